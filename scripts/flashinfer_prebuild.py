"""Build FlashInfer's JIT kernels for the flashinfer baseline variants once, and install them as its
ahead-of-time modules, on a GPU machine with the wheel of scripts/fetch_device_wheels.sh --flashinfer.

FlashInfer compiles a kernel family at its first use in each process, into FLASHINFER_WORKSPACE_BASE. The
harness gives its baseline process a cache of its own, but a fresh worker (which times the baseline beside
the baseline process when a clean time is measured) has a private folder and would compile every family
again, in every task. FlashInfer loads a module without building it when ``<package>/data/aot/<name>/<name>.so``
exists, so this script runs every flashinfer variant's setup once per task on its timed workload (each task
in its own process, all at once, so their nvcc builds overlap; ninja's parallelism is MAX_JOBS), checks its
outputs against the task's reference, and copies each built module there. The package folder is on the workers' import path, which the sandbox keeps read-only to candidates.

    MAX_JOBS=16 python scripts/flashinfer_prebuild.py [--tasks decode_gqa_paged,rope]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def install_aot(cached_ops: Path, aot: Path) -> list[str]:
    """Copy every built module ``cached_ops/<name>/<name>.so`` to ``aot/<name>/<name>.so``; the names copied."""
    copied = []
    for built in sorted(cached_ops.glob("*/*.so")):
        name = built.parent.name
        if built.name != f"{name}.so":
            continue
        (aot / name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, aot / name / built.name)
        copied.append(name)
    return copied


def flashinfer_tasks(chosen: list[str] | None) -> dict[str, list[str]]:
    """Task id -> its flashinfer variants' names, for the chosen tasks (default: every task that has one)."""
    from ptxbench.evaluate.baselines.variants import variants_for
    from ptxbench.tasks.loader import bundled_suite

    found = {}
    for task in bundled_suite():
        if task.baseline.library == "reference" or (chosen and task.id not in chosen):
            continue
        names = [name for name in variants_for(task.id) if name.startswith("flashinfer")]
        if names:
            found[task.id] = names
    return found


def build_one(task_id: str, device: str = "cuda") -> bool:
    """Every flashinfer variant of the task set up and run once on its timed workload, its outputs checked
    against the task's reference under the task's tolerance; True when all built and passed."""
    import torch

    from ptxbench.evaluate.baselines.variants import variant_specs
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.loader import bundled_suite
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = next(t for t in bundled_suite() if t.id == task_id)
    sizes = task.timed().sizes
    inputs = make_inputs(task, sizes, seed=0, device=device)
    expected = run_reference(task, dict(inputs), sizes)
    passed = True
    for name, variant in variant_specs(task).items():
        if not name.startswith("flashinfer"):
            continue
        started = time.perf_counter()
        try:
            outputs = variant.setup(inputs, sizes)()
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported, the other variants still build
            print(f"{task_id}/{name}: FAILED after {time.perf_counter() - started:.0f} s: "
                  f"{type(exc).__name__}: {exc}".splitlines()[0][:400], flush=True)
            passed = False
            continue
        verdicts = compare_outputs(task, outputs, expected)
        passed &= all(v.passed for v in verdicts)
        checks = "; ".join(f"{v.output} {'ok' if v.passed else 'FAILS'} error/bound {v.max_error_ratio:.3f}"
                           for v in verdicts)
        print(f"{task_id}/{name}: built and ran in {time.perf_counter() - started:.0f} s; {checks}", flush=True)
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: every task FlashInfer covers)")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)  # the child process of one task
    args = parser.parse_args()
    if args.one:
        sys.exit(0 if build_one(args.one) else 1)
    import flashinfer

    tasks = flashinfer_tasks([t for t in args.tasks.split(",") if t] or None)
    base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or tempfile.mkdtemp(prefix="flashinfer-jit-"))
    environment = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(base))
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, __file__, "--one", task_id], env=environment) for task_id in tasks]
    failed = sum(child.wait() != 0 for child in children)
    aot = Path(flashinfer.__file__).parent / "data" / "aot"
    copied = [name for ops in sorted(base.glob(".cache/flashinfer/*/*/cached_ops")) for name in install_aot(ops, aot)]
    print(f"built {', '.join(tasks)} in {time.perf_counter() - started:.0f} s; {len(copied)} modules installed in {aot}:")
    for name in copied:
        print(f"  {name}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
