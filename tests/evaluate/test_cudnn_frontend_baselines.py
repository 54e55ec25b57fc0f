"""cuDNN frontend baseline (``cudnn.pygraph.sdpa_fp8``, PyPI nvidia-cudnn-frontend): declared for exactly
attention_fp8_fwd, its graph built once in setup with the task's tensors as they are, checked end to end against
the task's reference through a CPU stand-in with the frontend's keyword names and its own reference's numerics
(tests/evaluate/fake_cudnn.py), and a clear skip where the frontend cannot be imported or loaded a libcudnn other
than PyTorch's."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from ptxbench.evaluate.baselines import cudnn_frontend
from ptxbench.evaluate.baselines.variants import baseline_variants, variant_specs
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.reference import make_inputs, run_reference

from . import fake_cudnn
from .stand_ins import assert_declared_exactly

COVERED = {"attention_fp8_fwd": {"cudnn_fp8"}}
VERSION = 91900  # nvidia-cudnn-cu13 9.19, PyTorch 2.11's
# The smallest workload, and the edges the workloads lack: half a tile with and without the mask.
SHAPES = [None, {"B": 2, "H": 3, "S": 64, "causal": 0}, {"B": 2, "H": 3, "S": 192, "causal": 1}]


def _task():  # type: ignore[no-untyped-def]
    return get_task("attention_fp8_fwd")


def _install(monkeypatch: pytest.MonkeyPatch, version: int | None = None) -> fake_cudnn.FakeCudnn:
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: VERSION)
    return fake_cudnn.install(monkeypatch, version=version)


def test_the_variant_is_declared_exactly_for_fp8_attention() -> None:
    assert cudnn_frontend.REQUIRES == ("cudnn._pygraph",)
    assert_declared_exactly("cudnn_fp8", COVERED, cudnn_frontend.REQUIRES, "sdpa_fp8")


@pytest.mark.parametrize("sizes", SHAPES, ids=str)
def test_the_variant_matches_the_reference_through_the_frontends_contract(
        sizes: dict[str, int] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong mapping (a descale left out, the mask off, the stats' layout) fails the task's tolerance."""
    _install(monkeypatch)
    task = _task()
    sizes = sizes or min(task.workloads, key=lambda w: task.bytes_for(w.sizes)).sizes
    inputs = make_inputs(task, sizes, seed=3, device="cpu")
    outputs = variant_specs(task)["cudnn_fp8"].setup(inputs, sizes)()
    expected = run_reference(task, dict(inputs), sizes)
    for verdict in compare_outputs(task, outputs, expected):
        assert verdict.passed, verdict


def test_the_graph_takes_the_tasks_tensors_and_descales_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch)
    task = _task()
    sizes = {"B": 2, "H": 3, "S": 128, "causal": 1}
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    call = variant_specs(task)["cudnn_fp8"].setup(inputs, sizes)
    (graph,) = fake.graphs
    assert graph.steps == ["validate", "build_operation_graph", "create_execution_plans", "check_support",
                           "build_plans"]
    assert graph.kwargs["io_data_type"] == fake_cudnn.data_type.FP8_E4M3
    assert isinstance(graph.kwargs["handle"], fake_cudnn.Handle)  # the frontend's handle, no default one
    node = graph.node
    assert node["attn_scale"] == 1.0 / math.sqrt(128) and node["stats"] and not node["stats_use_log2"]
    assert node["diagonal_alignment"] == fake_cudnn.diagonal_alignment.TOP_LEFT and node["right_bound"] == 0
    assert not node["use_causal_mask"] and node["left_bound"] is None
    for name in ("q", "k", "v"):
        declared = node[name]
        assert declared.dim == [2, 3, 128, 128] and declared.stride == list(inputs[name.upper()].stride())
        assert declared.data_type == fake_cudnn.data_type.FP8_E4M3
    o, stats, amax_s, amax_o = node["outputs"]
    assert o.data_type == fake_cudnn.data_type.BFLOAT16 and stats.dim == [2, 3, 128, 1]
    assert amax_s.is_virtual and amax_o.is_output
    assert fake.executed == 1  # the warm-up, in setup
    outputs = call()
    assert fake.executed == 2 and fake.streams[-1] == fake_cudnn.FAKE_STREAM  # the current stream, each call
    o, lse = outputs["O"], outputs["LSE"]
    assert o.shape == (2, 3, 128, 128) and o.dtype == torch.bfloat16 and o.is_contiguous()
    assert lse.shape == (2, 3, 128) and lse.dtype == torch.float32
    # the descales go in as the task's tensors (views of them): a changed descale is read at the next call
    inputs["descale_v"].mul_(2)
    again = call()
    assert torch.allclose(again["O"].float(), 2 * o.float(), rtol=1e-2)
    # the graph is kept per shape and mask: a second setup builds none
    variant_specs(task)["cudnn_fp8"].setup(inputs, sizes)
    assert len(fake.graphs) == 1
    variant_specs(task)["cudnn_fp8"].setup(inputs, {**sizes, "causal": 0})
    assert len(fake.graphs) == 2 and fake.graphs[-1].node["right_bound"] is None


def test_without_the_mask_of_the_workload_the_reference_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: the causal workload's outputs through an unmasked graph do not pass."""
    _install(monkeypatch)
    task = _task()
    sizes = {"B": 1, "H": 2, "S": 128, "causal": 1}
    inputs = make_inputs(task, sizes, seed=2, device="cpu")
    outputs = variant_specs(task)["cudnn_fp8"].setup(inputs, {**sizes, "causal": 0})()
    expected = run_reference(task, dict(inputs), sizes)
    assert not all(v.passed for v in compare_outputs(task, outputs, expected))


def test_a_libcudnn_other_than_pytorchs_is_refused_in_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, version=92100)
    task = _task()
    sizes = {"B": 1, "H": 2, "S": 64, "causal": 0}
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    with pytest.raises(RuntimeError, match=r"loaded libcudnn 92100, not PyTorch's \(91900\)"):
        variant_specs(task)["cudnn_fp8"].setup(inputs, sizes)


def test_without_the_frontend_the_variant_is_skipped_with_the_import_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cudnn", None)  # the import fails, as where it is not installed
    monkeypatch.delitem(sys.modules, "cudnn._pygraph", raising=False)
    task = _task()
    reason = variant_specs(task)["cudnn_fp8"].load()
    assert reason is not None and reason.startswith("cudnn._pygraph could not be imported: ModuleNotFoundError")
    loadable = baseline_variants(task)
    assert "cudnn_fp8" not in loadable and loadable  # the other variants still run


def test_pytorchs_own_cudnn_does_not_satisfy_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    """A top-level ``cudnn`` that is not the frontend (no graph module) is not taken for it."""
    import types

    monkeypatch.setitem(sys.modules, "cudnn", types.ModuleType("cudnn"))
    monkeypatch.delitem(sys.modules, "cudnn._pygraph", raising=False)
    reason = variant_specs(_task())["cudnn_fp8"].load()
    assert reason is not None and reason.startswith("cudnn._pygraph could not be imported")
