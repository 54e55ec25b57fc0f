"""Does the reference softmax lose time to a last partial wave of rows on vocabulary-sized rows?

Its host plan gives each thread-block cluster whole rows (rows c, c + G, c + 2G, ... for G clusters), so
with 512 rows on 30 clusters two clusters take an 18th row while the rest stop at 17. If a row's time
were fixed, 512 rows would cost as much as 540; if the clusters left running share the memory
bandwidth of the idle ones, time grows with the row count itself. This times the kernel alone
(built as the evaluator builds it, called through ctypes, CUDA events, no L2 flush: 300 MB dwarfs the
60 MB L2) for row counts around 512, next to a device copy of the same bytes, and checks every output against torch.

    python benchmarks/softmax_row_scaling.py [--columns 151936] [--rows 450 480 512 540] [--out DIR]

Writes ``softmax_row_scaling_<gpu>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import sys
from pathlib import Path

from ptxbench.kernels import reference_folder

REPO = Path(__file__).resolve().parents[1]
KERNEL = reference_folder("sm_90a") / "softmax.cu"
ROWS = (450, 480, 481, 496, 510, 511, 512, 528, 540, 541, 570)


def build() -> Path:
    """The reference softmax's shared object, built by the harness's own build step (its flags, the
    wrapper header inlined, the task's entry point checked) so the kernel timed is the one evaluated."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import build_request, read_candidate
    from ptxbench.tasks.loader import get_task
    from ptxbench.toolchain.compile import build as build_candidate

    result = build_candidate(build_request(read_candidate(KERNEL), Arch.SM_90A, get_task("softmax")))
    shared_object = result.artifact(".so")
    if not result.ok or shared_object is None:
        raise RuntimeError(f"{KERNEL} did not build:\n{result.log}")
    return shared_object


def mean_us(torch, call, calls: int = 30) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def measure(library: ctypes.CDLL, rows: int, columns: int) -> dict[str, float]:
    import torch

    x = torch.randn(rows, columns, device="cuda", dtype=torch.bfloat16) * 3
    y = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream

    def call() -> None:
        status = library.softmax(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                                 ctypes.c_int64(rows), ctypes.c_int64(columns), ctypes.c_void_p(stream))
        if status != 0:
            raise RuntimeError(f"softmax returned CUDA error {status} for {rows} x {columns}")

    call()
    torch.cuda.synchronize()
    error = (y.float() - torch.softmax(x.float(), dim=-1)).abs().max().item()
    kernel_us = mean_us(torch, call)
    copy_us = mean_us(torch, lambda: y.copy_(x))
    return {"rows": rows, "kernel_us": kernel_us, "copy_us": copy_us, "pct_of_copy": 100.0 * copy_us / kernel_us,
            "us_per_row": kernel_us / rows, "max_abs_error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=151936)
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("needs an NVIDIA GPU")
    gpu = torch.cuda.get_device_name()
    library = ctypes.CDLL(str(build()))
    results = [measure(library, rows, args.columns) for rows in args.rows]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = "python benchmarks/softmax_row_scaling.py " + " ".join(sys.argv[1:])
    lines = [f"# Reference softmax against the row count on {gpu}", "",
             f"{date}; torch {torch.__version__}; command: `{command.strip()}`; {args.columns} columns", "",
             "| rows | kernel µs | copy of the same bytes µs | % of copy | µs per row | max abs error |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['rows']} | {r['kernel_us']:.1f} | {r['copy_us']:.1f} | {r['pct_of_copy']:.1f} | "
              f"{r['us_per_row']:.4f} | {r['max_abs_error']:.2e} |" for r in results]
    stem = "softmax_row_scaling_" + gpu.split()[-1].lower()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"schema": 1, "date": date, "gpu": gpu, "torch": torch.__version__, "command": command.strip(),
         "columns": args.columns, "results": results}, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
