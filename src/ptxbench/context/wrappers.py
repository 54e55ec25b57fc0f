"""``ptx_wrappers.cuh``, the PTX wrapper header a candidate may include, as the harness handles it.

The header ships in this package. ``inline_wrapper_header`` pastes it into a candidate in place of its
``#include`` (candidates are single files); ``wrapper_targets`` says which targets see a wrapper, for
the diagnoses; ``wrapper_header`` is the header without the other target's section, as the ``full``
prompt shows it. Prompt text is not here (``ptxbench.prompts.context``): this is what check and the
toolchain's diagnoses need, so it sits below them.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch

HEADER_NAME = "ptx_wrappers.cuh"


def check_target(arch: Arch) -> Arch:
    """``arch`` as a benchmark target; a plain one (sm_90) has no arch-specific section to show."""
    arch = Arch(arch)
    if arch not in BENCHMARK_ARCHS:
        raise ValueError(f"context packs exist for {', '.join(a.value for a in BENCHMARK_ARCHS)}, not {arch.value}")
    return arch


def _read(name: str) -> str:
    return resources.files("ptxbench.context").joinpath(name).read_text()


# An arch-only section of the header: its banner names the target, its #endif repeats it.
_SECTION = re.compile(r"// =+\n// (?P<arch>sm_\w+) only:.*?#endif  // (?P=arch) only\n\n?", re.DOTALL)


_WRAPPER_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:ptxbench/)?ptx_wrappers\.cuh[>"][^\n]*$', re.MULTILINE)


def inline_wrapper_header(source: str, *, line_directives: bool = True) -> str:
    """``source`` with ``#include "ptx_wrappers.cuh"`` replaced by the bundled header's text.

    Candidates are single files built in an empty folder; this lets a file on disk (the reference
    kernels, a one-shot example) use the header while the stored candidate stays exactly what was
    compiled. Only the bundled header is ever read, never a path the file names. ``#line`` directives
    keep the compiler's diagnostics in the file's own line numbers (and the header's, inside it); text
    that is only shown (a one-shot example in a prompt) goes without them.
    """
    from ptxbench.contract.signature import SOURCE_NAME

    match = _WRAPPER_INCLUDE.search(source)
    if match is None:
        return source
    # "#pragma once" in what is now the main file would draw a warning; a comment keeps the line numbers
    text = _read(HEADER_NAME).replace("#pragma once\n", "// (#pragma once: inlined into the main file)\n", 1)
    resumes_at = source.count("\n", 0, match.start()) + 2  # the line after the #include, in the file's numbering
    enter, leave = ("", "")
    if line_directives:
        enter, leave = f"#line 1 \"{HEADER_NAME}\"\n", f"\n#line {resumes_at} \"{SOURCE_NAME}\""
    block = (f"// ---- {HEADER_NAME} (inlined by PTXBench) ----\n{enter}{text.rstrip()}\n"
             f"// ---- end of {HEADER_NAME} ----{leave}")
    return source[:match.start()] + block + source[match.end():]


# A target-only section of the header, as the compiler sees it: its condition names the targets whose
# feature macro enables it for device code.
_GUARDED = re.compile(r"^#if (?P<condition>[^\n]*__CUDA_ARCH_FEAT_[^\n]*)\n(?P<body>.*?)^#endif\b",
                      re.DOTALL | re.MULTILINE)
_FEATURE_MACRO = re.compile(r"__CUDA_ARCH_FEAT_SM(\d+)_ALL")


@cache
def wrapper_targets(name: str) -> frozenset[Arch] | None:
    """The targets whose device code sees ``name`` of ``ptx_wrappers.cuh``, when the header defines it
    only in target-only sections; None when it is not there or visible everywhere (the common part)."""
    text = _read(HEADER_NAME)
    mentioned = re.compile(rf"\b{re.escape(name)}\b")
    targets: set[Arch] = set()
    for section in _GUARDED.finditer(text):
        if mentioned.search(section.group("body")):
            targets |= {Arch(f"sm_{n}a") for n in _FEATURE_MACRO.findall(section.group("condition"))}
    if not targets or mentioned.search(_GUARDED.sub("", text)):
        return None
    return frozenset(targets)


def wrapper_header(arch: Arch) -> str:
    """``ptx_wrappers.cuh`` without the sections that exist only on the other target."""
    arch = check_target(arch)
    return _SECTION.sub(lambda m: m.group(0) if m.group("arch") == arch.value else "", _read(HEADER_NAME))
