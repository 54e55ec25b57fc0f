"""Fixit on the GPU: a teacher's repair is kept only once the GPU evaluator passes it (correct on every
workload, required features executed by ncu's proof). The scripted teacher first answers with a correct
plain-CUDA transpose, which the evaluator sends back for not using TMA, then with the TMA reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptxbench.check import read_candidate
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.fixit.mine import mine_failures
from ptxbench.fixit.repair import repair
from ptxbench.kernels import reference_folder
from ptxbench.refine.graders import GpuGrader

from ..conftest import EXAMPLES
from ..fixit.test_mine_and_dataset import _run
from ..llm.conftest import FakeLLMServer, Reply

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute")]


def test_only_a_gpu_verified_repair_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    plain = (EXAMPLES / "transpose.cu").read_text()
    expert = read_candidate(reference_folder("sm_90a") / "transpose.cu")
    gpu = GpuEvaluator(EvalOptions(trials=1, timing_budget_ms=20, call_timeout_s=60))
    with FakeLLMServer() as teacher:
        teacher.script.extend([Reply(text=f"```cuda\n{plain}\n```"),
                               Reply(text=f"Using TMA:\n```cuda\n{expert}\n```")])
        try:
            (case, *_) = mine_failures([_run(tmp_path)])
            pairs = repair([case], "openai:teacher", tmp_path / "repairs", GpuGrader(gpu), turns=3,
                           base_url=f"{teacher.url}/v1")
        finally:
            gpu.close()
    assert len(teacher.received) == 2
    sent_back = teacher.received[1].body["messages"][-1]["content"]
    print(f"FEEDBACK on the plain kernel:\n{sent_back}")
    assert "Status: REJECTED" in sent_back and "tma.load" in sent_back
    assert len(pairs) == 1 and pairs[0].verified
    assert pairs[0].fixed_source.strip() == expert.strip()
