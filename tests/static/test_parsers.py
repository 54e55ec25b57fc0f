"""The PTX, SASS and ptxas-log readers on hand-written and real text."""

from __future__ import annotations

from ptxbench.static import ptx, sass
from ptxbench.static.ptxas_log import resources, warnings

PTX = """
.visible .entry _Z6kernelPf(
    .param .u64 _Z6kernelPf_param_0
)
{
    .reg .b32 %r<4>;
    // begin inline asm
    { .reg .pred p; elect.sync _|p, 0xffffffff; }
    // end inline asm
    @%p1 bra $L__BB0_2;
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2; /* spin */
$L__BB0_2:
    tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r3, 1;
    ret;
}
"""

SASS = """
        code for sm_90a
                Function : _Z6kernelPf
        .headerflags    @"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0060*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0070*/              @!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x8], R2 ;
        /*0080*/               @P1 UTMALDG.2D.MULTICAST [UR8], [UR10], UR4 ;
        /*0090*/                   NOP ;
                Function : _Z5otherv
        /*0000*/                   EXIT ;
"""


def test_ptx_mnemonics_keep_every_modifier_and_skip_directives_labels_predicates() -> None:
    found = ptx.instructions(PTX)
    assert found == [
        "elect.sync",
        "bra",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "tcgen05.mma.cta_group::1.kind::f16",
        "ret",
    ]
    assert ptx.entry_names(PTX) == ["_Z6kernelPf"]


def test_sass_histogram_per_kernel_with_predicates_stripped() -> None:
    kernels = sass.per_kernel_histogram(SASS)
    assert kernels["_Z6kernelPf"] == {
        "LDC": 1, "HGMMA.64x128x16.F32.BF16": 1, "SYNCS.PHASECHK.TRANS64.TRYWAIT": 1, "UTMALDG.2D.MULTICAST": 1,
    }
    assert kernels["_Z5otherv"] == {"EXIT": 1}


def test_ptxas_verbose_log() -> None:
    log = """ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry.
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90a'
ptxas info    : Function properties for _Z3fooPf
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem
ptxas warning : Registers are spilled to local memory in function '_Z3fooPf', 8 bytes spill stores, 4 bytes spill loads
"""
    found = resources(log)["_Z3fooPf"]
    assert (found.registers, found.barriers, found.shared_bytes) == (168, 1, 2048)
    assert (found.stack_frame_bytes, found.spill_store_bytes, found.spill_load_bytes) == (16, 8, 4)
    codes = [(w.code, bool(w.meaning)) for w in warnings(log)]
    assert codes == [("C7508", True), (None, False)]


def test_wgmma_waits_and_serialisation_are_significant() -> None:
    """Messages ptxas 13.0 printed while the fp8 reference's loop was reshaped (function names shortened)."""
    log = """ptxas info    : (C7517) warpgroup.wait is injected in around line 2959 by compiler to allow use of registers defined by GMMA in function '_Z4gemmv'
ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted WG.DP in divergent path in the function '_Z4gemmv'
ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in the function '_Z4gemmv'
"""
    found = warnings(log)
    assert [w.code for w in found] == ["C7517", "C7518", "C7514"]
    assert all(w.meaning for w in found) and "injected" in (found[0].meaning or "")


def test_the_static_report_is_read_from_text_alone(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No tool is run: the SASS, the PTX and the readable names come in as text (check.py runs the tools)."""
    import subprocess

    from ptxbench.arch.registry import Arch
    from ptxbench.static.report import static_report

    def no_tools(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError(f"static/ ran a tool: {args}")

    monkeypatch.setattr(subprocess, "run", no_tools)
    monkeypatch.setattr(subprocess, "Popen", no_tools)
    report = static_report("", Arch.SM_90A, PTX, SASS, "", demangled={"_Z6kernelPf": "kernel(float*)"})
    assert sass.kernel_names(SASS) == ["_Z6kernelPf", "_Z5otherv"]
    assert [(k.name, k.demangled) for k in report.kernels] == [("_Z6kernelPf", "kernel(float*)"),
                                                               ("_Z5otherv", "_Z5otherv")]  # no name given: as is
    kernel = report.kernels[0]
    assert kernel.sass["HGMMA.64x128x16.F32.BF16"] == 1 and "wgmma.bf16" in kernel.features
    assert report.ptx["tcgen05.mma.cta_group::1.kind::f16"] == 1
