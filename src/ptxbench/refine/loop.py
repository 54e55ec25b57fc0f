"""``generate`` and ``run``: sample every (task, sample) item, refine over turns, keep the whole trajectory.

Each item's folder in the run directory holds, per turn, the request, the completion, the extracted
candidate and the grader's feedback, and finally ``result.json``, the trajectory (``ItemResult``), which
marks the item done, so an interrupted run resumes where it stopped and a rerun costs nothing thanks to
the completion cache. Fixit's repairs go through ``run_item`` too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from ptxbench._io import write_atomic
from ptxbench.arch.registry import Arch
from ptxbench.llm.extract import extract_candidate
from ptxbench.llm.types import CompletionRequest, SamplingParams
from ptxbench.prompts import PROMPT_VERSION
from ptxbench.prompts.conversation import ContextCondition, Message, OneShot, build_conversation, feedback_message
from ptxbench.records import Record
from ptxbench.records.completion import Completion, Extraction, ExtractionStatus, Usage
from ptxbench.records.rundir import RESULT_FILE, RunDir, RunHeader, load_result, write_model
from ptxbench.records.trajectory import ItemResult, Turn, item_name
from ptxbench.refine.graders import Grader, StaticGrader, extraction_feedback, grader_evidence
from ptxbench.tasks.model import Task


class RunConfig(Record):
    """Every option of ``ptxbench generate`` / ``run``; recorded in the run header."""

    model: str
    tasks: list[str]
    arch: Arch = Arch.SM_90A
    samples: int = Field(default=1, ge=1)
    turns: int = Field(default=1, ge=1)
    context: ContextCondition = ContextCondition.NONE
    params: SamplingParams = Field(default_factory=SamplingParams)
    concurrency: int = Field(default=4, ge=1)
    base_url: str | None = None
    adapter: str | None = Field(default=None, description="LoRA adapter directory for the local (hf) provider")
    one_shot: str | None = Field(default=None, description="'TASK:PATH' of a worked example, or None")
    evaluate: bool = Field(default=True, description="False for `generate`: sample only, no feedback turns")
    request_timeout_s: float = Field(default=900.0, gt=0)


def _total_usage(turns: list[Turn]) -> Usage:
    costs = [t.completion.usage.cost_usd for t in turns]
    return Usage(input_tokens=sum(t.completion.usage.input_tokens for t in turns),
                 output_tokens=sum(t.completion.usage.output_tokens for t in turns),
                 cost_usd=None if any(c is None for c in costs) else sum(c for c in costs if c is not None))


async def run_item(task: Task, sample: int, config: RunConfig, complete: Callable[[CompletionRequest], "asyncio.Future[Completion]"],
                   grader: Grader | None, rundir: RunDir, one_shot: OneShot | None = None,
                   build_slots: asyncio.Semaphore | None = None, opening: list[Message] | None = None,
                   item: str | None = None) -> ItemResult:
    """Sample, extract, grade and feed back, up to ``config.turns`` times; stop at the first pass, or at a
    turn the provider did not answer (kept in the trajectory, ungraded: the item's verdict stays the one of the
    turn before it, and an item never answered has none).

    ``opening`` replaces the task's conversation (Fixit's repairs start from a failed kernel)."""
    folder = rundir.item(task.id, item or item_name(sample))
    messages: list[Message] = opening or build_conversation(task, config.arch, config.context, one_shot)
    turns: list[Turn] = []
    for turn in range(config.turns):
        request = CompletionRequest(model=config.model, messages=messages, params=config.params, sample_index=sample,
                                    metadata={"task": task.id, "sample": sample, "turn": turn})
        turn_dir = folder / f"turn_{turn}"
        write_model(turn_dir / "request.json", request)
        completion = await complete(request)
        write_model(turn_dir / "completion.json", completion)
        extraction = extract_candidate(completion.text, task.entry_point) if not completion.error else \
            Extraction(status=ExtractionStatus.PROVIDER_ERROR, notes=[completion.error])
        if extraction.ok:
            write_atomic(turn_dir / "candidate.cu", extraction.source)
        feedback = None
        if config.evaluate and not completion.error:  # a turn the provider never answered is graded by no one
            if not extraction.ok:
                feedback = extraction_feedback(extraction, task.entry_point)
            else:
                slots = build_slots or asyncio.Semaphore(1)
                async with slots:
                    feedback = await asyncio.to_thread(grader.grade, task, config.arch, extraction.source) \
                        if grader is not None else None
            if feedback is not None:
                write_model(turn_dir / "feedback.json", feedback)
        turns.append(Turn(turn=turn, completion=completion, extraction=extraction, feedback=feedback))
        if completion.error or feedback is None or feedback.passed or turn + 1 == config.turns:
            break
        messages = [*messages, Message(role="assistant", content=completion.text),
                    feedback_message(feedback.text, turn + 1, config.turns)]
    # The verdict is the last answered turn's: a provider failure asks the model nothing, so it overwrites none.
    answered = [t for t in turns if not t.completion.error]
    last = answered[-1].feedback if answered else None
    result = ItemResult(task=task.id, task_hash=task.content_hash, sample=sample, arch=config.arch,
                        context=config.context, prompt_version=str(PROMPT_VERSION), turns=turns,
                        passed=bool(last and last.passed), verified_on_gpu=bool(last and last.verified_on_gpu),
                        usage=_total_usage(turns))
    write_model(folder / RESULT_FILE, result)
    return result


def one_shot_parts(spec: str) -> tuple[str, Path]:
    """The task id and the solution file of a ``TASK:FILE`` one-shot spec."""
    from ptxbench.errors import OptionError

    task_id, _, path = spec.partition(":")
    if not task_id or not path:
        raise OptionError(f"--one-shot takes TASK:FILE (a task id, a colon, a solution file for that task), not {spec!r}")
    return task_id, Path(path)


def load_one_shot(spec: str | None) -> OneShot | None:
    """The worked example of a ``TASK:FILE`` spec; an unknown task or an unreadable file is an error naming
    the option."""
    if not spec:
        return None
    from ptxbench.check import read_candidate
    from ptxbench.errors import CandidateError, OptionError, TaskError
    from ptxbench.tasks.loader import get_task

    task_id, path = one_shot_parts(spec)
    try:
        return OneShot(task=get_task(task_id), source=read_candidate(path, to_compile=False))
    except (TaskError, CandidateError) as exc:
        raise OptionError(f"--one-shot {spec}: {exc}") from None


async def run_all(tasks: list[Task], config: RunConfig, rundir: RunDir, complete, grader: Grader | None,
                  on_done: Callable[[ItemResult, float | None], None] | None = None) -> list[ItemResult]:
    """Every (task, sample) item not already done, ``config.concurrency`` at a time. ``on_done`` gets each
    item as it finishes with the seconds it took (None for an item already done: resumed)."""
    import os
    import time

    one_shot = load_one_shot(config.one_shot)
    item_slots = asyncio.Semaphore(config.concurrency)
    build_slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    async def one(task: Task, sample: int) -> ItemResult:
        if rundir.is_done(task.id, item_name(sample)):
            done = load_result(rundir.item(task.id, item_name(sample)) / RESULT_FILE, rundir.header,
                               fix="remove it to sample the item again")
            assert isinstance(done, ItemResult)  # the header's kind is generate or run (RunDir.open checked it)
            if on_done:
                on_done(done, None)
            return done
        async with item_slots:
            started = time.monotonic()
            result = await run_item(task, sample, config, complete, grader, rundir, one_shot, build_slots)
        if on_done:
            on_done(result, time.monotonic() - started)
        return result

    return list(await asyncio.gather(*(one(t, s) for t in tasks for s in range(config.samples))))


def provider_errors(results: list[ItemResult], shown: int = 3, width: int = 200) -> list[tuple[str, int]]:
    """Why requests failed at the provider, from each item's last turn: the most common reasons first
    with their counts (at most ``shown``, each cut to ``width`` characters). Messages that differ only in
    numbers or quoted names (the item, a request id) count as one reason, shown by its first message
    after "e.g."."""
    import re

    groups: dict[str, list[str]] = {}
    for result in results:
        error = result.turns[-1].completion.error if result.turns else None
        if error:
            groups.setdefault(re.sub(r"\d+|'[^']*'|\"[^\"]*\"", "#", error), []).append(error)
    common = sorted(groups.values(), key=len, reverse=True)[:shown]
    reasons = [("e.g. " if len(set(messages)) > 1 else "") + messages[0] for messages in common]
    return [(reason if len(reason) <= width else reason[:width - 1] + "…", len(messages))
            for reason, messages in zip(reasons, common)]


def header_for(config: RunConfig, grader: Grader | None = None) -> RunHeader:
    """The run's header; its evidence profile is the grader's (publish for a grader that does not say)."""
    from ptxbench.toolchain.discover import find_toolchain

    toolchain = {name: tool.version for name, tool in find_toolchain().tools.items()}
    kind = "run" if config.evaluate else "generate"
    return RunHeader(kind=kind, toolchain=toolchain, evidence=grader_evidence(grader),
                     config={**config.model_dump(mode="json"), "prompt_version": PROMPT_VERSION})


class Plan(Record):
    """What a run would send, for ``--dry-run``: the first conversation and an upper bound of the cost."""

    items: int
    max_requests: int
    first_messages: list[Message]
    input_tokens_first_turn: int
    cost_upper_bound_usd: float | None


def _count_tokens(text: str) -> int:
    """tiktoken's count where it is installed; else the usual four characters a token."""
    try:
        import tiktoken

        return len(tiktoken.get_encoding("o200k_base").encode(text))
    except Exception:  # noqa: BLE001 - an estimate either way
        return max(1, len(text) // 4)


def plan(tasks: list[Task], config: RunConfig) -> Plan:
    from ptxbench.llm.pricing import cost

    one_shot = load_one_shot(config.one_shot)
    conversations = [build_conversation(t, config.arch, config.context, one_shot) for t in tasks]
    items = len(tasks) * config.samples
    max_requests = items * (config.turns if config.evaluate else 1)
    first_turn_tokens = [_count_tokens("\n".join(m.content for m in conv)) for conv in conversations]
    # Upper bound: every turn at max_tokens out, each later turn resending the growing conversation.
    per_turn_out = config.params.max_tokens
    turns = config.turns if config.evaluate else 1
    total_in = sum(config.samples * sum(tokens + turn * (per_turn_out + 500) for turn in range(turns))
                   for tokens in first_turn_tokens)
    bound = cost(config.model, Usage(input_tokens=total_in, output_tokens=max_requests * per_turn_out))
    return Plan(items=items, max_requests=max_requests, first_messages=conversations[0],
                input_tokens_first_turn=first_turn_tokens[0], cost_upper_bound_usd=bound)


def provider_for(model: str, base_url: str | None = None, adapter: str | None = None):  # type: ignore[no-untyped-def]
    """The provider for ``model`` with only the options that were given."""
    from ptxbench.llm.providers.base import get_provider

    options = {key: value for key, value in (("base_url", base_url), ("adapter", adapter)) if value}
    return get_provider(model, **options)


def completer(provider, cache, timeout_s: float | None):  # type: ignore[no-untyped-def]
    """One request at a time through the client (cache first, errors as error completions)."""
    from ptxbench.llm.client import complete_all

    async def complete(request: CompletionRequest) -> Completion:
        (completion,) = await complete_all([request], provider, concurrency=1, cache=cache, timeout_s=timeout_s)
        return completion
    return complete


def execute(tasks: list[Task], config: RunConfig, out: Path | str, *, cache_dir: Path | None = None,
            grader: Grader | None = None, on_done: Callable[[ItemResult, float | None], None] | None = None
            ) -> list[ItemResult]:
    """Run (or resume) every item into ``out``; the main job behind ``ptxbench generate`` and ``run``.

    With ``config.evaluate`` and no grader given, candidates are graded by the static grader."""
    from ptxbench.llm.cache import CompletionCache, default_completion_cache

    if config.evaluate and grader is None:
        grader = StaticGrader()
    # What can be refused is checked before the run directory exists, so a refusal leaves none behind: the
    # one-shot example against every task, then the provider (its name, key, replay file).
    one_shot = load_one_shot(config.one_shot)
    for task in tasks:
        build_conversation(task, config.arch, config.context, one_shot)
    provider = provider_for(config.model, config.base_url, config.adapter)
    rundir = RunDir.open(out, header_for(config, grader))
    cache = CompletionCache(cache_dir) if cache_dir else default_completion_cache()
    complete = completer(provider, cache, config.request_timeout_s)
    return asyncio.run(run_all(tasks, config, rundir, complete, grader, on_done))
