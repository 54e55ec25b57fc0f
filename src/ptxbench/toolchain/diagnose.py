"""Classify a failed build from its log, and say what to do about it.

The classes (``records.build.CompileFailure``, in the ``Diagnosis`` a ``BuildResult`` carries) feed the error
taxonomy, the feedback a model gets in refinement, and Fixit. The patterns are the diagnostics of nvcc 13.0's
front end, ptxas and the host linker, checked by the tests against real failing builds.
"""

from __future__ import annotations

import re

from ptxbench.arch.registry import Arch, load_registry
from ptxbench.records.build import CompileFailure, Diagnosis

# Order matters: the first class whose pattern matches any error line wins.
_PATTERNS: list[tuple[CompileFailure, re.Pattern[str]]] = [
    (CompileFailure.UNSUPPORTED_ON_TARGET, re.compile(
        r"not supported on \.target|cannot be compiled for architecture|requires \.target|"
        r"not supported for \.target|Feature '.*' requires")),
    (CompileFailure.RESOURCE_LIMIT, re.compile(
        r"too much shared data|uses too much|[Oo]ut of (registers|resources)|exceeds .*limit|"
        r"too many resources|Entry function .* uses too much")),
    (CompileFailure.LINK_ERROR, re.compile(
        r"nvlink error|undefined reference|ld returned|cannot find -l|Unresolved extern function")),
    (CompileFailure.PTX_OPERAND, re.compile(
        r"Arguments mismatch|[Oo]perand .* mismatch|Incorrect number of arguments|"
        r"[Uu]nexpected (operand|argument)|type mismatch|Illegal operand type|Invalid operand|"
        r"[Uu]nexpected instruction types|[Mm]ismatch in (type|vector)")),
    (CompileFailure.PTX_SYNTAX, re.compile(
        r"ptxas.*(syntax error|Parsing error|Unknown modifier|Not a name of any known instruction|"
        r"[Uu]nknown symbol|[Uu]ndefined identifier|[Ii]llegal modifier|Label expected|"
        r"[Dd]uplicate definition|expected|error)")),
    (CompileFailure.CPP_ERROR, re.compile(r"error")),
]

_ERROR_LINE = re.compile(r"\berror\b|\bfatal\b|undefined reference", re.IGNORECASE)
_PTX_LINE = re.compile(r"\.ptx, line (\d+)")
_MISSING_NAME = re.compile(r'(?:has no member|identifier) "(\w+)"')  # EDG: namespace "ptx" has no member "X"
_UNSUPPORTED_INSTRUCTION = re.compile(r"Instruction '([^']+)' (?:not supported|cannot be compiled)")


def error_lines(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if _ERROR_LINE.search(line)]


def diagnose(log: str, arch: Arch, ptx_text: str | None = None) -> Diagnosis:
    """The failure class of a build that did not succeed, and a sentence a model or user can act on.

    ``ptx_text`` (the kept PTX, when the front end got that far) lets target errors be traced to the
    exact instruction ptxas refused, and so to the registry's advice for it.
    """
    errors = error_lines(log) or [line.strip() for line in log.splitlines() if line.strip()][-1:]
    for failure, pattern in _PATTERNS:
        hit = next((line for line in errors if pattern.search(line)), None)
        if hit is not None:
            if failure is CompileFailure.CPP_ERROR and (target := _target_only(errors, arch)) is not None:
                return target
            summary = _advice(failure, errors, arch, ptx_text)
            if failure is CompileFailure.UNSUPPORTED_ON_TARGET and not arch.is_arch_specific and \
                    arch.specific.value not in summary:
                summary += " " + _plain_target_hint(arch)
            return Diagnosis(failure=failure, summary=summary, first_error=_with_source_line(hit, ptx_text))
    return Diagnosis(failure=CompileFailure.CPP_ERROR, summary="the build failed; see the log",
                     first_error=errors[0] if errors else "")


_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*\binlined_at\s+(\d+)\s+(\d+))?")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.MULTILINE)


def _with_source_line(error: str, ptx_text: str | None) -> str:
    """A ptxas error ("candidate.ptx, line 35") with the source line the PTX came from, read from the
    ``.loc`` directives that ``-lineinfo`` puts before each statement: the PTX is the harness's file,
    the source line is the user's ("(source: candidate.cu(8))", inlined wrappers named at their call)."""
    match = _PTX_LINE.search(error)
    if match is None or not ptx_text:
        return error
    lines = ptx_text.splitlines()[:int(match.group(1))]
    loc = next((m for line in reversed(lines) if (m := _LOC.match(line))), None)
    if loc is None:
        return error
    files = {number: name.rsplit("/", 1)[-1] for number, name in _FILE.findall(ptx_text)}
    where = f"{files.get(loc.group(1), '?')}({loc.group(2)})"
    if loc.group(3) is not None:
        where += f", inlined at {files.get(loc.group(3), '?')}({loc.group(4)})"
    return f"{error} (source: {where})"


def _plain_target_hint(arch: Arch) -> str:
    return (f"{arch.value} is the plain target, without the arch-specific features; the benchmark builds for "
            f"{arch.specific.value} (ptxbench check --arch {arch.specific.value}).")


def _target_only(errors: list[str], arch: Arch) -> Diagnosis | None:
    """A C++ error that is really the target's: the code calls wrappers that ``ptx_wrappers.cuh`` defines
    only for other targets (on sm_90 its wgmma section is compiled out, so ``ptx::wgmma_fence`` is "no
    member"), or, on a plain target, the errors name the arch-specific one (``#error needs sm_90a``)."""
    from ptxbench.context.wrappers import HEADER_NAME, wrapper_targets

    missing: dict[str, frozenset[Arch]] = {}
    for line in errors:
        for name in _MISSING_NAME.findall(line):
            targets = wrapper_targets(name)
            if targets is not None and arch not in targets:
                missing.setdefault(name, targets)
    first = next((line for line in errors if any(f'"{name}"' in line for name in missing)), None)
    if first is not None:
        names = list(missing)
        listed = ", ".join(f"ptx::{n}" for n in names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
        families: dict[str, set[Arch]] = {}  # wgmma_fence -> wgmma, in the order the errors name them
        for name, targets in missing.items():
            families.setdefault(name.split("_")[0], set()).update(targets)
        defined = ", ".join(f"{family} for {' and '.join(t.value for t in Arch if t in targets)} only"
                            for family, targets in families.items())
        hints = list(dict.fromkeys(h for family in families for h in _target_hints([family], arch)))
        if not arch.is_arch_specific:  # every family's advice is the same there: build for the a-target
            hints = hints[:1] or [_plain_target_hint(arch)]
        summary = f"{listed} not available on {arch.value} ({HEADER_NAME} defines {defined})." + \
            "".join(f" {h}" for h in hints)
        return Diagnosis(failure=CompileFailure.UNSUPPORTED_ON_TARGET, summary=summary, first_error=first)
    if not arch.is_arch_specific:
        specific = re.compile(rf"\b(?:{arch.specific.value}|compute_{arch.specific.value[3:]})\b|__CUDA_ARCH_FEAT_")
        named = next((line for line in errors if specific.search(line)), None)
        if named is not None:
            return Diagnosis(failure=CompileFailure.UNSUPPORTED_ON_TARGET, first_error=named,
                             summary=f"the code needs {arch.specific.value} (its errors name it), which {arch.value} "
                             f"is not. {_plain_target_hint(arch)}")
    return None


def _advice(failure: CompileFailure, errors: list[str], arch: Arch, ptx_text: str | None) -> str:
    if failure is CompileFailure.UNSUPPORTED_ON_TARGET:
        instructions = sorted({m.group(1) for line in errors for m in _UNSUPPORTED_INSTRUCTION.finditer(line)})
        refused = _refused_ptx_instructions(errors, ptx_text)
        hints = _target_hints(instructions + refused, arch)
        listed = ", ".join(instructions or refused) or "some instructions"
        return f"{listed} not available on {arch.value}." + (" " + " ".join(hints) if hints else "")
    return {
        CompileFailure.RESOURCE_LIMIT: "a hardware resource limit was exceeded (shared memory, registers or "
        "parameter space): shrink tiles or stages, or request dynamic shared memory at launch.",
        CompileFailure.PTX_OPERAND: "inline PTX has operands of the wrong number, type or width for the "
        "instruction: check the accumulator count, register constraints and operand types.",
        CompileFailure.PTX_SYNTAX: "ptxas rejected the inline PTX: check instruction spelling, modifiers, "
        "labels (scope them with braces) and register declarations.",
        CompileFailure.LINK_ERROR: "the link failed: only the CUDA runtime is linked; define every function "
        "you call and use no libraries.",
        CompileFailure.CPP_ERROR: "the C++/CUDA source does not compile.",
    }.get(failure, "")


def _refused_ptx_instructions(errors: list[str], ptx_text: str | None) -> list[str]:
    """Full mnemonics of the PTX lines ptxas points at ("candidate.ptx, line 97; error ...")."""
    if not ptx_text:
        return []
    from ptxbench.static.ptx import instructions

    lines = ptx_text.splitlines()
    found: list[str] = []
    for error in errors:
        match = _PTX_LINE.search(error)
        if match and 0 < int(match.group(1)) <= len(lines):
            found += [m for m in instructions(lines[int(match.group(1)) - 1]) if m not in found]
    return found


def _target_hints(instructions: list[str], arch: Arch) -> list[str]:
    """Registry advice for instructions this target rejects (e.g. wgmma on sm_100a): a feature whose
    PTX pattern matches the refused instruction speaks first; otherwise the first feature of the
    instruction's family that carries advice for ``arch``."""
    registry = load_registry().features
    hints: list[str] = []
    for instruction in instructions:
        for feature in registry:
            advice = feature.rejected.get(arch)
            if advice and feature.in_ptx([instruction]) and advice not in hints:
                hints.append(advice)
                break
    if hints:
        return hints
    families = {instr.split(" ")[0].split(".")[0] for instr in instructions}
    for family in sorted(families):
        for feature in registry:
            advice = feature.rejected.get(arch)
            if advice and feature.ptx_family == family:
                hints.append(advice)
                break
    return hints
