"""FA3 baselines (fa3-fwd's ``fa3_fwd_interface``): declared for exactly the two tasks its kernels cover, the task's
tensors handed to FA3 as views in the layouts it reads (checked end to end against the task's reference through a
CPU stand-in with FA3's contracts, tests/evaluate/fake_fa3.py), and a clear skip where the module cannot be
imported: not installed, or built against another libtorch (the wheel links torch 2.10's)."""

from __future__ import annotations

import importlib.abc
import math
import sys

import pytest
import torch

from ptxbench.evaluate.baselines import fa3
from ptxbench.evaluate.baselines.variants import baseline_variants, variant_specs
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.reference import make_inputs, run_reference

from . import fake_fa3
from .stand_ins import assert_declared_exactly, smallest_workload

COVERED = {"attention_fp8_fwd": {"fa3"}, "prefill_gqa_ragged": {"fa3"}}
# Each task's smallest workload, and shapes of its edges the workloads lack: fp8 with and without the mask on a
# sequence of half a tile; ragged sequences of 70, 50 and 30 tokens with two query heads per kv head.
SHAPES = [("attention_fp8_fwd", None), ("attention_fp8_fwd", {"B": 2, "H": 3, "S": 64, "causal": 0}),
          ("attention_fp8_fwd", {"B": 2, "H": 3, "S": 192, "causal": 1}), ("prefill_gqa_ragged", None),
          ("prefill_gqa_ragged", {"B": 3, "S": 70, "DS": 20, "T": 150, "H": 4, "KH": 2})]


def test_fa3_variants_are_declared_exactly_for_the_tasks_it_covers() -> None:
    assert fa3.REQUIRES == ("fa3_fwd_interface",)
    assert_declared_exactly("fa3", COVERED, fa3.REQUIRES, "FlashAttention-3")


@pytest.mark.parametrize(("task_id", "sizes"), SHAPES, ids=lambda x: x if isinstance(x, str) else str(x))
def test_the_variant_matches_the_reference_through_fa3s_contract(
        task_id: str, sizes: dict[str, int] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in computes what FA3 documents for the arguments it is given (layouts by stride, descales per
    batch entry and kv head, the LSE's layout): a wrong mapping (heads for tokens, a descale left out, the varlen
    LSE returned as [H, T]) fails the task's own tolerance or its shapes."""
    fake_fa3.install(monkeypatch)
    task = get_task(task_id)
    sizes = sizes or smallest_workload(task).sizes
    inputs = make_inputs(task, sizes, seed=3, device="cpu")
    outputs = variant_specs(task)["fa3"].setup(inputs, sizes)()
    expected = run_reference(task, dict(inputs), sizes)
    for verdict in compare_outputs(task, outputs, expected):
        assert verdict.passed, verdict


def test_fp8_attention_hands_fa3_views_and_its_descales_per_batch_and_kv_head(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_fa3.install(monkeypatch)
    task = get_task("attention_fp8_fwd")
    sizes = {"B": 2, "H": 3, "S": 128, "causal": 1}
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    call = variant_specs(task)["fa3"].setup(inputs, sizes)
    assert len(fake.named("flash_attn_func")) == 1  # the warm-up, in setup
    outputs = call()
    (q, k, v), kwargs = fake.named("flash_attn_func")[-1]
    for given, name in ((q, "Q"), (k, "K"), (v, "V")):  # [B, S, H, D] views of the task's tensors, no copy
        assert given.shape == (2, 128, 3, 128) and given.data_ptr() == inputs[name].data_ptr()
        assert given.stride() == inputs[name].transpose(1, 2).stride()
    for name in ("q_descale", "k_descale", "v_descale"):
        scale = kwargs[name]
        assert scale.shape == (2, 3) and scale.dtype == torch.float32
        assert scale.tolist() == [[float(inputs[f"descale_{name[0]}"])] * 3] * 2
    assert kwargs["softmax_scale"] == 1.0 / math.sqrt(128) and kwargs["causal"] is True
    assert kwargs["return_attn_probs"] is True
    o, lse = outputs["O"], outputs["LSE"]
    assert o.shape == (2, 3, 128, 128) and o.dtype == torch.bfloat16 and o.transpose(1, 2).is_contiguous()  # a view
    assert lse.shape == (2, 3, 128) and lse.dtype == torch.float32


def test_ragged_prefill_is_causal_on_seq_indptr_with_the_longest_sequence_from_setup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_fa3.install(monkeypatch)
    task = get_task("prefill_gqa_ragged")
    sizes = {"B": 3, "S": 70, "DS": 20, "T": 150, "H": 4, "KH": 2}
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    outputs = variant_specs(task)["fa3"].setup(inputs, sizes)()
    (q, k, v, cu_q, cu_k, max_q, max_k), kwargs = fake.named("flash_attn_varlen_func")[-1]
    assert q is inputs["Q"] and k is inputs["K"] and v is inputs["V"]
    assert cu_q is inputs["seq_indptr"] and cu_k is inputs["seq_indptr"]
    assert (max_q, max_k) == (70, 70) and type(max_q) is int
    assert kwargs["causal"] is True and kwargs["softmax_scale"] == 1.0 / math.sqrt(128)
    assert kwargs["return_attn_probs"] is True and kwargs["q_descale"] is None
    lse = outputs["LSE"]
    assert lse.shape == (150, 4) and lse.t().is_contiguous()  # FA3's [H, T], handed back as a view
    assert outputs["O"].shape == (150, 4, 128) and outputs["O"].dtype == torch.bfloat16


def test_without_fa3_each_variant_is_skipped_with_the_import_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", None)  # the import fails, as where it is not installed
    for task_id, names in COVERED.items():
        task = get_task(task_id)
        for name in names:
            reason = variant_specs(task)[name].load()
            assert reason is not None and reason.startswith("fa3_fwd_interface could not be imported: "
                                                            "ModuleNotFoundError")
        loadable = baseline_variants(task)
        assert not names & set(loadable) and loadable, task_id  # the other variants still run


class _BuiltForAnotherTorch(importlib.abc.MetaPathFinder):
    """The import as it fails where the wheel's extension links a libtorch other than the one loaded."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name == "fa3_fwd_interface":
            raise ImportError("/tmp/site/fa3_fwd/_C.abi3.so: undefined symbol: _ZN3c1013MessageLoggerC1EPKciib")
        return None


def test_a_wheel_built_for_another_torch_is_skipped_with_the_loaders_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "fa3_fwd_interface", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BuiltForAnotherTorch(), *sys.meta_path])
    reason = variant_specs(get_task("attention_fp8_fwd"))["fa3"].load()
    assert reason == ("fa3_fwd_interface could not be imported: ImportError: /tmp/site/fa3_fwd/_C.abi3.so: "
                      "undefined symbol: _ZN3c1013MessageLoggerC1EPKciib")
