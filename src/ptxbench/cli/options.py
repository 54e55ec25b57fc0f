"""Option types shared by several commands, declared once (``Annotated``) with their checks.

A check runs while the command line is parsed, so bad input fails with one line before anything runs
(and, for ``--one-shot``, before a run directory is created)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.arch.registry import Arch
from ptxbench.cli.output import fail
from ptxbench.errors import PtxbenchError


def benchmark_arch(arch: Arch) -> Arch:
    """Generation and evaluation target a benchmark arch; a plain one (sm_90) is for `check` to diagnose."""
    if not arch.is_arch_specific:
        fail(f"--arch {arch.value} is the plain target, without the arch-specific features the tasks require: "
             f"use --arch {arch.specific.value} (`ptxbench check --arch {arch.value}` shows why a kernel fails there)")
    return arch


def local_gpus(spec: Optional[str], *, visible_only: bool = True) -> Optional[list[int]]:
    """The GPUs of this machine that ``--gpus`` names (None: every visible one); one line for a malformed list or,
    with ``visible_only``, for a GPU this machine does not show."""
    from ptxbench.evaluate.fleet.pool import parse_gpus, visible_gpu_count

    if spec is None:
        return None
    try:
        chosen = parse_gpus(spec)
    except PtxbenchError as exc:
        fail(str(exc))
    if visible_only:
        visible = visible_gpu_count()
        unseen = [i for i in chosen if i >= visible]
        if unseen:
            fail(f"--gpus {spec}: GPU {unseen[0]} is not visible ({visible} GPU(s) visible, numbered from 0)")
    return chosen


def context_condition(value: str) -> str:
    from ptxbench.prompts.conversation import ContextCondition

    choices = [c.value for c in ContextCondition]
    if value not in choices:
        fail(f"--context is {', '.join(choices[:-1])} or {choices[-1]}, not {value!r}")
    return value


def one_shot_spec(value: Optional[str]) -> Optional[str]:
    """Checked before anything runs, so a malformed spec leaves no run directory behind."""
    if value is not None:
        from ptxbench.refine.loop import one_shot_parts

        try:
            one_shot_parts(value)
        except PtxbenchError as exc:
            fail(str(exc))
    return value


def server_token(server: Optional[str], token: Optional[str]) -> None:
    """A token typed on the command line without ``--server`` has nothing to open (one in the environment may)."""
    if server is None and token is not None and token != os.environ.get("PTXBENCH_SERVE_TOKEN"):
        fail("--server-token is the access token of a --server: give --server URL with it")


TargetArch = Annotated[Arch, typer.Option("--arch",
                                          metavar="<" + "|".join(a.value for a in Arch if a.is_arch_specific) + ">")]
"""A benchmark target (sm_90a, sm_100a); each command passes it through ``benchmark_arch`` first, which refuses
the plain targets with the reason. Not an option callback: typer versions differ in what they do with an enum
value a callback returns (one seen on the H200 turned it into None)."""
Context = Annotated[str, typer.Option("--context", callback=context_condition, metavar="<none|arch|full>",
                                      help="The task alone; + the target's feature table; + the guide and the "
                                           "wrapper header")]
OneShot = Annotated[Optional[str], typer.Option("--one-shot", callback=one_shot_spec, help="TASK:FILE worked example")]
TaskRef = Annotated[str, typer.Argument(help="Task id or path to a task .toml")]

# generate, run and fixit: which model, where
Model = Annotated[str, typer.Option("--model", help="provider:name, e.g. openai:gpt-5, anthropic:claude-sonnet-4-5, "
                                                    "vllm:NAME (with --base-url), hf:PATH_OR_ID, replay:FILE.jsonl")]
Tasks = Annotated[str, typer.Option("--tasks", help="Comma-separated task ids, or 'all'")]
Samples = Annotated[int, typer.Option("--samples", min=1)]
Turns = Annotated[int, typer.Option("--turns", min=1)]
Temperature = Annotated[float, typer.Option("--temperature", min=0.0)]
TopP = Annotated[Optional[float], typer.Option("--top-p")]
MaxTokens = Annotated[int, typer.Option("--max-tokens")]
Concurrency = Annotated[int, typer.Option("--concurrency", min=1)]
OutDir = Annotated[Optional[Path], typer.Option("--out")]
BaseUrl = Annotated[Optional[str], typer.Option("--base-url")]
Adapter = Annotated[Optional[str], typer.Option("--adapter")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print what would be sent and its cost; send nothing")]
Seed = Annotated[int, typer.Option("--seed")]

# eval, run and fixit: evaluate on a running `ptxbench serve` instead of this machine
Server = Annotated[Optional[str], typer.Option("--server", help="Evaluate on a running `ptxbench serve` (its URL) "
                                               "instead of this machine; the run directory is written here as "
                                               "without it")]
ServerToken = Annotated[Optional[str], typer.Option("--server-token", "--token", envvar="PTXBENCH_SERVE_TOKEN",
                                                    show_envvar=True, help="With --server: its access token")]


# Named --evidence, not --profile: --profile/--no-profile already turns ncu on and off.
EVIDENCE_HELP = ("Evidence profile: publish (every shown workload timed, ncu for every correct candidate: numbers to "
                 "report) or sweep (the same correctness and guards, the timed workload alone timed, ncu only within "
                 "2x the baseline's time: RL and repair loops)")


def evidence_profile(value: Optional[str]) -> Optional[str]:
    """Checked while the command line is parsed: publish or sweep (None: the command's default)."""
    from ptxbench.records.evidence import EvidenceProfile

    choices = [p.value for p in EvidenceProfile]
    if value is not None and value not in choices:
        fail(f"--evidence is {' or '.join(choices)}, not {value!r}")
    return value


Evidence = Annotated[Optional[str], typer.Option("--evidence", callback=evidence_profile, help=EVIDENCE_HELP)]
