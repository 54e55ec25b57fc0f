"""The classic-shortcut cases, modelled on the CPU: each case's bug, written out in PyTorch the way its
kernel computes (an implementation of its own, not the task's reference), is wrong on inputs drawn as
the evaluator draws them and right on the same inputs changed so that the shortcut's assumption holds.

So the GPU run cannot pass these cases merely because the bug is harmless, nor fail them merely because
the model of the kernel is wrong elsewhere. Small shapes of each task's own structure; that every real
workload breaks each assumption is tests/tasks/test_input_properties.py's part.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare_outputs  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import InputInit, Task  # noqa: E402
from ptxbench.tasks.reference import make_inputs, run_reference  # noqa: E402

from .cases import manifest_cases  # noqa: E402

Tensors = dict[str, "torch.Tensor"]
SEEDS = (3, 4, 5)


def _verdict(task: Task, outputs: Tensors, inputs: Tensors, sizes: dict[str, int]) -> tuple[bool, int]:
    """Whether ``outputs`` pass the task's comparison against its reference on ``inputs``, and how many
    elements fail."""
    expected = run_reference(task, inputs, sizes)
    results = compare_outputs(task, outputs, expected)
    return all(r.passed for r in results), sum(r.mismatched + r.nonfinite for r in results)


def _attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", scale: float) -> tuple["torch.Tensor", "torch.Tensor"]:
    """softmax(q kᵀ · scale) v and the log-sum-exp, in float64: q [rows, d], k [n, d], v [n, dv]."""
    scores = q.double() @ k.double().T * scale
    lse = torch.logsumexp(scores, dim=-1)
    return torch.exp(scores - lse[:, None]) @ v.double(), lse


# ---- the kernels' bugs -----------------------------------------------------------------------------

def softmax_unshifted(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    """softmax_unshifted_exp.cu: exp(x) summed and normalised in fp32, no maximum subtracted."""
    e = torch.exp(inputs["X"].float())
    return {"Y": (e * (1.0 / e.sum(dim=-1, keepdim=True))).to(torch.bfloat16)}


def decode_pages_in_order(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    """decode_pages_in_order.cu: sequence b's j-th page is page kv_indptr[b] + j; kv_indices unread."""
    q, k_cache, v_cache = inputs["Q"], inputs["K_cache"], inputs["V_cache"]
    indptr, last = inputs["kv_indptr"].tolist(), inputs["kv_last_page_len"].tolist()
    P, H, KH = sizes["P"], sizes["H"], sizes["KH"]
    out, lse = torch.empty(len(last), H, 128, dtype=torch.float64), torch.empty(len(last), H, dtype=torch.float64)
    for b in range(len(last)):
        n = (indptr[b + 1] - indptr[b] - 1) * P + last[b]
        rows = [(indptr[b] + t // P, t % P) for t in range(n)]
        for h in range(H):
            kvh = h // (H // KH)
            keys = torch.stack([k_cache[page, slot, kvh] for page, slot in rows])
            values = torch.stack([v_cache[page, slot, kvh] for page, slot in rows])
            o, l = _attention(q[b, h][None], keys, values, 1 / math.sqrt(128))
            out[b, h], lse[b, h] = o[0], l[0]
    return {"O": out.to(torch.bfloat16), "LSE": lse.float()}


def mla_last_page_full(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    """mla_last_page_full.cu: every sequence has pages_b * P tokens; kv_last_page_len unread."""
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"].tolist()
    P, B = sizes["P"], sizes["B"]
    scale = float(inputs["sm_scale"])
    out, lse = [], []
    for b in range(B):
        rows = [(page, slot) for page in indices[indptr[b]:indptr[b + 1]] for slot in range(P)]
        latent = torch.stack([inputs["ckv_cache"][p, s] for p, s in rows])
        rope = torch.stack([inputs["kpe_cache"][p, s] for p, s in rows])
        q = torch.cat([inputs["q_nope"][b], inputs["q_pe"][b]], dim=-1)  # [H, 576]
        o, l = _attention(q, torch.cat([latent, rope], dim=-1), latent, scale)
        out.append(o)
        lse.append(l)
    return {"output": torch.stack(out).to(torch.bfloat16), "lse": torch.stack(lse).float()}


def moe_equal_groups(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    """moe_equal_groups.cu: expert e owns rows [e T / E, (e + 1) T / E); expert_offsets unread."""
    T, E = sizes["T"], sizes["E"]
    x, w = inputs["X"].double(), inputs["W"].double()
    y = torch.empty(T, sizes["N"], dtype=torch.float64)
    for e in range(E):
        rows = slice(e * T // E, (e + 1) * T // E)
        y[rows] = x[rows] @ w[e].T
    return {"Y": y.to(torch.bfloat16)}


def prefill_equal_lengths(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    """prefill_equal_lengths.cu: a row's sequence starts at min(row / (T / B), B - 1) · (T / B)."""
    T, B, H, KH = sizes["T"], sizes["B"], sizes["H"], sizes["KH"]
    length = T // B
    out, lse = torch.empty(T, H, 128, dtype=torch.float64), torch.empty(T, H, dtype=torch.float64)
    for row in range(T):
        start = min(row // length, B - 1) * length
        for h in range(H):
            kvh = h // (H // KH)
            o, l = _attention(inputs["Q"][row, h][None], inputs["K"][start:row + 1, kvh],
                              inputs["V"][start:row + 1, kvh], 1 / math.sqrt(128))
            out[row, h], lse[row, h] = o[0], l[0]
    return {"O": out.to(torch.bfloat16), "LSE": lse.float()}


# ---- the inputs where each assumption holds ---------------------------------------------------------

def _centred_softmax() -> Task:
    """The softmax task drawing its logits as it did before the row offset: all rows centred."""
    task = get_task("softmax")
    x = task.inputs[0]
    init = InputInit(**{**x.init.model_dump(), "row_offset": 0.0, "row_offset_fraction": 0.0})
    return task.model_copy(update={"inputs": [x.model_copy(update={"init": init})]})


def _pages_in_order(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    return {**inputs, "kv_indices": torch.arange(sizes["NP"], dtype=torch.int32)}


def _last_pages_full(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    return {**inputs, "kv_last_page_len": torch.full((sizes["B"],), sizes["P"], dtype=torch.int32)}


def _balanced_routing(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    T, E = sizes["T"], sizes["E"]
    return {**inputs, "expert_offsets": torch.tensor([(e + 1) * T // E for e in range(E)], dtype=torch.int32)}


def _equal_lengths(inputs: Tensors, sizes: dict[str, int]) -> Tensors:
    T, B = sizes["T"], sizes["B"]
    return {**inputs, "seq_indptr": torch.tensor([b * (T // B) for b in range(B)] + [T], dtype=torch.int32)}


Case = tuple[str, str, dict[str, int], Callable[[Tensors, dict[str, int]], Tensors],
             Callable[[Tensors, dict[str, int]], Tensors] | None]
CASES: list[Case] = [
    ("softmax_unshifted_exp.cu", "softmax", {"R": 24, "C": 1024}, softmax_unshifted, None),
    ("decode_pages_in_order.cu", "decode_gqa_paged", {"B": 5, "H": 8, "KH": 2, "P": 16, "NP": 40, "L": 590},
     decode_pages_in_order, _pages_in_order),
    ("mla_last_page_full.cu", "mla_decode_paged", {"B": 4, "H": 16, "P": 16, "NP": 20, "L": 290},
     mla_last_page_full, _last_pages_full),
    ("moe_equal_groups.cu", "moe_grouped_gemm", {"T": 120, "E": 8, "N": 64, "K": 128}, moe_equal_groups,
     _balanced_routing),
    ("prefill_equal_lengths.cu", "prefill_gqa_ragged", {"B": 4, "S": 40, "DS": 7, "T": 118, "H": 4, "KH": 1},
     prefill_equal_lengths, _equal_lengths),
]


def test_every_shortcut_case_is_in_the_manifest_as_incorrect() -> None:
    listed = {c["file"]: c for c in manifest_cases()}
    for file, task_id, *_ in CASES:
        assert listed[file]["task"] == task_id and listed[file]["expect"] == "INCORRECT", file


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("seed", SEEDS)
def test_the_bug_is_wrong_on_drawn_inputs_and_right_where_its_assumption_holds(case: Case, seed: int) -> None:
    _, task_id, sizes, bug, assume = case
    task = get_task(task_id)
    inputs = dict(make_inputs(task, sizes, seed))
    passed, failing = _verdict(task, bug(inputs, sizes), inputs, sizes)
    assert not passed and failing >= 8, f"{task_id}: the shortcut survives the drawn inputs ({failing} elements)"
    if assume is None:  # softmax: the same task's logits without the row offset, as they were drawn before
        task = _centred_softmax()
        held = dict(make_inputs(task, sizes, seed))
    else:
        held = assume(inputs, sizes)
    passed, failing = _verdict(task, bug(held, sizes), held, sizes)
    assert passed, f"{task_id}: the model of the kernel is wrong even where its assumption holds ({failing})"
