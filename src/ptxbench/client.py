"""A Python client of ``ptxbench serve`` (httpx): submit candidates, follow their stages, read their evaluations.

```python
from ptxbench.client import Client
from ptxbench.serve.models import CandidateRequest

with Client("http://127.0.0.1:8765") as client:
    (job,) = client.submit(CandidateRequest(source=open("kernel.cu").read(), task="rmsnorm"))
    view = client.wait(job.id, on_event=lambda e: print(e.stage, e.data))
    print(view.evaluation.verdict)
```

Every failure is a ``ServerError`` with one line (the server's own reason where it gave one). A full queue
(429) is waited out, as the server's ``Retry-After`` says, unless ``submit(..., wait_when_full=False)``. A
stream cut short is resumed where it stopped (``Last-Event-ID``). ``evaluate_on_server`` is what
``ptxbench eval --server`` runs: the same run directory and output as a local ``eval``, evaluated there;
``ServerGrader`` is the grader ``run --server`` and Fixit's ``--server`` refine with. Both first check that the
server runs this version of ptxbench (``server_health``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptxbench.errors import PtxbenchError
from ptxbench.serve.models import (
    Accepted,
    CandidateRequest,
    Health,
    JobList,
    JobState,
    JobView,
    Metrics,
    StageEvent,
    SubmitReply,
    SubmitRequest,
)

if TYPE_CHECKING:
    import httpx

    from ptxbench.arch.registry import Arch
    from ptxbench.records.evaluation import Evaluation
    from ptxbench.records.evidence import EvidenceProfile
    from ptxbench.records.trajectory import Feedback
    from ptxbench.serve.evaluation import Candidate, EvalOptions, Resumption
    from ptxbench.tasks.model import Task

EXTRA_MISSING = "the ptxbench client needs httpx (the 'serve' extra): pip install 'ptxbench[serve]'"
BATCH = 200  # candidates per submission


class ServerError(PtxbenchError):
    """The server refused a request, or could not be reached; ``status`` is its HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class Client:
    """One server, by its base URL; ``token``: its access token, if it needs one."""

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = 60.0) -> None:
        try:
            import httpx
        except ImportError:
            raise PtxbenchError(EXTRA_MISSING) from None
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- requests ---------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> "httpx.Response":
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServerError(f"{self.url}: no answer ({type(exc).__name__}: {exc})") from None
        if response.status_code >= 400:
            raise _refusal(self.url, response)
        return response

    def submit(self, requests: CandidateRequest | Sequence[CandidateRequest], *, wait_when_full: bool = True,
               max_wait_s: float = 3600.0) -> list[Accepted]:
        """Submit one candidate or a batch (accepted or refused whole); the job of each, in order."""
        batch = [requests] if isinstance(requests, CandidateRequest) else list(requests)
        body = SubmitRequest(candidates=batch).model_dump_json(exclude_none=True)
        deadline = time.monotonic() + max_wait_s
        while True:
            try:
                response = self._call("POST", "/v1/jobs", content=body,
                                      headers={"Content-Type": "application/json"})
                return SubmitReply.model_validate_json(response.content).jobs
            except ServerError as exc:
                wait = exc.retry_after_s if exc.status == 429 and exc.retry_after_s is not None else None
                if not wait_when_full or wait is None or time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)

    def get(self, job_id: str) -> JobView:
        return JobView.model_validate_json(self._call("GET", f"/v1/jobs/{job_id}").content)

    def list(self, state: JobState | str | None = None, *, limit: int = 100, after: str | None = None) -> list[JobView]:
        params: dict[str, Any] = {"limit": limit}
        if state is not None:
            params["state"] = JobState(state).value
        if after is not None:
            params["after"] = after
        return JobList.model_validate_json(self._call("GET", "/v1/jobs", params=params).content).jobs

    def cancel(self, job_id: str) -> JobView:
        return JobView.model_validate_json(self._call("DELETE", f"/v1/jobs/{job_id}").content)

    def health(self) -> Health:
        return Health.model_validate_json(self._call("GET", "/v1/health").content)

    def metrics(self) -> Metrics:
        return Metrics.model_validate_json(self._call("GET", "/v1/metrics").content)

    # -- following a job --------------------------------------------------------------------------------

    def stream(self, job_id: str, *, timeout_s: float | None = None) -> Iterator[StageEvent | JobView]:
        """Each stage result as it lands, then the finished job (the last item). A connection cut short is
        resumed after the last event seen; ``timeout_s`` bounds the whole wait."""
        import httpx

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last = -1
        failures = 0
        while True:
            if deadline is not None and time.monotonic() > deadline:
                raise ServerError(f"job {job_id} did not finish within {timeout_s:g} s")
            try:
                with self._http.stream("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": str(last)},
                                       timeout=httpx.Timeout(self._http.timeout.connect, read=60.0)) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise _refusal(self.url, response)
                    for kind, data in _server_sent(response.iter_lines()):
                        failures = 0
                        if kind == "job":
                            yield JobView.model_validate_json(data)
                            return
                        event = StageEvent.model_validate_json(data)
                        last = event.seq
                        yield event
                        if deadline is not None and time.monotonic() > deadline:
                            raise ServerError(f"job {job_id} did not finish within {timeout_s:g} s")
            except httpx.HTTPError as exc:
                failures += 1
                if failures > 5:
                    raise ServerError(f"{self.url}: the event stream of job {job_id} broke off ({exc})") from None
                time.sleep(min(10.0, 0.5 * 2 ** failures))

    def wait(self, job_id: str, *, on_event: Callable[[StageEvent], None] | None = None,
             timeout_s: float | None = None) -> JobView:
        """The finished job (its evaluation when done), hearing each stage on the way."""
        for item in self.stream(job_id, timeout_s=timeout_s):
            if isinstance(item, JobView):
                return item
            if on_event is not None:
                on_event(item)
        raise ServerError(f"the event stream of job {job_id} ended before the job")  # pragma: no cover


def _server_sent(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) of each server-sent event; comments (keep-alives) are skipped."""
    kind, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def _refusal(url: str, response: "httpx.Response") -> ServerError:
    try:
        reason = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        reason = response.text.strip().splitlines()[0] if response.text.strip() else response.reason_phrase
    if response.status_code == 401:
        reason += " (give the server's token: --server-token, or PTXBENCH_SERVE_TOKEN)"
    retry = response.headers.get("retry-after")
    return ServerError(f"{url}: {response.status_code} {reason}", response.status_code,
                       float(retry) if retry and retry.replace(".", "", 1).isdigit() else None)


# -- ptxbench eval --server ---------------------------------------------------------------------------------

def request_for(candidate: "Candidate", arch: "Arch", options: "EvalOptions") -> CandidateRequest:
    """The request that evaluates ``candidate`` as a local ``eval`` would: a bundled task by id (with its hash,
    so a server with another definition refuses), any other task whole."""
    from ptxbench.serve.models import JobOptions
    from ptxbench.tasks.loader import bundled_suite

    bundled = {task.id: task.content_hash for task in bundled_suite()}
    task = candidate.task
    by_id = bundled.get(task.id) == task.content_hash
    return CandidateRequest(source=candidate.source, task=task.id if by_id else None,
                            task_definition=None if by_id else task, task_hash=task.content_hash, arch=arch,
                            options=JobOptions.model_validate(options.model_dump(exclude={"lanes"})),
                            name=candidate.origin, generation=candidate.generation)


def server_health(client: Client) -> Health:
    """The server's health, once it is known to run this version of ptxbench: an evaluation made by another
    version is not mixed into this one's records unnoticed."""
    from ptxbench import __version__

    health = client.health()
    if health.version != __version__:
        raise ServerError(f"{client.url} runs ptxbench {health.version}, this client is {__version__}: their records "
                          "would mix two versions of the harness; use one version on both sides")
    return health


def _finished(client: Client, job: Accepted, candidate: "Candidate") -> tuple["Evaluation", str | None]:
    """The evaluation of a submitted job once it is done, under this candidate's name (a job the server answered
    from an identical earlier one carries that one's name), and the GPU slot that ran it (None: none did)."""
    slots: list[str] = []
    view = client.wait(job.id, on_event=lambda e: slots.append(str(e.data.get("slot"))) if e.stage == "gpu" else None)
    if view.evaluation is None:
        raise ServerError(f"{client.url}: job {job.id} ({candidate.origin}) ended {view.state.value} without an "
                          "evaluation; every result before it is recorded, run the command again")
    evaluation = view.evaluation
    if evaluation.candidate != candidate.origin:
        evaluation = evaluation.model_copy(update={"candidate": candidate.origin})
    return evaluation, slots[-1] if slots else None


def evaluate_on_server(candidates: list["Candidate"], arch: "Arch", out: Path | str, options: "EvalOptions",
                       client: Client, *, on_done: Callable[["Evaluation"], None] | None = None,
                       resumption: "Resumption | None" = None) -> list["Evaluation"]:
    """``ptxbench eval --server``: the candidates evaluated by the server, recorded into the run directory
    ``out`` here as a local ``eval`` records them (resumable; items already done are not sent; ``resumption``
    hears what was done with them, as with a local ``eval``). A job the
    server answered from an identical earlier one carries this candidate's name, as a local result would."""
    from ptxbench.serve.evaluation import evaluate_elsewhere

    health = server_health(client)

    def remote(sent: list["Candidate"]) -> Iterator[tuple[int, "Evaluation", dict]]:
        jobs: list[Accepted] = []
        for start in range(0, len(sent), BATCH):
            jobs += client.submit([request_for(c, arch, options) for c in sent[start:start + BATCH]])
        for position, (candidate, job) in enumerate(zip(sent, jobs)):
            evaluation, slot = _finished(client, job, candidate)
            yield position, evaluation, {"backend": "server", "server": client.url, "job": job.id,
                                         "duplicate": job.duplicate, "slot": slot}

    environment = {"backend": "server", "server": client.url, "server_version": health.version,
                   "gpus": health.gpus, "on_gpus": health.on_gpus}
    return evaluate_elsewhere(candidates, arch, out, options, remote, environment, on_gpus=health.on_gpus,
                              on_done=on_done, resumption=resumption)


# -- ptxbench run --server, fixit repair --server ----------------------------------------------------------

class ServerGrader:
    """Refinement's grader through a running server (``run --server``, Fixit's ``--server``): each turn's candidate
    is evaluated there as ``GpuGrader`` evaluates it here, and told back in the same words; a server without GPUs
    builds and reads it, told back as ``StaticGrader`` tells it. The feedback's record is the server's evaluation,
    so the run directory holds what a local run writes. The server is asked once, here, whether it answers and
    runs this version, so a wrong URL or token fails before any model is asked anything."""

    def __init__(self, client: Client, options: "EvalOptions | None" = None) -> None:
        from ptxbench.serve.evaluation import EvalOptions

        self.client = client
        self.options = options or EvalOptions()
        self.health = server_health(client)

    @property
    def evidence(self) -> "EvidenceProfile":
        """The evidence profile its evaluations gather (recorded in the run header)."""
        return self.options.evidence

    def grade(self, task: "Task", arch: "Arch", source: str) -> "Feedback":
        from ptxbench.refine.graders import gpu_feedback, static_feedback
        from ptxbench.serve.evaluation import Candidate

        candidate = Candidate(task=task, item="candidate", source=source, origin="candidate.cu")  # GpuGrader's name
        (job,) = self.client.submit(request_for(candidate, arch, self.options))
        evaluation, _ = _finished(self.client, job, candidate)
        # what the server's run directory keys its item by is not the trajectory's business: the record is the
        # one a local grader makes
        evaluation = evaluation.model_copy(update={"judged": None})
        if not self.health.on_gpus and evaluation.build is not None:
            return static_feedback(evaluation)
        return gpu_feedback(evaluation, task)

    def close(self) -> None:
        """Close the connection (the server and its GPUs stay as they are)."""
        self.client.close()
