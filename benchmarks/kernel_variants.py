"""Variants of one kernel file, timed side by side by the evaluator: the tool for tuning a reference
kernel's knobs on a lent GPU in one call, without a build of its own.

A variant overrides named compile-time constants of the file (``constexpr <type> NAME = <expr>;``,
each name matched exactly once, so a misspelt knob is an error rather than a silently unchanged
variant), and may replace whole definitions of it with those of a variant source (``@file``: a path,
or a file of benchmarks/variants/). Alternatives that were measured and rejected live there, not as
switches inside the reference kernels; each file says what it changes and what it measured. Every
variant, and the file as it is, goes through the evaluator (correctness on every workload, the vendor
library timed in the same process, interleaved; ncu off, one input set unless --trials says more: this
is for choosing, the reference benchmark is for reporting). Each variant's
worst error over its bound, per workload and over every trial (held-out workloads too), is reported
beside its times: a knob that trades accuracy for speed shows how much of the tolerance it spends
(--vendor-error adds the vendor library's). For memory-bound tasks the script then times a plain
device copy of each workload's bytes in the same way (L2 flushed, launch gated), since a copy of the
same size, not the 1 GiB copy of the roofline, is what the kernel can be expected to approach on
small workloads.

    python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu \\
        --variant "deep:kBytesInFlightPerCta=128 * 1024" --variant "wide:kThreads=512" [--budget-ms 100]
    python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_bf16.cu \\
        --variant "pf8:@gemm_bf16.decode_l2_prefetch.cu;PREFETCH_BLOCKS=8"

Writes kernel_variants_<task>.{json,md} into --out (default: the current folder).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import NamedTuple

VARIANTS = Path(__file__).resolve().parent / "variants"


class Variant(NamedTuple):
    """One variant: its name, the constants it overrides, and the variant sources whose definitions
    replace the file's (applied first, so their own constants can be overridden too)."""

    name: str
    overrides: dict[str, str]
    sources: tuple[Path, ...] = ()


AS_IS = Variant("as-is", {})


def parse_variant(text: str) -> Variant:
    """``name:[@source;]CONST=expr;CONST=expr`` -> Variant(name, {CONST: expr}, (source path, ...))."""
    name, sep, body = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == AS_IS.name:
        raise ValueError(f"variant {text!r}: expected name:[@source;]CONST=expr[;CONST=expr], name of [A-Za-z0-9_.-]")
    overrides = {}
    sources = []
    for part in filter(None, (p.strip() for p in body.split(";"))):
        if part.startswith("@"):
            path = Path(part[1:].strip())
            path = path if path.is_file() or path.parent != Path(".") else VARIANTS / path
            if not path.is_file():
                raise ValueError(f"variant {text!r}: no variant source {part[1:].strip()!r} (nor in {VARIANTS})")
            sources.append(path)
            continue
        key, eq, value = part.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", key.strip()) or not value.strip():
            raise ValueError(f"variant {text!r}: {part!r} is not CONST=expr or @source")
        overrides[key.strip()] = value.strip()
    if not overrides and not sources:
        raise ValueError(f"variant {text!r} changes nothing")
    return Variant(name, overrides, tuple(sources))


def _closes(line: str) -> bool:
    """A definition's closing line: ``}`` for a function, ``};`` for a class (e.g. a templated tile
    configuration, whose constants the file may spell twice and so cannot be overridden by name)."""
    return line.rstrip() in ("}", "};")


REPLACES = "// replaces: "
ADDS = "// adds before: "


class Replacement(NamedTuple):
    """One definition of a variant source and the first line of the definition it replaces (or, ``added``,
    the definition it is inserted before)."""

    target: str
    lines: list[str]
    added: bool = False


def replacement_blocks(text: str) -> list[Replacement]:
    """The definitions of a variant source: each from a line that starts in column 0 (not a comment,
    not ``template <...>``) through the next line that is exactly ``}`` or ``};``. Each replaces the
    definition whose first line is the same, or the one a ``// replaces: <first line>`` comment right
    above it names (for a first line that itself changes, e.g. a kernel's launch bounds). A definition the
    file does not have follows a ``// adds before: <first line>`` comment, with the comments that say what
    it is and its template head, and is inserted above the named definition (and above that one's template
    head and comments). Other comments and blank lines between them are notes for the reader."""
    blocks: list[Replacement] = []
    current: list[str] | None = None
    target: str | None = None
    added = False
    lead: list[str] = []  # an added definition's own comments
    for number, line in enumerate(text.splitlines(), 1):
        if added and current is None and line.startswith("//") and not line.startswith((REPLACES, ADDS)):
            lead.append(line)
        elif current is not None:
            current.append(line)
            if _closes(line):
                blocks.append(Replacement(target or current[0], lead + current, added))
                current, target, added, lead = None, None, False, []
        elif line.startswith((REPLACES, ADDS)):
            added = line.startswith(ADDS)
            target = line[len(ADDS if added else REPLACES):]
        elif line.strip() and not line.startswith(("//", " ", "\t")):
            if line.startswith("template") and not added:
                raise ValueError(f"line {number}: start a replacement at the declarator line, after its template head")
            current = [line]
        elif target is not None:
            marker = ADDS if added else REPLACES
            raise ValueError(f"line {number}: {marker.strip()} must stand right above the definition it names")
    if current is not None:
        raise ValueError(f"the definition starting {current[0]!r} has no closing line '}}' or '}};'")
    if target is not None:
        raise ValueError(f"{ADDS if added else REPLACES}{target}: no definition follows it")
    if not blocks:
        raise ValueError("no definition to replace")
    return blocks


def apply_replacements(source: str, variant_text: str) -> str:
    """``source`` with each definition of ``variant_text`` in place of the one whose first line is its
    target (exactly one must be), through that definition's closing ``}`` (or ``};``) line; added ones
    above their target."""
    lines = source.split("\n")
    for target, block, added in replacement_blocks(variant_text):
        starts = [i for i, line in enumerate(lines) if line.rstrip() == target.rstrip()]
        if len(starts) != 1:
            raise ValueError(f"{target.strip()!r}: found {len(starts)} definitions starting so, expected exactly one")
        if added:  # above the target's template head and comments
            at = starts[0]
            while at > 0 and lines[at - 1].startswith(("template", "//")):
                at -= 1
            lines[at:at] = [*block, ""]
            continue
        end = next((i for i in range(starts[0], len(lines)) if _closes(lines[i])), None)
        if end is None:
            raise ValueError(f"{target.strip()!r}: its definition has no closing line '}}' or '}};'")
        lines[starts[0]:end + 1] = block
    return "\n".join(lines)


def apply_overrides(source: str, overrides: dict[str, str]) -> str:
    """``source`` with each named constexpr's initializer replaced; each name must occur exactly once."""
    for key, value in overrides.items():
        pattern = re.compile(rf"(\bconstexpr\s+[\w:<> ]+?\s+{re.escape(key)}\s*=\s*)([^;]+)(;)")
        matches = pattern.findall(source)
        if len(matches) != 1:
            raise ValueError(f"constexpr {key}: found {len(matches)} definitions, expected exactly one")
        source = pattern.sub(lambda m: m.group(1) + value + m.group(3), source)
    return source


def variant_sources(kernel: Path, variants: list[Variant]) -> list[str]:
    """Each variant's candidate source: the file as the evaluator reads it (the wrapper header inlined),
    with the variant's definitions replaced, then its constants overridden."""
    from ptxbench.check import read_candidate

    source = read_candidate(kernel)
    built = []
    for variant in variants:
        text = source
        for path in variant.sources:
            text = apply_replacements(text, path.read_text())
        built.append(apply_overrides(text, variant.overrides))
    return built


def same_bytes_copy_ms(byte_counts: list[int], repeats: int = 50) -> list[float]:
    """Median time of a device copy moving each count of bytes (half read, half written), timed as the
    evaluator times candidates."""
    import torch

    from ptxbench.evaluate.child.gpu_side import CandidateRunner

    runner = CandidateRunner()
    stream = torch.cuda.current_stream()  # where copy_ runs: the events must be on the same stream
    medians = []
    for count in byte_counts:
        source = torch.empty(count // 2, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        medians.append(statistics.median(runner._time(lambda s: target.copy_(source), stream, repeats)))
        del source, target
    return medians


def worst_error_ratios(trials) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The largest error/bound of any output in any trial, per workload (below 1 passes)."""
    worst: dict[str, float] = {}
    for trial in trials:
        for comparison in trial.comparisons:
            worst[trial.workload] = max(worst.get(trial.workload, 0.0), comparison.max_error_ratio)
    return worst


def vendor_error_ratios(task, trials: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The vendor library's own worst error/bound per workload, on ``trials`` fresh input sets each: how
    much of the tolerance the library spends, for comparison with the variants'."""
    import secrets

    import torch

    from ptxbench.evaluate.baselines.variants import baseline_variants
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import make_inputs, run_reference

    call = next(iter(baseline_variants(task).values()))
    worst: dict[str, float] = {}
    for workload in task.workloads:
        for _ in range(trials):
            inputs = make_inputs(task, workload.sizes, secrets.randbits(62), device="cuda")
            expected = run_reference(task, dict(inputs), workload.sizes)
            outputs = call(inputs, workload.sizes)
            ratio = max(c.max_error_ratio for c in compare_outputs(task, outputs, expected))
            worst[workload.name] = max(worst.get(workload.name, 0.0), ratio)
            del inputs, expected, outputs
        torch.cuda.empty_cache()
    return worst


def _markdown(result: dict) -> str:
    lines = [f"# Variants of {result['kernel']} ({result['task']}) on {result['environment'].get('name')}", "",
             f"{result['date']}; torch {result['environment'].get('torch')}, CUDA {result['environment'].get('cuda')}; "
             f"git {str(result['git_revision'])[:12]}; command: `{result['command']}`", "",
             f"{result.get('trials', 1)} input set(s) per workload for correctness, ncu off, each variant and the vendor "
             "library timed interleaved in one process. "
             "'% of vendor' is the library's time over the variant's; '% of copy' is a device copy of the "
             "workload's bytes over the variant's time (memory-bound tasks).", ""]
    workloads = result["workloads"]
    header = "| variant | overrides | status |" + "".join(f" {w} |" for w in workloads)
    lines += ["Each cell: variant ms, % of vendor, % of roofline[, % of copy].", "", header,
              "|---|---|---|" + "---|" * len(workloads)]
    for variant in result["variants"]:
        cells = []
        for workload in workloads:
            row = variant["timings"].get(workload)
            if row is None:
                cells.append("–")
                continue
            parts = [f"{row['ms']:.4f}", f"{row['pct_of_vendor']:.1f} %" if row["pct_of_vendor"] else "–",
                     f"{row['pct_of_roofline']:.1f} %" if row["pct_of_roofline"] else "–"]
            if row.get("pct_of_copy") is not None:
                parts.append(f"{row['pct_of_copy']:.1f} %")
            cells.append(" / ".join(parts))
        overrides = "; ".join([f"@{n}" for n in variant.get("sources", [])]
                              + [f"{k}={v}" for k, v in variant["overrides"].items()]) or "–"
        lines.append(f"| {variant['name']} | {overrides} | {variant['status']} |" + "".join(f" {c} |" for c in cells))
    ratios = [v for v in result["variants"] if v.get("error_ratio")]
    if result.get("vendor_error_ratio"):
        ratios.append({"name": "vendor library", "error_ratio": result["vendor_error_ratio"]})
    if ratios:
        checked = list(dict.fromkeys(w for v in ratios for w in v["error_ratio"]))
        lines += ["", f"Worst error over its bound ({result.get('trials', 1)} input set(s) per workload; below 1 passes):",
                  "", "| variant |" + "".join(f" {w} |" for w in checked), "|---|" + "---|" * len(checked)]
        for variant in ratios:
            lines.append(f"| {variant['name']} |" + "".join(
                f" {variant['error_ratio'][w]:.3f} |" if w in variant["error_ratio"] else " – |" for w in checked))
    if result.get("copy_ms"):
        lines += ["", "Device copy of each workload's bytes: " + ", ".join(
            f"{w} {ms * 1e3:.1f} us" for w, ms in result["copy_ms"].items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.evaluator import DEFAULT_LANES, EvalOptions
    from ptxbench.evaluate.fleet.run import Candidate, evaluate_candidates
    from ptxbench.records.rundir import RunDir
    from ptxbench.tasks.loader import get_task

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", type=Path, help="the kernel file; its stem names the task")
    parser.add_argument("--variant", action="append", default=[], help="name:CONST=expr[;CONST=expr]")
    parser.add_argument("--arch", default=Arch.SM_90A.value)
    parser.add_argument("--budget-ms", type=float, default=100.0, help="measured time per workload and side")
    parser.add_argument("--lanes", type=int, default=DEFAULT_LANES)
    parser.add_argument("--trials", type=int, default=1, help="input sets per workload for the correctness check")
    parser.add_argument("--no-copy", action="store_true", help="skip the same-size device copies")
    parser.add_argument("--vendor-error", action="store_true",
                        help="also measure the vendor library's worst error/bound on every workload")
    parser.add_argument("--out", type=Path, default=Path.cwd())
    args = parser.parse_args()

    task = get_task(args.kernel.stem)
    try:
        variants = [AS_IS] + [parse_variant(v) for v in args.variant]
        sources = variant_sources(args.kernel, variants)
    except ValueError as exc:
        parser.error(str(exc))
    if len({v.name for v in variants}) != len(variants):
        parser.error("variant names must be unique")
    candidates = [Candidate(task=task, item=v.name, source=source,
                            origin=" ".join([str(args.kernel), *(f"@{p.name}" for p in v.sources), str(v.overrides)]))
                  for v, source in zip(variants, sources)]
    options = EvalOptions(trials=args.trials, timing_budget_ms=args.budget_ms, profile=False, lanes=args.lanes)
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run"
        evaluations = evaluate_candidates(candidates, Arch(args.arch), run_dir, options)
        header = RunDir.load(run_dir).header

    workloads: list[str] = []
    rows: list[dict] = []
    byte_counts: dict[str, int] = {}
    for (name, overrides, replaced), evaluation in zip(variants, evaluations):
        status = (evaluation.status.value if evaluation.status
                  else f"infra: {evaluation.infra_failure.value if evaluation.infra_failure else None}")
        timings = {}
        for t in evaluation.timings:
            if t.workload not in workloads:
                workloads.append(t.workload)
            if t.gbps and t.tflops is None:
                byte_counts.setdefault(t.workload, round(t.gbps * 1e6 * t.candidate_ms))
            timings[t.workload] = {"ms": t.candidate_ms, "iqr_ms": t.candidate_iqr_ms, "baseline": t.baseline,
                                   "baseline_ms": t.baseline_ms,
                                   "pct_of_vendor": 100 * t.speedup if t.speedup else None,
                                   "pct_of_roofline": t.roofline_pct}
        rows.append({"name": name, "overrides": overrides, "sources": [p.name for p in replaced], "status": status,
                     "message": evaluation.message,
                     "timings": timings, "error_ratio": worst_error_ratios(evaluation.trials)})
    copy_ms: dict[str, float] = {}
    if byte_counts and not args.no_copy:
        copy_ms = dict(zip(byte_counts, same_bytes_copy_ms(list(byte_counts.values()))))
        for row in rows:
            for workload, timing in row["timings"].items():
                if workload in copy_ms:
                    timing["pct_of_copy"] = 100 * copy_ms[workload] / timing["ms"]
    vendor_error = vendor_error_ratios(task, args.trials) if args.vendor_error else {}
    result = {"date": header.created, "task": task.id, "kernel": str(args.kernel), "git_revision": header.git_revision,
              "command": "python benchmarks/kernel_variants.py " + " ".join(
                  [str(args.kernel)] + [f'--variant "{v}"' for v in args.variant]
                  + [f"--budget-ms {args.budget_ms:g}", f"--trials {args.trials}"]
                  + (["--vendor-error"] if args.vendor_error else [])),
              "trials": args.trials,
              "environment": dict(header.environment), "workloads": workloads, "byte_counts": byte_counts,
              "copy_ms": copy_ms, "variants": rows, "vendor_error_ratio": vendor_error}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"kernel_variants_{task.id}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = _markdown(result)
    (args.out / f"kernel_variants_{task.id}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
