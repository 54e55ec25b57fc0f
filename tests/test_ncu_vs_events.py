"""benchmarks/ncu_vs_events.py: which candidates it takes, and the table it writes, judged by the guard's own rule
(the GPU measurement itself runs on the device)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .conftest import repo_script

bench = repo_script("benchmarks/ncu_vs_events.py")


def test_candidates_are_the_references_the_examples_and_files_with_or_without_the_reference(tmp_path: Path) -> None:
    extra = tmp_path / "addon.cu"
    extra.write_text("// more\n")
    chosen = bench._candidates(argparse.Namespace(gold=True, examples=False,
                                                  files=[f"gemm_bf16=ref+{extra}", str(bench.EXAMPLES / "rmsnorm.cu")]))
    names = [name for _, name, _ in chosen]
    assert "reference/gemm_bf16.cu" in names and "reference+addon.cu" in names and "rmsnorm.cu" in names
    task, _, source = next(c for c in chosen if c[1] == "reference+addon.cu")
    assert task == "gemm_bf16" and source.rstrip().endswith("// more") and "inlined by PTXBench" in source


def test_the_table_says_which_honest_kernels_the_guard_would_accuse(tmp_path: Path) -> None:
    rows = [{"task": "decode_gqa_paged", "candidate": "split_kv_decode.cu", "workload": "w", "event_ms": 0.1627,
             "samples": 300, "kernel_ms": [0.19, 0.012], "launches": 2, "ncu_ms": 0.202, "share_of_sum": 0.805,
             "share_of_longest": 0.856, "allowed_ms": 0.1425, "accused": False},
            {"task": "rmsnorm", "candidate": "x.cu", "error": "did not build"}]
    bench._write(tmp_path, {"gpu": "NVIDIA H100 80GB HBM3", "date": "d", "torch": "t", "ncu": "n", "python": "p",
                            "command": "c", "rows": rows})
    table = (tmp_path / "ncu_vs_events_h100_80gb_hbm3.md").read_text()
    assert "| decode_gqa_paged | split_kv_decode.cu | 2 | 0.1627 | 0.2020 | 0.805 | 0.856 | 0.1425 | no |" in table
    assert "did not build" in table
    assert json.loads((tmp_path / "ncu_vs_events_h100_80gb_hbm3.json").read_text())["rows"] == rows
