"""benchmarks/serve_throughput.py stops waiting at its deadline and counts only what finished."""

import time
from types import SimpleNamespace

from ptxbench.client import ServerError
from ptxbench.serve.models import JobState

from ..conftest import repo_script

serve_throughput = repo_script("benchmarks/serve_throughput.py")


class StubClient:
    """Job "a" finishes at once; job "b" never does (its wait runs out)."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.waits: list[float | None] = []

    def view(self, job_id: str, state: JobState) -> SimpleNamespace:
        return SimpleNamespace(id=job_id, state=state, finished_at=time.time() if state.finished else None)

    def wait(self, job_id: str, timeout_s: float | None = None) -> SimpleNamespace:
        self.waits.append(timeout_s)
        if job_id == "b":
            raise ServerError(f"job {job_id} did not finish within {timeout_s:g} s")
        return self.view(job_id, JobState.DONE)

    def get(self, job_id: str) -> SimpleNamespace:
        return self.view(job_id, JobState.DONE if job_id == "a" else JobState.RUNNING)

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def test_jobs_past_the_deadline_are_reported_as_they_stand_and_cancelled() -> None:
    client = StubClient()
    views = serve_throughput.collect(client, ["a", "b", "a"], deadline_s=30.0)  # type: ignore[arg-type]
    assert [v.state for v in views] == [JobState.DONE, JobState.RUNNING, JobState.DONE]
    assert client.cancelled == ["b"]
    assert all(w is not None and 0 < w <= 30.0 for w in client.waits)


class OnGpuClient(StubClient):
    """Job "b" is already on a GPU when the deadline passes: the server refuses its cancel (409)."""

    def cancel(self, job_id: str) -> None:
        super().cancel(job_id)
        raise ServerError(f"job {job_id} is running on a GPU and cannot be cancelled")


def test_a_job_already_on_a_gpu_at_the_deadline_does_not_end_the_benchmark() -> None:
    client = OnGpuClient()
    views = serve_throughput.collect(client, ["b", "a"], deadline_s=30.0)  # type: ignore[arg-type]
    assert [(v.id, v.state) for v in views] == [("b", JobState.RUNNING), ("a", JobState.DONE)]
    assert client.cancelled == ["b"]
