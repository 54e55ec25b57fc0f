"""What the commands print where a newcomer first reads it: a pipe or a CI log, 80 columns, no TTY."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.evaluate.judgement.static_only import NO_GPU_MESSAGE
from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import bundled_suite

from ..conftest import REPO
from .newcomer import COLUMNS, cli, one_line, widest_line

if TYPE_CHECKING:
    from ptxbench.records.evaluation import Evaluation

EXAMPLES = REPO / "kernels" / "examples"


def test_check_names_each_kernel_shortly_and_fits_80_columns(tmp_path: Path) -> None:
    # Relative names from a folder of their own: each file's title line holds its path, and the checkout's or
    # the temporary folder's path, whatever its length, is no part of what must fit.
    for source in (reference_folder("sm_90a") / "transpose.cu", EXAMPLES / "softmax.cu"):
        shutil.copy(source, tmp_path)
    result = cli("check", "transpose.cu", "softmax.cu", "--task", "auto", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert widest_line(out) <= COLUMNS, out
    assert "anonymous namespace" not in out and "…" not in out, out
    lines = out.splitlines()
    assert {"transpose.cu → sm_90a (task transpose)", "softmax.cu → sm_90a (task softmax)"} <= set(lines), out
    for kernel in ("transpose_tma_kernel<8>", "transpose_tma_kernel<12>", "transpose_plain_kernel", "softmax_kernel"):
        assert f"  kernel {kernel}" in lines, out
    assert any(line.startswith("    features in SASS: ") and "tma.store" in line for line in lines), out
    # every line is a file's title, part of a table, or indented under its item (a wrapped explanation too)
    stray = [line for line in lines if not line.startswith((" ", "┏", "┃", "┡", "│", "└")) and " → sm_90a" not in line]
    assert not stray, out


def test_short_kernel_names_drop_return_type_namespace_and_parameters_but_stay_unique() -> None:
    from ptxbench.results.terminal import short_kernel_name, short_kernel_names

    assert short_kernel_name("void (anonymous namespace)::decode::gemm_sm90a<64>(CUtensorMap_st, int)") == \
        "decode::gemm_sm90a<64>"
    assert short_kernel_name("void (anonymous namespace)::gemm_fp8<128, false>(float const*, int)") == \
        "gemm_fp8<128, false>"
    assert short_kernel_name("(anonymous namespace)::softmax_kernel(__nv_bfloat16 const*, long)") == "softmax_kernel"
    assert short_kernel_name("scale") == "scale"  # extern "C": nothing to strip
    assert short_kernel_name("void ns::apply(void (*)(int), float*)") == "ns::apply"
    assert short_kernel_names(["void k(float*)", "void k(double*)", "void j(int)"]) == ["k(float*)", "k(double*)", "j"]
    assert short_kernel_names(["k", "k"]) == ["k #1", "k #2"]


def test_tasks_show_reads_cleanly_at_80_columns() -> None:
    for task in bundled_suite():
        result = cli("tasks", "show", task.id)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert widest_line(out) <= COLUMNS, out
        assert "…" not in out, out
        # the statement whole, as paragraphs (nothing in it taken for markup, e.g. softmax's "X[r, c]")
        assert one_line(task.statement) in one_line(out), out
        lines = out.splitlines()
        for workload in task.workloads:  # every workload row on one line: no cell wrapped into ragged columns
            row = next((line for line in lines if line.startswith(workload.name + " ")), None)
            assert row is not None, (workload.name, out)
            cells = row.split()
            assert workload.role.value in cells and all(f"{k}={v}" in cells for k, v in workload.sizes.items())
            assert cells[-1].replace(",", "").replace(".", "").isdigit(), row
        assert any(line.startswith("sm_90a requires: ") for line in lines), out


def _gpu_evaluation(task: str, guards: list[tuple[str, str]]) -> Evaluation:
    """What a GPU machine with Nsight Compute records for a bundled example: correct on every trial, then
    REJECTED where a required feature did not execute (or PASSED without guards)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.records.evaluation import Evaluation, Guard, GuardFinding, Status, TrialResult
    from ptxbench.tasks.loader import get_task

    findings = [GuardFinding(guard=Guard(guard), detail=detail) for guard, detail in guards]
    return Evaluation(candidate=str(EXAMPLES / f"{task}.cu"), task=task, task_hash=get_task(task).content_hash,
                      arch=Arch.SM_90A, status=Status.REJECTED if findings else Status.PASSED,
                      message="; ".join(f.detail for f in findings) or "correct on every workload",
                      trials=[TrialResult(workload="timed", role="timed", seed=1, passed=True)], guards=findings,
                      durations_s={"total": 17.4})


def _gpu_run(out: Path, evaluations: list[Evaluation]) -> None:
    from ptxbench.records.rundir import RESULT_FILE, RunDir, RunHeader, write_model

    rundir = RunDir.open(out, RunHeader(kind="eval", config={"arch": "sm_90a"}, environment={"name": "NVIDIA H200"}))
    for evaluation in evaluations:
        write_model(rundir.item(evaluation.task, evaluation.task) / RESULT_FILE, evaluation)


def test_eval_in_a_pipe_prints_a_line_per_finished_candidate(tmp_path: Path) -> None:
    result = cli("eval", str(EXAMPLES / "softmax.cu"), str(EXAMPLES / "transpose.cu"), "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    progress = [line for line in lines if line.startswith("[")]
    assert [line.split(":")[0] for line in progress] == ["[1/2] softmax.cu", "[2/2] transpose.cu"], result.stdout
    reason = NO_GPU_MESSAGE.split("; ")[0]  # the message's first clause, whole: the line is over 80 columns
    for line in progress:  # status, seconds, a reason, in one line
        assert re.fullmatch(rf"\[\d/2\] \w+\.cu: infra: NO_GPU \(\d+\.\d s\) {re.escape(reason)}", line), line
    assert lines.index(progress[-1]) < next(i for i, line in enumerate(lines) if line.startswith("┏")), \
        "the lines come as candidates finish, before the final table"


def test_eval_says_in_one_line_why_every_example_was_rejected(tmp_path: Path) -> None:
    tasks = ["softmax", "transpose", "rmsnorm"]
    _gpu_run(tmp_path / "run", [_gpu_evaluation(task, [("feature_not_executed", "mbarrier: not executed")])
                                for task in tasks])
    result = cli("eval", *(str(EXAMPLES / f"{task}.cu") for task in tasks), "--out", str(tmp_path / "run"), "--regrade")
    assert result.returncode == 0, result.stderr
    assert "[1/3] softmax.cu: REJECTED (17.4 s) mbarrier: not executed" in result.stdout.splitlines()
    assert ("all 3 candidates are correct but REJECTED: none executed the Hopper (sm_90a) features its task "
            "requires (plain CUDA kernels, like the bundled examples, do not); `ptxbench eval --gold` evaluates "
            "the expert reference kernels, which do") in one_line(result.stdout)


def test_the_rejection_note_is_only_for_runs_where_every_candidate_lacked_its_features() -> None:
    from ptxbench.arch.registry import Arch
    from ptxbench.results.terminal import all_rejected_note

    missing = [("feature_not_executed", "wgmma.bf16 did 0 % of the FLOPs")]
    rejected = [_gpu_evaluation("softmax", missing), _gpu_evaluation("transpose", missing)]
    assert all_rejected_note(rejected, Arch.SM_90A) is not None
    assert "--gold --arch sm_100a" in (all_rejected_note(rejected, Arch.SM_100A) or "")
    assert all_rejected_note([*rejected, _gpu_evaluation("rmsnorm", [])], Arch.SM_90A) is None, "one passed"
    other = _gpu_evaluation("rmsnorm", [*missing, ("foreign_kernels", "cuBLAS ran")])
    assert all_rejected_note([*rejected, other], Arch.SM_90A) is None, "rejected for something else as well"
    assert all_rejected_note([], Arch.SM_90A) is None


def test_report_and_run_files_are_ordinary_files_that_respect_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    _gpu_run(tmp_path / "run", [_gpu_evaluation("softmax", [("feature_not_executed", "mbarrier: not executed")])])
    for umask, mode in ((0o022, 0o644), (0o027, 0o640)):
        previous = os.umask(umask)  # inherited by the command, as from the user's shell
        try:
            out = tmp_path / f"report-{umask:o}"
            result = cli("report", str(tmp_path / "run"), "--out", str(out))
            assert result.returncode == 0, result.stderr
            regraded = cli("eval", str(EXAMPLES / "softmax.cu"), "--out", str(tmp_path / "run"), "--regrade")
            assert regraded.returncode == 0, regraded.stderr
        finally:
            os.umask(previous)
        written = [out / "report.md", out / "report.html", tmp_path / "run" / "items" / "softmax" / "softmax" / "result.json"]
        assert {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in written} == \
            {f.name: oct(mode) for f in written}, f"umask {umask:o}"


def test_cache_commands_say_where_and_how_much_and_prune_oldest_first(tmp_path: Path) -> None:
    import json
    import os
    import time

    # The cache named relative to the command's folder: its path is printed, and must fit 80 columns whatever
    # the length of the temporary folder's (pytest-xdist's workers add a level to it).
    root = Path("cache")
    env = {"PTXBENCH_CACHE": str(root), "PTXBENCH_CACHE_MAX_SIZE": "2.5M"}
    folders = []
    for index, days in enumerate((3, 1, 2)):  # 1.2 MB each, last used 3, 1 and 2 days ago
        key = f"{index:02x}" + "f" * 62
        folder = tmp_path / root / "builds" / key[:2] / key
        folder.mkdir(parents=True)
        (folder / "candidate.so").write_bytes(b"\0" * 1_200_000)
        used = time.time() - days * 86400
        os.utime(folder, (used, used))
        folders.append(folder)

    shown = cli("cache", "info", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert one_line(shown.stdout).startswith(f"build cache: {root / 'builds'} 3 entries, 3.6 MB (limit 2.5 MB; "
                                             "PTXBENCH_CACHE_MAX_SIZE sets it) last used: oldest "), shown.stdout
    assert json.loads(cli("cache", "info", "--json", env=env, cwd=tmp_path).stdout)["bytes"] == 3_600_000

    pruned = cli("cache", "prune", env=env, cwd=tmp_path)  # to the configured limit
    assert pruned.returncode == 0, pruned.stderr
    assert one_line(pruned.stdout) == (f"removed 1 entry (1.2 MB), the longest unused first; 2 entries (2.4 MB) "
                                       f"left in {root / 'builds'}")
    assert [f.exists() for f in folders] == [False, True, True]
    smaller = cli("cache", "prune", "--max-size", "1.5MB", env=env, cwd=tmp_path)
    assert smaller.returncode == 0 and [f.exists() for f in folders] == [False, True, False]
    refused = cli("cache", "prune", "--max-size", "lots", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert one_line(refused.stderr) == ("error: 'lots' is not a size: give a number with an optional unit (500M, 5G, "
                                        "2GiB) or 'off'")

    cleared = cli("cache", "clear", env=env, cwd=tmp_path)
    assert cleared.returncode == 0 and one_line(cleared.stdout) == f"removed 1 entry (1.2 MB) from {root / 'builds'}"
    assert f"{root / 'builds'} 0 entries, 0 B (limit" in one_line(cli("cache", "info", env=env, cwd=tmp_path).stdout)
