"""``python -I profile_batch.py BATCH_JSON``: the program ncu profiles when several candidates share one session.

Nsight Compute's start-up, and the reading back of its report, cost the same whether a session profiles one call
or several (``proof.batching``). Each candidate still runs in a process of its own (its ``profile_one.py`` command,
as the harness wrote it), one after the other, so no candidate's code shares an address space with another's:
ncu follows every process of its session and records each launch's process id, and this program writes which
process ran which candidate, so the harness splits the report by process.

The batch file lists, per candidate: its id, its command, the variables that differ from this program's own
environment (HOME and the compile caches: the rest, ncu's injection variables included, is inherited), its
working folder, its time limit and the file its output goes to. What this program writes (``record``, each
entry's pid, exit code, seconds and whether it was killed) lies in a folder every candidate's plan protects, and
it is written whole at the end: a batch that does not end cleanly leaves no record, and the harness then profiles
each of its candidates in a session of its own. Standard library only, like ``profile_one.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path


def _processes():  # type: ignore[no-untyped-def]
    """``isolation/processes.py``, loaded by its path (this program imports nothing of ptxbench)."""
    path = Path(__file__).parent.parent / "isolation" / "processes.py"
    spec = importlib.util.spec_from_file_location("ptxbench_processes", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_entry(entry: dict, processes) -> dict:  # type: ignore[no-untyped-def]
    """One candidate's profiled program, in its own session, to its end or its time limit; what it left running is
    killed before the next one starts."""
    environment = {**os.environ, **entry["environment"]}
    started = time.monotonic()
    with open(entry["output"], "wb") as output:
        child = subprocess.Popen(entry["command"], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                 env=environment, cwd=entry["cwd"], start_new_session=True)
        killed = False
        try:
            code: int | None = child.wait(timeout=entry["timeout_s"])
        except subprocess.TimeoutExpired:
            killed = True
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            code = child.wait()
        finally:
            with suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            processes.reap(processes.kill_descendants(os.getpid()))
    return {"id": entry["id"], "pid": child.pid, "exit": code, "killed": killed,
            "seconds": round(time.monotonic() - started, 3)}


def main(batch_path: str) -> int:
    batch = json.loads(Path(batch_path).read_text())
    processes = _processes()
    processes.become_subreaper()  # what a candidate abandons is re-parented here, and killed before the next one
    ran = [run_entry(entry, processes) for entry in batch["entries"]]
    record = Path(batch["record"])
    partial = record.with_name(record.name + ".partial")
    partial.write_text(json.dumps({"launcher": os.getpid(), "entries": ran}))
    partial.replace(record)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
