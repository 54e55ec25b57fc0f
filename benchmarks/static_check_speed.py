"""How long the static path (build + PTX/SASS report) takes per candidate, cold cache.

Goal (foundation issue): <= 5 s per candidate on a 2-core machine. Measures every bundled example
for sm_90a and sm_100a, one at a time (the per-candidate latency a user sees) and all at once with
parallel builds (throughput); writes JSON and Markdown under benchmarks/results/.

    python benchmarks/static_check_speed.py
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from ptxbench.arch.registry import BENCHMARK_ARCHS
from ptxbench.check import check_file, check_files
from ptxbench.tasks.loader import get_task
from ptxbench.toolchain.discover import find_toolchain

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "kernels" / "examples").glob("*.cu"))
OUT = REPO / "benchmarks" / "results"


def main() -> None:
    rows = []
    for arch in BENCHMARK_ARCHS:
        with tempfile.TemporaryDirectory() as cache:
            for path in EXAMPLES:
                started = time.perf_counter()
                report = check_file(path, arch, get_task(path.stem), cache_dir=Path(cache))
                rows.append({"candidate": path.name, "arch": arch.value, "seconds": time.perf_counter() - started,
                             "built": report.build.ok})
        with tempfile.TemporaryDirectory() as cache:
            started = time.perf_counter()
            check_files([(p, get_task(p.stem)) for p in EXAMPLES], arch, cache_dir=Path(cache))
            rows.append({"candidate": f"all {len(EXAMPLES)} in parallel", "arch": arch.value,
                         "seconds": time.perf_counter() - started, "built": True})
    single = [r["seconds"] for r in rows if not r["candidate"].startswith("all")]
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "toolchain": {n: t.version for n, t in find_toolchain().tools.items()},
        "rows": rows,
        "per_candidate_seconds": {"median": statistics.median(single), "max": max(single)},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "static_check_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Static check speed ({result['date']}, {os.cpu_count()} CPUs, nvcc {result['toolchain']['nvcc']})", "",
             "| candidate | arch | seconds |", "|---|---|---|"]
    lines += [f"| {r['candidate']} | {r['arch']} | {r['seconds']:.2f} |" for r in rows]
    lines += ["", f"Per candidate: median {result['per_candidate_seconds']['median']:.2f} s, "
              f"max {result['per_candidate_seconds']['max']:.2f} s (goal: <= 5 s)."]
    (OUT / "static_check_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
