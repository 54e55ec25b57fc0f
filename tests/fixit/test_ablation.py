"""Selection for the diversity-vs-volume ablation, the shipped experiment config, and the exports."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench._io import write_jsonl
from ptxbench.fixit.ablation import AblationConfig, load_ablation, run_ablation
from ptxbench.fixit.dataset import build_dataset, export, select
from ptxbench.fixit.mine import FailureCase, RepairPair
from ptxbench.results.attempts import Attempt
from ptxbench.tasks.loader import get_task

from ..conftest import REPO


def _pair(index: int, task: str, error_class: str) -> RepairPair:
    attempt = Attempt(run="r", arch="sm_90a", task=task, sample=f"s{index}", error_class=error_class)
    failure = FailureCase(attempt=attempt, source=f"int x = bad_name_{index};", feedback=f"bad_name_{index} is undefined")
    return RepairPair(failure=failure, fixed_source=f"int x = {index};", verified=True, origin="teacher:t",
                      explanation=f"The file read bad_name_{index}, which nothing declares, so it could not build; "
                                  "the fix writes the value itself instead of naming a missing variable.")


def _pairs() -> list[RepairPair]:
    frequent = [_pair(i, "transpose", "compile.cpp_error") for i in range(12)]
    rare = [_pair(100 + i, task, cls) for i, (task, cls) in enumerate(
        [("softmax", "numerical.nan"), ("rmsnorm", "guard.other_stream"), ("gemm_bf16", "instruction.absent"),
         ("gemm_fp8", "compile.ptx_syntax")])]
    return frequent + rare


def test_diverse_selection_covers_more_kinds_of_mistake_than_volume() -> None:
    records, _ = build_dataset(_pairs())
    diverse, volume = select(records, 5, "diverse"), select(records, 5, "volume", seed=3)
    kinds = lambda chosen: {(r.family, r.error_class, r.task) for r in chosen}  # noqa: E731
    assert len(diverse) == len(volume) == 5
    assert len(kinds(diverse)) == 5 and len(kinds(volume)) < 5
    with pytest.raises(ValueError, match="diverse"):
        select(records, 5, "random")


def test_family_holdout_and_no_held_out_shapes_in_records() -> None:
    records, card = build_dataset(_pairs(), holdout_families=("gemm",))
    assert {r.task for r in records if r.split == "test"} == {"gemm_bf16", "gemm_fp8"}
    assert card.holdout_families == ["gemm"]
    for record in records:
        text = record.messages[1].content
        for workload in get_task(record.task).held_out():
            assert workload.name not in text


def test_exports_parquet_and_hf(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    records, card = build_dataset(_pairs(), holdout_tasks=("softmax",))
    written = export(records, card, tmp_path / "data", formats=("jsonl", "parquet", "hf"))
    import datasets

    assert (tmp_path / "data" / "train.parquet") in written
    loaded = datasets.load_from_disk(str(tmp_path / "data" / "hf" / "train"))
    assert len(loaded) == card.by_split["train"] and loaded[0]["messages"][-1]["role"] == "assistant"


def test_shipped_ablation_config_and_a_build_only_run(tmp_path: Path) -> None:
    shipped = load_ablation(REPO / "experiments" / "fixit_diversity_vs_volume.toml")
    assert shipped.size > 0 and shipped.train["base_model"]
    pairs_file = tmp_path / "pairs.jsonl"
    write_jsonl(pairs_file, _pairs())
    config = AblationConfig(pairs=[pairs_file], size=4, train={"base_model": "unused"}, eval_tasks=["transpose"],
                            out=tmp_path / "ablation")
    summary = run_ablation(config, build_only=True)
    assert summary["arms"]["diverse"]["cells"] > summary["arms"]["volume"]["cells"]
    assert (tmp_path / "ablation" / "diverse" / "data" / "train.jsonl").is_file()
