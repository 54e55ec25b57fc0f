"""A FlashInfer-Trace dataset in the Hugging Face layout (built by the test: definitions/, workloads/ JSONL,
blob/ safetensors, solutions/) imports into task files that load, show, prompt and check; their index inputs
keep the trace's layout, FLOPs and bytes count the real work, the reference runs on the CPU and is the
baseline. With PTXBENCH_FLASHINFER_TRACE pointing at a folder of real definitions, those import too."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.tasks.flashinfer import ImportProblem, import_dataset, load_summary
from ptxbench.tasks.flashinfer.importer import SUMMARY_NAME
from ptxbench.tasks.loader import load_task_file
from ptxbench.tasks.model import Family, InitKind, Task
from ptxbench.tasks.reference import make_inputs, run_reference

from .flashinfer_dataset import PAGED_PREFILL, RAGGED_PREFILL, ROUTED_MOE, SMALL_DEFINITIONS, write_dataset

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
runner = CliRunner()
SUPPORTED = ("gemm", "gqa_paged", "gqa_ragged", "mla_paged", "mla_ragged", "moe", "rmsnorm", "gdn", "dsa_paged",
             "mamba_ssu", "rope")
RUN_ON_THE_CPU = ("gdn", "dsa_paged", "mamba_ssu", "rope")  # stored definitions whose references the test runs


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = write_dataset(tmp_path_factory.mktemp("trace"), list(SMALL_DEFINITIONS))
    out = tmp_path_factory.mktemp("tasks")
    import_dataset(root, out)
    return root, out


def _task(out: Path, definition: dict) -> Task:
    summary = load_summary(out / SUMMARY_NAME)
    outcome = next(o for o in summary.outcomes if o.definition == definition["name"])
    assert outcome.refused is None, outcome.refused
    return load_task_file(out / outcome.task_file)


def _blob_lengths(root: Path, definition: dict, workload_note: str) -> dict[str, list[int]]:
    from safetensors.numpy import load_file

    uuid = workload_note.split()[1].rstrip(";")
    trace = next(json.loads(line) for line in (root / "workloads" / definition["op_type"] /
                                               f"{definition['name']}.jsonl").read_text().splitlines()
                 if json.loads(line)["workload"]["uuid"] == uuid)
    blob = next(i["path"] for i in trace["workload"]["inputs"].values() if i["type"] == "safetensors")
    return {k: v.tolist() for k, v in load_file(str(root / blob)).items()}


def test_the_dataset_imports_whole_with_a_summary_that_says_so(imported: tuple[Path, Path]) -> None:
    root, out = imported
    summary = load_summary(out / SUMMARY_NAME)
    assert [o.refused for o in summary.outcomes] == [None] * 3
    assert all(o.workloads == 5 and o.layouts_from_blobs == 5 and o.solutions == 1 for o in summary.outcomes)
    assert {o.task_file for o in summary.outcomes} == {
        "gqa_paged/gqa_paged_prefill_causal_h4_kv2_d16_ps4.toml", "gqa_ragged/gqa_ragged_prefill_causal_h4_kv2_d16.toml",
        "moe/routed_moe_topk2_e4_h32_i16.toml"}
    (out / "broken.json").write_text('{"version": 2, "source": "x", "outcomes": []}')
    with pytest.raises(ImportProblem, match="broken.json: not an import summary: version"):
        load_summary(out / "broken.json")


@pytest.mark.parametrize("definition", SMALL_DEFINITIONS, ids=lambda d: d["name"])
def test_every_task_keeps_the_traces_layout_and_its_reference_runs_on_the_cpu(imported: tuple[Path, Path],
                                                                            definition: dict) -> None:
    root, out = imported
    task = _task(out, definition)
    assert task.baseline.library == "reference"
    smallest = min(task.workloads, key=lambda w: task.bytes_for(w.sizes))
    inputs = make_inputs(task, smallest.sizes, seed=5)
    outputs = run_reference(task, dict(inputs), smallest.sizes)
    assert all(torch.isfinite(o).all() for o in outputs.values())
    blob = _blob_lengths(root, definition, smallest.note)
    for name in ("qo_indptr", "kv_indptr", "kv_last_page_len"):
        if name in blob:  # the trace's own lengths, not a random partition
            assert inputs[name].tolist() == blob[name], name
    if "kv_indices" in blob:  # fresh distinct pages of the cache per trial, as many as the trace's
        pages = inputs["kv_indices"].tolist()
        assert len(pages) == len(blob["kv_indices"]) == len(set(pages)) and max(pages) < smallest.sizes["num_pages"]
    if "topk_ids" in blob:
        ids = inputs["topk_ids"]
        assert all(len(set(row)) == len(row) for row in ids.tolist()) and int(ids.max()) < 4
    from ptxbench.evaluate.baselines.variants import variant_specs  # the baseline: the reference in the inputs' dtypes

    timed = variant_specs(task)["reference"].setup(inputs, smallest.sizes)()
    for name, value in timed.items():
        assert value.dtype == getattr(torch, next(o.dtype.value for o in task.outputs if o.name == name))
        assert torch.allclose(value.float(), outputs[name], rtol=2e-2, atol=2e-2)


def test_flops_and_bytes_count_what_the_layout_computes_and_reads(imported: tuple[Path, Path]) -> None:
    root, out = imported
    task = _task(out, PAGED_PREFILL)
    assert task.family is Family.ATTENTION_FORWARD
    assert {a.name for a in task.axes} >= {"kv_tokens", "attended_pairs"}
    workload = task.timed()
    blob = _blob_lengths(root, PAGED_PREFILL, workload.note)
    pages = [b - a for a, b in zip(blob["kv_indptr"], blob["kv_indptr"][1:])]
    queries = [b - a for a, b in zip(blob["qo_indptr"], blob["qo_indptr"][1:])]
    keys = [(p - 1) * 4 + last for p, last in zip(pages, blob["kv_last_page_len"])]
    pairs = sum(q * (k - q) + q * (q + 1) // 2 for q, k in zip(queries, keys))  # causal: the kept (query, key) pairs
    assert workload.sizes["kv_tokens"] == sum(keys) and workload.sizes["attended_pairs"] == pairs
    assert task.flops_for(workload.sizes) == 2 * 4 * (16 + 16) * pairs
    # the cache is read for the tokens the page tables name, whatever its size
    bigger = {**workload.sizes, "num_pages": workload.sizes["num_pages"] * 1000}
    assert task.bytes_for(bigger) == task.bytes_for(workload.sizes)
    assert task.bytes_for(workload.sizes) == pytest.approx(
        sum(keys) * 2 * 16 * 2 * 2 + sum(queries) * 4 * 16 * 2 * 2 + sum(queries) * 4 * 4
        + (len(pages) + 1) * 4 * 2 + sum(pages) * 4 + len(pages) * 4)
    moe = _task(out, ROUTED_MOE)
    assert moe.family is Family.MOE and moe.flops == ("2 * seq_len * top_k * (gemm1_out_size * hidden_size + "
                                                      "hidden_size * intermediate_size)")
    assert "min(num_experts, seq_len * top_k)" in (moe.bytes or "")
    # tokens may share experts: the physical floor counts only the top_k experts every routing reads
    assert "min(num_experts, top_k)" in (moe.floor_bytes or "")
    sizes = moe.timed().sizes
    assert moe.floor_bytes_for(sizes) < moe.bytes_for(sizes)


def test_a_scalar_written_in_fp32_and_in_fp64_is_one_scalar(imported: tuple[Path, Path]) -> None:
    root, out = imported
    values = {json.loads(line)["workload"]["inputs"]["sm_scale"]["value"]
              for line in (root / "workloads" / "gqa_ragged" / f"{RAGGED_PREFILL['name']}.jsonl").read_text().splitlines()}
    assert len(values) == 2  # the fixture writes both
    assert "sm_scale" not in {i.name for i in _task(out, RAGGED_PREFILL).inputs}


def test_workloads_without_blobs_or_with_missing_ones_get_a_layout_drawn_under_the_constraints(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "random", [PAGED_PREFILL], blobs=False)
    summary = import_dataset(root, tmp_path / "out")
    task = load_task_file(tmp_path / "out" / summary.outcomes[0].task_file)  # type: ignore[operator]
    assert summary.outcomes[0].layouts_from_blobs == 0 and all("drawn at import" in w.note for w in task.workloads)
    for workload in task.workloads:
        inputs = make_inputs(task, workload.sizes, seed=1)
        qo, kv, last = (inputs[n].tolist() for n in ("qo_indptr", "kv_indptr", "kv_last_page_len"))
        assert qo[-1] == workload.sizes["total_q"] and kv[-1] == workload.sizes["num_kv_indices"]
        for s in range(len(last)):  # every sequence has a query and no more queries than keys
            keys = (kv[s + 1] - kv[s] - 1) * 4 + last[s]
            assert 1 <= qo[s + 1] - qo[s] <= keys and 1 <= last[s] <= 4
    with_blobs = write_dataset(tmp_path / "cut", [PAGED_PREFILL])
    shutil.rmtree(with_blobs / "blob")
    summary = import_dataset(with_blobs, tmp_path / "cut-out")
    task = load_task_file(tmp_path / "cut-out" / summary.outcomes[0].task_file)  # type: ignore[operator]
    assert all("its blobs missing" in w.note for w in task.workloads)
    assert {i.name for i in task.inputs if i.init.kind is InitKind.DERIVED} == {
        "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"}


def test_a_blob_that_contradicts_the_axes_is_refused_in_one_line(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d", [RAGGED_PREFILL], count=3)
    jsonl = root / "workloads" / "gqa_ragged" / f"{RAGGED_PREFILL['name']}.jsonl"
    traces = [json.loads(line) for line in jsonl.read_text().splitlines()]
    traces[1]["workload"]["axes"]["total_q"] += 1
    jsonl.write_text("".join(json.dumps(t) + "\n" for t in traces))
    outcome = import_dataset(root, tmp_path / "o").outcomes[0]
    assert outcome.refused is not None and "\n" not in outcome.refused
    assert f"workload {traces[1]['workload']['uuid']}: qo_indptr ends at" in outcome.refused


def test_the_cli_imports_a_dataset_and_every_task_shows_prompts_and_checks(imported: tuple[Path, Path],
                                                                           tmp_path: Path) -> None:
    root, _ = imported
    out = tmp_path / "cli"
    result = runner.invoke(app, ["tasks", "import", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "gqa_paged" in result.output and "all" in result.output and (out / SUMMARY_NAME).is_file()
    refused = runner.invoke(app, ["tasks", "import", str(root)])
    assert refused.exit_code == 2 and "needs --out FOLDER" in refused.output
    from ptxbench.contract.signature import prototype
    from ptxbench.toolchain.discover import locate

    for task_file in sorted(out.rglob("*.toml")):
        assert runner.invoke(app, ["tasks", "show", str(task_file)]).exit_code == 0
        prompt = runner.invoke(app, ["prompt", str(task_file)])
        assert prompt.exit_code == 0 and load_task_file(task_file).id in prompt.output
        if locate("nvcc").path is None:
            continue
        task = load_task_file(task_file)
        candidate = tmp_path / f"{task.id}.cu"  # a candidate that only satisfies the contract: check builds it
        candidate.write_text(prototype(task).removesuffix(";") + " { return 0; }\n")
        checked = runner.invoke(app, ["check", str(candidate), "--task", str(task_file), "--json"])
        assert checked.exit_code in (0, 1), checked.output
        assert '"ok": true' in checked.output.replace('"ok":true', '"ok": true'), checked.output


STORED = os.environ.get("PTXBENCH_FLASHINFER_TRACE")


@pytest.mark.skipif(not STORED, reason="PTXBENCH_FLASHINFER_TRACE names no folder of FlashInfer-Trace definitions")
def test_the_stored_definitions_with_synthetic_workloads_import(tmp_path: Path) -> None:
    """The definitions of a real FlashInfer-Trace folder (its definitions/ only), with workloads this test
    synthesises in the dataset's layout: at least 80 % of those of the supported op types import, and the
    references of the op types in RUN_ON_THE_CPU run there at their smallest workloads, to finite outputs."""
    definitions = [json.loads(p.read_text()) for p in sorted(Path(STORED, "definitions").rglob("*.json"))]  # type: ignore[arg-type]
    summary = import_dataset(write_dataset(tmp_path / "d", definitions), tmp_path / "out")
    counts = summary.by_op_type()
    done = sum(counts[op][0] for op in SUPPORTED if op in counts)
    total = sum(counts[op][1] for op in SUPPORTED if op in counts)
    print(f"\nimported {len(summary.imported)} of {len(summary.outcomes)}; supported op types {done} of {total}")
    for reason, count in summary.reasons():
        print(f"  {count:3d}  {reason[:160]}")
    assert total and done >= 0.8 * total
    for outcome in summary.imported:
        if outcome.op_type in RUN_ON_THE_CPU:
            task = load_task_file(tmp_path / "out" / outcome.task_file)  # type: ignore[operator]
            smallest = min(task.workloads, key=lambda w: task.bytes_for(w.sizes))
            outputs = run_reference(task, dict(make_inputs(task, smallest.sizes, seed=5)), smallest.sizes)
            assert all(torch.isfinite(o).all() for o in outputs.values()), task.id


def test_a_last_page_length_declared_as_long_as_the_indptrs_is_padded(tmp_path: Path) -> None:
    """Some FlashInfer-Trace prefill definitions declare kv_last_page_len as [len_indptr]; their run() reads one
    entry per sequence, so the derived tensor has the declared length with a zero after the sequences'."""
    definition = json.loads(json.dumps(PAGED_PREFILL))
    definition["name"] = "gqa_paged_prefill_causal_h4_kv2_d16_ps4_long"
    definition["inputs"]["kv_last_page_len"]["shape"] = ["len_indptr"]
    summary = import_dataset(write_dataset(tmp_path / "d", [definition]), tmp_path / "out")
    task = load_task_file(tmp_path / "out" / summary.outcomes[0].task_file)  # type: ignore[operator]
    workload = task.workloads[0]
    inputs = make_inputs(task, workload.sizes, seed=4)
    assert len(inputs["kv_last_page_len"]) == workload.sizes["len_indptr"] and inputs["kv_last_page_len"][-1] == 0
    assert torch.isfinite(run_reference(task, dict(inputs), workload.sizes)["output"]).all()


def test_an_unreadable_workload_file_is_named_in_the_summary_and_by_the_cli(tmp_path: Path) -> None:
    root = write_dataset(tmp_path / "d", [RAGGED_PREFILL], count=3)
    (root / "workloads" / "gqa_ragged" / "broken.jsonl").write_text('{"definition": "x", "workload": {"uuid": "u"}}\n')
    result = runner.invoke(app, ["tasks", "import", str(root), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "broken.jsonl:1: workload.axes: Field required" in result.output
    summary = load_summary(tmp_path / "out" / SUMMARY_NAME)
    assert len(summary.imported) == 1 and len(summary.unreadable) == 1
