"""The ``ptxbench`` command: a thin layer over the Python API. Rendering lives here, logic does not."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ptxbench.arch.registry import Arch
from ptxbench.errors import PtxbenchError
from ptxbench.kernels import reference_folder

if TYPE_CHECKING:
    from ptxbench.tasks.model import Task

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?")
tasks_app = typer.Typer(no_args_is_help=True, help="The bundled task suite.")
app.add_typer(tasks_app, name="tasks")
fixit_app = typer.Typer(no_args_is_help=True, help="Fixit: mine failures, repair, explain, build an SFT set, train, evaluate.")
app.add_typer(fixit_app, name="fixit")
cache_app = typer.Typer(no_args_is_help=True, help="The build cache: its size, and removing entries (oldest use first).")
app.add_typer(cache_app, name="cache")
console = Console()
errors = Console(stderr=True)  # errors and warnings go to stderr, so piped results stay clean


def _fail(message: str) -> None:
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _benchmark_arch(arch: Arch) -> Arch:
    """Generation and evaluation target a benchmark arch; a plain one (sm_90) is for `check` to diagnose."""
    if not arch.is_arch_specific:
        _fail(f"--arch {arch.value} is the plain target, without the arch-specific features the tasks require: "
              f"use --arch {arch.specific.value} (`ptxbench check --arch {arch.value}` shows why a kernel fails there)")
    return arch


def _context_condition(value: str) -> str:
    from ptxbench.prompts.conversation import ContextCondition

    choices = [c.value for c in ContextCondition]
    if value not in choices:
        _fail(f"--context is {', '.join(choices[:-1])} or {choices[-1]}, not {value!r}")
    return value


def _one_shot_spec(value: Optional[str]) -> Optional[str]:
    """Checked before anything runs, so a malformed spec leaves no run directory behind."""
    if value is not None:
        from ptxbench.refine.loop import one_shot_parts

        try:
            one_shot_parts(value)
        except PtxbenchError as exc:
            _fail(str(exc))
    return value


_TARGET = typer.Option(Arch.SM_90A, "--arch", callback=_benchmark_arch,
                       metavar="<" + "|".join(a.value for a in Arch if a.is_arch_specific) + ">")
_CONTEXT = typer.Option("none", "--context", callback=_context_condition, metavar="<none|arch|full>",
                        help="The task alone; + the target's feature table; + the guide and the wrapper header")
_ONE_SHOT = typer.Option(None, "--one-shot", callback=_one_shot_spec, help="TASK:FILE worked example")


def _version(shown: bool) -> None:
    if shown:
        from ptxbench import __version__

        console.print(f"ptxbench {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?"""


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
    """Check the toolchain, the GPU and the versions; say what is missing and how to get it."""
    from ptxbench.doctor import run_doctor

    report = run_doctor()
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    table = Table("check", "ok", "detail / fix")
    for check in report.checks:
        table.add_row(check.name, "[green]yes[/green]" if check.ok else "[red]no[/red]",
                      check.detail if check.ok else f"{check.detail} — {check.fix or ''}")
    console.print(f"ptxbench {report.ptxbench} on Python {report.python}")
    console.print(table)
    console.print("static checks (ptxbench check): " + ("[green]ready[/green]" if report.can_check else "[red]not ready[/red]"))


@tasks_app.command("list")
def tasks_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the bundled tasks."""
    from ptxbench.tasks.loader import bundled_suite

    suite = bundled_suite()
    if as_json:
        print(json.dumps([{"id": t.id, "family": t.family.value, "title": t.title, "hash": t.content_hash}
                          for t in suite], indent=2))
        return
    warned = {t.id for t in suite if _weak_baseline(t) is not None}
    table = Table("id", "family", "title")  # the title takes the width the short columns leave (80 in a pipe)
    table.add_column("workloads (timed / visible / held-out)", max_width=10)
    for task in suite:
        visible = len(task.shown()) - 1
        marked = f"{task.id} {_WEAK_MARK}" if task.id in warned else task.id
        table.add_row(marked, task.family.value, task.title, f"1 / {visible} / {len(task.held_out())}")
    console.print(table)
    if warned:
        console.print(f"{_WEAK_MARK} weak baseline: the best vendor baseline is under {_weak_pct():.0f} % of its "
                      "roofline, so the speedup says little (`ptxbench tasks show TASK` says where)", highlight=False)


_WEAK_MARK = "*"  # beside a task id in `tasks list`; the legend says what it means


def _weak_pct() -> float:
    from ptxbench.evaluate.baselines import WEAK_BASELINE_PCT

    return WEAK_BASELINE_PCT


def _weak_baseline(task: Task) -> str | None:
    """The published weak-baseline warning for the task, if its best baseline was measured weak."""
    from ptxbench.evaluate.baselines import load_baseline_quality, weak_baseline_warning

    return weak_baseline_warning(task, load_baseline_quality())


@tasks_app.command("show")
def tasks_show(task: str = typer.Argument(..., help="Task id or path to a task .toml"),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """Show one task in full (held-out workloads included: this is the maintainer's view)."""
    from ptxbench.tasks.loader import get_task

    loaded = get_task(task)
    warning = _weak_baseline(loaded)
    if as_json:
        print(json.dumps({**loaded.model_dump(mode="json"), "baseline_warning": warning}, indent=2))
        return
    from ptxbench.results.terminal import render_task

    render_task(console, loaded, warning)


@app.command()
def prompt(task: str = typer.Argument(..., help="Task id or path to a task .toml"),
           arch: Arch = _TARGET, context: str = _CONTEXT, one_shot: Optional[str] = _ONE_SHOT,
           as_json: bool = typer.Option(False, "--json", help="The messages as JSON, exactly as sent")) -> None:
    """Print exactly what a model is given for TASK (the opening conversation of every sample)."""
    from ptxbench.prompts.conversation import ContextCondition, build_conversation
    from ptxbench.refine.loop import load_one_shot
    from ptxbench.tasks.loader import get_task

    messages = build_conversation(get_task(task), arch, ContextCondition(context), load_one_shot(one_shot))
    if as_json:
        print(json.dumps([m.model_dump() for m in messages], indent=2))
        return
    for message in messages:
        print(f"===== {message.role} =====")
        print(message.content)


@app.command()
def check(
    files: list[Path] = typer.Argument(..., help="Candidate .cu files (or directories of them)"),
    task: Optional[str] = typer.Option(None, "--task", help="Judge against this task's requirements; "
                                       "'auto' takes the task whose id is the file's name"),
    arch: Arch = typer.Option(Arch.SM_90A, "--arch", help="Target (sm_90 / sm_100 only to diagnose)"),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON"),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="Parallel builds (default: CPU count)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild even if an identical build is cached"),
) -> None:
    """Compile candidates for one target and report their PTX/SASS evidence (no GPU needed)."""
    from ptxbench.check import check_files
    from ptxbench.results.terminal import render_check
    from ptxbench.tasks.loader import get_task

    paths = _expand(files)
    items = [(path, _task_for(path, task, get_task)) for path in paths]
    reports = check_files(items, arch, jobs=jobs, use_cache=not no_cache)
    if as_json:
        payload = [json.loads(r.model_dump_json()) for r in reports]
        print(json.dumps(payload if len(payload) > 1 else payload[0], indent=2))
    else:
        for report in reports:
            render_check(console, report)
    if not all(r.build.ok for r in reports):
        raise typer.Exit(1)


@app.command("eval")
def evaluate(
    paths: Optional[list[Path]] = typer.Argument(None, help="Candidate .cu files, directories of them, a generate/run "
                                                 "directory, or a generations .jsonl file"),
    task: Optional[str] = typer.Option("auto", "--task", help="Task id for every file; 'auto': the file's name"),
    arch: Arch = _TARGET,
    out: Path = typer.Option(Path("runs/eval"), "--out", help="Run directory (resumed if it exists)"),
    trials: int = typer.Option(3, "--trials", min=1, help="Fresh input sets per workload"),
    timing: bool = typer.Option(True, "--time/--no-time", help="Time against the vendor baseline"),
    profile: bool = typer.Option(True, "--profile/--no-profile", help="Prove executed instructions with ncu"),
    budget_ms: Optional[float] = typer.Option(None, "--timing-budget-ms", min=1,
                                              help="Measured time per workload and side [default: 100]"),
    call_timeout_s: float = typer.Option(60.0, "--call-timeout-s"),
    regrade: bool = typer.Option(False, "--regrade", help="Recompute verdicts from the stored evidence; run nothing"),
    gold: bool = typer.Option(False, "--gold", help="Evaluate the reference kernels shipped with the package "
                              "(ptxbench/kernels/reference/<arch>)"),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Local GPUs to use, e.g. 0,1 (default: every visible GPU)"),
    backend: str = typer.Option("local", "--backend", help="local: this machine's GPUs; ray: every GPU of a Ray cluster"),
    address: Optional[str] = typer.Option(None, "--address", help="With --backend ray: the cluster (auto, "
                                          "ray://host:10001); default: start Ray on this machine"),
    lanes: Optional[int] = typer.Option(None, "--lanes", min=1, max=16, help="Candidates evaluated at once on each "
                                        "GPU (default 2): their untimed stages overlap, timing always runs alone"),
) -> None:
    """Evaluate candidates on the GPUs: correctness on every workload, guards, timing, executed features."""
    from ptxbench.evaluate.evaluator import EvalOptions
    from ptxbench.evaluate.fleet.pool import parse_gpus, visible_gpu_count
    from ptxbench.evaluate.fleet.run import (
        GpusRetired,
        candidates_from_eval_run,
        candidates_from_run,
        evaluate_candidates,
        gpu_available,
        is_eval_run,
    )
    from ptxbench.refine.generations import candidates_from_generations
    from ptxbench.results.terminal import STAGE_LABEL, EvalProgress, all_rejected_note
    from ptxbench.tasks.loader import get_task

    if backend not in ("local", "ray"):
        _fail(f"--backend is local or ray, not {backend!r}")
    if backend == "ray" and gpus is not None:
        _fail("--gpus chooses GPUs of this machine; with --backend ray every GPU of the cluster is used")
    if backend == "local" and address is not None:
        _fail("--address names a Ray cluster: use it with --backend ray")
    try:
        chosen = parse_gpus(gpus) if gpus is not None else None
    except PtxbenchError as exc:
        _fail(str(exc))
        return
    if chosen is not None and not regrade:
        visible = visible_gpu_count()
        unseen = [i for i in chosen if i >= visible]
        if unseen:
            _fail(f"--gpus {gpus}: GPU {unseen[0]} is not visible ({visible} GPU(s) visible, numbered from 0)")

    if gold:
        if paths:
            _fail("--gold evaluates the bundled reference kernels: give no paths with it")
        paths = [reference_folder(arch.value)]
        if not paths[0].is_dir():
            _fail(f"no reference kernels for {arch.value} yet ({paths[0]})")
    elif not paths:
        _fail("give candidate files or folders to evaluate (or --gold for the bundled reference kernels)")
    candidates = []
    for path in paths:
        if regrade and is_eval_run(path):  # `eval RUN --regrade`: an eval run's verdicts recomputed in place
            if len(paths) > 1 or out not in (Path("runs/eval"), path):
                _fail(f"--regrade recomputes the eval run {path} in place: give it alone, with no other --out")
            candidates += candidates_from_eval_run(path)
            out = path
        elif (path / "run.json").is_file():
            candidates += candidates_from_run(path)
        elif path.suffix == ".jsonl":
            candidates += candidates_from_generations(path)
        else:
            candidates += _candidates_in(path, task, get_task)
    if not candidates:
        _fail("nothing to evaluate: " + ", ".join(str(p) for p in paths) + " held no candidate with a known task")
    if backend == "local" and not gpu_available() and not regrade:
        console.print("note: no CUDA GPU is visible: candidates are built and read statically, not run; each that "
                      "builds is recorded as an infrastructure failure (NO_GPU), never as the candidate's failure",
                      highlight=False)
    options = EvalOptions(trials=trials, time=timing, profile=profile, call_timeout_s=call_timeout_s,
                          **({"timing_budget_ms": budget_ms} if budget_ms is not None else {}),
                          **({"lanes": lanes} if lanes is not None else {}))
    retired = None
    with EvalProgress(console, len(candidates), f"eval → {out}") as progress:
        try:
            results = evaluate_candidates(candidates, arch, out, options, regrade=regrade, gpus=chosen,
                                          backend="ray" if backend == "ray" else "local", address=address,
                                          on_done=progress.done)
        except GpusRetired as exc:
            results, retired = exc.results, exc
    table = Table("candidate", "task", "status", "detail")
    for result in results:
        verdict = result.verdict
        detail = result.message
        if result.status is None and result.static is not None:  # no GPU: say what the binary shows
            detail = "static only: " + "; ".join(f"{r.requirement.label} {STAGE_LABEL[r.stage]}"
                                                 for r in result.static.requirements)
        table.add_row(Path(result.candidate).name, result.task, verdict, detail[:160])
    console.print(table)
    rejected = all_rejected_note(results, arch)
    if rejected is not None:
        console.print(rejected, highlight=False, markup=False)
    _run_directory(out)
    if retired is not None:
        _fail(str(retired))


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory (eval, run or generate)"),
           out: Optional[Path] = typer.Option(None, "--out", help="Where to write report.md and report.html")) -> None:
    """Write a Markdown report and one self-contained HTML page with plots for a run."""
    from ptxbench.results.report import PLOTS_NEED_MATPLOTLIB, plots_available, write_report

    files = write_report(run_dir, out)
    if not plots_available():
        errors.print(f"note: {PLOTS_NEED_MATPLOTLIB}; the report has its tables, without plots", markup=False,
                     highlight=False, soft_wrap=True)
    console.print(f"wrote {files[0]} and {files[1]}", highlight=False)


@app.command()
def metrics(runs: list[Path] = typer.Argument(..., help="Run directories"),
            by: str = typer.Option("task", "--by", help="Comma-separated grouping fields, e.g. model,condition; '' for all"),
            k: int = typer.Option(1, "-k", min=1), bootstrap: int = typer.Option(1000, "--bootstrap", min=0),
            as_json: bool = typer.Option(False, "--json", help="The summaries as JSON (a rate not measured is null)")
            ) -> None:
    """Metrics with 95 % bootstrap intervals (pass@k, fast_p, speedup, generalization) as Markdown; a rate
    that nothing measured reads – (null in JSON), never 0."""
    from ptxbench.results.attempts import attempts_from_run
    from ptxbench.results.metrics import summarize, summary_table

    attempts = [a for run_dir in runs for a in attempts_from_run(run_dir)]
    groups = tuple(field for field in by.split(",") if field)
    summaries = summarize(attempts, by=groups, k=k, bootstrap=bootstrap)
    if as_json:
        print(json.dumps([json.loads(s.model_dump_json()) for s in summaries], indent=2))
        return
    print(summary_table(summaries))


@app.command()
def compare(run_a: Path = typer.Argument(...), run_b: Path = typer.Argument(...),
            metric: str = typer.Option("correct", "--metric", help="compile | correct | features_executed | fast_1.0 ..."),
            k: int = typer.Option(1, "-k", min=1)) -> None:
    """Compare two runs task by task (context ablation, base vs fine-tuned) with a paired test."""
    from ptxbench.results.compare import compare_command

    print(compare_command(run_a, run_b, metric, k))


@app.command()
def leaderboard(runs: list[Path] = typer.Argument(...), metric: str = typer.Option("fast_1.0", "--metric")) -> None:
    """Rank runs (models or conditions) on the tasks they all attempted."""
    from ptxbench.results.compare import leaderboard_command

    print(leaderboard_command(runs, metric))


@cache_app.command("info")
def cache_info(as_json: bool = typer.Option(False, "--json", help="Print it as JSON.")) -> None:
    """Where the build cache is, how many entries and bytes it holds, and its size limit."""
    from ptxbench.toolchain.build_cache import MAX_SIZE_VARIABLE, human, info

    held = info()
    if as_json:
        print(held.model_dump_json(indent=2))
        return
    limit = "no limit" if held.max_bytes is None else f"limit {human(held.max_bytes)}"
    console.print(f"build cache: {held.location}", highlight=False)
    console.print(f"{_entries(held.entries)}, {human(held.bytes)} ({limit}; {MAX_SIZE_VARIABLE} sets it)", highlight=False)
    if held.entries:
        console.print(f"last used: oldest {held.oldest_use}, newest {held.newest_use}", highlight=False)
    if held.unfinished:
        console.print(f"{held.unfinished} folder(s) of builds in progress or interrupted", highlight=False)


@cache_app.command("prune")
def cache_prune(max_size: Optional[str] = typer.Option(None, "--max-size", help="Keep at most this much, e.g. 500M "
                                                       "or 2G [default: the cache's limit]")) -> None:
    """Remove build cache entries, the longest unused first, until the cache is within a size."""
    from ptxbench.toolchain.build_cache import cache_dir, human, max_bytes, parse_size, prune

    limit = parse_size(max_size) if max_size is not None else max_bytes()
    if limit is None:
        _fail("the build cache has no size limit: give --max-size SIZE")
        return
    done = prune(limit)
    console.print(f"removed {_entries(done.removed)} ({human(done.freed_bytes)}), the longest unused first; "
                  f"{_entries(done.entries)} ({human(done.bytes)}) left in {cache_dir()}", highlight=False)


@cache_app.command("clear")
def cache_clear() -> None:
    """Remove every build cache entry (baseline times and the integrity key are kept)."""
    from ptxbench.toolchain.build_cache import cache_dir, clear, human

    done = clear()
    console.print(f"removed {_entries(done.removed)} ({human(done.freed_bytes)}) from {cache_dir()}", highlight=False)


def _entries(count: int) -> str:
    return "1 entry" if count == 1 else f"{count} entries"


def _grader_for_refinement():  # type: ignore[no-untyped-def]
    """The GPU grader where a GPU is visible, else the static grader (and say so)."""
    from ptxbench.refine.graders import StaticGrader, grader_for_this_machine

    grader = grader_for_this_machine()
    if isinstance(grader, StaticGrader):
        console.print(_static_evaluation_note(), highlight=False)
    return grader


@fixit_app.command("mine")
def fixit_mine(runs: list[Path] = typer.Argument(..., help="Run directories (run or eval)"),
               out: Path = typer.Option(Path("fixit/failures.jsonl"), "--out"),
               pairs_out: Optional[Path] = typer.Option(None, "--own-repairs", help="Also write the model's own later fixes here"),
               per_task: Optional[int] = typer.Option(None, "--per-task"), per_class: Optional[int] = typer.Option(None, "--per-class"),
               seed: int = typer.Option(0, "--seed")) -> None:
    """Collect failed kernels with their diagnostics (capped per task and error class)."""
    from ptxbench._io import write_jsonl
    from ptxbench.fixit.mine import harvest_own_repairs, mine_failures

    failures = mine_failures(runs, per_task=per_task, per_class=per_class, seed=seed)
    write_jsonl(out, failures)
    console.print(f"{len(failures)} failures → {out}", highlight=False)
    if pairs_out is not None:
        pairs = harvest_own_repairs(runs)
        write_jsonl(pairs_out, pairs)
        console.print(f"{len(pairs)} own repairs → {pairs_out}", highlight=False)


@fixit_app.command("repair")
def fixit_repair(failures: Path = typer.Argument(...), teacher: str = typer.Option(..., "--teacher"),
                 out: Path = typer.Option(Path("fixit/pairs.jsonl"), "--out"),
                 work: Path = typer.Option(Path("fixit/repairs"), "--work", help="Run directory of the repair turns"),
                 turns: int = typer.Option(3, "--turns", min=1), base_url: Optional[str] = typer.Option(None, "--base-url")) -> None:
    """A teacher model fixes each failure through the refinement loop; only fixes that pass are kept."""
    from ptxbench._io import read_jsonl, write_jsonl
    from ptxbench.fixit.mine import FailureCase
    from ptxbench.fixit.repair import repair

    pairs = repair(read_jsonl(failures, FailureCase), teacher, work, _grader_for_refinement(), turns=turns,
                   base_url=base_url)
    write_jsonl(out, pairs)
    verified = sum(p.verified for p in pairs)
    console.print(f"{len(pairs)} repairs kept ({verified} verified on a GPU) → {out}", highlight=False)


@fixit_app.command("explain")
def fixit_explain(pairs: Path = typer.Argument(...), teacher: str = typer.Option(..., "--teacher"),
                  out: Path = typer.Option(Path("fixit/explained.jsonl"), "--out"),
                  base_url: Optional[str] = typer.Option(None, "--base-url")) -> None:
    """The teacher explains each repair; empty, generic or ungrounded explanations are rejected."""
    from ptxbench._io import read_jsonl, write_jsonl
    from ptxbench.fixit.mine import RepairPair
    from ptxbench.fixit.repair import explain

    kept, rejected = explain(read_jsonl(pairs, RepairPair), teacher, base_url=base_url)
    write_jsonl(out, kept)
    console.print(f"{len(kept)} explained → {out}; rejected: {rejected or 'none'}", highlight=False)


@fixit_app.command("build")
def fixit_build(pairs: list[Path] = typer.Argument(..., help="Explained pairs (.jsonl)"),
                out: Path = typer.Option(Path("fixit/data"), "--out"),
                holdout_tasks: str = typer.Option("", "--holdout-tasks", help="Comma-separated task ids kept for testing"),
                holdout_families: str = typer.Option("", "--holdout-families", help="Comma-separated families (variants)"),
                per_cell: Optional[int] = typer.Option(None, "--per-cell", help="Cap per family x error class"),
                allow_unverified: bool = typer.Option(False, "--allow-unverified"),
                formats: str = typer.Option("jsonl", "--format", help="Comma-separated: jsonl, parquet, hf"),
                seed: int = typer.Option(0, "--seed")) -> None:
    """Deduplicate, balance, split and export the SFT set with its data card."""
    from ptxbench._io import read_jsonl
    from ptxbench.fixit.dataset import build_dataset, export
    from ptxbench.fixit.mine import RepairPair

    loaded = [pair for path in pairs for pair in read_jsonl(path, RepairPair)]
    records, card = build_dataset(loaded, holdout_tasks=tuple(t for t in holdout_tasks.split(",") if t),
                                  holdout_families=tuple(f for f in holdout_families.split(",") if f),
                                  per_cell=per_cell, require_verified=not allow_unverified, seed=seed)
    files = export(records, card, out, formats=tuple(f for f in formats.split(",") if f))
    console.print(f"{card.records} records → {', '.join(str(f) for f in files)}", highlight=False)


@fixit_app.command("train")
def fixit_train(config: Path = typer.Argument(..., help="Training config (.toml or .json)"),
                overwrite: bool = typer.Option(False, "--overwrite")) -> None:
    """Fine-tune with LoRA (TRL SFTTrainer + PEFT) on the exported set; saves the adapter and exact config."""
    from ptxbench.fixit.train import load_train_config, train

    result = train(load_train_config(config), overwrite=overwrite)
    console.print(f"trained {result.steps} steps, final loss {result.final_loss:.4f}", highlight=False)


@fixit_app.command("eval")
def fixit_eval(base: str = typer.Option(..., "--base", help="Base model path or id (local Hugging Face)"),
               adapter: Path = typer.Option(..., "--adapter"), tasks: str = typer.Option(..., "--tasks"),
               out: Path = typer.Option(Path("fixit/eval"), "--out"), samples: int = typer.Option(1, "--samples", min=1),
               turns: int = typer.Option(1, "--turns", min=1), max_tokens: int = typer.Option(4096, "--max-tokens")) -> None:
    """The benchmark with the base model and with the adapter; prints the paired comparison."""
    from ptxbench.fixit.evaluate import evaluate_adapter

    _, _, table = evaluate_adapter(base, adapter, [t for t in tasks.split(",") if t], out, samples=samples, turns=turns,
                                   grader=_grader_for_refinement(), max_tokens=max_tokens)
    print(table)


@fixit_app.command("ablation")
def fixit_ablation(config: Path = typer.Argument(..., help="Ablation config (.toml), e.g. experiments/fixit_diversity_vs_volume.toml"),
                   build_only: bool = typer.Option(False, "--build-only", help="Only build both arms' data sets")) -> None:
    """Diversity vs volume: train on a varied set and on an equally large unvaried one, evaluate both, compare."""
    from ptxbench.fixit.ablation import load_ablation, run_ablation

    summary = run_ablation(load_ablation(config), grader=None if build_only else _grader_for_refinement(),
                           build_only=build_only)
    for arm, facts in summary["arms"].items():
        console.print(f"{arm}: {facts['records']} records over {facts['cells']} family/class/task cells → {facts['data']}",
                      highlight=False)
    if "diverse_vs_volume" in summary:
        print(summary["diverse_vs_volume"])


def _static_evaluation_note() -> str:
    """Why `run` grades at the static stage only: there is no GPU to run candidates on."""
    return ("note: no CUDA GPU is visible, so candidates are graded at the static stage only (build + PTX/SASS); "
            "correctness and speed are not measured and no verdict is marked GPU-verified")


def _generation(command: str, model: str, tasks: str, arch: Arch, samples: int, turns: int, context: str,
                temperature: float, top_p: Optional[float], max_tokens: int, concurrency: int, out: Optional[Path],
                base_url: Optional[str], adapter: Optional[str], one_shot: Optional[str], dry_run: bool) -> None:
    from ptxbench.llm.types import SamplingParams
    from ptxbench.prompts.conversation import ContextCondition
    from ptxbench.refine.loop import RunConfig, execute, plan, provider_errors
    from ptxbench.tasks.loader import bundled_suite, get_task

    chosen = list(bundled_suite()) if tasks == "all" else [get_task(t.strip()) for t in tasks.split(",") if t.strip()]
    evaluate = command == "run"
    if not evaluate and turns != 1:
        _fail("generate samples only (one turn); multi-turn refinement needs evaluation: use `ptxbench run`")
    config = RunConfig(model=model, tasks=[t.id for t in chosen], arch=arch, samples=samples, turns=turns,
                       context=ContextCondition(context), concurrency=concurrency, base_url=base_url, adapter=adapter,
                       params=SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens),
                       one_shot=one_shot, evaluate=evaluate)
    if dry_run:
        shown = plan(chosen, config)
        for message in shown.first_messages:
            console.rule(f"{message.role}")
            console.print(message.content, highlight=False, markup=False)
        cost = "unknown (no price for this model)" if shown.cost_upper_bound_usd is None else f"${shown.cost_upper_bound_usd:,.2f}"
        console.print(f"dry run: {shown.items} items, at most {shown.max_requests} requests; first prompt ≈ "
                      f"{shown.input_tokens_first_turn:,} tokens; cost at most {cost}. Nothing was sent.")
        return
    from ptxbench.results.terminal import GenerationProgress

    grader = _grader_for_refinement() if evaluate else None
    target = out or Path("runs") / f"{command}-{model.replace(':', '-').replace('/', '_')}-{arch.value}-{context}"
    with GenerationProgress(console, len(chosen) * samples, f"{command} → {target}") as progress:
        try:
            results = execute(chosen, config, target, grader=grader, on_done=progress.done)
        finally:
            if grader is not None:
                grader.close()
    passed = sum(r.passed for r in results)
    errors = sum(1 for r in results if r.turns and r.turns[-1].completion.error)
    spent = [r.usage.cost_usd for r in results]
    cost = "unknown" if any(c is None for c in spent) else f"${sum(c for c in spent if c is not None):,.4f}"
    stage = "the GPU evaluation" if any(r.verified_on_gpu for r in results) else "the static stage"
    verdict = f"{passed}/{len(results)} passed {stage}" if evaluate else f"{len(results)} items sampled"
    reasons = "; ".join(f"{count}× {reason}" for reason, count in provider_errors(results))
    failed = f"{errors} ({reasons})" if errors else "0"
    console.print(f"{verdict}; provider errors: {failed}; cost {cost}", highlight=False, markup=False)
    _run_directory(target)


def _run_directory(path: Path) -> None:
    """The run's folder on a line of its own, never wrapped (a pipe is 80 columns): a path cut in two cannot
    be copied back into the next command."""
    console.print(f"run directory: {path}", highlight=False, markup=False, soft_wrap=True)


_MODEL = typer.Option(..., "--model", help="provider:name, e.g. openai:gpt-5, anthropic:claude-sonnet-4-5, "
                      "vllm:NAME (with --base-url), hf:PATH_OR_ID, replay:FILE.jsonl")
_TASKS = typer.Option("all", "--tasks", help="Comma-separated task ids, or 'all'")


@app.command()
def generate(model: str = _MODEL, tasks: str = _TASKS, arch: Arch = _TARGET,
             samples: int = typer.Option(1, "--samples", min=1), context: str = _CONTEXT,
             temperature: float = typer.Option(0.7, "--temperature", min=0.0),
             top_p: Optional[float] = typer.Option(None, "--top-p"), max_tokens: int = typer.Option(16384, "--max-tokens"),
             concurrency: int = typer.Option(4, "--concurrency", min=1), out: Optional[Path] = typer.Option(None, "--out"),
             base_url: Optional[str] = typer.Option(None, "--base-url"), adapter: Optional[str] = typer.Option(None, "--adapter"),
             one_shot: Optional[str] = _ONE_SHOT,
             dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be sent and its cost; send nothing")) -> None:
    """Sample candidates from a model (no evaluation)."""
    _generation("generate", model, tasks, arch, samples, 1, context, temperature, top_p, max_tokens, concurrency, out,
                base_url, adapter, one_shot, dry_run)


@app.command()
def run(model: str = _MODEL, tasks: str = _TASKS, arch: Arch = _TARGET,
        samples: int = typer.Option(1, "--samples", min=1), turns: int = typer.Option(1, "--turns", min=1),
        context: str = _CONTEXT, temperature: float = typer.Option(0.7, "--temperature", min=0.0),
        top_p: Optional[float] = typer.Option(None, "--top-p"), max_tokens: int = typer.Option(16384, "--max-tokens"),
        concurrency: int = typer.Option(4, "--concurrency", min=1), out: Optional[Path] = typer.Option(None, "--out"),
        base_url: Optional[str] = typer.Option(None, "--base-url"), adapter: Optional[str] = typer.Option(None, "--adapter"),
        one_shot: Optional[str] = _ONE_SHOT,
        dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be sent and its cost; send nothing")) -> None:
    """Generate and evaluate, refining over --turns with the evaluator's feedback (the main job)."""
    _generation("run", model, tasks, arch, samples, turns, context, temperature, top_p, max_tokens, concurrency, out,
                base_url, adapter, one_shot, dry_run)


def _expand(files: list[Path]) -> list[Path]:
    paths: list[Path] = []
    for item in files:
        if item.is_dir():
            paths += sorted(item.glob("*.cu"))
        elif item.exists():
            paths.append(item)
        else:
            _fail(f"{item}: no such file or directory")
    if not paths:
        _fail("no candidate files (*.cu) found in " + ", ".join(str(f) for f in files))
    return paths


def _candidates_in(path: Path, task: str, get_task):  # type: ignore[no-untyped-def]
    """The candidate files of ``path``; with ``--task auto`` a file whose name is no task is skipped with a
    warning saying so, and the folder's other files are still evaluated."""
    from ptxbench.evaluate.fleet.run import candidate_from_file

    found = []
    for file in _expand([path]):
        try:
            chosen = get_task(file.stem if task == "auto" else task)
        except PtxbenchError as exc:
            if task != "auto":
                raise
            errors.print(f"[yellow]warning:[/yellow] {file}: skipped: its task is taken from the file name "
                         f"({file.stem!r}), which names no task ({exc}); pass --task TASK", highlight=False,
                         soft_wrap=True)
            continue
        found.append(candidate_from_file(file, chosen))
    return found


def _task_for(path: Path, task: str | None, get_task):  # type: ignore[no-untyped-def]
    if task is None:
        return None
    return get_task(path.stem if task == "auto" else task)


def _bare_flags(command) -> None:  # type: ignore[no-untyped-def]
    """typer's help labels every on/off flag ``<bool>``, as if it took a value, which it refuses
    (``--dry-run true``): show the flags of ``command`` and its subcommands bare, as what they are."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for subcommand in getattr(command, "commands", {}).values():
        _bare_flags(subcommand)


def main() -> None:
    try:
        command = typer.main.get_command(app)
        _bare_flags(command)
        command()
    except PtxbenchError as exc:
        errors.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
