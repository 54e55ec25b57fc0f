"""``ptxbench fixit``: failed kernels → verified repairs with explanations → a balanced SFT set → LoRA →
base vs adapter. Each command is one call into ``ptxbench.fixit``; the files between them are JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.grading import grader_for_refinement
from ptxbench.cli.options import BaseUrl, Evidence, MaxTokens, Samples, Seed, Server, ServerToken, Turns, server_token
from ptxbench.cli.output import console

app = typer.Typer(no_args_is_help=True,
                  help="Fixit: mine failures, repair, explain, build an SFT set, train, evaluate.")

_Teacher = Annotated[str, typer.Option("--teacher")]


@app.command("mine")
def fixit_mine(runs: Annotated[list[Path], typer.Argument(help="Run directories (run or eval)")],
               out: Annotated[Path, typer.Option("--out")] = Path("fixit/failures.jsonl"),
               pairs_out: Annotated[Optional[Path], typer.Option("--own-repairs", help="Also write the model's own "
                                                                 "later fixes here")] = None,
               per_task: Annotated[Optional[int], typer.Option("--per-task")] = None,
               per_class: Annotated[Optional[int], typer.Option("--per-class")] = None,
               seed: Seed = 0) -> None:
    """Collect failed kernels with their diagnostics (capped per task and error class)."""
    from ptxbench._io import write_jsonl
    from ptxbench.fixit.mine import harvest_own_repairs, mine_failures

    failures = mine_failures(runs, per_task=per_task, per_class=per_class, seed=seed)
    write_jsonl(out, failures)
    console.print(f"{len(failures)} failures → {out}", highlight=False)
    if pairs_out is not None:
        pairs = harvest_own_repairs(runs)
        write_jsonl(pairs_out, pairs)
        console.print(f"{len(pairs)} own repairs → {pairs_out}", highlight=False)


@app.command("repair")
def fixit_repair(failures: Annotated[Path, typer.Argument()], teacher: _Teacher,
                 out: Annotated[Path, typer.Option("--out")] = Path("fixit/pairs.jsonl"),
                 work: Annotated[Path, typer.Option("--work", help="Run directory of the repair turns")
                                 ] = Path("fixit/repairs"),
                 turns: Turns = 3, base_url: BaseUrl = None, server: Server = None, token: ServerToken = None,
                 evidence: Evidence = None) -> None:
    """A teacher model fixes each failure through the refinement loop; only fixes that pass are kept.

    --evidence defaults to publish on this machine and to sweep through --server (said when it runs)."""
    from ptxbench._io import read_jsonl, write_jsonl
    from ptxbench.fixit.mine import FailureCase
    from ptxbench.fixit.repair import repair

    server_token(server, token)
    from ptxbench.records.evidence import EvidenceProfile

    cases = read_jsonl(failures, FailureCase)
    grader = grader_for_refinement(server, token, evidence, on_server=EvidenceProfile.SWEEP)
    try:
        pairs = repair(cases, teacher, work, grader, turns=turns, base_url=base_url)
    finally:
        grader.close()
    write_jsonl(out, pairs)
    verified = sum(p.verified for p in pairs)
    console.print(f"{len(pairs)} repairs kept ({verified} verified on a GPU) → {out}", highlight=False)


@app.command("explain")
def fixit_explain(pairs: Annotated[Path, typer.Argument()], teacher: _Teacher,
                  out: Annotated[Path, typer.Option("--out")] = Path("fixit/explained.jsonl"),
                  base_url: BaseUrl = None) -> None:
    """The teacher explains each repair; empty, generic or ungrounded explanations are rejected."""
    from ptxbench._io import read_jsonl, write_jsonl
    from ptxbench.fixit.mine import RepairPair
    from ptxbench.fixit.repair import explain

    kept, rejected = explain(read_jsonl(pairs, RepairPair), teacher, base_url=base_url)
    write_jsonl(out, kept)
    console.print(f"{len(kept)} explained → {out}; rejected: {rejected or 'none'}", highlight=False)


@app.command("build")
def fixit_build(pairs: Annotated[list[Path], typer.Argument(help="Explained pairs (.jsonl)")],
                out: Annotated[Path, typer.Option("--out")] = Path("fixit/data"),
                holdout_tasks: Annotated[str, typer.Option("--holdout-tasks", help="Comma-separated task ids kept "
                                                           "for testing")] = "",
                holdout_families: Annotated[str, typer.Option("--holdout-families", help="Comma-separated families "
                                                              "(variants)")] = "",
                per_cell: Annotated[Optional[int], typer.Option("--per-cell", help="Cap per family x error class")
                                    ] = None,
                allow_unverified: Annotated[bool, typer.Option("--allow-unverified")] = False,
                formats: Annotated[str, typer.Option("--format", help="Comma-separated: jsonl, parquet, hf")
                                   ] = "jsonl",
                seed: Seed = 0) -> None:
    """Deduplicate, balance, split and export the SFT set with its data card."""
    from ptxbench._io import read_jsonl
    from ptxbench.fixit.dataset import build_dataset, export
    from ptxbench.fixit.mine import RepairPair

    loaded = [pair for path in pairs for pair in read_jsonl(path, RepairPair)]
    records, card = build_dataset(loaded, holdout_tasks=_listed(holdout_tasks),
                                  holdout_families=_listed(holdout_families),
                                  per_cell=per_cell, require_verified=not allow_unverified, seed=seed)
    files = export(records, card, out, formats=_listed(formats))
    console.print(f"{card.records} records → {', '.join(str(f) for f in files)}", highlight=False)


@app.command("train")
def fixit_train(config: Annotated[Path, typer.Argument(help="Training config (.toml or .json)")],
                overwrite: Annotated[bool, typer.Option("--overwrite")] = False) -> None:
    """Fine-tune with LoRA (TRL SFTTrainer + PEFT) on the exported set; saves the adapter and exact config."""
    from ptxbench.fixit.train import load_train_config, train

    result = train(load_train_config(config), overwrite=overwrite)
    console.print(f"trained {result.steps} steps, final loss {result.final_loss:.4f}", highlight=False)


@app.command("eval")
def fixit_eval(base: Annotated[str, typer.Option("--base", help="Base model path or id (local Hugging Face)")],
               adapter: Annotated[Path, typer.Option("--adapter")],
               tasks: Annotated[str, typer.Option("--tasks")],
               out: Annotated[Path, typer.Option("--out")] = Path("fixit/eval"), samples: Samples = 1,
               turns: Turns = 1, max_tokens: MaxTokens = 4096, server: Server = None, token: ServerToken = None
               ) -> None:
    """The benchmark with the base model and with the adapter; prints the paired comparison."""
    from ptxbench.fixit.evaluate import evaluate_adapter

    server_token(server, token)
    grader = grader_for_refinement(server, token)
    try:
        _, _, table = evaluate_adapter(base, adapter, list(_listed(tasks)), out, samples=samples, turns=turns,
                                       grader=grader, max_tokens=max_tokens)
    finally:
        grader.close()
    print(table)


@app.command("ablation")
def fixit_ablation(config: Annotated[Path, typer.Argument(help="Ablation config (.toml), e.g. "
                                                          "experiments/fixit_diversity_vs_volume.toml")],
                   build_only: Annotated[bool, typer.Option("--build-only", help="Only build both arms' data sets")
                                         ] = False, server: Server = None, token: ServerToken = None) -> None:
    """Diversity vs volume: train on a varied set and on an equally large unvaried one, evaluate both, compare."""
    from ptxbench.fixit.ablation import load_ablation, run_ablation

    server_token(server, token)
    settings = load_ablation(config)
    grader = None if build_only else grader_for_refinement(server, token)
    try:
        summary = run_ablation(settings, grader=grader, build_only=build_only)
    finally:
        if grader is not None:
            grader.close()
    for arm, facts in summary["arms"].items():
        console.print(f"{arm}: {facts['records']} records over {facts['cells']} family/class/task cells "
                      f"→ {facts['data']}", highlight=False)
    if "diverse_vs_volume" in summary:
        print(summary["diverse_vs_volume"])


def _listed(text: str) -> tuple[str, ...]:
    """A comma-separated option's items, empty ones dropped (``--tasks a,,b`` and ``--format ''``)."""
    return tuple(item for item in text.split(",") if item)
