"""The command line, end to end through typer (and a subprocess where the exit path matters)."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.tasks.loader import bundled_suite, get_task

from .cli.newcomer import cli
from .conftest import FIXTURES

runner = CliRunner()


def test_tasks_list_json_lists_the_suite() -> None:
    result = runner.invoke(app, ["tasks", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert [t["id"] for t in listed] == [t.id for t in bundled_suite()]
    assert all(len(t["hash"]) == 64 for t in listed)


def test_tasks_show_json_round_trips_the_model() -> None:
    result = runner.invoke(app, ["tasks", "show", "attention_fwd", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["id"] == "attention_fwd" and data["content_hash"] == get_task("attention_fwd").content_hash
    human = runner.invoke(app, ["tasks", "show", "gemm_bf16"])
    assert human.exit_code == 0 and "heldout" in human.output


def test_prompt_shows_contract_and_visible_workloads_but_never_held_out_ones() -> None:
    for task in bundled_suite():
        for arch in ("sm_90a", "sm_100a"):
            result = runner.invoke(app, ["prompt", task.id, "--arch", arch])
            assert result.exit_code == 0, result.output
            text = result.output
            assert f'extern "C" int {task.id}(' in text
            for workload in task.shown():
                assert workload.name in text
            for workload in task.held_out():
                assert workload.name not in text
                sizes = ", ".join(f"{k}={v}" for k, v in workload.sizes.items())
                assert sizes not in text
    hopper = runner.invoke(app, ["prompt", "gemm_bf16"]).output
    blackwell = runner.invoke(app, ["prompt", "gemm_bf16", "--arch", "sm_100a"]).output
    assert "wgmma.bf16" in hopper and "tcgen05" not in hopper
    assert "tcgen05.mma.f16" in blackwell and "wgmma" not in blackwell


def test_check_json_without_task_lists_features_per_kernel() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "wgmma_unguarded.cu"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["build"]["ok"] and data["arch"] == "sm_90a"
    assert "wgmma.bf16" in data["static"]["kernels"][0]["features"]


def test_check_renders_the_funnel_for_a_task() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "gemm_mma_sync.cu"), "--task", "gemm_bf16"])
    assert result.exit_code == 0, result.output
    assert "wgmma.bf16" in result.output and "absent" in result.output and "mma.sync" in result.output


def test_check_exits_nonzero_on_a_failed_build() -> None:
    result = runner.invoke(app, ["check", str(FIXTURES / "cpp_syntax_error.cu")])
    assert result.exit_code == 1
    assert "cpp_error" in result.output


def test_doctor_json() -> None:
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["can_check"] is True
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["cuda headers"]["ok"]
    assert checks["nvcc"]["ok"] and checks["cuobjdump"]["ok"]
    for check in checks.values():
        assert check["ok"] or check["fix"], f"{check['name']} is missing without a fix"


def test_malformed_task_file_gives_one_line_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.toml"
    bad.write_text('id = "x"\n')
    proc = subprocess.run([sys.executable, "-m", "ptxbench", "tasks", "show", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: invalid task:") and proc.stdout == ""  # errors on stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unreadable_candidate_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = tmp_path / "kernel.txt"
    text.write_text("not cuda")
    proc = subprocess.run([sys.executable, "-m", "ptxbench", "check", str(text)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "a candidate is one CUDA C++ file" in proc.stderr


def test_version_is_printed() -> None:
    from ptxbench import __version__

    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"ptxbench {__version__}"


def test_errors_go_to_stderr_and_say_where_they_looked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = cli("eval", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert f"no candidate files (*.cu) found in {tmp_path}" in " ".join(done.stderr.split())


def test_a_file_named_after_no_task_is_skipped_and_the_folder_still_evaluated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from .conftest import EXAMPLES

    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "softmax.cu").write_text((EXAMPLES / "softmax.cu").read_text())
    (folder / "binary.cu").write_text((EXAMPLES / "softmax.cu").read_text())
    done = cli("eval", str(folder), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    warning = " ".join(done.stderr.split())
    assert "binary.cu: skipped: its task is taken from the file name ('binary')" in warning and "--task" in warning
    assert [p.parent.name for p in (tmp_path / "run").glob("items/*/*/result.json")] == ["softmax"]


def test_error_messages_keep_their_square_brackets() -> None:
    """rich reads `[name]` as markup: an error quoting `ptxbench[report]` or a user's text must not lose it."""
    done = cli("tasks", "show", "[bold]nosuch")
    assert done.returncode == 2 and "[bold]nosuch" in done.stderr, done.stderr
