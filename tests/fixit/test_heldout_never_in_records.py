"""Fixit's SFT records never show a held-out workload or variant, even when the failure was on one.

Each record is built from a failure on every held-out workload of every task: its feedback rendered from
the evaluation as refinement renders it, or (as in runs mined before feedback hid them) a raw text that
names the workload and its sizes, with an explanation that repeats both. Every message of every record is
scanned for every held-out name and size signature.
"""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.fixit.dataset import build_dataset
from ptxbench.fixit.mine import FailureCase, RepairPair
from ptxbench.records.evaluation import Comparison, Evaluation, Status, TrialResult
from ptxbench.refine.graders import render_evaluation_feedback
from ptxbench.results.attempts import Attempt
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.model import Task, Workload
from ptxbench.tasks.visibility import hidden_mentions, size_signatures


def _evaluation(task: Task, workload: Workload) -> Evaluation:
    output = task.outputs[0].name
    wrong = Comparison(output=output, passed=False, elements=777, mismatched=5, nonfinite=0, max_abs_error=3.0,
                       max_rel_error=1.0, worst_index=[0, 3], worst_value=1.0, worst_expected=4.0)
    trial = TrialResult(workload=workload.name, role=workload.role.value, seed=1, comparisons=[wrong], passed=False)
    variant = task.variant_of(workload)
    return Evaluation(candidate="c.cu", task=task.id, task_hash=task.content_hash, arch=Arch.SM_90A,
                      status=Status.INCORRECT, trials=[trial],
                      message=f"wrong on workload {workload.name} ({workload.role.value}) "
                              f"{variant.name if variant else ''}: {size_signatures(workload.sizes)[2]}")


def _pairs(task: Task) -> list[RepairPair]:
    pairs = []
    for index, workload in enumerate(task.held_out()):
        signature = size_signatures(workload.sizes)[0]
        variant = task.variant_of(workload)
        rendered = render_evaluation_feedback(_evaluation(task, workload))[2]
        legacy = f"- {workload.name} (heldout), output {task.outputs[0].name}: wrong at {signature}"
        for kind, feedback in (("rendered", rendered), ("legacy", legacy)):
            attempt = Attempt(run="r", arch="sm_90a", task=task.id, family=task.family.value,
                              sample=f"{kind}_{index}", error_class="correctness.wrong_values")
            explanation = (f"The kernel indexed past the last row on {workload.name} ({signature}), the "
                           f"{variant.name if variant else 'same'} setting; the fix guards every row store.")
            pairs.append(RepairPair(failure=FailureCase(attempt=attempt, source=f"int broken_{kind}_{index};\n",
                                                        feedback=feedback),
                                    fixed_source=f"int fixed_{kind}_{index};\n", verified=True, origin="own_later_turn",
                                    explanation=explanation))
    return pairs


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_no_sft_record_names_or_sizes_a_held_out_workload_or_variant(task: Task) -> None:
    pairs = _pairs(task)
    raw = "\n".join(p.failure.feedback + p.explanation for p in pairs if p.explanation)
    assert hidden_mentions(raw, task)  # the material did mention them: the records must not
    records, card = build_dataset(pairs, require_explanation=False)
    assert card.records == len(pairs) == len(records) > 0
    for record in records:
        text = "\n".join(m.content for m in record.messages)
        assert hidden_mentions(text, task) == [], record.messages[1].content[-400:]
        assert "indexed past the last row" in record.messages[-1].content  # the explanation itself is kept
