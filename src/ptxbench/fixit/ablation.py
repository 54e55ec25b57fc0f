"""The diversity-vs-volume ablation: from the same repairs, train one adapter on a varied set and one
on a set of the same size drawn as the data comes (dominated by the frequent mistakes), evaluate both,
and compare them. The seed's finding was that the varied set wins; this makes the claim testable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from ptxbench._compat import tomllib
from ptxbench._io import read_jsonl
from ptxbench.errors import PtxbenchError
from ptxbench.fixit.dataset import build_dataset, export, select
from ptxbench.fixit.mine import RepairPair
from ptxbench.records import Record
from ptxbench.refine.graders import Grader

ABLATION_VERSION = 1
ARMS: tuple[Literal["diverse", "volume"], ...] = ("diverse", "volume")


class AblationConfig(Record):
    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = ABLATION_VERSION
    pairs: list[Path] = Field(min_length=1, description="Explained repair pairs (.jsonl from `fixit explain`)")
    size: int = Field(ge=1, description="Training records per arm (the same for both)")
    holdout_tasks: list[str] = Field(default_factory=list)
    holdout_families: list[str] = Field(default_factory=list)
    require_verified: bool = True
    train: dict[str, Any] = Field(description="TrainConfig fields except dataset and output_dir")
    eval_tasks: list[str] = Field(min_length=1)
    samples: int = Field(default=4, ge=1)
    turns: int = Field(default=1, ge=1)
    out: Path
    seed: int = 0


def load_ablation(path: Path | str) -> AblationConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
        return AblationConfig.model_validate(data)
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise PtxbenchError(f"{path}: not a valid ablation config: {exc}") from None


def run_ablation(config: AblationConfig, *, grader: Grader | None = None, build_only: bool = False) -> dict[str, Any]:
    """Both arms: data (always), then training and evaluation unless ``build_only``; returns a summary."""
    from ptxbench.fixit.evaluate import evaluate_adapter
    from ptxbench.fixit.train import TrainConfig, train

    pairs = [pair for path in config.pairs for pair in read_jsonl(path, RepairPair)]
    records, card = build_dataset(pairs, holdout_tasks=tuple(config.holdout_tasks),
                                  holdout_families=tuple(config.holdout_families),
                                  require_verified=config.require_verified, seed=config.seed)
    training = [r for r in records if r.split == "train"]
    if len(training) < config.size:
        raise PtxbenchError(f"only {len(training)} training records for arms of {config.size}: lower `size`")
    summary: dict[str, Any] = {"records": card.records, "arms": {}}
    for arm in ARMS:
        chosen = select(training, config.size, arm, config.seed)
        data = config.out / arm / "data"
        export(chosen, card.model_copy(update={"records": len(chosen)}), data)
        cells = {(r.family, r.error_class, r.task) for r in chosen}
        summary["arms"][arm] = {"records": len(chosen), "cells": len(cells), "data": str(data)}
        if build_only:
            continue
        settings = {**config.train, "dataset": data / "train.jsonl", "output_dir": config.out / arm / "adapter"}
        train_config = TrainConfig.model_validate(settings)
        result = train(train_config)
        _, adapter_run, table = evaluate_adapter(train_config.base_model, train_config.output_dir, config.eval_tasks,
                                                 config.out / arm / "eval", samples=config.samples, turns=config.turns,
                                                 grader=grader)
        summary["arms"][arm].update({"final_loss": result.final_loss, "eval": str(adapter_run), "vs_base": table})
    if not build_only:
        from ptxbench.results.compare import compare_command

        summary["diverse_vs_volume"] = compare_command(Path(summary["arms"]["volume"]["eval"]),
                                                       Path(summary["arms"]["diverse"]["eval"]), "correct", 1)
    return summary
