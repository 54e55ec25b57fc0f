"""The op types gdn, dsa_paged, mamba_ssu and rope import from small definitions of their own form: each gets
the family its judging matches, FLOPs and bytes that count what a kernel must do and move (checked against
hand-computed values), index inputs inside their tables, int64 from the definition to the candidate's
prototype, and what still cannot be judged is refused in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ptxbench.contract.signature import prototype
from ptxbench.errors import TaskError
from ptxbench.tasks.flashinfer import import_definition
from ptxbench.tasks.model import DType, Family, InitKind, Task
from ptxbench.tasks.reference import make_inputs, run_reference

from .new_op_definitions import DSA, GDN_DECODE, GDN_MTP, GDN_PREFILL, INDEXER, MAMBA, ROPE, write

torch = pytest.importorskip("torch")


def _task(tmp_path: Path, definition: dict[str, Any], axes: list[dict[str, int]],
          scalars: dict[str, float] | None = None) -> Task:
    return import_definition(*_paths(tmp_path, definition, axes, scalars))[0]


def _paths(tmp_path: Path, definition: dict[str, Any], axes: list[dict[str, int]],
           scalars: dict[str, float] | None) -> tuple[Path, list[Path]]:
    path, jsonl = write(tmp_path, definition, axes, scalars)
    return path, [jsonl]


def _workload(task: Task, **sizes: int) -> dict[str, int]:
    return next(w.sizes for w in task.workloads if all(w.sizes[k] == v for k, v in sizes.items()))


def test_rope_positions_are_int64_from_the_definition_to_the_prototype_and_index_the_cache(tmp_path: Path) -> None:
    task = _task(tmp_path, ROPE, [{"num_tokens": 5, "max_seq_len": 16}, {"num_tokens": 7, "max_seq_len": 3}])
    assert task.family is Family.MEMORY_BOUND and task.flops == "0"
    positions = next(i for i in task.inputs if i.name == "positions")
    assert positions.dtype is DType.I64 and positions.init.kind is InitKind.DERIVED
    assert "const int64_t* __restrict__ positions" in prototype(task)
    sizes = _workload(task, num_tokens=5)
    # q, k read and written once (bf16), the 5 cache rows the positions name (fp32, rotary_dim 4), 5 int64 positions
    assert task.bytes_for(sizes) == 2 * (5 * 2 * 8 * 2 + 5 * 1 * 8 * 2) + 5 * 4 * 4 + 5 * 8
    assert task.bytes_for(_workload(task, num_tokens=7)) == 2 * (7 * 2 * 8 * 2 + 7 * 8 * 2) + 3 * 4 * 4 + 7 * 8
    inputs = make_inputs(task, sizes, seed=3)
    drawn = inputs["positions"]
    assert drawn.dtype == torch.int64 and len(set(drawn.tolist())) == 5
    assert 0 <= int(drawn.min()) and int(drawn.max()) < 16
    wide = make_inputs(task, _workload(task, num_tokens=7), seed=3)["positions"]  # every row of a short cache read
    assert sorted(set(wide.tolist())) == [0, 1, 2]
    out = run_reference(task, dict(inputs), sizes)
    cos, sin = inputs["cos_sin_cache"].double()[drawn].chunk(2, dim=-1)
    x = inputs["q"].double()
    first, second = x[..., :2], x[..., 2:4]
    expected = torch.cat((first * cos[:, None] - second * sin[:, None], second * cos[:, None] + first * sin[:, None],
                          x[..., 4:]), dim=-1)
    assert torch.allclose(out["q_out"].double(), expected, rtol=2e-2, atol=2e-2)


def test_gdn_decode_streams_its_state_and_its_q_and_k_are_drawn_normalised(tmp_path: Path) -> None:
    task = _task(tmp_path, GDN_DECODE, [{"batch_size": 2}, {"batch_size": 3}], {"scale": 0.25})
    assert task.family is Family.MEMORY_BOUND and task.flops == "0"
    assert {i.name: i.init.scale for i in task.inputs if i.name in ("q", "k")} == {"q": 0.25, "k": 0.25}
    # q, k (2 heads x 16), v (4 x 16), output (4 x 16) in bf16; the state [4, 16, 16] fp32 in and out; gates
    per_batch = (2 * 16 + 2 * 16 + 4 * 16 + 4 * 16) * 2 + 2 * 4 * 16 * 16 * 4 + 2 * 4 * 2
    assert task.bytes_for(_workload(task, batch_size=3)) == 3 * per_batch + 2 * 4 * 4
    sizes = _workload(task, batch_size=2)
    out = run_reference(task, dict(make_inputs(task, sizes, seed=1)), sizes)
    assert all(torch.isfinite(t).all() for t in out.values())


def test_gdn_prefill_counts_its_state_products_on_the_tensor_cores(tmp_path: Path) -> None:
    task = _task(tmp_path, GDN_PREFILL, [{"total_seq_len": 48, "num_seqs": 1, "len_cu_seqlens": 2},
                                         {"total_seq_len": 9, "num_seqs": 3, "len_cu_seqlens": 4}], {"scale": 0.25})
    assert task.family is Family.ATTENTION_FORWARD
    assert task.flops_for(_workload(task, total_seq_len=9)) == 6 * 9 * 4 * 16 * 16
    matrix = next(r for r in task.requirements_for(next(iter(task.requirements))) if r.min_flop_share)
    assert set(matrix.any_of) == {"wgmma.bf16", "wgmma.tf32"} and matrix.min_flop_share == 0.9
    assert task.tolerance_for("new_state").rtol == 2.0 ** -9  # a tensor-core operand: tf32, not fp32's 4 ulp
    assert next(i for i in task.inputs if i.name == "cu_seqlens").dtype is DType.I64
    sizes = _workload(task, total_seq_len=9)
    offsets = make_inputs(task, sizes, seed=2)["cu_seqlens"].tolist()
    assert offsets[0] == 0 and offsets[-1] == 9 and len(offsets) == 4
    assert all(b > a for a, b in zip(offsets, offsets[1:]))
    assert {i.name: i.init.scale for i in task.inputs if i.name in ("q", "k")} == {"q": 0.25, "k": 0.25}
    long = _workload(task, total_seq_len=48)  # 48 tokens of one sequence through the state
    out = run_reference(task, dict(make_inputs(task, long, seed=2)), long)
    assert all(torch.isfinite(t).all() for t in out.values())


def test_gdn_mtp_gives_its_written_buffer_a_copy_and_counts_it_as_no_work(tmp_path: Path) -> None:
    task = _task(tmp_path, GDN_MTP, [{"batch_size": 2, "seq_len": 3, "pool_size": 4},
                                     {"batch_size": 3, "seq_len": 2, "pool_size": 3}], {"scale": 0.25})
    assert task.family is Family.MEMORY_BOUND and "_WRITES_INTO = ('intermediate_states_buffer',)" in task.reference
    sizes = _workload(task, batch_size=2)
    state = 4 * 16 * 16 * 4  # one pool slot, fp32
    per_token = (2 * 16 + 2 * 16 + 4 * 16 + 4 * 16) * 2 + 2 * 4 * 2
    # the whole pool read and returned (final_state is it unchanged); the buffer the reference only writes: nothing
    assert task.bytes_for(sizes) == 2 * 3 * per_token + 2 * 4 * state + 2 * 4 + 2 * 4 * 4
    inputs = make_inputs(task, sizes, seed=4)
    before = {n: t.clone() for n, t in inputs.items()}
    assert sorted(set(inputs["initial_state_indices"].tolist())) == sorted(inputs["initial_state_indices"].tolist())
    assert int(inputs["initial_state_indices"].max()) < 4
    out = run_reference(task, dict(inputs), sizes)
    assert all(torch.equal(before[n], inputs[n]) for n in inputs)  # the drawn inputs stay as drawn
    assert torch.equal(out["final_state"], inputs["initial_state"])


def test_mamba_updates_distinct_slots_and_returns_the_whole_cache(tmp_path: Path) -> None:
    task = _task(tmp_path, MAMBA, [{"batch_size": 3, "state_cache_size": 3}, {"batch_size": 2, "state_cache_size": 9}])
    assert task.family is Family.MEMORY_BOUND and task.flops == "0"
    sizes = _workload(task, state_cache_size=9)
    # the cache [9, 4, 4, 8] bf16 read and written whole (new_state is all of it); x, dt, output; A (fp32); B, C;
    # D, dt_bias; the slots
    assert task.bytes_for(sizes) == (2 * 9 * 4 * 4 * 8 * 2 + 3 * 2 * 4 * 4 * 2 + 4 * 4 * 8 * 4 + 2 * 2 * 2 * 8 * 2
                                     + 2 * 4 * 4 * 2 + 2 * 4)
    inputs = make_inputs(task, sizes, seed=6)
    slots = inputs["state_batch_indices"].tolist()
    assert len(set(slots)) == 2 and all(0 <= s < 9 for s in slots)
    out = run_reference(task, dict(inputs), sizes)
    untouched = [s for s in range(9) if s not in slots]
    assert torch.equal(out["new_state"][untouched], inputs["state"][untouched].float())
    assert not torch.equal(out["new_state"][slots], inputs["state"][slots].float())


def test_sparse_attention_reads_the_top_k_tokens_it_names_as_a_decode(tmp_path: Path) -> None:
    task = _task(tmp_path, DSA, [{"num_tokens": 3, "num_pages": 2}, {"num_tokens": 4, "num_pages": 8}],
                 {"sm_scale": 1 / math.sqrt(12)})
    assert task.family is Family.ATTENTION_DECODE
    short, wide = _workload(task, num_pages=2), _workload(task, num_pages=8)
    # 2 heads x (8 + 4 + 8) per (query, key) pair; a row attends min(topk 6, the cache's 2 x 2 tokens)
    assert task.flops_for(short) == 2 * 2 * 20 * 3 * 4 and task.flops_for(wide) == 2 * 2 * 20 * 4 * 6
    fixed = 4 * 2 * (8 + 4 + 8) * 2 + 4 * 2 * 4 + 4 * 6 * 4  # queries, output, lse, indices of 4 rows
    assert task.bytes_for(wide) == fixed + 16 * (8 + 4) * 2  # min(16 cache tokens, 4 rows x 6)
    assert task.floor_bytes_for(wide) == fixed + 6 * (8 + 4) * 2  # one row's 6 tokens
    for sizes, valid in ((short, 4), (wide, 6)):
        inputs = make_inputs(task, sizes, seed=8)
        for row in inputs["sparse_indices"].tolist():
            named = [i for i in row if i != -1]
            assert row[valid:] == [-1] * (6 - valid) and len(set(named)) == valid
            assert 0 <= min(named) and max(named) < sizes["num_pages"] * 2
        out = run_reference(task, dict(inputs), sizes)
        assert all(torch.isfinite(t).all() for t in out.values())


def test_what_cannot_be_judged_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(TaskError) as refused:
        _task(tmp_path / "indexer", INDEXER, [{"batch_size": 1, "max_num_pages": 2, "num_pages": 3},
                                              {"batch_size": 2, "max_num_pages": 2, "num_pages": 3}])
    assert str(refused.value).startswith("output topk_indices is int32: outputs are compared within a floating-point "
                                         "tolerance") and "\n" not in str(refused.value)
    flat = {**DSA, "name": "dsa_unpaged", "inputs": {  # caches of tokens, no pages: nothing says what an index names
        **DSA["inputs"], "ckv_cache": {"shape": ["num_pages", "head_dim_ckv"], "dtype": "bfloat16"},
        "kpe_cache": {"shape": ["num_pages", "head_dim_kpe"], "dtype": "bfloat16"}}}
    with pytest.raises(TaskError, match=r"^input sparse_indices must be 2-D \(\[rows, topk\]\) over a paged cache"):
        _task(tmp_path / "flat", flat, [{"num_tokens": 1, "num_pages": 2}, {"num_tokens": 2, "num_pages": 2}],
              {"sm_scale": 0.5})
