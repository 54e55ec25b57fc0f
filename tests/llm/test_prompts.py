"""Context conditions: each adds to the same task section, and none leaks a held-out workload."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch
from ptxbench.llm.prompts import OneShot, build_conversation, prompt_version
from ptxbench.prompt import render_task_prompt
from ptxbench.records.trajectory import ContextCondition
from ptxbench.tasks.loader import bundled_suite, get_task

from ..conftest import EXAMPLES


@pytest.mark.parametrize("arch", BENCHMARK_ARCHS, ids=lambda a: a.value)
def test_conditions_nest_and_never_show_held_out_workloads(arch: Arch) -> None:
    for task in bundled_suite():
        texts = {c: build_conversation(task, arch, c)[-1].content for c in ContextCondition}
        assert texts[ContextCondition.NONE] == render_task_prompt(task, arch)
        for condition, text in texts.items():
            assert text.endswith(texts[ContextCondition.NONE]), condition
            for workload in task.held_out():
                assert workload.name not in text
                assert ", ".join(f"{k}={v}" for k, v in workload.sizes.items()) not in text
        assert len(texts[ContextCondition.NONE]) < len(texts[ContextCondition.ARCH]) < len(texts[ContextCondition.FULL])
    full = build_conversation(get_task("gemm_bf16"), arch, ContextCondition.FULL)[-1].content
    assert "```cpp" in full and "mbarrier" in full
    if arch is Arch.SM_90A:
        assert "wgmma.mma_async" in full
    else:
        assert "tcgen05.mma" in full


def test_prompt_versions_name_the_condition() -> None:
    versions = {prompt_version(c) for c in ContextCondition}
    assert len(versions) == 3 and all(v.startswith("task-") for v in versions)


def test_one_shot_comes_first_and_must_be_another_task() -> None:
    example = OneShot(task=get_task("transpose"), source=(EXAMPLES / "transpose.cu").read_text())
    messages = build_conversation(get_task("softmax"), Arch.SM_90A, ContextCondition.NONE, example)
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert "Task `transpose`" in messages[1].content and messages[2].content.startswith("```cuda\n")
    assert "Task `softmax`" in messages[3].content
    with pytest.raises(ValueError, match="another task"):
        build_conversation(get_task("transpose"), Arch.SM_90A, ContextCondition.NONE, example)
