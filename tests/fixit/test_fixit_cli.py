"""`ptxbench fixit mine` and `build` from the command line, on a synthetic run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ptxbench._io import read_jsonl, write_jsonl
from ptxbench.cli import app
from ptxbench.fixit.mine import RepairPair

from .test_mine_and_dataset import _run

runner = CliRunner()


def test_mine_then_build(tmp_path: Path) -> None:
    run = _run(tmp_path)
    failures, pairs = tmp_path / "failures.jsonl", tmp_path / "pairs.jsonl"
    mined = runner.invoke(app, ["fixit", "mine", str(run), "--out", str(failures), "--own-repairs", str(pairs),
                                "--per-class", "2"])
    assert mined.exit_code == 0, mined.output
    assert len(failures.read_text().splitlines()) == 2 and len(pairs.read_text().splitlines()) == 1
    (pair,) = read_jsonl(pairs, RepairPair)
    explained = tmp_path / "explained.jsonl"
    write_jsonl(explained, [pair.model_copy(update={"explanation": (
        "The launcher returned undeclared_value, which no scope declares, so compilation stopped; the fixed file "
        "launches the tiled transpose kernel and returns cudaGetLastError().")})])
    built = runner.invoke(app, ["fixit", "build", str(explained), "--out", str(tmp_path / "data")])
    assert built.exit_code == 0, built.output
    record = json.loads((tmp_path / "data" / "train.jsonl").read_text().splitlines()[0])
    assert record["split"] == "train" and record["messages"][-1]["role"] == "assistant"
