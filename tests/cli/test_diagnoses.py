"""Newcomer issue, misleading diagnoses and input errors: each message names the real problem, the user's
file and line, and the fix, in one line with the exact exit code (no traceback, no raw library text)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, FIXTURES, REPO
from .newcomer import cli, one_line

ONE_SHOT_FORM = "(a task id, a colon, a solution file for that task)"


def _copy(fixture: str, folder: Path, name: str) -> Path:
    target = folder / name
    target.write_text((FIXTURES / fixture).read_text())
    return target


def _error_line(stderr: str) -> str:
    """stderr must hold exactly one message (rich wraps it at 80 columns), with no traceback."""
    assert "Traceback" not in stderr
    text = one_line(stderr)
    assert text.startswith("error: ") and text.count("error: ") == 1, stderr
    return text


# -- item 5: the diagnosis names the real problem ----------------------------------------------------------

def test_an_extern_c_entry_point_under_another_name_is_reported_as_the_wrong_name(tmp_path: Path) -> None:
    _copy("softmax_misnamed.cu", tmp_path, "softmax.cu")
    done = cli("check", "softmax.cu", "--task", "softmax", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    shown = one_line(done.stdout)
    assert "build failed: missing_entry_point" in shown
    assert ("no entry point 'softmax': found extern \"C\" 'my_softmax' instead; rename it to 'softmax' "
            "(declared in ptxbench_task.h)") in shown
    assert "mangled" not in shown and "parameters differ" not in shown


def test_a_cpp_overload_is_still_reported_as_differing_parameters(tmp_path: Path) -> None:
    _copy("rmsnorm_wrong_signature.cu", tmp_path, "rmsnorm.cu")
    done = cli("check", "rmsnorm.cu", "--task", "auto", cwd=tmp_path)
    assert done.returncode == 1
    shown = one_line(done.stdout)
    assert "no extern \"C\" function 'rmsnorm' is exported: found the C++ function rmsnorm(" in shown
    assert "whose parameters differ from the header's prototype" in shown


def test_a_compiler_error_after_the_wrapper_include_names_the_users_file_and_line(tmp_path: Path) -> None:
    _copy("error_after_wrappers.cu", tmp_path, "kernel.cu")
    assert (tmp_path / "kernel.cu").read_text().splitlines()[9].strip() == "out[lane] = undeclared_after_header;"
    done = cli("check", "kernel.cu", cwd=tmp_path)
    assert done.returncode == 1
    shown = one_line(done.stdout)
    assert 'first error: kernel.cu(10): error: identifier "undeclared_after_header" is undefined' in shown
    assert "candidate.cu" not in shown


def test_eval_keeps_the_users_file_and_line_in_the_build_log(tmp_path: Path) -> None:
    _copy("error_after_wrappers.cu", tmp_path, "softmax.cu")
    done = cli("eval", "softmax.cu", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result,) = (tmp_path / "run").glob("items/softmax/*/result.json")
    evaluation = json.loads(result.read_text())
    assert evaluation["status"] == "COMPILE_ERROR"
    assert evaluation["build"]["diagnosis"]["first_error"].startswith("softmax.cu(10): error: identifier")
    assert evaluation["message"] == ('the C++/CUDA source does not compile. First error: softmax.cu(10): error: '
                                     'identifier "undeclared_after_header" is undefined')
    assert "candidate.cu" not in (result.parent / "build.log").read_text()


def test_check_on_plain_sm90_says_to_use_sm90a(tmp_path: Path) -> None:
    _copy("wgmma_wrappers.cu", tmp_path, "kernel.cu")
    done = cli("check", "kernel.cu", "--arch", "sm_90", cwd=tmp_path)
    assert done.returncode == 1
    shown = one_line(done.stdout)
    assert "build failed: unsupported_on_target" in shown and "cpp_error" not in shown
    assert ("ptx::wgmma_fence, ptx::wgmma_commit and 1 more not available on sm_90 (ptx_wrappers.cuh defines "
            "wgmma for sm_90a only).") in shown
    assert "compile with -gencode arch=compute_90a,code=sm_90a (ptxbench check --arch sm_90a)" in shown
    assert 'first error: kernel.cu(8): error: namespace "ptx" has no member "wgmma_fence"' in shown


def test_a_ptxas_refusal_on_plain_sm90_names_the_users_line_and_the_fix(tmp_path: Path) -> None:
    _copy("wgmma_unguarded.cu", tmp_path, "kernel.cu")
    done = cli("check", "kernel.cu", "--arch", "sm_90", cwd=tmp_path)
    assert done.returncode == 1
    shown = one_line(done.stdout)
    assert "build failed: unsupported_on_target" in shown and "(ptxbench check --arch sm_90a)" in shown
    assert ("Instruction 'wgmma.fence' not supported on .target 'sm_90' (source: kernel.cu(8))") in shown


def test_check_on_plain_sm90_of_the_wgmma_reference_gives_the_hint(tmp_path: Path) -> None:
    # the expert kernel: package data since 'eval --gold' works from a wheel, beside the sources before that
    reference = next(folder / "sm_90a" / "gemm_bf16.cu" for folder in
                     (REPO / "src" / "ptxbench" / "kernels" / "reference", REPO / "kernels" / "reference")
                     if (folder / "sm_90a" / "gemm_bf16.cu").is_file())
    # by a relative name: the log names the file, and its path, wrapped at 80 columns, would be the checkout's
    (tmp_path / reference.name).write_text(reference.read_text())
    done = cli("check", reference.name, "--task", "auto", "--arch", "sm_90", cwd=tmp_path)
    assert done.returncode == 1
    shown = one_line(done.stdout)
    assert "build failed: unsupported_on_target" in shown and "(ptxbench check --arch sm_90a)" in shown
    include = reference.read_text().splitlines().index('#include "ptx_wrappers.cuh"') + 1
    line = int(re.search(r"gemm_bf16\.cu\((\d+)\): error", shown).group(1))
    assert include < line <= len(reference.read_text().splitlines()), "a line of the user's file"


@pytest.mark.parametrize("command", [["eval", "kernel.cu", "--task", "gemm_bf16"], ["prompt", "gemm_bf16"],
                                     ["generate", "--model", "replay:x.jsonl", "--dry-run"]])
def test_a_plain_target_is_refused_up_front_with_the_fix(tmp_path: Path, command: list[str]) -> None:
    _copy("wgmma_wrappers.cu", tmp_path, "kernel.cu")
    done = cli(*command, "--arch", "sm_90", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert _error_line(done.stderr) == (
        "error: --arch sm_90 is the plain target, without the arch-specific features the tasks require: use "
        "--arch sm_90a (`ptxbench check --arch sm_90` shows why a kernel fails there)")
    assert not (tmp_path / "runs").exists()


def test_eval_on_blackwell_of_a_hopper_kernel_says_to_use_tcgen05(tmp_path: Path) -> None:
    _copy("wgmma_wrappers.cu", tmp_path, "gemm_bf16.cu")
    done = cli("eval", "gemm_bf16.cu", "--arch", "sm_100a", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result,) = (tmp_path / "run").glob("items/gemm_bf16/*/result.json")
    evaluation = json.loads(result.read_text())
    assert evaluation["status"] == "COMPILE_ERROR"
    assert evaluation["build"]["diagnosis"]["failure"] == "unsupported_on_target"
    assert "Blackwell has no wgmma: use tcgen05.mma" in evaluation["message"]


# -- item 10: input errors in one line --------------------------------------------------------------------

def test_flags_are_shown_as_flags_and_take_no_value() -> None:
    shown = cli("generate", "--help")
    assert shown.returncode == 0 and "<bool>" not in shown.stdout and "--dry-run" in shown.stdout
    assert "<bool>" not in cli("eval", "--help").stdout + cli("--help").stdout + cli("tasks", "list", "--help").stdout
    sent = cli("generate", "--model", "replay:none.jsonl", "--tasks", "softmax", "--dry-run")
    assert sent.returncode == 0 and "Nothing was sent." in one_line(sent.stdout)
    refused = cli("generate", "--model", "replay:none.jsonl", "--tasks", "softmax", "--dry-run", "true")
    assert refused.returncode == 2 and "unexpected extra argument" in one_line(refused.stderr)


def test_a_binary_candidate_is_one_clear_line(tmp_path: Path) -> None:
    """check refuses it in one line; eval records it as its own failed item with that reason (issue #43, item 4:
    one unreadable file among many must not stop the others)."""
    (tmp_path / "softmax.cu").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe\x00\x80")
    reason = "softmax.cu: not a text file (a candidate is one CUDA C++ source)"
    checked = cli("check", "softmax.cu", cwd=tmp_path)
    assert checked.returncode == 2 and checked.stdout == ""
    assert _error_line(checked.stderr) == f"error: {reason}"
    evaluated = cli("eval", "softmax.cu", "--out", "run", cwd=tmp_path)
    assert evaluated.returncode == 0 and "Traceback" not in evaluated.stderr
    assert "extraction: no_code_block" in one_line(evaluated.stdout)
    record = json.loads((tmp_path / "run" / "items" / "softmax" / "softmax" / "result.json").read_text())
    assert record["extraction"] == "no_code_block" and record["message"] == reason


def test_a_bad_replay_line_names_the_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "answers.jsonl").write_text(json.dumps({"task": "softmax", "sample": 0, "completion": "x"}) + "\n"
                                            + json.dumps({"task": "softmax", "sample": 1}) + "\n")
    done = cli("generate", "--model", "replay:answers.jsonl", "--tasks", "softmax", "--out", "gen", cwd=tmp_path)
    assert done.returncode == 2
    assert _error_line(done.stderr) == "error: answers.jsonl:2: not a replay entry: missing field 'completion'"


def test_provider_errors_say_why(tmp_path: Path) -> None:
    answer = f"```cuda\n{(EXAMPLES / 'softmax.cu').read_text()}```"
    (tmp_path / "answers.jsonl").write_text(json.dumps({"task": "softmax", "sample": 0, "completion": answer}) + "\n")
    done = cli("generate", "--model", "replay:answers.jsonl", "--tasks", "softmax", "--samples", "3", "--out", "gen",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("3 items sampled; provider errors: 2 (2× e.g. no replayed answer for ReplayKey(task='softmax', sample=1, "
            "turn=0) in replay:answers.jsonl); cost") in one_line(done.stdout)


@pytest.mark.parametrize("command", [["prompt", "softmax"], ["generate", "--model", "replay:x.jsonl", "--dry-run"],
                                     ["run", "--model", "replay:x.jsonl", "--dry-run"]])
def test_a_bad_context_lists_the_choices(command: list[str]) -> None:
    done = cli(*command, "--context", "bogus")
    assert done.returncode == 2 and done.stdout == ""
    assert _error_line(done.stderr) == "error: --context is none, arch or full, not 'bogus'"


@pytest.mark.parametrize("command", [["prompt", "softmax"], ["generate", "--model", "replay:x.jsonl", "--dry-run"]])
def test_a_one_shot_without_a_colon_gives_the_form(command: list[str]) -> None:
    done = cli(*command, "--one-shot", "nocolon")
    assert done.returncode == 2 and done.stdout == ""
    assert _error_line(done.stderr) == f"error: --one-shot takes TASK:FILE {ONE_SHOT_FORM}, not 'nocolon'"


def test_a_one_shot_of_the_same_task_is_one_line() -> None:
    done = cli("prompt", "softmax", "--one-shot", f"softmax:{EXAMPLES / 'softmax.cu'}")
    assert done.returncode == 2
    assert _error_line(done.stderr) == "error: a one-shot example must come from another task than 'softmax'"


def test_eval_of_an_eval_run_directory_says_what_it_is(tmp_path: Path) -> None:
    _copy("cpp_syntax_error.cu", tmp_path, "softmax.cu")
    first = cli("eval", "softmax.cu", "--out", "run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    done = cli("eval", "run", "--out", "again", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert _error_line(done.stderr) == (
        "error: run is an eval run directory: it holds evaluations, not generated candidates. eval takes candidate "
        "files or folders, a generate or run directory, or a generations .jsonl; to recompute this run's verdicts "
        "from its evidence: ptxbench eval run --regrade")
    assert not (tmp_path / "again").exists()
    regraded = cli("eval", "run", "--regrade", cwd=tmp_path)  # what the message says to do
    assert regraded.returncode == 0, regraded.stderr
    assert "COMPILE_ERROR" in regraded.stdout and not (tmp_path / "runs").exists(), "regraded in place"
    elsewhere = cli("eval", "run", "--regrade", "--out", "other", cwd=tmp_path)
    assert elsewhere.returncode == 2
    assert _error_line(elsewhere.stderr) == ("error: --regrade recomputes the eval run run in place: give it alone, "
                                            "with no other --out")


def test_readme_header_and_prompt_agree_on_what_the_entry_point_returns() -> None:
    prompt = cli("prompt", "softmax")
    assert prompt.returncode == 0
    assert 'extern "C" int softmax(' in prompt.stdout
    assert "return an int: cudaGetLastError() or\n// another cudaError_t value (0 = cudaSuccess)" in prompt.stdout
    readme = one_line((REPO / "README.md").read_text())
    assert "it returns an `int`, a `cudaError_t` value (0 = `cudaSuccess`" in readme
    assert "returns a `cudaError_t`" not in readme
