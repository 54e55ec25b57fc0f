"""One `ptxbench eval` run over every adversarial case together with the honest examples (Run with `-m gpu`).

Each case of tests/adversarial/ is also tested alone (test_evaluator_gpu.py); this run is about what they
do to each other and to the harness when they share it: a case that kills its parent or process group,
sprays the harness's descriptors, forges result.json files or leaves a daemon must cost only its own item.
Asserted: the run completes; every item has a result with its expected status; the honest examples (of
the tasks the cases use) get what they get alone (plain CUDA: PASSED without ncu, REJECTED
feature_not_executed with it); every result.json holds what the run returned; nothing forged appears in the
run directory or the caches, and no compiled baseline code carries a candidate's mark; and no process
started by the run outlives it. The run's cache starts as a copy of the machine's (measured baselines
kept), so run it after a section that timed them (examples, adversarial) to fit one device call.

The run goes through the Python API the CLI uses (``evaluate_candidates``), in a child process of its own
session, so a broken guarantee fails this test instead of ending pytest.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxbench._compat import tomllib
from ptxbench.integrity import KEY_FILE
from ptxbench.paths import cache_root
from ptxbench.records.evaluation import Evaluation, Guard, Status
from ptxbench.records.rundir import RunDir
from ptxbench.tasks.loader import bundled_suite

from ..adversarial.cases import case_file
from ..conftest import EXAMPLES, REPO
from .test_evaluator_gpu import (PROFILED_GUARDS, assert_compile_cache_unchanged, assert_expected,
                                 assert_harness_unchanged, assert_no_daemon_survives, daemons)

pytestmark = pytest.mark.gpu
ADVERSARIAL = REPO / "tests" / "adversarial"
HONEST_PREFIX = "honest_"
RUN_TIMEOUT_S = 1500
FORGED_MARK = '"forged": true'  # what rewrite_results.cu writes into every file it manages to forge

_RUN = """
import json, sys
from pathlib import Path
from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions
from ptxbench.evaluate.fleet.run import candidate_from_file, evaluate_candidates
from ptxbench.tasks.loader import get_task

plan = json.loads(Path(sys.argv[1]).read_text())
candidates = [candidate_from_file(Path(c["path"]), get_task(c["task"])).model_copy(update={"item": c["item"]})
              for c in plan["candidates"]]
results = evaluate_candidates(candidates, Arch.SM_90A, plan["out"], EvalOptions.model_validate(plan["options"]))
returned = {f"{c.task.id}/{c.item}": e.model_dump_json() for c, e in zip(candidates, results)}
Path(plan["returned"]).write_text(json.dumps(returned))
"""


def _cases() -> list[dict]:
    return tomllib.loads((ADVERSARIAL / "manifest.toml").read_text())["case"]


def _plan(tmp_path: Path, profile: bool) -> dict:
    candidates = [{"path": str(case_file(c, tmp_path / "composed")), "task": c["task"], "item": Path(c["file"]).stem}
                  for c in _cases()]
    hostile_tasks = {c["task"] for c in _cases()}  # honest items where the hostile ones are: their baselines are timed anyway
    candidates += [{"path": str(EXAMPLES / f"{t.id}.cu"), "task": t.id, "item": f"{HONEST_PREFIX}{t.id}"}
                   for t in bundled_suite() if t.id in hostile_tasks]
    options = {"trials": 1, "timing_budget_ms": 20, "call_timeout_s": 20, "profile": profile,
               "profile_timeout_s": 300}
    return {"candidates": candidates, "out": str(tmp_path / "run"), "returned": str(tmp_path / "returned.json"),
            "options": options}


def _expectation(case: dict, profile: bool) -> dict:
    """Without ncu the executed-feature cheats are judged on what else they do: any candidate status."""
    if not profile and case.get("guard") in PROFILED_GUARDS:
        return {**{k: v for k, v in case.items() if k != "guard"}, "expect": "any"}
    return case


def _snapshot() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}


def _mentions(pid: int, needles: tuple[str, ...]) -> bool:
    folder = Path("/proc") / str(pid)
    texts = []
    for name in ("cmdline", "environ"):
        try:
            texts.append((folder / name).read_bytes().decode(errors="replace"))
        except OSError:
            pass
    try:
        texts.append(os.readlink(folder / "cwd"))
    except OSError:
        pass
    return any(needle in text for needle in needles for text in texts)


def _orphaned(pid: int) -> bool:
    """A Python or Nsight process of ours adopted by init: what a forked worker (or a profiler it started) that
    escaped its parent looks like. Other programs are left out: the machine's own tools start orphans too."""
    folder = Path("/proc") / str(pid)
    try:
        status = (folder / "status").read_text()
        program = Path(os.readlink(folder / "exe")).name
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    ours = fields.get("PPid", "").strip() == "1" and int(fields.get("Uid", "-1").split()[0]) == os.getuid()
    return ours and (program.startswith("python") or program.startswith("ncu") or "nsight" in program.lower())


def _stray_pids(before: set[int], needles: tuple[str, ...]) -> list[int]:
    return [pid for pid in sorted(_snapshot() - before - {os.getpid()}) if _mentions(pid, needles) or _orphaned(pid)]


def _strays(before: set[int], needles: tuple[str, ...]) -> list[str]:
    found = []
    for pid in _stray_pids(before, needles):
        try:
            found.append(f"{pid}: {(Path('/proc') / str(pid) / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue  # it ended meanwhile
    return found


def _wait_for_no_strays(before: set[int], needles: tuple[str, ...], grace_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + grace_s
    strays = _strays(before, needles)
    while strays and time.monotonic() < deadline:
        time.sleep(0.5)
        strays = _strays(before, needles)
    return strays


def _records_containing(folder: Path, text: str) -> list[Path]:
    """JSON files only: the candidates' binaries in the build cache hold the forged text as a string literal."""
    found = []
    for path in folder.rglob("*.json"):
        try:
            if path.is_file() and not path.is_symlink() and text in path.read_text(errors="replace"):
                found.append(path)
        except OSError:
            continue
    return found


def _seed_cache(cache: Path) -> str:
    """The run's cache starts with the machine's measured baselines and compiled baseline code (and the key
    that signs them) where there are some (PTXBENCH_HOSTILE_SEED_CACHE names another cache to start from):
    timing every baseline variant anew takes most of a cold run, and it is what the examples already did
    in this session. The forged-record checks read this copy."""
    warm = Path(os.environ.get("PTXBENCH_HOSTILE_SEED_CACHE") or cache_root())  # a cache carried from another run
    if not (warm / "baselines").is_dir() or not (warm / KEY_FILE).is_file():
        return "cold cache"
    cache.mkdir(parents=True)
    shutil.copy2(warm / KEY_FILE, cache / KEY_FILE)
    for folder in ("baselines", "compile"):
        if (warm / folder).is_dir():
            shutil.copytree(warm / folder, cache / folder, symlinks=True)
    return f"cache seeded from {warm}: {len(list((cache / 'baselines').glob('*.json')))} baseline time(s)"


def _finished(run: Path) -> list[str]:
    """Each item with a result.json so far: its status and where its seconds went (for a run cut short)."""
    lines = []
    for stored in sorted(run.glob("items/*/*/result.json")):
        try:
            evaluation = Evaluation.model_validate_json(stored.read_text())
        except (OSError, ValueError) as exc:
            lines.append(f"{stored.parent.name}: unreadable ({exc})")
            continue
        slowest = sorted(evaluation.durations_s.items(), key=lambda kv: -kv[1])[:4]
        lines.append(f"{stored.parent.parent.name}/{stored.parent.name}: {evaluation.status} "
                     + ", ".join(f"{k} {v:.0f}s" for k, v in slowest))
    return lines


def _profile() -> bool:
    """With ncu when the machine has it, unless PTXBENCH_HOSTILE_PROFILE=0: a run of every case under ncu takes
    far longer than one lent-GPU call allows, and the cases only ncu catches have their own section (profiled)."""
    wanted = os.environ.get("PTXBENCH_HOSTILE_PROFILE", "1") != "0"
    return wanted and shutil.which("ncu") is not None


def test_one_run_of_every_hostile_case_with_the_honest_examples(tmp_path: Path) -> None:
    profile = _profile()
    plan = _plan(tmp_path, profile)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    cache = tmp_path / "cache" / "ptxbench"
    secret_names = {c["secret_env"] for c in _cases() if "secret_env" in c}
    secret_values = {name: secrets.token_hex(16) for name in secret_names}
    mark = f"ptxbench-hostile-{secrets.token_hex(8)}"
    environment = {**os.environ, **secret_values, "PTXBENCH_CACHE": str(cache), "PTXBENCH_HOSTILE_RUN": mark}
    before, daemons_before = _snapshot(), daemons()

    seeded = _seed_cache(cache)
    started = time.monotonic()
    timeout_s = float(os.environ.get("PTXBENCH_HOSTILE_TIMEOUT_S", RUN_TIMEOUT_S))
    # Output to files, not pipes: the run's hosts and forkserver inherit them, and a pipe would hold a reader
    # past a timeout until the last of them ends.
    with open(tmp_path / "run.out", "w") as out, open(tmp_path / "run.err", "w") as err:
        child = subprocess.Popen([sys.executable, "-c", _RUN, str(plan_file)], env=environment, stdout=out,
                                 stderr=err, text=True, start_new_session=True)
    try:
        child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        for pid in _stray_pids(before, (mark, str(tmp_path))):  # the hosts and workers left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finished = _finished(Path(plan["out"]))
        pytest.fail(f"the run did not finish in {timeout_s:.0f} s ({seeded}); {len(finished)} of "
                    f"{len(plan['candidates'])} items done:\n" + "\n".join(finished)
                    + f"\nits stderr ends: {(tmp_path / 'run.err').read_text()[-3000:]}")
    done = subprocess.CompletedProcess(child.args, child.returncode, (tmp_path / "run.out").read_text(),
                                       (tmp_path / "run.err").read_text())
    print(f"HOSTILE RUN: {len(plan['candidates'])} items in {time.monotonic() - started:.0f} s, profile={profile}, "
          f"exit {done.returncode}, {seeded}")
    print("\n".join(_finished(Path(plan["out"]))))
    assert done.returncode == 0, f"the run did not complete: {done.stderr[-4000:]}"
    returned = json.loads(Path(plan["returned"]).read_text())
    assert len(returned) == len(plan["candidates"]), "every item has a result"

    run = Path(plan["out"])
    for candidate in plan["candidates"]:
        key = f"{candidate['task']}/{candidate['item']}"
        evaluation = Evaluation.model_validate_json(returned[key])
        stored = run / "items" / candidate["task"] / candidate["item"] / "result.json"
        assert stored.is_file(), f"{key}: no result.json"
        # Compared as canonical JSON text: NaN (a partly written output's error) is never equal to itself.
        assert Evaluation.model_validate_json(stored.read_text()).model_dump_json() == evaluation.model_dump_json(), (
            f"{key}: result.json changed after it was written")
        if candidate["item"].startswith(HONEST_PREFIX):
            print(f"HONEST {key}: {evaluation.status} — {evaluation.message[:200]}")
            assert evaluation.infra_failure is None, evaluation.infra_failure
            if profile:
                assert evaluation.status is Status.REJECTED, evaluation.message
                assert {g.guard for g in evaluation.guards} == {Guard.FEATURE_NOT_EXECUTED}, evaluation.guards
            else:
                assert evaluation.status is Status.PASSED, evaluation.message
        else:
            case = next(c for c in _cases() if Path(c["file"]).stem == candidate["item"])
            assert_expected(_expectation(case, profile), evaluation)
            for value in secret_values.values():
                assert value not in returned[key], f"{key}: a harness secret reached its record"

    assert not list(tmp_path.rglob("FORGED_BY_CANDIDATE.json")), "a candidate created files outside its sandbox"
    forged = _records_containing(run, FORGED_MARK) + (_records_containing(cache, FORGED_MARK) if cache.is_dir() else [])
    assert not forged, f"forged records: {forged}"
    RunDir.load(run)  # the run header is intact: it still reads as the versioned model
    assert_compile_cache_unchanged(cache)

    assert_harness_unchanged()
    assert_no_daemon_survives(daemons_before)
    strays = _wait_for_no_strays(before, (mark, str(tmp_path)))
    assert not strays, f"processes of the run outlived it: {strays}"
