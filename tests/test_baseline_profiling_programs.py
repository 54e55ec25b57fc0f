"""The profiling scripts profile exactly one timed baseline call: the variant's setup (auxiliary tensors,
compilation, warm-up) runs once before the profiled range, never inside it."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import pytest
import torch

from ptxbench.evaluate.baselines import variants as baselines
from ptxbench.tasks import reference

from .conftest import repo_script


def _load(name: str) -> ModuleType:
    return repo_script(f"benchmarks/{name}.py")


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One stand-in variant "v" and a stand-in profiler, all recording into the returned list."""
    log: list[str] = []

    def setup(inputs, sizes):  # type: ignore[no-untyped-def]
        log.append("setup")
        return lambda: log.append("call") or {}

    variant = baselines.BaselineVariant("v", "stand-in", setup)
    monkeypatch.setattr(baselines, "variant_specs", lambda task: {"v": variant})
    monkeypatch.setattr(reference, "make_inputs", lambda *args, **kwargs: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: log.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: log.append("stop"))
    return log


def test_ncu_against_vendor_profiles_one_call_after_setup(events: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    tool = _load("ncu_against_vendor")
    command = tool.vendor_program("softmax", {"R": 4, "C": 8}, "v")
    monkeypatch.setattr(sys, "argv", ["-c", command[3]])
    assert json.loads(command[3])["baseline"] == "v"
    exec(command[2], {"__name__": "vendor_program"})  # noqa: S102 - the program the tool hands to ncu
    assert events == ["setup", "call", "start", "call", "stop"]


def test_baseline_features_profiles_one_call_after_setup(events: list[str]) -> None:
    _load("baseline_features").child("softmax", "v")
    assert events == ["setup", "call", "start", "call", "stop"]
