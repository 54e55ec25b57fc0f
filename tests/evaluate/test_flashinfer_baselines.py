"""FlashInfer baselines: declared for the tasks FlashInfer covers, their arguments mapped from the task's
tensors to FlashInfer's calls (checked end to end against the task's reference through a CPU stand-in with
FlashInfer's contracts, tests/evaluate/fake_flashinfer.py), plan() in setup only, and a clear skip where
flashinfer cannot be imported."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from ptxbench.evaluate.baselines import flashinfer as fi
from ptxbench.evaluate.baselines.variants import baseline_variants, variant_specs
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.reference import make_inputs, run_reference

from . import fake_flashinfer
from .stand_ins import assert_declared_exactly, smallest_workload

COVERED = {"decode_gqa_paged": {"flashinfer", "flashinfer_tc"}, "prefill_gqa_ragged": {"flashinfer"},
           "attention_fp8_fwd": {"flashinfer"}, "mla_decode_paged": {"flashinfer"}, "rope": {"flashinfer"}}
CASES = [(task_id, name) for task_id, names in COVERED.items() for name in sorted(names)]


def test_flashinfer_variants_are_declared_exactly_for_the_tasks_it_covers() -> None:
    assert_declared_exactly("flashinfer", COVERED, ("flashinfer",), "FlashInfer")


@pytest.mark.parametrize(("task_id", "name"), CASES)
def test_the_variant_matches_the_reference_through_flashinfers_contract(
        task_id: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in computes what FlashInfer documents for the arguments it is given (page table, layout,
    LSE base, cos/sin layout): a wrong mapping (indptr for indices, the page size, a base-2 LSE left as it
    is, sines for cosines) fails the task's own tolerance."""
    fake_flashinfer.install(monkeypatch)
    task = get_task(task_id)
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=3, device="cpu")
    outputs = variant_specs(task)[name].setup(inputs, sizes)()
    expected = run_reference(task, dict(inputs), sizes)
    for verdict in compare_outputs(task, outputs, expected):
        assert verdict.passed, (name, verdict)


def test_decode_plans_on_the_tasks_page_table_and_runs_on_the_pages_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_flashinfer.install(monkeypatch)
    task = get_task("decode_gqa_paged")
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    for name, tensor_cores in (("flashinfer", False), ("flashinfer_tc", True)):
        fake.calls.clear()
        call = variant_specs(task)[name].setup(inputs, sizes)
        (init_args, init_kwargs), = fake.named("decode.init")
        assert init_args[1] == "NHD" and init_kwargs["use_tensor_cores"] is tensor_cores
        assert init_args[0].numel() == fi.WORKSPACE_BYTES and not init_args[0].any()  # zeroed, as FlashInfer asks
        (plan_args, plan_kwargs), = fake.named("decode.plan")
        assert plan_args[0] is inputs["kv_indptr"] and plan_args[1] is inputs["kv_indices"]
        assert plan_args[2] is inputs["kv_last_page_len"]
        assert plan_args[3:] == (sizes["H"], sizes["KH"], 128, sizes["P"])
        assert plan_kwargs["q_data_type"] == plan_kwargs["kv_data_type"] == torch.bfloat16
        assert plan_kwargs["sm_scale"] == pytest.approx(1 / math.sqrt(128))
        call()
        call()
        assert len(fake.named("decode.plan")) == 1, "plan() belongs to setup, never to the timed call"
        (q, (k_cache, v_cache)), kwargs = fake.named("decode.run")[-1]
        assert q is inputs["Q"] and k_cache is inputs["K_cache"] and v_cache is inputs["V_cache"]
        assert kwargs["return_lse"] is True


def test_ragged_prefill_is_causal_on_seq_indptr_with_a_natural_log_lse(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_flashinfer.install(monkeypatch)
    task = get_task("prefill_gqa_ragged")
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    variant_specs(task)["flashinfer"].setup(inputs, sizes)
    (plan_args, plan_kwargs), = fake.named("prefill.plan")
    assert plan_args[0] is inputs["seq_indptr"] and plan_args[1] is inputs["seq_indptr"]
    assert plan_args[2:5] == (sizes["H"], sizes["KH"], 128) and plan_kwargs["causal"] is True
    (q, k, v), kwargs = fake.named("prefill.run")[-1]
    assert (q, k, v) == (inputs["Q"], inputs["K"], inputs["V"]) and kwargs["lse_base"] == "ln"


def test_fp8_attention_runs_token_major_with_per_head_descales(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_flashinfer.install(monkeypatch)
    task = get_task("attention_fp8_fwd")
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    variant_specs(task)["flashinfer"].setup(inputs, sizes)
    (plan_args, plan_kwargs), = fake.named("prefill.plan")
    batch, heads, seq = sizes["B"], sizes["H"], sizes["S"]
    assert plan_args[0].tolist() == [b * seq for b in range(batch + 1)] and plan_args[1].tolist() == plan_args[0].tolist()
    assert plan_kwargs["causal"] is bool(sizes["causal"]) and plan_kwargs["o_data_type"] == torch.bfloat16
    (q, k, v, scale_q, scale_k, scale_v), kwargs = fake.named("prefill.run")[-1]
    assert torch.equal(q.view(batch, seq, heads, 128).transpose(1, 2), inputs["Q"])
    assert torch.equal(v.view(batch, seq, heads, 128).transpose(1, 2), inputs["V"])
    assert scale_q.tolist() == [float(inputs["descale_q"])] * heads and kwargs["lse_base"] == "ln"
    assert scale_v.tolist() == [float(inputs["descale_v"])] * heads


def test_mla_plans_lengths_from_the_page_table_and_sm_scale_from_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_flashinfer.install(monkeypatch)
    task = get_task("mla_decode_paged")
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    variant_specs(task)["flashinfer"].setup(inputs, sizes)
    (_, plan_kwargs), = fake.named("mla.plan")
    fields = plan_kwargs["metadata"].fields
    indptr, last = inputs["kv_indptr"].tolist(), inputs["kv_last_page_len"].tolist()
    lengths = [(indptr[b + 1] - indptr[b] - 1) * sizes["P"] + last[b] for b in range(sizes["B"])]
    assert fields["kv_len_arr"].tolist() == lengths and sum(lengths) == sizes["L"]
    assert fields["kv_indptr"] is inputs["kv_indptr"] and fields["kv_indices"] is inputs["kv_indices"]
    assert plan_kwargs["sm_scale"] == float(inputs["sm_scale"]) and plan_kwargs["causal"] is False
    assert (plan_kwargs["head_dim_ckv"], plan_kwargs["head_dim_kpe"], plan_kwargs["page_size"]) == (512, 64, sizes["P"])
    _, kwargs = fake.named("mla.run")[-1]
    assert kwargs["query"] == (inputs["q_nope"], inputs["q_pe"])
    assert kwargs["kv_cache"] == (inputs["ckv_cache"], inputs["kpe_cache"])


def test_rope_cache_is_cosines_then_sines_of_every_position_in_fp32() -> None:
    cache = fi.cos_sin_cache(64, 500000, torch.device("cpu"))
    assert cache.shape == (fi.ROPE_MAX_POSITION, 64) and cache.dtype == torch.float32
    position, i = 31999, 5
    angle = position * 500000.0 ** (-2 * i / 64)
    assert cache[position, i].item() == pytest.approx(math.cos(angle), abs=1e-7)
    assert cache[position, 32 + i].item() == pytest.approx(math.sin(angle), abs=1e-7)
    assert fi.cos_sin_cache(64, 500000, torch.device("cpu")) is cache  # built once per process


def test_curand_headers_come_from_nvidias_wheel_only_where_the_toolkit_lacks_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    toolkit, wheels = tmp_path / "cuda", tmp_path / "site" / "nvidia"
    (toolkit / "include").mkdir(parents=True)
    assert fi.curand_include_flag(str(toolkit), [str(wheels)]) is None  # nowhere to take it from
    (wheels / "cu13" / "include").mkdir(parents=True)
    (wheels / "cu13" / "include" / fi.CURAND_HEADER).write_text("")
    assert fi.curand_include_flag(str(toolkit), [str(wheels)]) == f"-isystem {wheels / 'cu13' / 'include'}"
    (toolkit / "include" / fi.CURAND_HEADER).write_text("")
    assert fi.curand_include_flag(str(toolkit), [str(wheels)]) is None  # the toolkit's own wins


def test_without_flashinfer_each_variant_is_skipped_with_the_import_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # the import fails, as where it is not installed
    for task_id, names in COVERED.items():
        task = get_task(task_id)
        for name in names:
            reason = variant_specs(task)[name].load()
            assert reason is not None and reason.startswith("flashinfer could not be imported: ModuleNotFoundError")
        loadable = baseline_variants(task)
        assert not names & set(loadable) and loadable, task_id  # the other variants still run
