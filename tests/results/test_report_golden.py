"""The report's Markdown and HTML stay byte for byte what they were for the same attempts.

The golden files under ``golden/report/`` were written by the report code as it stood before it was
split into counting, plots and renderers; any change to a renderer or a count shows here as a diff.
Two things in a page are not the report's content and are masked before comparing: the time the page
was made (its footer) and the PNG bytes of the plots (they depend on the installed matplotlib and
FreeType). The plots' titles, captions and places stay in the comparison.

After an intended change to the report, rewrite the files with ``PTXBENCH_REGOLD=1 pytest <this file>``
and read the diff. (Rewritten for issue #43: the candidates per task, the definitions of attempt, provider
error and the stage words, no empty plot panels, "not measured" rather than 0 in an empty run, the by-turn
table's "samples"; for issue #37, sol_p beside fast_p, the median SOL per task and the SOL card.)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from ptxbench.results.attempts import Attempt
from ptxbench.records.rundir import RunHeader

pytest.importorskip("matplotlib")

from ptxbench.results.report import render_report  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "report"
REGOLD = os.environ.get("PTXBENCH_REGOLD") == "1"

HEADER = RunHeader(kind="eval", created="2025-01-02T03:04:05+00:00", ptxbench="0.9.0", git_revision="0123456789abcdef",
                   python="3.11.0", host="golden", toolchain={"nvcc": "12.8.93"},
                   environment={"name": "NVIDIA H200", "driver": "580.00"}, config={"arch": "sm_90a", "options": {}})


def _a(task: str, sample: str, error_class: str, *, family: str | None = "reduction", model: str | None = None,
       condition: str | None = None, compiled: bool = True, ptx: bool = True, sass: bool = True,
       correct: bool | None = None, executed: bool | None = None, speedup: float | None = None, turn: int = 0,
       last_turn: bool = True, run: str = "golden", requirements: dict[str, str] | None = None,
       roofline_pct: float | None = None) -> Attempt:
    return Attempt(run=run, model=model, condition=condition, arch="sm_90a", task=task, family=family, sample=sample,
                   turn=turn, last_turn=last_turn, compiled=compiled, features_in_ptx=ptx, features_in_sass=sass,
                   correct=correct, features_executed=executed, speedup=speedup, roofline_pct=roofline_pct,
                   error_class=error_class, requirements=requirements or {})


def _gpu_mixed() -> list[Attempt]:
    """Two models and two contexts on a GPU with a profiler: every stage measured, some of it partly."""
    attempts = []
    for model in ("openai:gpt-x", "local:/models/a|very<long>&odd-model-name-that-goes-on-and-on"):
        for condition in ("none", "full"):
            m = dict(model=model, condition=condition)
            attempts += [
                _a("softmax", f"{condition}0", "ok", correct=True, executed=True, speedup=1.5, roofline_pct=82.0,
                   **m),
                _a("softmax", f"{condition}1", "ok", correct=True, speedup=0.8, roofline_pct=44.0, **m),
                _a("softmax", f"{condition}2", "numerical.wrong_values", correct=False, **m),
                _a("softmax", f"{condition}3", "instruction.not_executed", correct=True, executed=False, speedup=2.1,
                   **m),
                _a("gemm_bf16", f"{condition}0", "compile.ptx_syntax", family="gemm", compiled=False, ptx=False,
                   sass=False, **m),
                _a("gemm_bf16", f"{condition}1", "ok", family="gemm", correct=True, executed=True, speedup=1.2,
                   roofline_pct=61.0, **m),
                _a("gemm_bf16", f"{condition}2", "guard.library_call", family="gemm", ptx=False, sass=False,
                   correct=False, **m),
                _a("gemm_bf16", f"{condition}3", "numerical.nan", family="gemm", sass=False, correct=False, **m),
                _a("rmsnorm", f"{condition}0", "infra.no_gpu", family=None, **m),
                _a("rmsnorm", f"{condition}1", "runtime.illegal_address", family=None, correct=False, **m),
            ]
    return attempts


def _gpu_unprofiled() -> list[Attempt]:
    """On a GPU without Nsight Compute: correct kernels whose executed instructions nobody counted."""
    return [_a("softmax", "s0", "ok", correct=True, speedup=1.1), _a("softmax", "s1", "ok", correct=True, speedup=0.4),
            _a("softmax", "s2", "numerical.wrong_values", correct=False),
            _a("softmax", "s3", "infra.harness_error", correct=None)]


def _cpu_static() -> list[Attempt]:
    """Built and checked statically, no GPU: nothing past "features in SASS" is measured. Each candidate says how
    far its required feature got, so the candidates' table explains the SASS share."""
    stage = {0: "sass", 1: "sass", 2: "ptx", 3: "source"}
    return [_a("softmax", f"s{i}", "infra.no_gpu", sass=i < 2, ptx=i < 3, requirements={"tma.load": stage[i]})
            for i in range(4)] + [
        _a("rmsnorm", "r0", "compile.cpp_error", compiled=False, ptx=False, sass=False, family="normalization")]


def _generated() -> list[Attempt]:
    """A ``generate`` run: sampled, never built."""
    return [_a("softmax", "s0", "unevaluated", compiled=False, ptx=False, sass=False, model="openai:gpt-x"),
            _a("softmax", "s1", "extraction.no_code_block", compiled=False, ptx=False, sass=False,
               model="openai:gpt-x")]


def _multi_turn() -> list[Attempt]:
    """Three samples refined over up to three turns: counted at their last turn, with a table by turn."""
    return [
        _a("softmax", "s0", "compile.ptx_syntax", compiled=False, ptx=False, sass=False, turn=0, last_turn=False),
        _a("softmax", "s0", "numerical.wrong_values", correct=False, turn=1, last_turn=False),
        _a("softmax", "s0", "ok", correct=True, executed=True, speedup=1.3, turn=2),
        _a("softmax", "s1", "ok", correct=True, executed=True, speedup=0.9, turn=0),
        _a("softmax", "s2", "runtime.timeout", correct=False, turn=0, last_turn=False),
        _a("softmax", "s2", "ok", correct=True, speedup=1.05, turn=1),
    ]


CASES = {
    "gpu_mixed": (_gpu_mixed, HEADER),
    "gpu_unprofiled": (_gpu_unprofiled, HEADER),
    "cpu_static": (_cpu_static, None),
    "generated": (_generated, HEADER.model_copy(update={"kind": "generate", "git_revision": None, "toolchain": {},
                                                         "environment": {}})),
    "multi_turn": (_multi_turn, None),
    "empty": (list, HEADER),
}
PLOTS = {"gpu_mixed": 4, "gpu_unprofiled": 4, "cpu_static": 2, "generated": 2, "multi_turn": 3, "empty": 0}
"""The real PNGs behind the mask: no empty panel (fast_p and speedups without a GPU, errors without a failure)."""

_MADE = re.compile(r"Made by ptxbench report on [^.<]+\.")
_PNG = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


def _masked(page: str) -> str:
    page, made = _MADE.subn("Made by ptxbench report on TIME.", page)
    assert made == 1
    return _PNG.sub("data:image/png;base64,PNG", page)


def _check(name: str, text: str) -> None:
    golden = GOLDEN / name
    if REGOLD:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(text.encode())
    assert text.encode() == golden.read_bytes(), f"{name} differs from its golden file"


@pytest.mark.parametrize("case", list(CASES))
def test_the_report_is_byte_identical_to_its_golden_files(case: str) -> None:
    attempts, header = CASES[case]
    report = render_report(attempts(), f"PTXBench report: {case}", header=header)
    _check(f"{case}.md", report.markdown)
    _check(f"{case}.html", _masked(report.html))
    assert report.html.count("data:image/png;base64,iVBOR") == PLOTS[case]


def test_without_matplotlib_the_page_is_byte_identical_to_its_golden_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report = render_report(_gpu_mixed(), "PTXBench report: no plots", header=HEADER)
    _check("no_plots.md", report.markdown)
    _check("no_plots.html", _masked(report.html))
    assert "data:image/png" not in report.html
