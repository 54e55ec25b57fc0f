"""All code in the context packs compiles for its target, and what it asks for reaches the binary.

Builds (in parallel, through ``ptxbench.check.check_files``):
- sm_90a: ``wrappers_sm90a.cu`` (every common, wgmma and setmaxnreg wrapper in plausible kernels),
  ``gpu_wrappers_check.cu`` (the program that ran the wrappers on the H200), the common-only file with
  the full header and with the sm_90a pack's header, and every ```cuda block of the sm_90a guide;
- sm_100a: ``wrappers_sm100a.cu`` (every tcgen05 wrapper), the common-only file with both headers,
  and every ```cuda block of the sm_100a guide.
The header is pasted in place of ``#include "ptx_wrappers.cuh"``, as a candidate would paste it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import check_files
from ptxbench.context import wrappers
from ptxbench.prompts.context import compilable_snippets
from ptxbench.records.check import CheckReport
from ptxbench.static.ptx import instructions

HERE = Path(__file__).resolve().parent
INCLUDE = '#include "ptx_wrappers.cuh"'
FULL_HEADER = wrappers._read(wrappers.HEADER_NAME)
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_WRAPPER = re.compile(r"^(?:__device__ __forceinline__|__host__ __device__ constexpr|inline) [\w:<>()&*, ]*?\b(\w+)\(",
                      re.MULTILINE)


def with_header(name: str, header: str = FULL_HEADER) -> str:
    source = (HERE / name).read_text()
    assert INCLUDE in source, name
    return source.replace(INCLUDE, header)


def asm_mnemonics(source: str) -> set[str]:
    """PTX mnemonics written in the inline-asm strings of ``source`` (dotted ones: skips constraints)."""
    asm = "\n".join(s.replace("\\n", "\n") for s in _STRING.findall(source))
    return {m for m in instructions(asm) if "." in m}


def sections(header: str) -> dict[str, str]:
    """The header split into 'common' (before the first arch-only banner) and each arch-only section."""
    found = {m.group(1): m.group(0) for m in re.finditer(r"// (sm_\w+) only:.*?#endif  // \1 only", header, re.DOTALL)}
    found["common"] = header[: header.index("// sm_90a only:")]
    return found


PLAN: dict[Arch, dict[str, str]] = {
    Arch.SM_90A: {
        "wrappers_sm90a": with_header("wrappers_sm90a.cu"),
        "gpu_check": with_header("gpu_wrappers_check.cu"),
        "common_full_header": with_header("wrappers_common.cu"),
        "common_pack_header": with_header("wrappers_common.cu", wrappers.wrapper_header(Arch.SM_90A)),
        **{f"guide_{i}": s for i, s in enumerate(compilable_snippets(Arch.SM_90A))},
    },
    Arch.SM_100A: {
        "wrappers_sm100a": with_header("wrappers_sm100a.cu"),
        "common_full_header": with_header("wrappers_common.cu"),
        "common_pack_header": with_header("wrappers_common.cu", wrappers.wrapper_header(Arch.SM_100A)),
        **{f"guide_{i}": s for i, s in enumerate(compilable_snippets(Arch.SM_100A))},
    },
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[Arch, str], CheckReport]:
    root = tmp_path_factory.mktemp("context-builds")
    found: dict[tuple[Arch, str], CheckReport] = {}
    for arch, sources in PLAN.items():
        items = []
        for name, source in sources.items():
            path = root / f"{arch.value}-{name}.cu"
            path.write_text(source)
            items.append((path, None))
        for name, report in zip(sources, check_files(items, arch)):
            found[(arch, name)] = report
    return found


def kernel_features(report: CheckReport, name: str) -> set[str]:
    assert report.static is not None
    kernel = next((k for k in report.static.kernels if k.demangled.startswith(f"{name}(")), None)
    assert kernel is not None, f"no kernel {name} in {[k.demangled for k in report.static.kernels]}"
    return set(kernel.features)


def kernel_sass(report: CheckReport, name: str) -> set[str]:
    assert report.static is not None
    return next(set(k.sass) for k in report.static.kernels if k.demangled.startswith(f"{name}("))


CASES = [(arch, name) for arch, sources in PLAN.items() for name in sources]


@pytest.mark.parametrize(("arch", "name"), CASES, ids=[f"{a.value}-{n}" for a, n in CASES])
def test_builds_cleanly(reports: dict[tuple[Arch, str], CheckReport], arch: Arch, name: str) -> None:
    report = reports[(arch, name)]
    assert report.build.ok, report.build.log
    assert report.static is not None
    if "__global__" in PLAN[arch][name]:  # host-only snippets (tensor-map encoding) have none
        assert report.static.kernels, "no kernel: nothing was checked by ptxas"
    assert not report.static.warnings, [w.text for w in report.static.warnings]
    for kernel in report.static.kernels:
        spills = kernel.resources.spill_store_bytes + kernel.resources.spill_load_bytes
        assert spills == 0, f"{kernel.demangled} spills {spills} bytes"


@pytest.mark.parametrize(("arch", "name"), [c for c in CASES if c[1].startswith("guide_")],
                         ids=[f"{a.value}-{n}" for a, n in CASES if n.startswith("guide_")])
def test_guide_snippet_keeps_all_its_ptx(reports: dict[tuple[Arch, str], CheckReport], arch: Arch, name: str) -> None:
    """Every instruction a snippet writes is in its PTX, so ptxas really checked it (nothing eliminated)."""
    report = reports[(arch, name)]
    assert report.static is not None
    missing = asm_mnemonics(PLAN[arch][name]) - set(report.static.ptx)
    assert not missing, missing


def test_sm90a_wrappers_reach_the_sass(reports: dict[tuple[Arch, str], CheckReport]) -> None:
    report = reports[(Arch.SM_90A, "wrappers_sm90a")]
    gemm = kernel_features(report, "gemm_mainloop")
    assert {"wgmma.bf16", "tma.load", "tma.load_multicast", "mbarrier", "setmaxnreg", "stmatrix", "tma.store",
            "fence.proxy_async", "cluster.barrier", "pdl"} <= gemm, gemm
    sass = kernel_sass(report, "gemm_mainloop")
    for opcode in ("HGMMA.64x256x16.F32.BF16", "UTMALDG", "SYNCS", "USETMAXREG", "STSM", "UTMASTG"):
        assert any(m.startswith(opcode) for m in sass), opcode
    assert {"wgmma.bf16", "tma.load", "tma.store"} <= kernel_features(report, "attention_tile")
    assert {"wgmma.fp8", "tma.load_multicast"} <= kernel_features(report, "fp8_tile")
    assert {"bulk.copy", "ldmatrix", "cluster.barrier"} <= kernel_features(report, "misc")


def test_sm100a_wrappers_reach_the_sass(reports: dict[tuple[Arch, str], CheckReport]) -> None:
    features = kernel_features(reports[(Arch.SM_100A, "wrappers_sm100a")], "umma_gemm")
    assert {"tcgen05.mma.f16", "tcgen05.alloc", "tcgen05.ld", "tcgen05.st", "tcgen05.cp", "tcgen05.commit",
            "tma.load", "mbarrier", "setmaxnreg"} <= features, features


def test_guides_show_their_headline_features(reports: dict[tuple[Arch, str], CheckReport]) -> None:
    def union(arch: Arch) -> set[str]:
        return {f for (a, n), r in reports.items() if a is arch and n.startswith("guide_") and r.static
                for k in r.static.kernels for f in k.features}
    assert {"wgmma.bf16", "tma.load", "tma.load_multicast", "tma.store", "mbarrier", "setmaxnreg", "stmatrix",
            "pdl", "cluster.barrier"} <= union(Arch.SM_90A)
    assert {"tcgen05.mma.f16", "tcgen05.mma.cta_group2", "tcgen05.alloc", "tcgen05.ld", "tcgen05.commit",
            "tma.load", "tma.load_2cta", "setmaxnreg"} <= union(Arch.SM_100A)


@pytest.mark.parametrize(("section", "arch", "build"), [
    ("common", Arch.SM_90A, "common_full_header"),
    ("common", Arch.SM_100A, "common_full_header"),
    ("sm_90a", Arch.SM_90A, "wrappers_sm90a"),
    ("sm_100a", Arch.SM_100A, "wrappers_sm100a"),
], ids=["common-sm_90a", "common-sm_100a", "sm_90a", "sm_100a"])
def test_every_wrapper_is_called_and_every_instruction_assembled(
        reports: dict[tuple[Arch, str], CheckReport], section: str, arch: Arch, build: str) -> None:
    text = sections(FULL_HEADER)[section]
    names = set(_WRAPPER.findall(text))
    assert len(names) >= 5, names
    source = PLAN[arch][build].replace(FULL_HEADER, "")
    uncalled = sorted(n for n in names if not re.search(rf"\b{n}\b", source))
    assert not uncalled, uncalled
    report = reports[(arch, build)]
    assert report.static is not None
    missing = asm_mnemonics(text) - set(report.static.ptx)
    assert not missing, missing


def test_setmaxnreg_section_is_exercised_on_both_targets(reports: dict[tuple[Arch, str], CheckReport]) -> None:
    for arch, build in ((Arch.SM_90A, "wrappers_sm90a"), (Arch.SM_100A, "wrappers_sm100a")):
        static = reports[(arch, build)].static
        assert static is not None
        assert {"setmaxnreg.inc.sync.aligned.u32", "setmaxnreg.dec.sync.aligned.u32"} <= set(static.ptx)
