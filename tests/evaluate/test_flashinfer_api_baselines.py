"""The FlashInfer variant of an imported task whose definition names a FlashInfer API (``fi_api``): offered beside
the reference only then, its arguments mapped from the task's tensors and the recorded call onto FlashInfer's
(checked end to end against the task's reference through the CPU stand-in, tests/evaluate/fake_flashinfer.py),
plan() in setup only, and skipped with the import's reason where flashinfer is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ptxbench.evaluate.baselines import flashinfer as fi
from ptxbench.evaluate.baselines import flashinfer_api
from ptxbench.evaluate.baselines.variants import baseline_variants, variant_specs
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.tasks.flashinfer import fi_api
from ptxbench.tasks.model import Task
from ptxbench.tasks.reference import make_inputs, run_reference

from ..tasks import fi_api_definitions as defs
from ..tasks.flashinfer_dataset import RAGGED_PREFILL
from . import fake_flashinfer
from .stand_ins import smallest_workload


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    """Each supported definition imported once (the import is what decides the recorded call)."""
    return {name: defs.imported(definition, tmp_path_factory.mktemp(name)).task
            for name, definition in defs.SUPPORTED.items()}


def _set_up(task: Task, monkeypatch: pytest.MonkeyPatch, seed: int = 1):  # type: ignore[no-untyped-def]
    fake = fake_flashinfer.install(monkeypatch)
    sizes = smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=seed, device="cpu")
    call = variant_specs(task)["flashinfer"].setup(inputs, sizes)
    return fake, sizes, inputs, call


def test_every_api_the_import_maps_has_a_setup() -> None:
    assert set(flashinfer_api._SETUPS) == set(fi_api.SUPPORTED)


@pytest.mark.parametrize("name", sorted(defs.SUPPORTED))
def test_the_variant_is_offered_beside_the_reference_and_matches_it(name: str, tasks: dict[str, Task],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Through FlashInfer's contracts (page tables, layouts, base-2 LSE, bottom-right causal masks), a wrong
    mapping (another sm_scale, the LSE scaled when it should not be, a mask dropped) fails the task's tolerance."""
    task = tasks[name]
    variants = variant_specs(task)
    assert set(variants) == {"reference", "flashinfer"}
    assert variants["flashinfer"].requires == ("flashinfer", task.baseline.flashinfer.api.rsplit(".", 1)[0])
    assert variants["flashinfer"].description in task.baseline.call
    assert variants["reference"].description in task.baseline.call
    fake, sizes, inputs, call = _set_up(task, monkeypatch, seed=3)
    drawn = {n: t.clone() for n, t in inputs.items()}
    plans = [c for c, _, _ in fake.calls if c.endswith(".plan")]
    call()
    outputs = call()
    for verdict in compare_outputs(task, outputs, run_reference(task, dict(inputs), sizes)):
        assert verdict.passed, (name, verdict)
    assert all(torch.equal(drawn[n], t) for n, t in inputs.items()), "the task's inputs stay as drawn"
    assert plans == [c for c, _, _ in fake.calls if c.endswith(".plan")] and len(plans) <= 1, "plan() in setup only"


def test_a_task_whose_definition_names_no_api_has_its_reference_alone(tmp_path: Path) -> None:
    task = defs.imported(RAGGED_PREFILL, tmp_path).task
    assert task.baseline.flashinfer is None and set(variant_specs(task)) == {"reference"}


def test_rmsnorm_is_called_on_the_tasks_tensors_with_the_definitions_eps(tasks: dict[str, Task],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _, inputs, call = _set_up(tasks["rmsnorm"], monkeypatch)
    call()
    (args, kwargs), *_ = fake.named("norm.rmsnorm")
    assert args[0] is inputs["hidden_states"] and args[1] is inputs["weight"] and kwargs["eps"] == 1e-6


def test_fused_add_rmsnorm_runs_in_place_on_copies_of_the_inputs(tasks: dict[str, Task],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _, inputs, call = _set_up(tasks["fused_add_rmsnorm"], monkeypatch)
    hidden, residual = inputs["hidden_states"].clone(), inputs["residual"].clone()
    out = call()["output"]
    (args, kwargs), *_ = fake.named("norm.fused_add_rmsnorm")
    assert args[0] is out and args[0] is not inputs["hidden_states"] and args[1] is not inputs["residual"]
    assert args[2] is inputs["weight"] and kwargs["eps"] == 1e-5  # the definition's own EPS, not FlashInfer's default
    assert torch.equal(args[1], (hidden.float() + residual.float()).to(residual.dtype))  # its residual, updated
    assert torch.equal(inputs["hidden_states"], hidden) and torch.equal(inputs["residual"], residual)


@pytest.mark.parametrize("name", ["decode", "decode_ps1"])
def test_decode_plans_on_the_page_table_with_the_recorded_scale(name: str, tasks: dict[str, Task],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    task = tasks[name]
    fake, sizes, inputs, call = _set_up(task, monkeypatch)
    (init_args, init_kwargs), = fake.named("decode.init")
    assert init_args[1] == "NHD" and init_kwargs["use_tensor_cores"] is False and init_args[0].numel() == fi.WORKSPACE_BYTES
    (plan_args, plan_kwargs), = fake.named("decode.plan")
    assert plan_args[0] is inputs["kv_indptr"] and plan_args[1] is inputs["kv_indices"]
    batch, page_size = sizes["len_indptr"] - 1, sizes["page_size"]
    if name == "decode":
        assert torch.equal(plan_args[2], inputs["kv_last_page_len"][:batch])
    else:  # no kv_last_page_len in the definition: every page (of one token) is full
        assert plan_args[2].tolist() == [page_size] * batch and page_size == 1
    assert plan_args[3:] == (sizes["num_qo_heads"], sizes["num_kv_heads"], sizes["head_dim"], page_size)
    assert plan_kwargs["sm_scale"] == task.baseline.flashinfer.arguments["sm_scale"]
    assert plan_kwargs["pos_encoding_mode"] == "NONE" and plan_kwargs["q_data_type"] == torch.bfloat16
    call()
    (q, (k_cache, v_cache)), kwargs = fake.named("decode.run")[-1]
    assert q is inputs["q"] and k_cache is inputs["k_cache"] and v_cache is inputs["v_cache"] and kwargs["return_lse"]
    assert len(fake.named("decode.plan")) == 1


def test_paged_prefill_plans_causal_on_the_query_offsets(tasks: dict[str, Task], monkeypatch: pytest.MonkeyPatch) -> None:
    fake, sizes, inputs, call = _set_up(tasks["paged_prefill"], monkeypatch)
    (plan_args, plan_kwargs), = fake.named("paged_prefill.plan")
    assert plan_args[0] is inputs["qo_indptr"] and plan_args[1] is inputs["kv_indptr"] and plan_args[2] is inputs["kv_indices"]
    assert torch.equal(plan_args[3], inputs["kv_last_page_len"][:sizes["len_indptr"] - 1])
    assert plan_args[4:] == (4, 2, 16, 4) and plan_kwargs["causal"] is True and plan_kwargs["head_dim_vo"] == 16
    call()
    (q, (k_cache, v_cache)), _ = fake.named("paged_prefill.run")[-1]
    assert q is inputs["q"] and k_cache is inputs["k_cache"] and v_cache is inputs["v_cache"]


@pytest.mark.parametrize(("name", "vo"), [("ragged_prefill", 16), ("mla_ragged", 16)])
def test_ragged_prefill_plans_on_both_offsets_with_the_value_dim(name: str, vo: int, tasks: dict[str, Task],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _, inputs, call = _set_up(tasks[name], monkeypatch)
    (plan_args, plan_kwargs), = fake.named("prefill.plan")
    assert plan_args[0] is inputs["qo_indptr"] and plan_args[1] is inputs["kv_indptr"]
    assert plan_args[5] == vo and plan_kwargs["causal"] is True
    call()
    (q, k, v), kwargs = fake.named("prefill.run")[-1]
    assert (q, k, v) == (inputs["q"], inputs["k"], inputs["v"]) and kwargs["lse_base"] == "log2"  # FlashInfer's own


@pytest.mark.parametrize("name", ["mla_decode", "mla_prefill"])
def test_mla_plans_lengths_and_queries_from_the_page_table(name: str, tasks: dict[str, Task],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake, sizes, inputs, call = _set_up(tasks[name], monkeypatch)
    (_, plan_kwargs), = fake.named("mla.plan")
    fields = plan_kwargs["metadata"].fields
    indptr = inputs["kv_indptr"].tolist()
    batch, page_size = len(indptr) - 1, sizes["page_size"]
    last = inputs["kv_last_page_len"].tolist() if name == "mla_decode" else [page_size] * batch
    assert fields["kv_len_arr"].tolist() == [(indptr[b + 1] - indptr[b] - 1) * page_size + last[b] for b in range(batch)]
    if name == "mla_decode":
        assert fields["qo_indptr"].tolist() == list(range(batch + 1)) and plan_kwargs["causal"] is False
    else:
        assert fields["qo_indptr"] is inputs["qo_indptr"] and plan_kwargs["causal"] is True
    assert plan_kwargs["lse_mode"] == "base2" and plan_kwargs["page_size"] == page_size
    call()
    _, kwargs = fake.named("mla.run")[-1]
    assert kwargs["query"] == (inputs["q_nope"], inputs["q_pe"]) and kwargs["return_lse_base_on_e"] is False


def test_without_flashinfer_the_variant_is_skipped_with_the_reason_and_the_reference_runs(
        tasks: dict[str, Task], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # the import fails, as where it is not installed
    for task in tasks.values():
        reason = variant_specs(task)["flashinfer"].load()
        assert reason is not None and reason.startswith("flashinfer could not be imported: ModuleNotFoundError")
        assert set(baseline_variants(task)) == {"reference"}


def test_a_call_text_that_is_not_the_variants_is_refused(tasks: dict[str, Task]) -> None:
    task = tasks["rmsnorm"]
    edited = task.model_copy(update={"baseline": task.baseline.model_copy(update={"call": "cuBLAS"})})
    with pytest.raises(ValueError, match="baseline.call is not the text its variants generate"):
        variant_specs(edited)
    unknown = task.baseline.flashinfer.model_copy(update={"api": "flashinfer.norm.layernorm"})
    with pytest.raises(ValueError, match="does not time flashinfer.norm.layernorm"):
        variant_specs(task.model_copy(update={"baseline": task.baseline.model_copy(update={"flashinfer": unknown})}))
