"""Every target the reference results say is missed is explained (benchmarks/reference_limits.toml), with
evidence that exists, and the results' Markdown carries the explanation under the task that misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.tasks.loader import get_task

from .conftest import REPO, repo_script

RESULTS = REPO / "benchmarks" / "results"
reference_kernels = repo_script("benchmarks/reference_kernels.py")
RESULT_FILES = sorted(RESULTS.glob("reference_kernels_*.json"))


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.stem)
def test_every_missed_target_has_an_explanation(path: Path) -> None:
    explained = {(entry["task"], workload) for entry in reference_kernels.limits() for workload in entry["workloads"]}
    result = json.loads(path.read_text())
    missed = [(task["task"], row["workload"]) for task in result["tasks"] for row in task["timings"] if not row["met"]]
    assert missed, "the results file lists no miss: nothing to check (or its rows lost their 'met')"
    unexplained = [pair for pair in missed if pair not in explained]
    assert not unexplained, f"missed targets without an entry in reference_limits.toml: {unexplained}"


def test_every_entry_names_real_workloads_and_evidence_that_exists() -> None:
    entries = reference_kernels.limits()
    assert entries
    for entry in entries:
        assert entry["finding"].strip() and entry["evidence"], entry["task"]
        names = {workload.name for workload in get_task(entry["task"]).workloads}
        assert set(entry["workloads"]) <= names, f"{entry['task']}: no such workload in {entry['workloads']}"
        for evidence in entry["evidence"]:
            if evidence != reference_kernels.EXECUTED_COUNTS:
                assert (RESULTS / evidence).is_file(), f"{entry['task']}: evidence {evidence} is not in benchmarks/results"


def test_the_markdown_explains_a_miss_under_its_task_and_not_a_target_met() -> None:
    row = {"workload": "w1", "ms": 1.0, "tflops": None, "gbps": None, "baseline": "lib", "baseline_ms": 0.9,
           "pct_of_vendor": 90.0, "pct_of_roofline": None, "target": ">= 100 % of the library", "met": False,
           "miss": "library 10.00 points short"}
    result = {"arch": "sm_90a", "date": "d", "git_revision": "abc", "command": "c", "environment": {"name": "GPU"},
              "tasks": [{"task": "a", "status": "PASSED", "message": "m", "timings": [row], "features": []},
                        {"task": "b", "status": "PASSED", "message": "m",
                         "timings": [{**row, "met": True, "miss": None}], "features": []}]}
    explained = [{"task": "a", "workloads": ["w1"], "evidence": ["x.md"], "finding": "the ring is  too\nshallow"},
                 {"task": "b", "workloads": ["w1"], "evidence": ["y.md"], "finding": "never shown"}]
    text = reference_kernels._markdown(result, explained)
    section_a, section_b = text.split("## b:")
    assert "- w1: the ring is too shallow (evidence: `x.md`)" in section_a
    assert "never shown" not in section_b
    later = [{"task": "b", "workloads": ["w1"], "evidence": ["z.md"], "finding": "a faster library", "after_run": True}]
    section_b = reference_kernels._markdown(result, later).split("## b:")[1]
    assert "Measured after this run" in section_b and "- w1: a faster library (evidence: `z.md`)" in section_b
    assert "Why it misses" not in section_b


def test_the_committed_markdown_is_what_the_json_and_the_limits_render() -> None:
    for path in RESULT_FILES:
        rendered = reference_kernels._markdown(json.loads(path.read_text())) + "\n"
        assert path.with_suffix(".md").read_text() == rendered, (
            f"{path.with_suffix('.md').name} is stale: python benchmarks/reference_kernels.py --render-only")


def test_the_misses_gpu_check_profiles_real_workloads_against_real_baselines() -> None:
    """scripts/gpu_checks.sh's `misses` section (the ncu side-by-sides still to take) names workloads of its tasks
    and baselines those tasks have, so its one device call is not spent on a typo."""
    import re

    from ptxbench.evaluate.baselines.variants import variant_specs

    script = (REPO / "scripts" / "gpu_checks.sh").read_text()
    specs = []
    for section, count in (("misses", 3), ("serving_misses", 6)):
        start = script.index(f"        {section})")
        block = script[start:script.index(";;", start)]
        found = re.findall(r'"(\w+) ([\w.-]+) (\w+)"', block)
        assert len(found) == count, block
        specs += found
    for task_id, workload, baseline in specs:
        task = get_task(task_id)
        assert workload in {w.name for w in task.workloads}, (task_id, workload)
        assert baseline in variant_specs(task), (task_id, baseline)
