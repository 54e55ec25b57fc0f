"""The attention references take the heads a block at a time, so their S x S temporaries stay bounded
(SCORE_BLOCK fp32 scores per block) in every workload, and the blocks change nothing: computed with
blocks of three heads (the last one partial), every output equals the one-block result exactly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tasks import reference  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402

BLOCKED = ("attention_fwd", "attention_fp8_fwd", "attention_bwd")


@pytest.mark.parametrize("task_id", BLOCKED)
def test_every_workload_keeps_its_scores_within_one_block(task_id: str) -> None:
    task = get_task(task_id)
    namespace = reference._namespace(task)
    limit = namespace["SCORE_BLOCK"]
    assert limit * 4 <= 256 << 20
    for workload in task.workloads:
        sizes = workload.sizes
        shape = (sizes["B"], sizes["H"], sizes["S"], sizes.get("D", 128))
        blocks = namespace["_head_blocks"](torch.empty(shape, device="meta"))
        assert [i for part in blocks for i in range(part.start, part.stop)] == list(range(sizes["B"] * sizes["H"]))
        for part in blocks:  # within the limit, or one head whose scores alone exceed it (S > 8192 would)
            heads = part.stop - part.start
            assert heads * sizes["S"] ** 2 <= limit or heads == 1, (workload.name, heads)
    timed = task.timed().sizes  # which used to hold every head's scores at once: 16 blocks' worth
    assert timed["B"] * timed["H"] * timed["S"] ** 2 >= 16 * limit


@pytest.mark.parametrize("task_id", BLOCKED)
@pytest.mark.parametrize("causal", [0, 1])
def test_blocks_of_three_heads_give_exactly_the_one_block_result(task_id: str, causal: int) -> None:
    task = get_task(task_id)
    sizes = {"B": 2, "H": 5, "S": 64 if task_id == "attention_fp8_fwd" else 37, "causal": causal}
    if task_id != "attention_fp8_fwd":
        sizes["D"] = 64
    whole = reference._namespace(task)
    assert len(whole["_head_blocks"](torch.empty(2, 5, sizes["S"], 1))) == 1
    blocked = reference._namespace(task)
    blocked["SCORE_BLOCK"] = 3 * sizes["S"] ** 2  # blocks of 3, 3, 3 and 1 of the 10 heads
    assert [p.stop - p.start for p in blocked["_head_blocks"](torch.empty(2, 5, sizes["S"], 1))] == [3, 3, 3, 1]
    drawn = {k: v for k, v in reference.make_inputs(task, sizes, seed=8).items()}
    if task_id == "attention_bwd":
        own = {k: drawn[k] for k in ("Q", "K", "V", "dO")}
        derived = blocked["derive_inputs"](**own, **sizes)
        assert torch.equal(derived["O"], drawn["O"]) and torch.equal(derived["LSE"], drawn["LSE"])
    expected = whole["reference"](**drawn, **sizes)
    got = blocked["reference"](**drawn, **sizes)
    assert set(got) == set(expected)
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
