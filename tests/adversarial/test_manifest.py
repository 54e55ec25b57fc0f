"""The adversarial suite's manifest is complete and consistent, and every case builds (CPU only).

Each ``.cu`` here is a candidate the GPU evaluator must not pass; ``manifest.toml`` says which status
it must get and, for REJECTED, which guard must fire. Running them needs a GPU; this test checks what
can be checked without one: the list matches the folder, its values come from the fixed vocabularies,
every case builds for sm_90a with the harness flags and exports its entry point, and the two cases
aimed at static checks look to the static report the way they are meant to (so that only the run-time
checks can catch them).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxbench._compat import tomllib
from ptxbench.arch.registry import Arch
from ptxbench.check import CheckReport, check_files
from ptxbench.static.report import Stage
from ptxbench.tasks.loader import bundled_suite, get_task

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"

EXPECTS = {"COMPILE_ERROR", "RUNTIME_ERROR", "TIMEOUT", "INCORRECT", "REJECTED", "PASSED"}
GUARDS = {"library_call", "torch_fallback", "other_stream", "cached_output", "input_mutation", "dead_code_feature",
          "out_of_bounds_write", "below_physical_floor", "feature_not_executed"}
REQUIRED_KEYS = {"file", "task", "expect", "why"}
HEADER = re.compile(r"^// ADVERSARIAL CASE (?P<case>\w+) \(task (?P<task>\w+)\) -- expected: (?P<expect>[A-Z_]+)")


def _cases() -> list[dict[str, str]]:
    with MANIFEST.open("rb") as handle:
        return tomllib.load(handle)["case"]


CASES = _cases()


def _case(file: str) -> dict[str, str]:
    return next(c for c in CASES if c["file"] == file)


def test_manifest_lists_exactly_the_files_here() -> None:
    listed = [c["file"] for c in CASES]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    for name in listed:
        assert (HERE / name).is_file(), f"{name} is listed but missing"
    assert sorted(p.name for p in HERE.glob("*.cu")) == sorted(listed), "every .cu here must be listed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["file"])
def test_entry_uses_the_fixed_vocabulary(case: dict[str, str]) -> None:
    tasks = {t.id for t in bundled_suite()}
    assert REQUIRED_KEYS <= set(case) <= REQUIRED_KEYS | {"guard"}, sorted(case)
    assert case["file"].endswith(".cu")
    assert case["task"] in tasks
    assert case["expect"] in EXPECTS
    if case["expect"] == "REJECTED":
        assert case.get("guard") in GUARDS, f"{case['file']}: REJECTED needs a guard from the list"
    else:
        assert "guard" not in case, f"{case['file']}: only a REJECTED case names a guard"
    why = case["why"].strip()
    assert why and why.endswith(".") and "\n" not in why


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["file"])
def test_file_opens_with_its_explanation(case: dict[str, str]) -> None:
    lines = (HERE / case["file"]).read_text().splitlines()
    match = HEADER.match(lines[0])
    assert match, f"{case['file']}: the first line must be '// ADVERSARIAL CASE <name> (task <id>) -- expected: <STATUS>'"
    assert match["case"] == Path(case["file"]).stem
    assert match["task"] == case["task"] and match["expect"] == case["expect"]
    block = []
    for line in lines:
        if not line.startswith("//"):
            break
        block.append(line)
    assert any("How the evaluator must catch it" in line for line in block), case["file"]


@pytest.fixture(scope="module")
def reports() -> dict[str, CheckReport]:
    items = [(HERE / c["file"], get_task(c["task"])) for c in CASES]
    return {Path(r.candidate).name: r for r in check_files(items, Arch.SM_90A)}


def test_every_case_builds_for_sm90a_with_its_entry_point(reports: dict[str, CheckReport]) -> None:
    for case in CASES:
        report = reports[case["file"]]
        diagnosis = report.build.diagnosis.summary if report.build.diagnosis else report.build.log[-2000:]
        assert report.build.ok, f"{case['file']}: {diagnosis}"
        assert report.static is not None and report.build.artifact(".so") is not None
        assert report.static.task == case["task"]


def test_dead_code_wgmma_is_in_the_sass(reports: dict[str, CheckReport]) -> None:
    """Statically indistinguishable from real use: only the executed-instruction check can catch it."""
    static = reports["dead_code_wgmma.cu"].static
    wgmma = next(r for r in static.requirements if "wgmma.bf16" in r.requirement.any_of)
    assert wgmma.stage is Stage.IN_SASS, wgmma.message
    assert any(m.startswith("HGMMA.") and m.endswith(".F32.BF16") for k in static.kernels for m in k.sass)
    assert any("wgmma.bf16" in k.features for k in static.kernels)


def test_library_call_is_flagged_statically_but_not_linked(reports: dict[str, CheckReport]) -> None:
    static = reports["library_call.cu"].static
    assert any("dlopen" in v for v in static.policy_violations), static.policy_violations
    assert not any("links" in v for v in static.policy_violations), "no link-time dependency: caught at run time"


def test_no_other_case_trips_a_static_policy(reports: dict[str, CheckReport]) -> None:
    """The rest are invisible to the source and link checks: the GPU evaluator must catch them."""
    for case in CASES:
        if case["file"] != "library_call.cu":
            assert not reports[case["file"]].static.policy_violations, case["file"]


def test_library_call_is_the_only_case_without_a_kernel(reports: dict[str, CheckReport]) -> None:
    """The torch_fallback case defines a kernel it never launches, so "no kernel in the build" is not its tell."""
    without = sorted(name for name, report in reports.items() if not report.static.kernels)
    assert without == ["library_call.cu"]
