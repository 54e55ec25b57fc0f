"""The text of the ``arch`` and ``full`` prompt conditions.

``arch_table(arch)`` is a concise reference: the target's key limits and a table of the registry's
features available there, with what each is for and its PTX spelling. ``context_pack(arch)`` is the
target's guide followed by ``ptx_wrappers.cuh`` with the other target's section removed.

Everything comes from this module, the files of ``ptxbench.context`` (guides, wrapper header) and the
registry, so a pack is fully determined by the package contents; a change to any of them that changes
the words fails the digest test until ``PROMPT_VERSION`` is bumped. The PTX spellings are read from the
registry's probe kernels (which tests/arch proves compile to the registered SASS), not typed by hand.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from ptxbench.arch.registry import Arch, Feature, load_registry, probe_path
from ptxbench.context.wrappers import HEADER_NAME, check_target, wrapper_header
from ptxbench.static.ptx import instructions

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
    other = _OTHER_FAMILY[check_target(arch)]
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
    arch = check_target(arch)
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


def guide(arch: Arch) -> str:
    """The target's guide, shipped beside the wrapper header in ``ptxbench.context``."""
    name = f"guide_{check_target(arch).value}.md"
    return resources.files("ptxbench.context").joinpath(name).read_text()


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
    arch = check_target(arch)
    return (f"{guide(arch).rstrip()}\n\n## The wrapper header ({HEADER_NAME})\n\n"
            f"```cpp\n{wrapper_header(arch).rstrip()}\n```\n")
