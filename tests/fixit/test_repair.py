"""Repair and explain through a scripted teacher behind a local OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.fixit.mine import harvest_own_repairs, mine_failures
from ptxbench.fixit.repair import explain, repair
from ptxbench.prompts import PROMPT_VERSION
from ptxbench.records.rundir import RunDir
from ptxbench.records.trajectory import Feedback

from ..llm.conftest import FakeLLMServer, Reply
from .test_mine_and_dataset import FIXED, _run


class FixedWhenTiled:
    """A grader stand-in: passes (as if GPU-verified) exactly the known-good kernel."""

    def grade(self, task, arch, source):  # type: ignore[no-untyped-def]
        good = source.strip() == FIXED.strip()
        return Feedback(passed=good, stage="gpu", verified_on_gpu=True,
                        text="Status: PASSED." if good else "Status: INCORRECT. wrong on workload r4096-c4096")


@pytest.fixture
def teacher():  # type: ignore[no-untyped-def]
    with FakeLLMServer() as server:
        yield server


def test_repair_refines_until_the_evaluator_passes(teacher: FakeLLMServer, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (case, *_) = mine_failures([_run(tmp_path)])
    draft = "// draft that the evaluator rejects\n" + FIXED
    teacher.script.extend([Reply(text=f"```cuda\n{draft}\n```"), Reply(text=f"Now:\n```cuda\n{FIXED}\n```")])
    pairs = repair([case], "openai:teacher", tmp_path / "repairs", FixedWhenTiled(), turns=3,
                   base_url=f"{teacher.url}/v1")
    assert len(pairs) == 1 and pairs[0].verified and pairs[0].origin == "teacher:openai:teacher"
    assert pairs[0].fixed_source.strip() == FIXED.strip()
    first = teacher.received[0].body["messages"]
    assert "A previous attempt" in first[-1]["content"] and "undeclared_value" in first[-1]["content"]
    assert "wrong on workload" in teacher.received[1].body["messages"][-1]["content"]
    assert RunDir.load(tmp_path / "repairs").header.config["prompt_version"] == PROMPT_VERSION


def test_explanations_are_requested_and_filtered(teacher: FakeLLMServer, tmp_path: Path) -> None:
    (pair,) = harvest_own_repairs([_run(tmp_path)])
    grounded = ("The launcher returned undeclared_value, a name declared nowhere, so the build stopped; the fix "
                "launches a tiled transpose and returns cudaGetLastError().")
    teacher.script.extend([Reply(text=grounded), Reply(text="It was wrong, so I fixed it and now it is right.")])
    kept, rejected = explain([pair, pair.model_copy()], "openai:teacher", base_url=f"{teacher.url}/v1")
    assert [p.explanation for p in kept] == [grounded]
    assert rejected == {"too short": 1} or rejected == {"not grounded in the diff or the diagnosis": 1}
    assert "```diff" in teacher.received[0].body["messages"][0]["content"]
