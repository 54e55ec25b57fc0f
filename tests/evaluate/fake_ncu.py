"""A stand-in for Nsight Compute on the CPU: ``install(folder, ...)`` writes an executable ``ncu`` there.

Recording (``--export REPORT ... PROGRAM PLAN``) it never runs a profiled program: it reads the plan to tell the
harness's probe from a candidate's call, prints the scripted output (what the program and ncu would
print) and writes the scripted report, whose "content" is the CSV ``ncu --import`` then prints. It logs
each recording (the plan, the report path, the environment's names) to ``log.jsonl`` beside itself, and
answers ``--version`` as Nsight Compute does (``VERSION``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

UNREADABLE = "not a report"
VERSION = "2025.3.1.0"

_SCRIPT = '''#!{python}
import json, sys
from pathlib import Path

here = Path(__file__).resolve().parent
config = json.loads((here / "config.json").read_text())
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Copyright (c) 2018-2025 NVIDIA Corporation")
    print("Version {version} (build 36398880) (public-release)")
    sys.exit(0)
if "--import" in args:
    text = Path(args[args.index("--import") + 1]).read_text()
    if text == {unreadable!r}:
        print("==ERROR== the report could not be loaded", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(text)
    sys.exit(0)
import os
report = Path(args[args.index("--export") + 1])
if args[-2].endswith("profile_batch.py"):  # a batched session: run the launcher, with stand-ins for the programs
    import subprocess
    batch_file = Path(args[-1])
    batch = json.loads(batch_file.read_text())
    scripted = config["batch"]
    with open(here / "log.jsonl", "a") as log:
        log.write(json.dumps({{"role": "batch", "entries": batch["entries"], "report": str(report)}}) + "\\n")
    if scripted.get("fail"):
        print("==ERROR== the batched session failed")
        sys.exit(1)
    for entry in batch["entries"]:
        entry["command"] = [sys.executable, "-c", scripted.get("program", "print('profiled')")]
    batch_file.write_text(json.dumps(batch))
    subprocess.run([sys.executable, *args[-2:]], check=False)
    record = json.loads(Path(batch["record"]).read_text())
    lines = config["candidate"]["report"].splitlines(keepends=True)
    head = [line for line in lines if not line[1:2].isdigit()]  # the header and the units
    rows = [line for line in lines if line[1:2].isdigit()]
    body = []
    for entry in record["entries"]:
        if entry["exit"] != 0:  # a program that failed launched nothing
            continue
        for row in rows:
            cells = row.split('","')
            cells[0] = '"' + str(len(body) + 1)
            cells[1] = str(entry["pid"] if not scripted.get("foreign") else 1)
            body.append('","'.join(cells))
    report.write_text("".join(head + body))
    sys.exit(0)
plan = json.loads(Path(args[-1]).read_text())
role = "probe" if plan.get("probe") else "candidate"
with open(here / "log.jsonl", "a") as log:
    log.write(json.dumps({{"role": role, "plan": plan, "report": str(report), "environment": sorted(os.environ)}}) + "\\n")
scripted = config[role]
sys.stdout.write(scripted["output"])
if scripted["report"] is not None:
    report.write_text(scripted["report"])
sys.exit(scripted.get("exit", 0))
'''


def install(folder: Path, probe_output: str = "", probe_report: str | None = None, candidate_output: str = "",
            candidate_report: str | None = None, batch: dict | None = None) -> Path:
    """The fake ``ncu`` in ``folder`` (to put first on PATH); reports are the CSV text to print, or None
    for none written. A batched session runs the real launcher on stand-in programs (``batch["program"]``, Python
    source) and reports ``candidate_report``'s rows once per candidate's process that exited 0 (as process 1 where
    ``batch["foreign"]``); ``batch["fail"]``: it fails before running anything."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ncu"
    script.write_text(_SCRIPT.format(python=sys.executable, unreadable=UNREADABLE, version=VERSION))
    script.chmod(0o755)
    (folder / "config.json").write_text(json.dumps({
        "probe": {"output": probe_output, "report": probe_report},
        "candidate": {"output": candidate_output, "report": candidate_report}, "batch": batch or {}}))
    return script


def use(folder: Path, monkeypatch, **scripted) -> Path:  # type: ignore[no-untyped-def]
    """``install`` the fake, first on PATH and named by ``PTXBENCH_NCU`` (so a real ncu under CUDA_HOME does
    not win the search); the toolchain is searched again as these variables change."""
    script = install(folder, **scripted)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("PTXBENCH_NCU", str(script))
    return script


def recordings(folder: Path) -> list[dict]:
    log = folder / "log.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
