"""Task variants: declared, validated as a partition of the workloads, and held out like held-out shapes."""

from __future__ import annotations

from importlib import resources

import pytest

from ptxbench.errors import TaskError
from ptxbench.tasks import formula
from ptxbench.tasks.loader import bundled_suite, get_task, parse_task
from ptxbench.tasks.model import Role
from ptxbench.tasks.visibility import HIDDEN_SIZES, HIDDEN_VARIANT, HIDDEN_WORKLOAD, hidden_mentions, redact

ATTENTION = resources.files("ptxbench.tasks").joinpath("suite", "attention_fwd.toml").read_text()
GEMM = resources.files("ptxbench.tasks").joinpath("suite", "gemm_bf16.toml").read_text()


def test_conditions_compare_and_combine() -> None:
    assert formula.holds("M % 8 != 0", {"M": 333}) and not formula.holds("M % 8 != 0", {"M": 1000})
    assert formula.holds("D == 64 and causal == 1", {"D": 64, "causal": 1})
    assert not formula.holds("D == 64 and not causal", {"D": 64, "causal": 1})
    assert formula.holds("1 <= M < 64 or M == 4096", {"M": 4096}) and not formula.holds("1 <= M < 64", {"M": 64})
    with pytest.raises(formula.FormulaError, match="not allowed"):
        formula.holds("M if M else 1", {"M": 1})


def test_suite_variants_partition_the_workloads_and_hold_out_only_held_out_workloads() -> None:
    for task in bundled_suite():
        assert task.held_out_variants(), f"{task.id} holds out no variant"
        for workload in task.workloads:
            owners = [v for v in task.variants if v.matches(workload.sizes)]
            assert len(owners) == 1 and task.variant_of(workload) is owners[0]
            if owners[0].heldout:
                assert workload.role is Role.HELDOUT
        assert task.variant_of(task.timed()) is not None and not task.variant_of(task.timed()).heldout
    assert get_task("gemm_bf16").variant_of("single-token").name == "m-ragged"
    assert get_task("gemm_bf16").variant_of("qwen-odd-tokens").name == "m-aligned"  # a held-out shape, shown variant
    assert get_task("rmsnorm").variant_of("t7-h7168").name == "decode"  # a held-out shape, shown variant
    assert get_task("rmsnorm").variant_of("t5-h896").name == "hd-not-256"
    assert parse_task(_gemm_with(), "t.toml").variant_of("single-token") is None  # a task without variants


def test_every_family_and_task_measures_both_kinds_of_generalization() -> None:
    """Every task holds out a variant (a setting never shown) and a shape of a shown variant, so both
    metrics exist for every family; a variant that is not held out shows a workload (else it is held out
    in all but name)."""
    suite = bundled_suite()
    families = {t.family for t in suite}
    assert {t.family for t in suite if t.variants and t.held_out_variants()} == families
    for task in suite:
        assert task.held_out_variants(), f"{task.id} holds out no variant"
        assert [w for w in task.held_out() if not task.variant_of(w).heldout], f"{task.id}: no held-out shape"
        for variant in task.variants:
            members = [w for w in task.workloads if task.variant_of(w) is variant]
            if not variant.heldout:
                assert any(w.role is not Role.HELDOUT for w in members), f"{task.id}/{variant.name} shows nothing"


def _variant(name: str, rule: str, heldout: bool = False) -> str:
    return f'\n[[variants]]\nname = "{name}"\ndescription = "d"\n{rule}\nheldout = {str(heldout).lower()}\n'


def _gemm_with(*variants: str) -> str:
    at = GEMM.index("\n# Variants")
    end = GEMM.index("\n[[requirements.sm_90a]]")
    return GEMM[:at] + "".join(variants) + GEMM[end:]


@pytest.mark.parametrize(("variants", "message"), [
    ((_variant("a", 'when = "M > 8"'),), "single-token must belong to exactly one variant, it matches none"),
    ((_variant("a", 'when = "M > 0"'), _variant("b", 'when = "M == 1"', True)),
     "single-token must belong to exactly one variant, it matches ['a', 'b']"),
    ((_variant("a", 'when = "M % 8 == 0"'), _variant("b", 'when = "M % 8 != 0"'), _variant("c", 'when = "M == 2"')),
     "variant c has no workload"),
    ((_variant("a", 'when = "M % 8 == 0"'), _variant("a", 'when = "M % 8 != 0"')), "duplicate variant names"),
    ((_variant("a", 'when = "M >= 16"', True), _variant("b", 'when = "M < 16"')),
     "held-out variant a holds workloads a prompt shows"),
    ((_variant("a", 'when = "Q > 0"'),), "condition 'Q > 0' uses unknown axes ['Q']"),
    ((_variant("a", "fixes = { Z = 1 }"),), "variant a fixes unknown axis Z"),
    ((_variant("a", ""),), "variant a fixes no axis and has no condition"),
])
def test_malformed_variants_are_refused_in_one_line(variants: tuple[str, ...], message: str) -> None:
    with pytest.raises(TaskError) as error:
        parse_task(_gemm_with(*variants), "t.toml")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_fixed_switch_value_must_be_one_the_axis_allows() -> None:
    text = ATTENTION.replace("fixes = { D = 64, causal = 1 }", "fixes = { D = 96, causal = 1 }")
    with pytest.raises(TaskError, match=r"variant hd64-causal: D=96 is not one of \[64, 128, 256\]"):
        parse_task(text, "t.toml")


def test_variants_are_part_of_the_hash_and_a_task_without_them_hashes_as_before() -> None:
    task = get_task("gemm_bf16")
    renamed = parse_task(GEMM.replace('name = "m-ragged"', 'name = "m-odd"'), "t.toml")
    assert renamed.content_hash != task.content_hash
    dropped = parse_task(_gemm_with(), "t.toml")
    assert "variants" not in dropped.model_dump(mode="json") or not dropped.variants
    # without variants the hashed data is exactly what it was before variants existed: no 'variants' key
    import hashlib
    import json

    legacy = {k: v for k, v in dropped.model_dump(mode="json", exclude={"content_hash"}).items()
              if k not in ("variants", "floor_bytes")}  # nor a floor_bytes of None, which came later still
    for tensor in (*legacy["inputs"], *legacy["outputs"]):  # nor the row offset, which came later still
        assert tensor["init"].pop("row_offset") == 0 and tensor["init"].pop("row_offset_fraction") == 0
    assert legacy["baseline"].pop("flashinfer") is None  # nor an imported task's FlashInfer call, later still
    canonical = json.dumps(legacy, sort_keys=True, separators=(",", ":"))
    assert dropped.content_hash == hashlib.sha256(canonical.encode()).hexdigest()


def test_redaction_replaces_names_and_sizes_and_leaves_shown_ones() -> None:
    task = get_task("gemm_bf16")
    text = ("failed on single-token (M=1, N=11008, K=4096) and on m-ragged; {'M': 333, 'N': 4096, 'K': 14336}; "
            "fine on llama3-8b-qkv-decode M=16, N=6144, K=4096; single-tokens is another word")
    assert set(hidden_mentions(text, task)) == {"single-token", "m-ragged", "M=1, N=11008, K=4096",
                                                "{'M': 333, 'N': 4096, 'K': 14336}"}
    clean = redact(text, task)
    assert hidden_mentions(clean, task) == []
    assert f"failed on {HIDDEN_WORKLOAD} ({HIDDEN_SIZES}) and on {HIDDEN_VARIANT}" in clean
    assert "llama3-8b-qkv-decode M=16, N=6144, K=4096" in clean and "single-tokens" in clean
