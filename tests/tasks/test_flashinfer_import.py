"""FlashInfer-Bench definitions imported as tasks: they load, their references run on the CPU at small
sizes and agree with an independent float64 computation, and what cannot map is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import pytest

from ptxbench.errors import TaskError
from ptxbench.tasks.flashinfer import import_definition
from ptxbench.tasks.loader import load_task_file
from ptxbench.tasks.model import Family, InitKind, Role, Task
from ptxbench.tasks.reference import make_inputs, run_reference

from ..conftest import FIXTURES

torch = pytest.importorskip("torch")

FI = FIXTURES / "flashinfer_bench"
GQA, RMS, GEMM = "gqa_paged_decode_h32_kv8_d128_ps1", "rmsnorm_h4096", "gemm_n6144_k4096"


def _import(name: str, flops: str | None = None) -> Task:
    return import_definition(FI / f"{name}.json", [FI / f"{name}.jsonl"], flops)[0]


DECODE = Family.ATTENTION_DECODE  # a decode definition (tag stage:decode, or "decode" in its name)


@pytest.mark.parametrize(("name", "family"), [(GQA, DECODE), (RMS, Family.MEMORY_BOUND), (GEMM, Family.GEMM)])
def test_a_definition_becomes_a_task_that_loads_from_its_file(name: str, family: Family, tmp_path: Path) -> None:
    task, text, _ = import_definition(FI / f"{name}.json", [FI / f"{name}.jsonl"])
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    loaded = load_task_file(path)
    assert loaded == task and loaded.content_hash == task.content_hash
    assert task.id == name and task.family is family
    traces = [json.loads(line) for line in (FI / f"{name}.jsonl").read_text().splitlines()]
    assert len(task.workloads) == len(traces)
    assert [w.role for w in task.workloads].count(Role.TIMED) == 1 and task.held_out()
    definition = json.loads((FI / f"{name}.json").read_text())
    consts = {a: v["value"] for a, v in definition["axes"].items() if v["type"] == "const"}
    assert task.workloads[0].role is Role.TIMED  # first, as in the bundled tasks: results read the first timing
    for workload, trace in zip(sorted(task.workloads, key=lambda w: w.name), traces):  # names: wNN, the trace's index
        assert workload.sizes == {**consts, **trace["workload"]["axes"]}
    timed = task.timed()
    assert all(task.flops_for(timed.sizes) >= task.flops_for(w.sizes) for w in task.workloads)
    # decode streams its KV cache (as the suite's decode_gqa_paged): a copy byte share, as memory-bound ops state
    requirements = task.requirements_for(next(iter(task.requirements)))
    bandwidth_bound = family in (Family.MEMORY_BOUND, Family.ATTENTION_DECODE)
    assert [r for r in requirements if (r.min_byte_share if bandwidth_bound else r.min_flop_share)]
    assert not [r for r in requirements if (r.min_flop_share if bandwidth_bound else r.min_byte_share)]


def test_gemm_flops_come_from_its_shapes_and_attention_from_its_op_type() -> None:
    assert _import(GEMM).flops == "2 * M * N * K"
    assert _import(GQA).flops == "2 * num_qo_heads * (head_dim + head_dim) * num_kv_indices * page_size"
    assert _import(RMS).flops == "0"
    assert _import(RMS, flops="3 * batch_size * hidden_size").flops == "3 * batch_size * hidden_size"


def _outputs(task: Task, sizes: dict[str, int]) -> tuple[Any, dict[str, Any]]:
    inputs = make_inputs(task, sizes, seed=7)
    return inputs, run_reference(task, dict(inputs), sizes)


def test_gemm_reference_matches_float64() -> None:
    task = _import(GEMM)
    inputs, out = _outputs(task, {"M": 5, "N": 6144, "K": 4096})
    expected = inputs["A"].double() @ inputs["B"].double().T
    assert out["C"].dtype == torch.float32
    assert torch.allclose(out["C"].double(), expected, rtol=1e-4, atol=1e-3)


def test_rmsnorm_reference_matches_float64_with_its_fixed_eps() -> None:
    task = _import(RMS)
    assert [i.name for i in task.inputs] == ["hidden_states", "weight"]  # eps is fixed, not an input
    inputs, out = _outputs(task, {"batch_size": 3, "hidden_size": 4096})
    x, w = inputs["hidden_states"].double(), inputs["weight"].double()
    for row in range(3):
        rms = math.sqrt(sum(v * v for v in x[row].tolist()) / 4096 + 1e-5)
        assert torch.allclose(out["output"][row].double(), x[row] / rms * w, rtol=1e-5, atol=1e-5)


def test_paged_decode_derives_a_valid_page_table_and_its_reference_matches_float64() -> None:
    task = _import(GQA)
    assert {i.name for i in task.inputs if i.init.kind is InitKind.DERIVED} == {"kv_indptr", "kv_indices"}
    sizes = min((w.sizes for w in task.workloads), key=lambda s: s["num_pages"])  # the layouts are per workload
    inputs, out = _outputs(task, sizes)
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"].tolist()
    used, sequences = sizes["num_kv_indices"], sizes["batch_size"]
    assert indptr[0] == 0 and indptr[-1] == used and len(indptr) == sequences + 1
    assert all(b > a for a, b in zip(indptr, indptr[1:]))
    assert len(set(indices)) == used and all(0 <= i < sizes["num_pages"] for i in indices)
    q, k, v = (inputs[n].double() for n in ("q", "k_cache", "v_cache"))
    for seq in range(sequences):
        pages = indices[indptr[seq]:indptr[seq + 1]]
        for head in range(0, 32, 7):
            kv_head = head // 4
            scores = [float(q[seq, head] @ k[p, 0, kv_head]) / math.sqrt(128) for p in pages]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            expected = sum(wt * v[p, 0, kv_head] for wt, p in zip(weights, pages)) / total
            assert torch.allclose(out["output"][seq, head].double(), expected, rtol=1e-2, atol=1e-2)  # bf16 output
            assert out["lse"][seq, head].item() == pytest.approx((top + math.log(total)) / math.log(2), rel=1e-5)
    again, _ = _outputs(task, sizes)
    other = make_inputs(task, sizes, seed=8)
    assert again["kv_indices"].tolist() == indices  # derived from the drawn data: reproducible per seed ...
    assert other["kv_indices"].tolist() != indices  # ... and different between trials
    assert other["kv_indptr"].tolist() == indptr  # the layout (each sequence's pages) is the workload's own
    with pytest.raises(ValueError, match="no layout of the index inputs is stored for the sizes"):
        make_inputs(task, {**sizes, "num_pages": sizes["num_pages"] + 1}, seed=7)


# ------------------------------------------------------------------------------------ refusals


def _edit(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = json.loads((FI / f"{name}.json").read_text())
    change(data)
    return data


def _traces(name: str, change: Callable[[list[dict[str, Any]]], None] | None = None) -> str:
    traces = [json.loads(line) for line in (FI / f"{name}.jsonl").read_text().splitlines()]
    if change:
        change(traces)
    return "\n".join(json.dumps(t) for t in traces) + "\n"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        for key in parents:
            data = data[key]
        data[last] = value
    return change


CASES: list[tuple[str, Any, Any, str]] = [
    (GEMM, _set("inputs/A/dtype", "float4_e2m1"), None, "input A has dtype float4_e2m1, which a PTXBench task cannot use"),
    (GEMM, _set("outputs/C/dtype", "int64"), None, "output C is int64: outputs are compared within a floating-point "
     "tolerance, so integer outputs"),
    (GEMM, _set("outputs/C/dtype", "int16"), None, "output C has dtype int16, which a PTXBench task cannot use"),
    (GEMM, _set("reference", "import torch\n\ndef forward(A, B):\n    return A @ B.T\n"), None,
     "reference does not define a top-level function `run`"),
    (GEMM, _set("reference", "def run(A, B:\n"), None, "reference is not valid Python"),
    (GEMM, _set("reference", "def run(B, A):\n    return A @ B.T\n"), None,
     "the definition is inconsistent: its reference `run` takes (B, A) but it lists its inputs as (A, B)"),
    (GEMM, _set("op_type", "sampling"), None, "op_type 'sampling' has no PTXBench family"),
    (GEMM, None, lambda t: t[2]["workload"]["axes"].pop("M"), "no value for axis M"),
    (GEMM, None, lambda t: t[1]["workload"]["axes"].update(Q=3), "Q is not a var axis of gemm_n6144_k4096"),
    (GEMM, None, lambda t: t.__delitem__(slice(1, None)), None),  # one workload: a held-out companion is added
    (GQA, None, lambda t: t.__delitem__(slice(1, None)), "1 distinct workload(s): a task needs one timed and at least one held out"),
    (RMS, None, lambda t: t[3]["workload"]["inputs"].update(eps={"type": "scalar", "value": 1e-6}),
     "scalar input eps differs across workloads"),
    (RMS, None, lambda t: t[0]["workload"]["inputs"].pop("eps"), "scalar input eps has no value in every workload"),
    (RMS, _set("op_type", "layernorm"), None, "op_type 'layernorm' has no PTXBench family"),
    (GQA, _set("inputs/kv_indptr/dtype", "int16"), None, "input kv_indptr has dtype int16"),
    (GQA, _set("inputs/kv_indptr/dtype", "int64"), None, None),  # int64 offsets are derived as int32 ones are
    (GQA, None, lambda t: t[0]["workload"]["axes"].update(len_indptr=5),
     "breaks the definition's constraint 'len_indptr == batch_size + 1'"),
    (GQA, _set("tags", []), None, None),  # a decode kernel named so, without the stage tag, still imports
    (GQA, _set("axes/num_kv_indices", {"type": "fixed"}), None, "axes.num_kv_indices: Input tag 'fixed'"),
    (GQA, _set("name", "9th_kernel"), None, "definition name '9th_kernel' cannot become a task id"),
]


@pytest.mark.parametrize(("name", "definition_change", "traces_change", "message"), CASES)
def test_what_cannot_map_is_refused_in_one_line(name: str, definition_change: Any, traces_change: Any,
                                                message: str | None, tmp_path: Path) -> None:
    definition = _edit(name, definition_change or (lambda d: None))
    (tmp_path / "d.json").write_text(json.dumps(definition))
    traces = _traces(name, traces_change).replace(f'"definition": "{name}"', f'"definition": "{definition["name"]}"')
    (tmp_path / "w.jsonl").write_text(traces)
    if message is None:
        import_definition(tmp_path / "d.json", [tmp_path / "w.jsonl"])
        return
    with pytest.raises(TaskError) as error:
        import_definition(tmp_path / "d.json", [tmp_path / "w.jsonl"])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_integer_input_without_a_rule_and_files_that_are_not_definitions_are_refused(tmp_path: Path) -> None:
    definition = _edit(GQA, lambda d: d["inputs"].update(seq_lens={"shape": ["batch_size"], "dtype": "int32"}))
    definition["reference"] = definition["reference"].replace("sm_scale):", "sm_scale, seq_lens):")
    (tmp_path / "d.json").write_text(json.dumps(definition))
    with pytest.raises(TaskError, match="input seq_lens is an integer tensor with no rule to draw valid values"):
        import_definition(tmp_path / "d.json", [FI / f"{GQA}.jsonl"])
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TaskError, match=r"bad.json: not JSON"):
        import_definition(tmp_path / "bad.json", [])
    (tmp_path / "partial.json").write_text(json.dumps({"name": "x", "op_type": "gemm"}))
    with pytest.raises(TaskError, match=r"partial.json: axes: Field required"):
        import_definition(tmp_path / "partial.json", [])
    (tmp_path / "w.jsonl").write_text('{"definition": "gemm_n6144_k4096", "workload": {"uuid": "u"}}\n')
    with pytest.raises(TaskError, match=r"w.jsonl:1: workload.axes: Field required"):
        import_definition(FI / f"{GEMM}.json", [tmp_path / "w.jsonl"])
    with pytest.raises(TaskError, match="comes with no workloads"):
        import_definition(FI / f"{GEMM}.json", [FI / f"{RMS}.jsonl"])  # traces of another definition only
