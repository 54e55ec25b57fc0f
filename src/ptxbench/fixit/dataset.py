"""Fixit, the data set: chat records from verified repairs, deduplicated, balanced, split, exported.

A record shows the model its task, its failed kernel and the evaluator's feedback, and trains the
answer: an explanation of the failure and the fixed kernel (loss on that last message only). Balance
is by family × error class, because the seed's finding was that a varied set beats a larger narrow
one; splits hold out whole tasks so generalisation is measured on problems never trained on.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

from pydantic import Field

from ptxbench._io import write_atomic
from ptxbench.errors import PtxbenchError
from ptxbench.arch.registry import Arch
from ptxbench.fixit.mine import RepairPair
from ptxbench.prompts import PROMPT_VERSION
from ptxbench.prompts.conversation import Message
from ptxbench.prompts.fixit import training_messages
from ptxbench.records import Record
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.visibility import redact

DATASET_VERSION = 2  # 2: records and the card name the prompts' version
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_CODE_LINE = re.compile(r"^\s*(#include|#define|__global__|asm|extern|return|for\s*\(|if\s*\(|[\w:<>*&\s]+[;{}]\s*$)")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.:]{3,}")
_GENERIC = re.compile(r"^(the (code|kernel) (was|is) (wrong|incorrect|broken)|fixed (the )?(bug|issue)s?)\.?$", re.IGNORECASE)


class ChatRecord(Record):
    version: int = DATASET_VERSION
    prompt_version: int = Field(description="ptxbench.prompts.PROMPT_VERSION of the words in `messages`")
    messages: list[Message]
    task: str
    family: str
    error_class: str
    split: str
    origin: str
    verified: bool


class DataCard(Record):
    version: int = DATASET_VERSION
    prompt_version: int = Field(description="ptxbench.prompts.PROMPT_VERSION of every record's words")
    records: int
    dropped: dict[str, int] = Field(description="why pairs were left out, with counts")
    by_split: dict[str, int]
    by_family_and_class: dict[str, int]
    holdout_tasks: list[str]
    holdout_families: list[str] = Field(default_factory=list)


def normalized(code: str) -> str:
    """Code without comments and whitespace: two kernels that differ only there are the same kernel."""
    return re.sub(r"\s+", "", _COMMENT.sub("", code))


def explanation_problem(explanation: str, failed: str, fixed: str, feedback: str) -> str | None:
    """Why an explanation is not worth training on, or None. Rejects empty, generic and code-only texts,
    and texts that name nothing from the failure (no identifier of the diff or the diagnosis)."""
    text = explanation.strip()
    if len(text) < 80:
        return "too short"
    if _GENERIC.match(text):
        return "generic"
    lines = [line for line in text.splitlines() if line.strip()]
    if sum(bool(_CODE_LINE.match(line)) for line in lines) > len(lines) / 2 or "```" in text:
        return "mostly code"
    changed = set(_IDENTIFIER.findall(fixed)) ^ set(_IDENTIFIER.findall(failed))
    grounded = changed | set(_IDENTIFIER.findall(feedback))
    if not any(word in text for word in grounded):
        return "not grounded in the diff or the diagnosis"
    return None


def chat_record(pair: RepairPair, split: str) -> ChatRecord:
    """One record; every text in it is redacted against the task (``tasks.visibility``), so feedback mined
    from runs that named a held-out workload, or an explanation that repeats it, trains on no held-out
    shape or variant."""
    attempt = pair.failure.attempt
    task = get_task(attempt.task)
    messages = training_messages(task, Arch(attempt.arch), pair.failure.source, pair.failure.feedback,
                                 pair.explanation, pair.fixed_source)
    messages = [m.model_copy(update={"content": redact(m.content, task)}) for m in messages]
    return ChatRecord(prompt_version=PROMPT_VERSION, messages=messages, task=task.id, family=task.family.value,
                      error_class=attempt.error_class, split=split, origin=pair.origin, verified=pair.verified)


def select(records: list[ChatRecord], size: int, mode: str, seed: int = 0) -> list[ChatRecord]:
    """``size`` training records chosen for the diversity-vs-volume ablation.

    ``diverse`` takes records round-robin over (family, error class, task) cells, so every kind of
    mistake is represented before any is repeated; ``volume`` takes them in a seeded random order,
    so the frequent mistakes dominate as they do in the mined data.
    """
    rng = random.Random(seed)
    pool = sorted(records, key=lambda r: (r.task, r.error_class, r.messages[-1].content))
    rng.shuffle(pool)
    if mode == "volume":
        return pool[:size]
    if mode != "diverse":
        raise ValueError(f"selection mode must be 'diverse' or 'volume', not {mode!r}")
    cells: dict[tuple[str, str, str], list[ChatRecord]] = defaultdict(list)
    for record in pool:
        cells[(record.family, record.error_class, record.task)].append(record)
    chosen: list[ChatRecord] = []
    while len(chosen) < size and any(cells.values()):
        for cell in sorted(cells):
            if cells[cell] and len(chosen) < size:
                chosen.append(cells[cell].pop())
    return chosen


def build_dataset(pairs: list[RepairPair], *, holdout_tasks: tuple[str, ...] = (), holdout_families: tuple[str, ...] = (),
                  per_cell: int | None = None, require_verified: bool = True, require_explanation: bool = True,
                  seed: int = 0) -> tuple[list[ChatRecord], DataCard]:
    """Filter, deduplicate, balance (at most ``per_cell`` per family × error class) and split.

    Held-out tasks and whole held-out families (e.g. every GEMM) go to ``test``; held-out *shapes* and
    held-out *variants* need no split of their own: a record's prompt never shows a held-out workload (a
    held-out variant holds only those), and every record's text is redacted against its task."""
    dropped: Counter[str] = Counter()
    seen: set[str] = set()
    kept: list[RepairPair] = []
    for pair in sorted(pairs, key=lambda p: p.failure.key):
        if require_verified and not pair.verified:
            dropped["fix not verified on a GPU"] += 1
            continue
        if require_explanation:
            problem = explanation_problem(pair.explanation or "", pair.failure.source, pair.fixed_source,
                                          pair.failure.feedback)
            if problem:
                dropped[f"explanation {problem}"] += 1
                continue
        digest = hashlib.sha256((normalized(pair.failure.source) + "\0" + normalized(pair.fixed_source)).encode()).hexdigest()
        if digest in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(digest)
        kept.append(pair)
    cells: dict[tuple[str, str], list[RepairPair]] = defaultdict(list)
    for pair in kept:
        cells[(get_task(pair.failure.attempt.task).family.value, pair.failure.attempt.error_class)].append(pair)
    rng = random.Random(seed)
    balanced: list[RepairPair] = []
    for cell in sorted(cells):
        members = cells[cell]
        rng.shuffle(members)
        if per_cell is not None and len(members) > per_cell:
            dropped["over the family × class cap"] += len(members) - per_cell
            members = members[:per_cell]
        balanced += members
    def split(pair: RepairPair) -> str:
        task = get_task(pair.failure.attempt.task)
        return "test" if task.id in holdout_tasks or task.family.value in holdout_families else "train"

    records = [chat_record(p, split(p)) for p in balanced]
    card = DataCard(prompt_version=PROMPT_VERSION, records=len(records), dropped=dict(dropped),
                    by_split=dict(Counter(r.split for r in records)),
                    by_family_and_class=dict(Counter(f"{r.family} × {r.error_class}" for r in records)),
                    holdout_tasks=sorted(holdout_tasks), holdout_families=sorted(holdout_families))
    return records, card


def export(records: list[ChatRecord], card: DataCard, out: Path, formats: tuple[str, ...] = ("jsonl",)) -> list[Path]:
    """Per split: JSONL (``{"messages": [...], ...}`` per line, as TRL reads it), and on request Parquet
    and a Hugging Face ``datasets`` folder (``save_to_disk``); plus the data card."""
    unknown = set(formats) - {"jsonl", "parquet", "hf"}
    if unknown:
        raise ValueError(f"unknown export formats {sorted(unknown)}; choose from jsonl, parquet, hf")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for split in sorted({r.split for r in records}):
        rows = [r.model_dump(mode="json") for r in records if r.split == split]
        path = out / f"{split}.jsonl"
        write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))
        written.append(path)
        if {"parquet", "hf"} & set(formats):
            try:
                import datasets
            except ImportError:
                raise PtxbenchError("Parquet and Hugging Face exports need `datasets`: pip install 'ptxbench[train]'") from None
            table = datasets.Dataset.from_list(rows)
            if "parquet" in formats:
                table.to_parquet(str(out / f"{split}.parquet"))
                written.append(out / f"{split}.parquet")
            if "hf" in formats:
                table.save_to_disk(str(out / "hf" / split))
                written.append(out / "hf" / split)
    lines = [f"# Fixit data card (v{DATASET_VERSION}, prompts v{card.prompt_version})", "",
             f"{card.records} records; held-out tasks: "
             f"{', '.join(card.holdout_tasks) or 'none'}.", "", "| split | records |", "|---|---|"]
    lines += [f"| {split} | {count} |" for split, count in sorted(card.by_split.items())]
    lines += ["", "| family × error class | records |", "|---|---|"]
    lines += [f"| {cell} | {count} |" for cell, count in sorted(card.by_family_and_class.items())]
    lines += ["", "| left out because | pairs |", "|---|---|"]
    lines += [f"| {reason} | {count} |" for reason, count in sorted(card.dropped.items())]
    card_path = out / "DATA_CARD.md"
    write_atomic(card_path, "\n".join(lines) + "\n")
    write_atomic(out / "data_card.json", card.model_dump_json(indent=1))
    return [*written, card_path]
