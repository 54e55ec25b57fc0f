"""`ptxbench tasks`: `list` groups the suite by family; `import` turns a FlashInfer-Bench definition into a task."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.tasks.loader import bundled_suite, by_family
from ptxbench.tasks.model import Family

from ..conftest import FIXTURES, REPO

runner = CliRunner()


def _rows(output: str) -> list[tuple[str, str]]:
    """(id, family) of each task row of the table; a row's wrapped continuation lines have no id."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and cells[0]:
            rows.append((cells[0].removesuffix(" *"), cells[1]))
    return rows


def test_tasks_list_groups_the_suite_by_family_and_keeps_its_columns() -> None:
    result = runner.invoke(app, ["tasks", "list"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert sorted(rows) == sorted((t.id, t.family.value) for t in bundled_suite())
    families = [family for _, family in rows]
    groups = [f for i, f in enumerate(families) if i == 0 or f != families[i - 1]]
    assert len(groups) == len(set(families))  # each family's tasks are together, once
    assert groups == [f.value for f in Family if f.value in families]  # in the families' declared order
    separators = [line for line in result.output.splitlines() if line.startswith("├")]
    assert len(separators) == len(groups) - 1  # a rule between families, none inside one
    gemm = next(t for t in bundled_suite() if t.id == "gemm_bf16")
    counts = f"1 / {len(gemm.shown()) - 1} / {len(gemm.held_out())}"
    assert "workloads" in result.output and counts in result.output  # the counts are still there


def test_by_family_keeps_every_task_once_in_order_within_a_family() -> None:
    suite = bundled_suite()
    groups = by_family(list(reversed(suite)))
    assert sum(len(tasks) for tasks in groups.values()) == len(suite)
    for family, tasks in groups.items():  # the given (here reversed) order within each family
        assert tasks == [t for t in reversed(suite) if t.family is family]
    assert {"rmsnorm", "softmax", "transpose"} <= {t.id for t in groups[Family.MEMORY_BOUND]}
    assert list(groups) == [f for f in Family if f in groups]


def test_the_readme_task_table_lists_every_task_once_under_its_family() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index("| task | family | what | sm_90a requires | sm_100a requires |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows += [(task_id, cells[1]) for task_id in re.findall(r"`([^`]+)`", cells[0])]
    assert sorted(rows) == sorted((t.id, t.family.value) for t in bundled_suite())
    families = [family for _, family in rows]
    groups = [f for i, f in enumerate(families) if i == 0 or f != families[i - 1]]
    assert groups == [f.value for f in Family if f.value in families]  # grouped, as `tasks list` groups them


def test_tasks_import_writes_a_task_file_that_loads(tmp_path: Path) -> None:
    folder = FIXTURES / "flashinfer_bench"
    out = tmp_path / "gemm.toml"
    result = runner.invoke(app, ["tasks", "import", str(folder / "gemm_n6144_k4096.json"),
                                 str(folder / "gemm_n6144_k4096.jsonl"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "task gemm_n6144_k4096 (gemm), 6 workloads" in result.output
    shown = runner.invoke(app, ["tasks", "show", str(out), "--json"])
    assert shown.exit_code == 0 and '"id": "gemm_n6144_k4096"' in shown.output
    printed = runner.invoke(app, ["tasks", "import", str(folder / "gemm_n6144_k4096.json"),
                                  str(folder / "gemm_n6144_k4096.jsonl")])
    assert printed.exit_code == 0 and printed.output == out.read_text()


def test_tasks_import_refuses_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    definition = (FIXTURES / "flashinfer_bench" / "gemm_n6144_k4096.json").read_text()
    bad = tmp_path / "d.json"
    bad.write_text(definition.replace('"bfloat16"', '"float4_e2m1"', 1))
    result = runner.invoke(app, ["tasks", "import", str(bad), str(FIXTURES / "flashinfer_bench" / "gemm_n6144_k4096.jsonl")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: input A has dtype float4_e2m1"), result.output
    assert "Traceback" not in result.output


def test_tasks_show_lists_each_variant_with_its_rule_and_workloads(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tasks", "show", "attention_fwd"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "variant hd64-causal (held out): D=64 causal=1 S % 64 == 0 — hd64-s1024-causal" in text
    assert "variant hd64-full: D=64 causal=0 S % 64 == 0 — hd64-s2048, hd64-s640" in text
    # every bundled task has variants: a task file without them shows none
    suite = REPO / "src" / "ptxbench" / "tasks" / "suite"
    plain = tmp_path / "softmax.toml"
    plain.write_text(re.sub(r"\[\[variants\]\]\n(?:\w[^\n]*\n)*", "", (suite / "softmax.toml").read_text()))
    shown = runner.invoke(app, ["tasks", "show", str(plain)])
    assert shown.exit_code == 0 and "softmax" in shown.output, shown.output
    assert "variant" not in shown.output
