"""The text of the ``arch`` and ``full`` prompt conditions.

``arch_table(arch)`` is a concise reference: the target's key limits and a table of the registry's
features available there, with what each is for and its PTX spelling. ``context_pack(arch)`` is the
target's guide followed by ``ptx_wrappers.cuh`` with the other target's section removed.

Everything comes from files in this package and the registry, so a pack is fully determined by
``CONTEXT_PACK_VERSION`` and the package contents. The PTX spellings are read from the registry's
probe kernels (which tests/arch proves compile to the registered SASS), not typed by hand.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch, Feature, load_registry, probe_path
from ptxbench.static.ptx import instructions

CONTEXT_PACK_VERSION = 1

HEADER_NAME = "ptx_wrappers.cuh"

# Key limits, stated as in the guides (H200 figures measured here; B200 figures are NVIDIA's or
# third-party, no B200 being available to the project).
_LIMITS: dict[Arch, list[str]] = {
    Arch.SM_90A: [
        "GPU: H100 SXM / H200 (compute capability 9.0), 132 SMs (the H200 here reports 132).",
        "Shared memory: 228 KB per SM; up to 227 KB (232448 B) per block after "
        "`cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)`, 48 KB without.",
        "Registers: 65536 x 32-bit per SM (and per block), at most 255 per thread; "
        "`setmaxnreg` moves them between warpgroups (needs `__launch_bounds__(threads, 1)`).",
        "Warpgroup: 4 consecutive warps (128 threads) starting at a warp index divisible by 4; "
        "it issues each wgmma together.",
        "L2: 60 MiB reported by the H200 here (H100: 50 MB). HBM3e on the H200: 141 GB, 4.8 TB/s peak "
        "(about 4.3 TB/s measured for a device copy).",
        "Clusters: up to 8 CTAs (portable); TMA multicast shares a tile between them.",
    ],
    Arch.SM_100A: [
        "GPU: B200 (compute capability 10.0), 148 SMs.",
        "Shared memory: 228 KB per SM; up to 227 KB per block after "
        "`cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)`, 48 KB without.",
        "Registers: 65536 x 32-bit per SM, at most 255 per thread; `setmaxnreg` works as on Hopper.",
        "Tensor memory: 128 lanes x 512 columns of 32 bits (256 KB) per SM, allocated in power-of-two "
        "column counts (32-512); warp w reaches lanes 32*(w%4) to 32*(w%4)+31 only.",
        "Warpgroup: 4 consecutive warps (128 threads); a warpgroup's four warps together read all 128 TMEM "
        "lanes, while `tcgen05.mma` is issued by a single thread.",
        "L2: about 126 MB. HBM3e: about 8 TB/s.",
        "Clusters: up to 8 CTAs (portable); a CTA pair can run one `cta_group::2` MMA.",
    ],
}

_ABSENT: dict[Arch, str] = {
    Arch.SM_90A: "tcgen05 (tensor memory and single-thread MMA) does not exist on sm_90a: ptxas rejects it; "
    "use wgmma with register accumulators.",
    Arch.SM_100A: "wgmma does not exist on sm_100a: ptxas rejects it; use tcgen05.mma with the accumulator in "
    "tensor memory.",
}

_STRING_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _check_arch(arch: Arch) -> Arch:
    arch = Arch(arch)
    if arch not in BENCHMARK_ARCHS:
        raise ValueError(f"context packs exist for {', '.join(a.value for a in BENCHMARK_ARCHS)}, not {arch.value}")
    return arch


def ptx_spellings(feature: Feature) -> list[str]:
    """The PTX mnemonics of ``feature`` as its probe kernel writes them (inline-asm strings), in order."""
    source = probe_path(feature).read_text()
    asm_text = "\n".join(s.replace("\\n", "\n") for s in _STRING_LITERAL.findall(source))
    return [m for m in dict.fromkeys(instructions(asm_text)) if feature.in_ptx([m])]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").strip()


# The tensor-core family that the target lacks; registry purposes that name both families are
# rewritten so a table never points at an instruction its target rejects.
_OTHER_FAMILY = {Arch.SM_90A: r"tcgen05(?:\.\w+)*", Arch.SM_100A: r"wgmma(?:\.\w+)*"}


def for_target(text: str, arch: Arch) -> str:
    """``text`` without mentions of the instruction family that ``arch`` does not have."""
    other = _OTHER_FAMILY[_check_arch(arch)]
    for pattern, replacement in (
        (rf"\b{other}/(\w+)", r"\1"),                  # "wgmma/tcgen05" -> the one that exists
        (rf"(\w+)/{other}\b", r"\1"),
        (rf", {other} or ", " or "),                      # "TMA stores, wgmma or tcgen05.mma"
        (rf", (\w+) or {other}\b", r" or \1"),
        (rf" or {other}\b", ""),                         # "issues TMA or tcgen05.mma"
    ):
        text = re.sub(pattern, replacement, text)
    return text


@cache
def arch_table(arch: Arch) -> str:
    """A concise Markdown reference for ``arch``: key limits, then every feature available there."""
    arch = _check_arch(arch)
    name = "Hopper, sm_90a" if arch is Arch.SM_90A else "Blackwell, sm_100a"
    lines = [f"## Target features ({name})", "", "Key limits:"]
    lines += [f"- {limit}" for limit in _LIMITS[arch]]
    lines += [f"- {_ABSENT[arch]}", "",
              "| feature | what it is for | PTX |", "|---|---|---|"]
    for feature in load_registry().features:
        if not feature.supported_on(arch):
            continue
        spelled = "<br>".join(f"`{m}`" for m in ptx_spellings(feature))
        lines.append(f"| `{feature.id}` | {_cell(for_target(feature.purpose, arch))} | {spelled} |")
    lines.append("")
    return "\n".join(lines)


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
    arch = _check_arch(arch)
    return _SECTION.sub(lambda m: m.group(0) if m.group("arch") == arch.value else "", _read(HEADER_NAME))


def guide(arch: Arch) -> str:
    return _read(f"guide_{_check_arch(arch).value}.md")


# Guides tag code blocks by what CI does with them: ```cuda blocks are complete translation units
# compiled for the guide's target (tests/context); ```text blocks are layouts and are not compiled.
# No other fence is used, so no PTX in a guide escapes the compiler.
_FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```\s*$", re.DOTALL | re.MULTILINE)


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group("lang"), m.group("body")) for m in _FENCE.finditer(markdown)]


def compilable_snippets(arch: Arch) -> list[str]:
    """The guide's ```cuda blocks: each one builds alone for ``arch``."""
    return [body for lang, body in code_blocks(guide(arch)) if lang == "cuda"]


@cache
def context_pack(arch: Arch) -> str:
    """The ``full`` condition's text: the guide for ``arch``, then the wrapper header for ``arch``."""
    arch = _check_arch(arch)
    return (f"{guide(arch).rstrip()}\n\n## The wrapper header ({HEADER_NAME})\n\n"
            f"```cpp\n{wrapper_header(arch).rstrip()}\n```\n")
