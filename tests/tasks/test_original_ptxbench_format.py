"""The original PTXBench's own definitions (FlashInfer-Trace records with ``op_type "attention"`` over
``[B, H, S, D]`` tensors, workloads that restate the const axes, one-workload block-scaled fp8 GEMMs, references
that call cuDNN or DeepGEMM) import. The definitions here are small ones written for the tests in that form."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ptxbench.tasks.flashinfer import import_dataset
from ptxbench.tasks.loader import load_task_file
from ptxbench.tasks.model import Family, InitKind, Role, Task
from ptxbench.tasks.reference import make_inputs, run_reference

torch = pytest.importorskip("torch")

_ATTENTION = '''import torch


def run(Q, K, V):
    scores = (Q.float() @ K.float().transpose(-1, -2)) / Q.shape[-1] ** 0.5
    if CAUSAL:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, -float("inf"))
    lse = torch.logsumexp(scores, -1)
    return (torch.softmax(scores, -1) @ V.float()).to(torch.bfloat16), lse
'''

_BLOCKSCALE_GEMM = '''import torch


def run(A, SF_A, B, SF_B):
    a = A.float() * SF_A.repeat_interleave(128, dim=1)
    b = B.float() * SF_B.repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return (a @ b.T).to(torch.bfloat16)
'''

_CUDNN_BACKWARD = '''import cudnn
import torch


def run(Q, K, V, O, dO, L):
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16)
    return graph.sdpa_backward(q=Q, k=K, v=V, o=O, dO=dO, stats=L)
'''


_TORCH_BACKWARD = '''import torch


def run(Q, K, V, O, dO, L):
    scores = (Q.float() @ K.float().transpose(-1, -2)) / Q.shape[-1] ** 0.5
    keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    p = torch.exp(scores.masked_fill(~keep, -float("inf")) - L.unsqueeze(-1))
    dp = dO.float() @ V.float().transpose(-1, -2)
    ds = p * (dp - (dO.float() * O.float()).sum(-1, keepdim=True))
    scale = Q.shape[-1] ** -0.5
    return ((ds @ K.float()) * scale).to(Q.dtype), ((ds.transpose(-1, -2) @ Q.float()) * scale).to(Q.dtype), \\
        (p.transpose(-1, -2) @ dO.float()).to(Q.dtype)
'''


def _attention(causal: bool) -> dict[str, Any]:
    tensor = {"shape": ["B", "H", "S", "D"], "dtype": "bfloat16"}
    return {"name": f"mha_with_lse_d16{'_causal' if causal else ''}", "op_type": "attention",
            "tags": ["returns:o_and_lse", f"causal:{str(causal).lower()}"],
            "axes": {"B": {"type": "const", "value": 2}, "H": {"type": "const", "value": 3},
                     "D": {"type": "const", "value": 16}, "S": {"type": "var"}},
            "inputs": {"Q": tensor, "K": tensor, "V": tensor},
            "outputs": {"O": tensor, "LSE": {"shape": ["B", "H", "S"], "dtype": "float32"}},
            "reference": _ATTENTION.replace("CAUSAL", str(causal))}


GEMM = {"name": "fp8_gemm_nt_1d2d_n256_k256", "op_type": "gemm", "tags": ["recipe:1d2d"],
        "axes": {"m": {"type": "var"}, "n": {"type": "const", "value": 256}, "k": {"type": "const", "value": 256},
                 "num_nblock": {"type": "const", "value": 2}, "num_kblock": {"type": "const", "value": 2}},
        "inputs": {"A": {"dtype": "float8_e4m3fn", "shape": ["m", "k"]},
                   "SF_A": {"dtype": "float32", "shape": ["m", "num_kblock"]},
                   "B": {"dtype": "float8_e4m3fn", "shape": ["n", "k"]},
                   "SF_B": {"dtype": "float32", "shape": ["num_nblock", "num_kblock"]}},
        "outputs": {"D": {"dtype": "bfloat16", "shape": ["m", "n"]}}, "reference": _BLOCKSCALE_GEMM}

_BWD_TENSOR = {"shape": ["B", "H", "S", "d"], "dtype": "bfloat16"}
BACKWARD = {"name": "mha_bwd_d16_causal", "op_type": "attention", "tags": ["causal:true", "direction:backward"],
            "axes": {"B": {"type": "const", "value": 1}, "H": {"type": "const", "value": 2},
                     "d": {"type": "const", "value": 16}, "S": {"type": "var"}},
            "inputs": {"Q": _BWD_TENSOR, "K": _BWD_TENSOR, "V": _BWD_TENSOR, "O": _BWD_TENSOR, "dO": _BWD_TENSOR,
                       "L": {"shape": ["B", "H", "S"], "dtype": "float32"}},
            "outputs": {"dQ": _BWD_TENSOR, "dK": _BWD_TENSOR, "dV": _BWD_TENSOR}, "reference": _CUDNN_BACKWARD}


TORCH_BACKWARD = {**BACKWARD, "name": "mha_bwd_torch_d16_causal", "reference": _TORCH_BACKWARD}


def _write(root: Path, definition: dict[str, Any], workload_axes: list[dict[str, int]]) -> None:
    for folder, suffix, text in (("definitions", "json", json.dumps(definition)),
                                 ("workloads", "jsonl", "".join(json.dumps({
                                     "definition": definition["name"], "solution": None, "evaluation": None,
                                     "workload": {"uuid": f"u{i}", "axes": axes,
                                                  "inputs": {n: {"type": "random"} for n in definition["inputs"]}}})
                                     + "\n" for i, axes in enumerate(workload_axes)))):
        path = root / folder / definition["op_type"] / f"{definition['name']}.{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Task]:
    root = tmp_path_factory.mktemp("ptxbench")
    for causal in (False, True):  # the const axes restated in every workload, as the original's are
        _write(root, _attention(causal), [{"B": 2, "H": 3, "D": 16, "S": s} for s in (8, 24, 16, 5)])
    _write(root, GEMM, [{"m": 96}])
    _write(root, BACKWARD, [{"B": 1, "H": 2, "d": 16, "S": s} for s in (64, 128, 32)])
    _write(root, TORCH_BACKWARD, [{"B": 1, "H": 2, "d": 16, "S": s} for s in (64, 128, 32)])
    out = tmp_path_factory.mktemp("out")
    summary = import_dataset(root, out)
    assert [o.refused for o in summary.outcomes] == [None] * 5
    return {o.definition: load_task_file(out / o.task_file) for o in summary.outcomes}  # type: ignore[operator]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_bhsd_imports_with_its_flops_and_a_cpu_reference(tasks: dict[str, Task], causal: bool) -> None:
    task = tasks[_attention(causal)["name"]]
    assert task.family is Family.ATTENTION_FORWARD and task.baseline.library == "reference"
    sizes = {"B": 2, "H": 3, "D": 16, "S": 24}
    pairs = 24 * 25 // 2 if causal else 24 * 24
    assert task.flops_for(sizes) == 4 * 2 * 3 * 16 * pairs
    smallest = min(task.workloads, key=lambda w: w.sizes["S"])
    inputs = make_inputs(task, smallest.sizes, seed=2)
    out = run_reference(task, dict(inputs), smallest.sizes)
    scores = inputs["Q"].double() @ inputs["K"].double().transpose(-1, -2) / 4
    if causal:
        scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -math.inf)
    assert torch.allclose(out["LSE"].double(), torch.logsumexp(scores, -1), atol=1e-4)


def test_a_one_workload_block_scaled_gemm_gets_a_held_out_companion(tasks: dict[str, Task]) -> None:
    task = tasks[GEMM["name"]]
    assert task.family is Family.GEMM and task.flops == "2 * m * n * k"  # operands found past the scales between them
    assert [(w.role, w.sizes["m"]) for w in task.workloads] == [(Role.TIMED, 96), (Role.HELDOUT, 49)]
    assert "halved and made odd by the importer" in task.held_out()[0].note
    assert {i.name: i.init.kind for i in task.inputs}["SF_A"] is InitKind.POSITIVE
    sizes = task.held_out()[0].sizes
    inputs = make_inputs(task, sizes, seed=1)
    out = run_reference(task, dict(inputs), sizes)
    assert out["D"].shape == (49, 256) and torch.isfinite(out["D"]).all()


def test_a_reference_that_calls_cudnn_imports_and_says_where_it_runs(tasks: dict[str, Task]) -> None:
    task = tasks[BACKWARD["name"]]
    assert task.family is Family.ATTENTION_BACKWARD
    assert task.flops == "5 * B * H * 2 * d * (S * S - S * (S - 1) / 2)"  # 2.5 times the forward's
    assert "calls the cuDNN frontend (`cudnn`) on the inputs in their own dtypes" in " ".join(task.statement.split())
    assert "_UPCAST = False" in task.reference  # cuDNN is given bf16, as it needs


def test_a_workload_that_changes_a_const_axis_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, _attention(False), [{"B": 2, "H": 3, "D": 16, "S": 8}, {"B": 2, "H": 4, "D": 16, "S": 16}])
    outcome = import_dataset(tmp_path, tmp_path / "out").outcomes[0]
    assert outcome.refused == "workload u1: H = 4, but the definition fixes it to 3"


def test_a_backward_is_given_the_forward_of_its_own_q_k_v(tasks: dict[str, Task]) -> None:
    """O and L of an attention backward are derived: the causal forward of the drawn Q, K, V, natural-log LSE."""
    task = tasks[TORCH_BACKWARD["name"]]
    assert {i.name for i in task.inputs if i.init.kind is InitKind.DERIVED} == {"O", "L"}
    sizes = {"B": 1, "H": 2, "d": 16, "S": 32}
    inputs = make_inputs(task, sizes, seed=9)
    scores = inputs["Q"].double() @ inputs["K"].double().transpose(-1, -2) / 4
    scores = scores.masked_fill(~torch.ones(32, 32, dtype=torch.bool).tril(), -math.inf)
    assert torch.allclose(inputs["L"].double(), torch.logsumexp(scores, -1), atol=1e-4)
    expected = torch.softmax(scores, -1) @ inputs["V"].double()
    assert torch.allclose(inputs["O"].double(), expected, atol=2e-2)  # O in bf16
    gradients = run_reference(task, dict(inputs), sizes)
    assert all(torch.isfinite(g).all() for g in gradients.values())
