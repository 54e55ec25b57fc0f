"""The import records the FlashInfer call a definition's ``fi_api`` tag names in its task (``baseline.flashinfer``)
with the arguments derived from the definition, only where it can be called on the definition's inputs, and says
why not in the import summary otherwise."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ptxbench.errors import TaskError
from ptxbench.tasks.flashinfer import fi_api, import_dataset
from ptxbench.tasks.flashinfer.layouts import plan_indices
from ptxbench.tasks.flashinfer.schema import Definition
from ptxbench.tasks.loader import load_task_file, parse_task
from ptxbench.tasks.model import REFERENCE_BASELINE_CALL

from . import fi_api_definitions as defs
from .flashinfer_dataset import RAGGED_PREFILL, write_dataset

SCALE = {"sm_scale": 0.25}


def _found(definition: dict[str, Any], scalars: dict[str, Any] | None = None) -> fi_api.ApiBaseline:
    parsed = Definition.model_validate(definition)
    return fi_api.api_baseline(parsed, SCALE if scalars is None else scalars, plan_indices(parsed))


def test_the_task_file_records_the_call_for_a_tagged_definition_and_none_without(tmp_path: Path) -> None:
    task, text, _ = defs.imported(defs.RMSNORM, tmp_path / "tagged")
    assert task.baseline.library == "reference" and task.baseline.flashinfer is not None
    assert task.baseline.flashinfer.api == defs.RMSNORM_API and task.baseline.flashinfer.arguments == {"eps": 1e-6}
    assert 'api = "flashinfer.norm.rmsnorm"' in text and task.baseline.call == fi_api.baseline_call(task.baseline.flashinfer)
    (tmp_path / "t.toml").write_text(text)
    loaded = load_task_file(tmp_path / "t.toml")
    assert loaded == task and loaded.content_hash == task.content_hash
    untagged, text, _ = defs.imported(RAGGED_PREFILL, tmp_path / "untagged")
    assert untagged.baseline.flashinfer is None and untagged.baseline.call == REFERENCE_BASELINE_CALL
    assert "flashinfer = " not in text


def test_the_recorded_call_is_part_of_the_hash_and_belongs_to_a_reference_baseline(tmp_path: Path) -> None:
    task, text, _ = defs.imported(defs.FUSED_ADD_RMSNORM, tmp_path)
    other = parse_task(text.replace("eps = 1e-05", "eps = 1e-06"), "t.toml")
    assert other.baseline.flashinfer.arguments["eps"] == 1e-6 and other.content_hash != task.content_hash
    with pytest.raises(TaskError, match="library reference"):
        parse_task(text.replace('library = "reference"', 'library = "torch"'), "t.toml")
    with pytest.raises(TaskError, match="flashinfer.api"):
        parse_task(text.replace('api = "flashinfer.norm.fused_add_rmsnorm"', 'api = "torch.rms_norm"'), "t.toml")


def test_the_summary_says_which_api_and_why_a_task_has_no_flashinfer_baseline(tmp_path: Path) -> None:
    definitions = [defs.DECODE, RAGGED_PREFILL, defs.UNSUPPORTED, defs.MISFIT]
    summary = import_dataset(write_dataset(tmp_path / "d", definitions, count=3), tmp_path / "out")
    outcomes = {o.definition: o for o in summary.outcomes}
    assert all(o.refused is None for o in outcomes.values())
    assert outcomes[defs.DECODE["name"]].fi_api == defs.DECODE_API and not outcomes[defs.DECODE["name"]].fi_api_refused
    assert outcomes[RAGGED_PREFILL["name"]].fi_api is None and outcomes[RAGGED_PREFILL["name"]].fi_api_refused is None
    unsupported = outcomes[defs.UNSUPPORTED["name"]].fi_api_refused
    assert unsupported and unsupported.startswith("PTXBench does not time flashinfer.fused_moe.trtllm_fp8_block_scale_moe")
    misfit = outcomes[defs.MISFIT["name"]].fi_api_refused
    assert misfit == f"{defs.FUSED_API} cannot be called on the definition's inputs: it needs inputs residual"
    assert dict(summary.flashinfer_refusals()) == {unsupported: 1, misfit: 1}
    task = load_task_file(tmp_path / "out" / outcomes[defs.MISFIT["name"]].task_file)
    assert task.baseline.flashinfer is None and task.baseline.call == REFERENCE_BASELINE_CALL


@pytest.mark.parametrize(("name", "expected"), [
    ("decode", {"sm_scale": 0.25, "lse_base": "log2", "kv_layout": "NHD", "pos_encoding_mode": "NONE"}),
    ("paged_prefill", {"sm_scale": 0.25, "lse_base": "log2", "causal": True, "kv_layout": "NHD",
                       "pos_encoding_mode": "NONE"}),
    ("mla_decode", {"sm_scale": 0.25, "lse_base": "log2", "causal": False}),
    ("mla_prefill", {"sm_scale": 0.25, "lse_base": "log2", "causal": True}),
])
def test_the_arguments_are_derived_from_the_definition(name: str, expected: dict[str, Any]) -> None:
    found = _found(defs.SUPPORTED[name])
    assert found.refused is None and found.call is not None and found.call.arguments == expected


def test_a_prefill_not_named_causal_is_planned_without_a_mask() -> None:
    definition = {**defs.RAGGED, "name": "gqa_ragged_prefill_h4_kv2_d16"}
    assert _found(definition).call.arguments["causal"] is False


def test_the_lse_base_comes_from_the_description_and_the_reference_which_must_agree() -> None:
    natural = copy.deepcopy(defs.DECODE)
    natural["reference"] = natural["reference"].replace("torch.logsumexp(logits, -1) / math.log(2.0)",
                                                        "torch.logsumexp(logits, -1)")
    assert _found(natural).call.arguments["lse_base"] == "ln"
    natural["outputs"]["lse"]["description"] = "The 2-based log-sum-exp of attention logits."
    assert "lse is described as log2 but its reference computes ln" in _found(natural).refused


def test_pages_not_laid_out_nhd_are_refused() -> None:
    hnd = copy.deepcopy(defs.DECODE)
    for cache in ("k_cache", "v_cache"):
        hnd["inputs"][cache]["shape"] = ["num_pages", "num_kv_heads", "page_size", "head_dim"]
    assert "k_cache and v_cache are not NHD pages" in _found(hnd).refused


def test_what_the_wrapper_would_need_an_argument_for_is_refused_and_a_comment_is_not_read() -> None:
    rotary = copy.deepcopy(defs.PREFILL)
    rotary["reference"] = rotary["reference"].replace("k = k.float()", "k = apply_rope(k).float()")
    assert "a rotary embedding (pos_encoding_mode) (apply_rope)" in _found(rotary).refused
    commented = copy.deepcopy(defs.PREFILL)
    commented["reference"] = commented["reference"].replace("delta = ", "# keys before the query window\n        delta = ")
    assert _found(commented).refused is None


def test_scalars_eps_and_aliases() -> None:
    assert "sm_scale is None" in _found(defs.DECODE, scalars={}).refused
    no_eps = {**defs.RMSNORM, "reference": defs.RMSNORM["reference"].replace("EPS = 1e-6", "EPS = eps_of()")}
    assert "does not state one epsilon" in _found(no_eps).refused
    alias = defs.tagged({**defs.PREFILL, "tags": []}, "flashinfer.BatchPrefillWithPagedKVCacheWrapper")
    found = _found(alias)
    assert found.tag == "flashinfer.BatchPrefillWithPagedKVCacheWrapper" and found.call.api == defs.PAGED_API
    two = defs.tagged(defs.RMSNORM, defs.FUSED_API)
    assert "names 2 FlashInfer APIs" in _found(two).refused
    assert _found({**defs.RMSNORM, "tags": []}) == fi_api.ApiBaseline(None, None, None)
