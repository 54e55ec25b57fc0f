"""The CPU stand-in for the GPU side names a build's kernels as the harness's SASS listing does, though it reads
them from the cubin's ELF (``fake_runner.cubin_functions``) rather than starting cuobjdump for every item."""

from __future__ import annotations

from ptxbench.arch.registry import Arch
from ptxbench.check import check_source
from ptxbench.static.sass import kernel_names
from ptxbench.toolchain.tools import disassemble

from .fake_runner import cubin_functions

SEVERAL = """
template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; }
__global__ void first(float* x) { x[threadIdx.x] = 2 * x[threadIdx.x]; }
extern "C" __global__ void second(float* x) { x[threadIdx.x] += 1; }
template __global__ void scale<3>(float*);
template __global__ void scale<5>(float*);
"""


def test_the_stand_in_lists_the_functions_of_the_sass_listing_in_its_order() -> None:
    report = check_source(SEVERAL, Arch.SM_90A)
    assert report.build.ok, report.build.log
    cubin = report.build.artifact(".cubin")
    assert cubin is not None
    listed = kernel_names(disassemble(cubin))
    assert len(listed) == 4 and "second" in listed
    assert cubin_functions(cubin.read_bytes()) == listed
