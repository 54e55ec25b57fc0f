"""One PROMPT_VERSION covers every word a model is given: a change to any prompt fails here until the
version is bumped and the committed digest updated.

The digest is taken over every prompt rendered on fixed inputs: a probe task defined here (so editing a
bundled task, which its content hash records, needs no bump) and placeholder sources and findings. It
covers the templates in ``ptxbench.prompts`` and what they read: the registry's titles, purposes and
probe kernels, the guides, the wrapper header and the contract header.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator

import pytest

from ptxbench import prompts
from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch
from ptxbench.prompts import context, conversation, fixit, task
from ptxbench.prompts.conversation import ContextCondition, OneShot, build_conversation, feedback_message
from ptxbench.tasks.baseline_quality import BaselineQuality
from ptxbench.tasks.model import Task

PROBE = Task.model_validate({
    "id": "probe", "family": "gemm", "title": "TITLE", "statement": "STATEMENT of the probe task, twenty chars",
    "axes": [{"name": "M", "description": "rows", "divisible_by": 64}, {"name": "K", "description": "depth"}],
    "inputs": [{"name": "A", "dtype": "bfloat16", "shape": ["M", "K"], "description": "INPUT"}],
    "outputs": [{"name": "C", "dtype": "float32", "shape": ["M"], "description": "OUTPUT"}],
    "reference": "def reference(A, **sizes):\n    return A.float().sum(-1)", "flops": "2 * M * K",
    "baseline": {"library": "torch", "call": "BASELINE"},
    "workloads": [{"name": "timed", "role": "timed", "sizes": {"M": 128, "K": 64}, "note": "NOTE"},
                  {"name": "visible", "role": "visible", "sizes": {"M": 64, "K": 64}},
                  {"name": "heldout", "role": "heldout", "sizes": {"M": 192, "K": 64}}],
    "requirements": {"sm_90a": [{"any_of": ["wgmma.bf16"], "min_flop_share": 0.5}, {"any_of": ["tma.load", "bulk.copy"]}],
                     "sm_100a": [{"any_of": ["tcgen05.mma.f16"], "min_flop_share": 0.5}, {"any_of": ["tma.load"]}]},
})
EXAMPLE = OneShot(task=PROBE.model_copy(update={"id": "example"}), source="EXAMPLE SOURCE")
WEAK = BaselineQuality(gpu="GPU", date="DATE", tasks={"probe": {"timed": 12.0}})
"""A published baseline quality in which the probe's baseline is weak, so its words are in the digest too."""


def rendered() -> list[object]:
    """Every prompt on the fixed inputs, as the JSON it is sent or stored as."""
    shown: list[object] = []
    for arch in BENCHMARK_ARCHS:
        for condition in ContextCondition:
            shown.append([m.model_dump() for m in build_conversation(PROBE, arch, condition, EXAMPLE)])
        shown.append([m.model_dump() for m in fixit.repair_opening(PROBE, arch, "FAILED", "FINDINGS")])
        shown.append(task.render_task_prompt(PROBE, arch, WEAK))
        for explanation in ("EXPLANATION", None):
            shown.append([m.model_dump() for m in
                          fixit.training_messages(PROBE, arch, "FAILED", "FINDINGS", explanation, "FIXED")])
    shown += [feedback_message("FINDINGS", turn, 3).model_dump() for turn in (1, 2)]
    shown.append(fixit.explain_request("FAILED\nKEPT", "FIXED\nKEPT", "FINDINGS"))
    return shown


def digest() -> str:
    return hashlib.sha256(json.dumps(rendered(), sort_keys=True).encode()).hexdigest()


@pytest.fixture(autouse=True)
def fresh_renderings() -> Iterator[None]:
    """The context texts are cached per target: a changed word must reach them, and no change may leak."""
    context.arch_table.cache_clear()
    context.context_pack.cache_clear()
    yield
    context.arch_table.cache_clear()
    context.context_pack.cache_clear()


def test_the_committed_digest_is_that_of_the_prompts_words() -> None:
    now = digest()
    assert now == prompts.PROMPT_DIGEST, (
        f"the words of the prompts changed: bump PROMPT_VERSION (now {prompts.PROMPT_VERSION}) in "
        f"src/ptxbench/prompts/__init__.py and set PROMPT_DIGEST = {now!r}")


def _edit_guide(monkeypatch: pytest.MonkeyPatch) -> None:
    original = context.guide
    monkeypatch.setattr(context, "guide", lambda arch: original(arch) + "\nOne more line.\n")


def _edit_registry_purpose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "_cell", lambda text: text.replace("|", "\\|").strip() + ".")


def _edit_contract_header(monkeypatch: pytest.MonkeyPatch) -> None:
    original = task.header
    monkeypatch.setattr(task, "header", lambda t: original(t).replace("int ", "long ", 1))


def _edit_wrapper_header(monkeypatch: pytest.MonkeyPatch) -> None:
    original = context.wrapper_header
    monkeypatch.setattr(context, "wrapper_header", lambda arch: original(arch).replace("namespace ptx", "namespace p", 1))


EDITS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "system prompt": lambda mp: mp.setattr(conversation, "SYSTEM_PROMPT", conversation.SYSTEM_PROMPT + " "),
    "repair system prompt": lambda mp: mp.setattr(fixit, "REPAIR_SYSTEM_PROMPT", fixit.REPAIR_SYSTEM_PROMPT[:-1]),
    "explanation prompt": lambda mp: mp.setattr(fixit, "EXPLAIN_PROMPT", fixit.EXPLAIN_PROMPT.lower()),
    "key limits": lambda mp: mp.setitem(context._LIMITS, Arch.SM_100A, context._LIMITS[Arch.SM_100A][:-1]),
    "absent family": lambda mp: mp.setitem(context._ABSENT, Arch.SM_90A, "no tcgen05 here."),
    "requirement line": lambda mp: mp.setattr(task, "requirements_text", lambda t, a: "- anything"),
    "weak baseline line": lambda mp: mp.setattr(task, "weak_baseline_text", lambda t, q=None: ""),
    "guide": _edit_guide,
    "registry purpose": _edit_registry_purpose,
    "contract header": _edit_contract_header,
    "wrapper header": _edit_wrapper_header,
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_a_change_to_any_prompt_text_is_caught(monkeypatch: pytest.MonkeyPatch,
                                               edit: Callable[[pytest.MonkeyPatch], None]) -> None:
    before = digest()
    edit(monkeypatch)
    context.arch_table.cache_clear()
    context.context_pack.cache_clear()
    assert digest() != before


def test_the_probe_is_stable_and_shows_no_held_out_shape() -> None:
    assert digest() == digest()
    assert "heldout" not in json.dumps(rendered()) and "M=192" not in json.dumps(rendered())
