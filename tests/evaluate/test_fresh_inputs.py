"""Timing gives every round's input set fresh contents, replayable by the parent, and checks timed calls drawn at
random: a candidate that hands back outputs it kept from earlier calls is found out (on the CPU; the adversarial
case memoized_output.cu shows it on a GPU)."""

from __future__ import annotations

import collections

import pytest
import torch

from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.evaluate.timing.fresh_inputs import (
    CHECKED_CALLS,
    FRESH_CAP,
    FRESH_SHARE,
    CheckedCalls,
    checked_slots,
    freshen,
    freshen_tensor,
    freshened_inputs,
    replay,
    round_key,
)
from ptxbench.tasks.loader import bundled_suite, get_task
from ptxbench.tasks.reference import make_inputs, run_reference


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float16])
def test_a_round_changes_a_share_of_elements_to_values_of_the_tensor_itself(dtype: torch.dtype) -> None:
    original = torch.randn(513, 777).to(dtype)
    tensor = original.clone()
    freshen_tensor(tensor, round_key(123, 4))
    changed = (tensor.view(-1).view(torch.uint8 if dtype.itemsize == 1 else torch.int16 if dtype.itemsize == 2
                                    else torch.int32) != original.view(-1).view(
        torch.uint8 if dtype.itemsize == 1 else torch.int16 if dtype.itemsize == 2 else torch.int32))
    expected = original.numel() * FRESH_SHARE
    assert 0.5 * expected < int(changed.sum()) <= expected + 1, "about one element in 64 changes"
    values = set(original.float().view(-1).tolist())
    assert set(tensor.float().view(-1).tolist()) <= values, "the new values are drawn from the tensor itself"
    rows_changed = changed.view(513, 777).any(dim=1).float().mean()
    assert rows_changed > 0.99, "the changes are spread over every row"


def test_rounds_differ_and_replay_gives_the_same_contents() -> None:
    drawn = torch.randn(300, 200).bfloat16()
    child, parent = drawn.clone(), drawn.clone()
    keys = [round_key(99, turn) for turn in range(1, 40, 3)]
    for key in keys:
        before = child.clone()
        freshen({"x": child}, ["x"], key)
        assert not torch.equal(before, child), "every round changes the set"
    replay({"x": parent}, ["x"], keys)
    assert torch.equal(child, parent)
    other = drawn.clone()
    replay({"x": other}, ["x"], keys[::-1])
    assert not torch.equal(other, child), "the order of the rounds matters, so the parent replays them in order"


def test_the_share_is_capped_on_the_largest_tensors() -> None:
    tensor = torch.zeros(FRESH_CAP * 80, dtype=torch.uint8)
    tensor[1::2] = 1
    before = tensor.clone()
    freshen_tensor(tensor, round_key(5, 5))
    assert 0 < int((tensor != before).sum()) <= FRESH_CAP


def test_inputs_that_a_derived_input_depends_on_are_left_alone() -> None:
    assert freshened_inputs(get_task("attention_bwd")) == ("dO",), "O and LSE come from Q, K and V"
    assert freshened_inputs(get_task("gemm_bf16")) == ("A", "B")
    paged = freshened_inputs(get_task("decode_gqa_paged"))
    assert paged == ("Q", "K_cache", "V_cache"), "page tables and lengths (integers) carry the structure"
    assert freshened_inputs(get_task("mla_decode_paged")) == ("q_nope", "q_pe", "ckv_cache", "kpe_cache"), \
        "sm_scale is derived from the sizes alone"
    assert all(freshened_inputs(task) for task in bundled_suite()), "every task's timed calls get fresh contents"


@pytest.mark.parametrize("task_id", ["rmsnorm", "rope", "silu_mul", "transpose", "gemm_fp8", "attention_fwd"])
def test_an_output_kept_from_before_a_round_fails_the_check(task_id: str) -> None:
    """What a memoizing candidate hands back once its input set was freshened is out of tolerance."""
    task = get_task(task_id)
    workload = min(task.workloads, key=lambda w: sum(s.numel(w.sizes) for s in task.inputs))
    inputs = dict(make_inputs(task, workload.sizes, 11, device="cpu"))
    stale = run_reference(task, inputs, workload.sizes)
    freshen(inputs, freshened_inputs(task), round_key(11, 4))
    fresh = run_reference(task, inputs, workload.sizes)
    assert not all(c.passed for c in compare_outputs(task, stale, fresh))
    assert all(c.passed for c in compare_outputs(task, fresh, fresh))


def test_checked_calls_are_a_uniform_secret_sample() -> None:
    picked: collections.Counter[int] = collections.Counter()
    for secret in range(3000):
        checks = CheckedCalls(2, secret)
        slots: list[int | None] = [None, None]
        for call in range(10):
            slot = checks.offer()
            if slot is not None:
                slots[slot] = call
        picked.update(slot for slot in slots if slot is not None)
    assert sorted(picked) == list(range(10))
    shares = [picked[call] / 6000 for call in range(10)]
    assert max(shares) - min(shares) < 0.04, shares
    assert checked_slots(10) == CHECKED_CALLS and checked_slots(1 << 40) == 1
