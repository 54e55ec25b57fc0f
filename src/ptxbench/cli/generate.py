"""``ptxbench generate`` and ``ptxbench run``: sample candidates from a model, and (``run``) evaluate and
refine them over turns. Both build one ``RunConfig`` and hand it to ``ptxbench.refine.loop.execute``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.arch.registry import Arch
from ptxbench.cli.grading import grader_for_refinement
from ptxbench.cli.options import (
    Adapter,
    Evidence,
    BaseUrl,
    Concurrency,
    Context,
    DryRun,
    MaxTokens,
    Model,
    OneShot,
    OutDir,
    Samples,
    Server,
    ServerToken,
    TargetArch,
    Tasks,
    Temperature,
    TopP,
    Turns,
    benchmark_arch,
    server_token,
)
from ptxbench.cli.output import console, run_directory

if TYPE_CHECKING:
    from ptxbench.refine.loop import RunConfig
    from ptxbench.tasks.model import Task


def generate(model: Model, tasks: Tasks = "all", arch: TargetArch = Arch.SM_90A, samples: Samples = 1,
             context: Context = "none", temperature: Temperature = 0.7, top_p: TopP = None,
             max_tokens: MaxTokens = 16384, concurrency: Concurrency = 4, out: OutDir = None,
             base_url: BaseUrl = None, adapter: Adapter = None, one_shot: OneShot = None,
             dry_run: DryRun = False) -> None:
    """Sample candidates from a model (no evaluation)."""
    arch = benchmark_arch(arch)
    chosen = _tasks(tasks)
    config = _config(model, chosen, arch, samples, 1, context, temperature, top_p, max_tokens, concurrency,
                     base_url, adapter, one_shot, evaluate=False)
    _execute("generate", chosen, config, out, dry_run)


def run(model: Model, tasks: Tasks = "all", arch: TargetArch = Arch.SM_90A, samples: Samples = 1, turns: Turns = 1,
        context: Context = "none", temperature: Temperature = 0.7, top_p: TopP = None,
        max_tokens: MaxTokens = 16384, concurrency: Concurrency = 4, out: OutDir = None,
        base_url: BaseUrl = None, adapter: Adapter = None, one_shot: OneShot = None,
        dry_run: DryRun = False, server: Server = None, token: ServerToken = None, evidence: Evidence = None) -> None:
    """Generate and evaluate, refining over --turns with the evaluator's feedback (the main job).

    --evidence defaults to publish on this machine and to sweep through --server (said when it runs)."""
    arch = benchmark_arch(arch)
    server_token(server, token)
    chosen = _tasks(tasks)
    config = _config(model, chosen, arch, samples, turns, context, temperature, top_p, max_tokens, concurrency,
                     base_url, adapter, one_shot, evaluate=True)
    _execute("run", chosen, config, out, dry_run, server, token, evidence)


def _tasks(tasks: str) -> list[Task]:
    from ptxbench.tasks.loader import bundled_suite, get_task

    return list(bundled_suite()) if tasks == "all" else [get_task(t.strip()) for t in tasks.split(",") if t.strip()]


def _config(model: str, chosen: list[Task], arch: Arch, samples: int, turns: int, context: str, temperature: float,
            top_p: float | None, max_tokens: int, concurrency: int, base_url: str | None, adapter: str | None,
            one_shot: str | None, *, evaluate: bool) -> RunConfig:
    """The command line's options as the loop's one configuration (what the run directory records)."""
    from ptxbench.llm.types import SamplingParams
    from ptxbench.prompts.conversation import ContextCondition
    from ptxbench.refine.loop import RunConfig

    return RunConfig(model=model, tasks=[t.id for t in chosen], arch=arch, samples=samples, turns=turns,
                     context=ContextCondition(context), concurrency=concurrency, base_url=base_url, adapter=adapter,
                     params=SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens),
                     one_shot=one_shot, evaluate=evaluate)


def _execute(command: str, chosen: list[Task], config: RunConfig, out: Path | None, dry_run: bool,
             server: str | None = None, token: str | None = None, evidence: str | None = None) -> None:
    from ptxbench.refine.loop import execute, plan, provider_errors

    if dry_run:
        shown = plan(chosen, config)
        for message in shown.first_messages:
            console.rule(f"{message.role}")
            console.print(message.content, highlight=False, markup=False)
        bound = shown.cost_upper_bound_usd
        cost = "unknown (no price for this model)" if bound is None else f"${bound:,.2f}"
        console.print(f"dry run: {shown.items} items, at most {shown.max_requests} requests; first prompt ≈ "
                      f"{shown.input_tokens_first_turn:,} tokens; cost at most {cost}. Nothing was sent.")
        return
    from ptxbench.results.terminal import GenerationProgress

    from ptxbench.records.evidence import EvidenceProfile

    grader = grader_for_refinement(server, token, evidence, on_server=EvidenceProfile.SWEEP) if config.evaluate else None
    model, arch, context = config.model, config.arch, config.context.value
    target = out or Path("runs") / f"{command}-{model.replace(':', '-').replace('/', '_')}-{arch.value}-{context}"
    with GenerationProgress(console, len(chosen) * config.samples, f"{command} → {target}") as progress:
        try:
            results = execute(chosen, config, target, grader=grader, on_done=progress.done)
        finally:
            if grader is not None:
                grader.close()
    passed = sum(r.passed for r in results)
    errors = sum(1 for r in results if r.turns and r.turns[-1].completion.error)
    spent = [r.usage.cost_usd for r in results]
    cost = "unknown" if any(c is None for c in spent) else f"${sum(c for c in spent if c is not None):,.4f}"
    stage = "the GPU evaluation" if any(r.verified_on_gpu for r in results) else "the static stage"
    verdict = f"{passed}/{len(results)} passed {stage}" if config.evaluate else f"{len(results)} items sampled"
    reasons = "; ".join(f"{count}× {reason}" for reason, count in provider_errors(results))
    failed = f"{errors} ({reasons})" if errors else "0"
    console.print(f"{verdict}; provider errors: {failed}; cost {cost}", highlight=False, markup=False)
    run_directory(target)
