"""Each Fixit test gets its own cache: scripted teachers answer the same prompts differently in
different tests, and the completion cache must not carry one test's answers into another."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
