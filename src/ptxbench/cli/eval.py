"""``ptxbench eval``: evaluate candidates on the GPUs into a resumable run directory, and print the verdicts.

The command checks what it was given and says so in one line; the evaluation itself is
``ptxbench.evaluate.fleet.run.evaluate_candidates``, or with ``--server`` ``ptxbench.client.evaluate_on_server``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ptxbench.arch.registry import Arch
from ptxbench.cli.files import candidates_in
from ptxbench.cli.options import Evidence, Server, ServerToken, TargetArch, benchmark_arch, local_gpus, server_token
from ptxbench.cli.output import console, fail, run_directory
from ptxbench.kernels import reference_folder

if TYPE_CHECKING:
    from ptxbench.evaluate.fleet.run import Candidate

_DEFAULT_OUT = Path("runs/eval")


def evaluate(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Candidate .cu files, directories of them, a "
                                                          "generate/run directory, or a generations .jsonl file")
                     ] = None,
    task: Annotated[str, typer.Option("--task", help="Task id for every file; 'auto': the file's name")] = "auto",
    arch: TargetArch = Arch.SM_90A,
    out: Annotated[Path, typer.Option("--out", help="Run directory (resumed if it exists)")] = _DEFAULT_OUT,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Fresh input sets per workload")] = 3,
    timing: Annotated[bool, typer.Option("--time/--no-time", help="Time against the vendor baseline")] = True,
    profile: Annotated[bool, typer.Option("--profile/--no-profile", help="Prove executed instructions with ncu")
                       ] = True,
    budget_ms: Annotated[Optional[float], typer.Option("--timing-budget-ms", min=1, help="Measured time per "
                                                       "workload and side [default: 100]")] = None,
    call_timeout_s: Annotated[float, typer.Option("--call-timeout-s")] = 60.0,
    regrade: Annotated[bool, typer.Option("--regrade", help="Recompute verdicts from the stored evidence; run "
                                          "nothing")] = False,
    repair: Annotated[bool, typer.Option("--repair", help="Rebuild the damaged run.json of the run given from its "
                                         "items' records; run nothing")] = False,
    gold: Annotated[bool, typer.Option("--gold", help="Evaluate the reference kernels shipped with the package "
                                       "(ptxbench/kernels/reference/<arch>)")] = False,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="Local GPUs to use, e.g. 0,1 (default: every "
                                                "visible GPU)")] = None,
    backend: Annotated[str, typer.Option("--backend", help="local: this machine's GPUs; ray: every GPU of a Ray "
                                         "cluster")] = "local",
    address: Annotated[Optional[str], typer.Option("--address", help="With --backend ray: the cluster (auto, "
                                                   "ray://host:10001); default: start Ray on this machine")] = None,
    lanes: Annotated[Optional[int], typer.Option("--lanes", min=1, max=16, help="Candidates evaluated at once on "
                                                 "each GPU (default 2): their untimed stages overlap, timing "
                                                 "always runs alone")] = None,
    server: Server = None,
    token: ServerToken = None,
    evidence: Evidence = "publish",
) -> None:
    """Evaluate candidates on the GPUs: correctness on every workload, guards, timing, executed features.

    --evidence publish (the default) gathers what a reported number needs; sweep what a loop's reward needs."""
    arch = benchmark_arch(arch)
    if repair:
        _repair(paths or [], gold, regrade, server)
        return
    from ptxbench.evaluate.evaluator import EvalOptions
    from ptxbench.evaluate.fleet.run import GpusRetired, Resumption, evaluate_candidates, gpu_available
    from ptxbench.records.evidence import EvidenceProfile
    from ptxbench.results.terminal import EvalProgress, all_rejected_note, verdict_table

    if server is not None:
        _server_fits(gpus, backend, address, regrade, lanes)
        chosen = None
    else:
        server_token(server, token)
        chosen = _chosen_gpus(gpus, backend, address, regrade)
    if gold:
        if paths:
            fail("--gold evaluates the bundled reference kernels: give no paths with it")
        paths = [reference_folder(arch.value)]
        if not paths[0].is_dir():
            fail(f"no reference kernels for {arch.value} yet ({paths[0]})")
        _say_tasks_without_reference(paths[0], arch)
    elif not paths:
        fail("give candidate files or folders to evaluate (or --gold for the bundled reference kernels)")
    candidates, out = _candidates(paths, task, out, regrade)
    if server is None and backend == "local" and not gpu_available() and not regrade:
        console.print("note: no CUDA GPU is visible: candidates are built and read statically, not run; each that "
                      "builds is recorded as an infrastructure failure (NO_GPU), never as the candidate's failure",
                      highlight=False)
    profile_of_evidence = EvidenceProfile(evidence or EvidenceProfile.PUBLISH.value)
    options = EvalOptions(trials=trials, time=timing, profile=profile, call_timeout_s=call_timeout_s,
                          evidence=profile_of_evidence,
                          **({"timing_budget_ms": budget_ms} if budget_ms is not None else {}),
                          **({"lanes": lanes} if lanes is not None else {}))
    retired = None
    resumption = Resumption()
    title = f"eval → {out}" + ("" if profile_of_evidence is EvidenceProfile.PUBLISH else " (evidence: sweep)")
    with EvalProgress(console, len(candidates), title) as progress:
        try:
            if server is not None:
                from ptxbench.client import Client, evaluate_on_server

                with Client(server, token) as client:
                    results = evaluate_on_server(candidates, arch, out, options, client, on_done=progress.done,
                                                 resumption=resumption)
            else:
                results = evaluate_candidates(candidates, arch, out, options, regrade=regrade, gpus=chosen,
                                              backend="ray" if backend == "ray" else "local", address=address,
                                              on_done=progress.done, resumption=resumption)
        except GpusRetired as exc:
            results, retired = exc.results, exc
    table, notes = verdict_table(results)
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    rejected = all_rejected_note(results, arch)
    if rejected is not None:
        console.print(rejected, highlight=False, markup=False)
    resumed = resumption.summary()
    if resumed is not None:
        console.print(resumed, highlight=False, markup=False)
    run_directory(out)
    if retired is not None:
        fail(str(retired))


def _repair(paths: list[Path], gold: bool, regrade: bool, server: Optional[str]) -> None:
    """``eval --repair RUN``: the run's damaged header rebuilt from its items, the damaged file kept beside it."""
    from ptxbench.records.rundir import repair_header

    if len(paths) != 1 or gold or regrade or server is not None:
        fail("--repair rebuilds one run directory's run.json: give the run directory alone (no --gold, --regrade "
             "or --server)")
    repaired = repair_header(paths[0])
    if repaired.damaged_kept is None:
        console.print(f"{paths[0] / 'run.json'} is intact: nothing to repair", highlight=False, markup=False)
        return
    header = repaired.header
    known = ", ".join(sorted(header.config)) or "nothing"
    console.print(f"{paths[0] / 'run.json'} rebuilt from {header.environment['rebuilt_from_items']} item(s): a "
                  f"{header.kind} run; its configuration holds what every item agrees on ({known}); the damaged "
                  f"file is kept as {repaired.damaged_kept}", highlight=False, markup=False)


def _say_tasks_without_reference(folder: Path, arch: Arch) -> None:
    """``--gold`` evaluates the references there are; the tasks that have none for ``arch`` are named."""
    from ptxbench.tasks.loader import bundled_suite

    present = {file.stem for file in folder.glob("*.cu")}
    missing = sorted(task.id for task in bundled_suite() if task.id not in present)
    if missing:
        console.print(f"note: {len(missing)} of the suite's tasks have no reference kernel for {arch.value} yet, so "
                      f"--gold does not evaluate them: {', '.join(missing)}", highlight=False, markup=False)


def _server_fits(gpus: Optional[str], backend: str, address: Optional[str], regrade: bool,
                 lanes: Optional[int]) -> None:
    """With --server the server's GPUs evaluate: the options that choose local ones do not apply."""
    given = [name for name, value in (("--gpus", gpus), ("--address", address), ("--lanes", lanes)) if value is not None]
    given += ["--backend"] if backend != "local" else []
    given += ["--regrade"] if regrade else []
    if given:
        fail(f"--server evaluates on the server's GPUs: {', '.join(given)} do(es) not apply (the server's own "
             "--gpus and --lanes do; --regrade runs here, without --server)")


def _chosen_gpus(gpus: Optional[str], backend: str, address: Optional[str], regrade: bool) -> Optional[list[int]]:
    """The local GPUs ``--gpus`` names (None: every visible one), after checking it fits ``--backend``."""
    if backend not in ("local", "ray"):
        fail(f"--backend is local or ray, not {backend!r}")
    if backend == "ray" and gpus is not None:
        fail("--gpus chooses GPUs of this machine; with --backend ray every GPU of the cluster is used")
    if backend == "local" and address is not None:
        fail("--address names a Ray cluster: use it with --backend ray")
    return local_gpus(gpus, visible_only=not regrade)


def _candidates(paths: list[Path], task: str, out: Path, regrade: bool) -> tuple[list[Candidate], Path]:
    """Every candidate the paths hold, and the run directory they go to (``eval RUN --regrade``: RUN itself)."""
    from ptxbench.evaluate.fleet.run import candidates_from_eval_run, candidates_from_run, is_eval_run
    from ptxbench.refine.generations import candidates_from_generations
    from ptxbench.tasks.loader import get_task

    candidates: list[Candidate] = []
    for path in paths:
        if regrade and is_eval_run(path):  # `eval RUN --regrade`: an eval run's verdicts recomputed in place
            if len(paths) > 1 or out not in (_DEFAULT_OUT, path):
                fail(f"--regrade recomputes the eval run {path} in place: give it alone, with no other --out")
            candidates += candidates_from_eval_run(path, [] if task == "auto" else [get_task(task)])
            out = path
        elif (path / "run.json").is_file():
            candidates += candidates_from_run(path)
        elif path.suffix == ".jsonl":
            candidates += candidates_from_generations(path)
        else:
            candidates += candidates_in(path, task, get_task)
    if not candidates:
        fail("nothing to evaluate: " + ", ".join(str(p) for p in paths) + " held no candidate with a known task")
    return candidates, out
