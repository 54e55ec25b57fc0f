"""A sample's trajectory: every turn of a refinement (the request's answer, the candidate found in it, the
grader's feedback) and the item's result, which ``generate``, ``run`` and Fixit's repairs write last.

A turn's feedback keeps the grader's full record, typed: an ``Evaluation``, or, in runs written before
every grader made one, the ``CheckReport`` of a static check. Which of the two it is is said by the
record's own ``kind``, never guessed from its keys.
"""

from __future__ import annotations


from typing import Annotated, Any, Literal

from pydantic import Field

from ptxbench.arch.registry import Arch
from ptxbench.prompts.conversation import ContextCondition
from ptxbench.records import Record
from ptxbench.records.check import CheckReport
from ptxbench.records.completion import Completion, Extraction, Usage
from ptxbench.records.evaluation import Evaluation
from ptxbench.records.version import Versioned

TRAJECTORY_VERSION = 2
"""2: a feedback's ``record`` says its kind (an evaluation or a check report) and is None for an answer
without code (the turn's extraction says why); version 1 records are migrated by ``_from_v1``."""


Stage = Literal["extraction", "compile", "static", "gpu"]
"""How far a candidate got: no code in the answer, the build failed, the binary fell short, the GPU judged it."""

GraderRecord = Annotated[CheckReport | Evaluation, Field(discriminator="kind")]


class Feedback(Record):
    """One grading as refinement sees it. ``passed`` means nothing is left to fix at this stage."""

    passed: bool
    stage: Stage = Field(description="'extraction', 'compile', 'static' or 'gpu': how far the candidate got")
    text: str = Field(description="What the model is told")
    verified_on_gpu: bool = False
    record: GraderRecord | None = Field(default=None, description=(
        "The grader's full record; None for an answer without code (the turn's extraction says why)"))


class Turn(Record):
    """One request and its answer: the completion, the candidate extracted from it, and what the grader said."""

    turn: int
    completion: Completion
    extraction: Extraction
    feedback: Feedback | None = None


def _from_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept a feedback's record as an untyped dict: the extraction for an answer without code, a
    GPU or static evaluation, or (before every grader made an evaluation) a static check report. Only here,
    on old data, is the kind read from the keys: an evaluation has ``trials``, a check report has not."""
    turns = []
    for turn in record.get("turns") or []:
        feedback = turn.get("feedback") if isinstance(turn, dict) else None
        if isinstance(feedback, dict):
            kept = feedback.get("record")
            if feedback.get("stage") == "extraction" or not isinstance(kept, dict) or not kept:
                kept = None
            elif "kind" not in kept:
                evaluation = feedback.get("verified_on_gpu") or "trials" in kept
                kept = {**kept, "kind": "evaluation" if evaluation else "check"}
            turn = {**turn, "feedback": {**feedback, "record": kept}}
        turns.append(turn)
    return {**record, "turns": turns}


class ItemResult(Versioned):
    """One sample of one task, all its turns; written last, as the item's 'done' marker."""

    RECORD = "trajectory"
    MIGRATIONS = {1: _from_v1}

    version: int = TRAJECTORY_VERSION
    task: str
    task_hash: str
    sample: int
    arch: Arch
    context: ContextCondition
    prompt_version: str
    turns: list[Turn]
    passed: bool = Field(description="The last feedback passed (static or GPU, see verified_on_gpu)")
    verified_on_gpu: bool = False
    usage: Usage = Field(default_factory=Usage)

    @property
    def final_source(self) -> str | None:
        for turn in reversed(self.turns):
            if turn.extraction.ok:
                return turn.extraction.source
        return None


def item_name(sample: int) -> str:
    """The folder a sample's trajectory is stored under, within its task's."""
    return f"sample_{sample:03d}"
