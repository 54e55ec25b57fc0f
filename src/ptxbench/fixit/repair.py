"""Fixit, steps two and three: a teacher model repairs failed kernels through the refinement loop,
and explains each kept repair.

Only repairs the evaluator passes are kept: on a GPU machine that means correct with the required
features executed; without a GPU the static evaluator can only say the fix builds with the features
in its SASS, and the pair is marked unverified (``build_dataset`` drops it unless told otherwise).
Explanations are asked for separately, grounded in the diff and the diagnosis, and filtered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ptxbench.arch.registry import Arch
from ptxbench.fixit.dataset import explanation_problem
from ptxbench.fixit.mine import FailureCase, RepairPair
from ptxbench.llm.types import CompletionRequest, SamplingParams
from ptxbench.prompts import PROMPT_VERSION
from ptxbench.prompts.conversation import Message
from ptxbench.prompts.fixit import explain_request, repair_opening
from ptxbench.records.rundir import RunDir, RunHeader
from ptxbench.refine.graders import Grader, grader_evidence
from ptxbench.refine.loop import RunConfig, run_item
from ptxbench.tasks.loader import get_task


def _item(case: FailureCase) -> str:
    a = case.attempt
    return f"{a.run}-{a.sample}-t{a.turn}".replace("/", "_")


def repair(cases: list[FailureCase], teacher: str, out: Path, grader: Grader, *, turns: int = 3,
           base_url: str | None = None, temperature: float = 0.2) -> list[RepairPair]:
    """Ask ``teacher`` to fix every case, refining with the grader's feedback; keep the passing fixes."""
    from ptxbench.llm.cache import default_completion_cache
    from ptxbench.llm.client import DEFAULT_TIMEOUT_S
    from ptxbench.refine.loop import completer, provider_for

    config = RunConfig(model=teacher, tasks=sorted({c.attempt.task for c in cases}), turns=turns,
                       params=SamplingParams(temperature=temperature), base_url=base_url)
    rundir = RunDir.open(out, RunHeader(kind="repair", evidence=grader_evidence(grader),
                                        config={**config.model_dump(mode="json"), "prompt_version": PROMPT_VERSION}))
    complete = completer(provider_for(teacher, base_url), default_completion_cache(), DEFAULT_TIMEOUT_S)

    async def all_cases() -> list[RepairPair]:
        pairs = []
        for case in cases:
            task, arch = get_task(case.attempt.task), Arch(case.attempt.arch)
            config_for = config.model_copy(update={"arch": arch})
            result = await run_item(task, 0, config_for, complete, grader, rundir,
                                    opening=repair_opening(task, arch, case.source, case.feedback), item=_item(case))
            last = result.turns[-1]
            if last.feedback is not None and last.feedback.passed and last.extraction.ok:
                pairs.append(RepairPair(failure=case, fixed_source=last.extraction.source,
                                        verified=last.feedback.verified_on_gpu, origin=f"teacher:{teacher}"))
        return pairs

    return asyncio.run(all_cases())


def explain(pairs: list[RepairPair], teacher: str, *, base_url: str | None = None) -> tuple[list[RepairPair], dict[str, int]]:
    """Ask ``teacher`` why each failure happened and why its fix works; keep explanations that pass the filter."""
    from ptxbench.llm.cache import default_completion_cache
    from ptxbench.llm.client import complete_all_sync
    from ptxbench.refine.loop import provider_for

    requests = []
    for index, pair in enumerate(pairs):
        question = explain_request(pair.failure.source, pair.fixed_source, pair.failure.feedback)
        requests.append(CompletionRequest(model=teacher, params=SamplingParams(temperature=0.2, max_tokens=600),
                                          messages=[Message(role="user", content=question)],
                                          metadata={"task": pair.failure.attempt.task, "sample": index, "turn": 0}))
    completions = complete_all_sync(requests, provider_for(teacher, base_url), concurrency=4,
                                    cache=default_completion_cache())
    kept, rejected = [], {}
    for pair, completion in zip(pairs, completions):
        problem = "provider error" if completion.error else explanation_problem(
            completion.text, pair.failure.source, pair.fixed_source, pair.failure.feedback)
        if problem:
            rejected[problem] = rejected.get(problem, 0) + 1
            continue
        kept.append(pair.model_copy(update={"explanation": completion.text.strip()}))
    return kept, rejected
