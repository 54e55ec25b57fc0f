"""The CPU half of tests/gpu/test_imported_tasks_gpu.py: the fixture definitions it evaluates (a GEMM, a paged
GQA decode, an fp8 block-scaled MoE) import, their references compute what the definitions say (against an
independent float64 computation at the smallest workload), each task's prompt states the entry point its plain
kernel (tests/gpu/imported/<task id>.cu) defines, and each kernel builds for sm_90a against its contract."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.contract.signature import prototype
from ptxbench.errors import TaskError
from ptxbench.tasks.loader import load_task_file
from ptxbench.tasks.model import Task
from ptxbench.tasks.reference import make_inputs, run_reference

from .flashinfer_dataset import EVAL_DEFINITIONS, FP8_MOE, GEMM_F16, PAGED_DECODE, write_dataset

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
KERNELS = Path(__file__).parents[1] / "gpu" / "imported"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Task]]:
    from ptxbench.tasks.flashinfer import import_dataset

    root = write_dataset(tmp_path_factory.mktemp("trace"), list(EVAL_DEFINITIONS))
    out = tmp_path_factory.mktemp("tasks")
    summary = import_dataset(root, out)
    assert [o.refused for o in summary.outcomes] == [None] * len(EVAL_DEFINITIONS)
    return {o.definition: (out / o.task_file, load_task_file(out / o.task_file))  # type: ignore[operator]
            for o in summary.outcomes}


def _smallest(task: Task) -> tuple[dict[str, int], dict, dict]:
    sizes = min((w.sizes for w in task.workloads), key=task.bytes_for)
    inputs = make_inputs(task, sizes, seed=3)
    return sizes, inputs, run_reference(task, dict(inputs), sizes)


def test_the_gemm_reference_is_a_times_b_transposed(tasks: dict[str, tuple[Path, Task]]) -> None:
    _, task = tasks[GEMM_F16["name"]]
    _, inputs, out = _smallest(task)
    expected = inputs["A"].double() @ inputs["B"].double().T
    assert torch.allclose(out["C"].double(), expected, rtol=1e-4, atol=1e-3)


def test_the_decode_reference_attends_to_each_sequences_pages_with_a_base_2_lse(
        tasks: dict[str, tuple[Path, Task]]) -> None:
    _, task = tasks[PAGED_DECODE["name"]]
    sizes, inputs, out = _smallest(task)
    indptr, indices, last = (inputs[n].tolist() for n in ("kv_indptr", "kv_indices", "kv_last_page_len"))
    q, k, v = (inputs[n].double() for n in ("q", "k_cache", "v_cache"))
    for b in range(sizes["batch_size"]):
        pages = indices[indptr[b]:indptr[b + 1]]
        tokens = [(p, s) for i, p in enumerate(pages) for s in range(16 if i < len(pages) - 1 else last[b])]
        for h in range(8):
            scores = torch.tensor([float(q[b, h] @ k[p, s, h // 4]) / math.sqrt(128) for p, s in tokens])
            weights = torch.softmax(scores, 0)
            expected = sum(float(wt) * v[p, s, h // 4] for wt, (p, s) in zip(weights, tokens))
            assert torch.allclose(out["output"][b, h].double(), expected, rtol=1e-2, atol=1e-2)  # bf16 output
            assert out["lse"][b, h].item() == pytest.approx(torch.logsumexp(scores, 0).item() / math.log(2), rel=1e-5)


def test_the_moe_reference_sums_each_tokens_experts_swiglu_with_block_scales(
        tasks: dict[str, tuple[Path, Task]]) -> None:
    _, task = tasks[FP8_MOE["name"]]
    sizes, inputs, out = _smallest(task)
    f64 = {n: t.float().double() if t.is_floating_point() else t for n, t in inputs.items()}
    ids, weights, x8, xs = (f64[n] for n in ("topk_ids", "topk_weights", "hidden_states", "hidden_states_scale"))

    def up(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:  # each element times its 128x128 block's scale
        return w * s.repeat_interleave(128, 0).repeat_interleave(128, 1)

    expected = torch.zeros(sizes["seq_len"], 256, dtype=torch.float64)
    for t in range(sizes["seq_len"]):
        x = x8[t] * xs[:, t].repeat_interleave(128)
        for slot in range(2):
            e = int(ids[t, slot])
            h = up(f64["gemm1_weights"][e], f64["gemm1_weights_scale"][e]) @ x
            act = h[:128] * (h[128:] * torch.sigmoid(h[128:]))  # up * silu(gate)
            expected[t] += weights[t, slot] * (up(f64["gemm2_weights"][e], f64["gemm2_weights_scale"][e]) @ act)
    assert len({tuple(row) for row in ids.tolist()}) > 1  # tokens are routed to different experts
    assert torch.allclose(out["output"].double(), expected, rtol=1e-2, atol=1e-2 * float(expected.abs().max()))


@pytest.mark.parametrize("definition", EVAL_DEFINITIONS, ids=lambda d: d["name"])
def test_each_plain_kernel_defines_its_prompts_entry_point_and_builds_against_the_contract(
        tasks: dict[str, tuple[Path, Task]], definition: dict) -> None:
    from ptxbench.check import build_request
    from ptxbench.toolchain.compile import build
    from ptxbench.toolchain.discover import locate

    task_file, task = tasks[definition["name"]]
    prompt = CliRunner().invoke(app, ["prompt", str(task_file)])
    assert prompt.exit_code == 0, prompt.output
    entry = prototype(task)
    assert entry.removesuffix(";") in prompt.output  # the contract the kernel was written to
    source = (KERNELS / f"{task.id}.cu").read_text()
    assert f'extern "C" int {task.id}(' in source
    if locate("nvcc").path is None:
        pytest.skip("no nvcc: the build is not checked")
    result = build(build_request(source, Arch.SM_90A, task))
    assert result.ok, result.log


def test_an_imported_tasks_eval_run_is_regraded_given_its_task_file(tasks: dict[str, tuple[Path, Task]],
                                                                   tmp_path: Path) -> None:
    """`eval RUN --regrade` finds a bundled task by the id its items record; an imported one needs its file."""
    task_file, task = tasks[GEMM_F16["name"]]
    run = tmp_path / "run"
    runner = CliRunner()
    done = runner.invoke(app, ["eval", str(KERNELS / f"{task.id}.cu"), "--task", str(task_file), "--out", str(run)])
    assert done.exit_code == 0, done.output
    refused = runner.invoke(app, ["eval", str(run), "--regrade"])  # the CLI's entry point makes it one line, rc 2
    assert isinstance(refused.exception, TaskError) and "give it with --task FILE.toml" in str(refused.exception)
    regraded = runner.invoke(app, ["eval", str(run), "--regrade", "--task", str(task_file)])
    assert regraded.exit_code == 0, regraded.output
