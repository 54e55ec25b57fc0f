"""On a GPU with FlashInfer installed: the ``flashinfer`` variant of an imported task whose definition names a
FlashInfer API (``fi_api``) computes what the task's own reference computes, through the real library.

The CPU suite checks the mapping against a stand-in of FlashInfer's contracts (tests/evaluate/fake_flashinfer.py);
only the library itself can say whether the stand-in is right: its page-table conventions, its base-2 LSE, its
bottom-right causal mask, the arguments of ``plan()``. Each API the import maps is imported from a small definition
(tests/tasks/fi_api_definitions.py) at the head sizes FlashInfer builds kernels for (128-wide GQA heads, DeepSeek's
MLA with a 512-wide latent and a 64-wide rope part, its 192/128 ragged prefill), and the variant's output on every
workload of the task is held to the task's tolerance against the reference, computed on the CPU.

Run with ``pytest -m gpu`` on an NVIDIA GPU with flashinfer importable (scripts/fetch_device_wheels.sh
--flashinfer); skipped elsewhere. The first run JIT-compiles each kernel module (about a minute each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..tasks import fi_api_definitions as defs

pytestmark = pytest.mark.gpu


def _at(definition: dict[str, Any], **values: int) -> dict[str, Any]:
    """The definition with some of its constant axes set to other values (and its name saying so)."""
    axes = dict(definition["axes"])
    for name, value in values.items():
        assert axes[name]["type"] == "const", name
        axes[name] = {"type": "const", "value": value}
    return {**definition, "axes": axes, "name": definition["name"] + "_at_" + "_".join(map(str, values.values()))}


_GQA = {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}
_MLA = {"num_qo_heads": 16, "head_dim_ckv": 512, "head_dim_kpe": 64}
AT_SERVING_SIZES = {
    "rmsnorm": _at(defs.RMSNORM, hidden_size=4096),
    "fused_add_rmsnorm": _at(defs.FUSED_ADD_RMSNORM, hidden_size=4096),
    "decode": defs.DECODE,  # already 8 query heads, 2 KV heads, head_dim 128, pages of 16
    "decode_ps1": _at(defs.DECODE_PS1, **_GQA),
    "paged_prefill": _at(defs.PREFILL, **_GQA, page_size=16),
    "ragged_prefill": _at(defs.RAGGED, **_GQA),
    "mla_ragged": _at(defs.MLA_RAGGED, num_qo_heads=16, num_kv_heads=16, qk_dim=192, vo_dim=128),
    "mla_decode": _at(defs.MLA_DECODE, **_MLA, page_size=64),
    "mla_prefill": _at(defs.MLA_PREFILL, **_MLA),
}


def test_every_mapped_api_is_checked_here() -> None:
    assert set(AT_SERVING_SIZES) == set(defs.SUPPORTED)


@pytest.mark.parametrize("name", sorted(AT_SERVING_SIZES))
def test_the_flashinfer_variant_matches_the_tasks_reference(name: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    pytest.importorskip("flashinfer", reason="FlashInfer is not installed (scripts/fetch_device_wheels.sh --flashinfer)")
    from ptxbench.evaluate.baselines.variants import variant_specs
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = defs.imported(AT_SERVING_SIZES[name], tmp_path).task
    variant = variant_specs(task)["flashinfer"]
    for index, workload in enumerate(task.workloads):
        sizes = dict(workload.sizes)
        inputs = make_inputs(task, sizes, seed=11 + index, device="cuda")
        drawn = {n: t.clone() for n, t in inputs.items()}
        call = variant.setup(inputs, sizes)
        outputs = {n: t.float().cpu() for n, t in call().items()}  # .cpu() waits for the call
        expected = run_reference(task, {n: t.cpu() for n, t in inputs.items()}, sizes)
        for verdict in compare_outputs(task, outputs, expected):
            assert verdict.passed, (name, workload.name, sizes, verdict)
        assert all(torch.equal(drawn[n], t) for n, t in inputs.items()), "the task's inputs stay as drawn"
        print(f"FLASHINFER {name} {workload.name} {sizes}: matches the reference")
