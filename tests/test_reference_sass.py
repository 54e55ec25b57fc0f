"""What the reference kernels compile to is pinned: a change to a reference kernel or to ptx_wrappers.cuh
(which they inline) that changes any kernel's SASS fails here, so a refactor that claims no behaviour
change can be believed without a GPU, and a change that does alter a kernel is re-measured on purpose.

tests/fixtures/reference_sass_sm90a.json holds, per kernel, the SHA-256 of its normalised SASS (addresses,
encodings and padding left out; register and barrier counts in), its instruction count and opcode counts.
After a deliberate change: `python scripts/reference_sass.py compare <revision>` shows what moved, and
`python scripts/reference_sass.py baseline` rewrites the file. The compiler's version is part of the
record: with another nvcc the comparison is skipped (other compilers make other SASS)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .conftest import repo_script

reference_sass = repo_script("scripts/reference_sass.py")

SASS = """
	code for sm_90a
		Function : _ZN45_GLOBAL__N__7d7b29d2_12_candidate_cu_76da259615gemm_bf16_sm90aILi64EEEv14CUtensorMap_stS1_S1_iii
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000fe20000000800 */
        /*0010*/              @!P0 BRA 0x80 ;                                      /* 0x0000000000008947 */
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;  /* 0x00e00000081879f0 */
        /*0030*/                   NOP;                                            /* 0x0000000000007918 */
"""


def test_sass_is_normalised_per_kernel_without_addresses_encodings_padding_or_the_file_hash():
    kernels = reference_sass.normalise(SASS)
    assert kernels == {"_ZN11_GLOBAL__N_15gemm_bf16_sm90aILi64EEEv14CUtensorMap_stS1_S1_iii": [
        "LDC R1, c[0x0][0x28]", "@!P0 BRA 0x80", "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24"]}
    assert reference_sass.opcode("@!P0 BRA 0x80") == "BRA"


def test_a_difference_is_named_by_the_strongest_claim_that_holds():
    before = ["// registers=40", "IADD3 R1, R2, R3, RZ", "STG.E desc[UR4][R6.64], R1", "EXIT"]
    renamed = ["// registers=40", "IADD3 R5, R2, R3, RZ", "STG.E desc[UR4][R6.64], R5", "EXIT"]
    reallocated = ["// registers=40", "IADD3 R2, R2, R3, RZ", "STG.E desc[UR4][R6.64], R2", "EXIT"]
    reordered = ["// registers=41", "IADD3 R1, R2, R3, RZ", "LDG.E R1, desc[UR4][R6.64]", "STG.E desc[UR4][R6.64], R1",
                 "EXIT"]
    assert reference_sass.verdict(before, before).startswith("identical (3 instructions)")
    assert reference_sass.verdict(before, renamed).startswith("registers renamed only")
    assert reference_sass.verdict(before, reallocated).startswith("registers allocated differently")
    changed = reference_sass.verdict(before, reordered)
    assert changed.startswith("CHANGED (3 -> 4 instructions; registers=40 -> registers=41; opcode counts {'LDG.E': 1}")
    assert "instructions DIFFER" in changed
    assert "in the same order" in reference_sass.verdict(before, before[:1] + ["MOV R9, RZ"] + before[1:])


BASELINE = json.loads(reference_sass.BASELINE.read_text())


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, list[str]]]:
    from ptxbench.toolchain.discover import find_toolchain

    if find_toolchain().fingerprint() != BASELINE["nvcc"]:
        pytest.skip(f"the baseline was recorded with {BASELINE['nvcc']}, not {find_toolchain().fingerprint()}")
    return reference_sass.reference_sass("sm_90a")


def test_every_reference_kernel_compiles_to_the_recorded_sass(built) -> None:  # type: ignore[no-untyped-def]
    now = reference_sass.summary(built)["kernels"]
    assert set(now) == set(BASELINE["kernels"])
    moved = []
    for stem, kernels in BASELINE["kernels"].items():
        assert set(now[stem]) == set(kernels), stem
        for kernel, recorded in kernels.items():
            if now[stem][kernel]["sha256"] != recorded["sha256"]:
                delta = Counter(now[stem][kernel]["opcodes"])
                delta.subtract(Counter(recorded["opcodes"]))
                moved.append(f"{stem} {reference_sass.demangled(kernel)}: {recorded['resources']} -> "
                             f"{now[stem][kernel]['resources']}; opcodes {({k: v for k, v in delta.items() if v})}")
    assert not moved, "SASS changed (scripts/reference_sass.py compare <rev> shows how):\n" + "\n".join(moved)
