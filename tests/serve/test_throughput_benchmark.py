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


def _view(verdict: str, timings: list[tuple[str, float]]) -> SimpleNamespace:
    evaluation = SimpleNamespace(verdict=verdict, timings=[SimpleNamespace(workload=w, speedup=s) for w, s in timings])
    return SimpleNamespace(evaluation=evaluation, state=JobState.DONE)


def test_the_agreement_pairs_each_candidate_on_sweeps_timed_workload() -> None:
    sweep = {"a": _view("PASSED", [("timed", 1.01)]), "b": _view("PASSED", []), "c": _view("PASSED", [("timed", 2.0)])}
    publish = {"a": _view("PASSED", [("visible", 3.0), ("timed", 1.0)]), "b": _view("INCORRECT", [])}
    found = serve_throughput.agreement(sweep, publish)  # type: ignore[arg-type]
    assert found["compared"] == 2 and found["verdicts_differ"] == ["b"]
    assert found["by_candidate"]["a"]["publish_speedup"] == 1.0 and found["largest_speedup_difference_pct"] == 1.0


def test_a_mixed_batch_takes_every_kind_of_candidate_in_turn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    batch = serve_throughput.mixed(len(serve_throughput.MIX) + 1, tmp_path, "t")
    assert [task for task, _, _ in batch] == [task for task, _ in serve_throughput.MIX] + ["gemm_bf16"]
    assert len({body for _, _, body in batch}) == len(batch), "each a job of its own"
    assert all(path.is_file() for _, path in serve_throughput.MIX)
