"""Two lanes share one GPU's memory: a candidate that takes nearly all of it during its calls must not
make the other lane's correct candidate fail (the evaluator tries a candidate that ran out of memory
again alone). Run with `-m gpu`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions
from ptxbench.evaluate.fleet.run import Candidate, evaluate_candidates
from ptxbench.records.evaluation import Status
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu

# The example rmsnorm, called by an entry point that first takes all of the GPU's free memory but 1 GiB
# and holds it for 1.5 s: correct, but a bad neighbour.
_HOG = r'''
#include <unistd.h>
extern "C" int rmsnorm(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                       __nv_bfloat16* __restrict__ Y, int64_t T, int64_t Hd, cudaStream_t stream) {
    size_t free_bytes = 0, total_bytes = 0;
    void* hoard = nullptr;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && free_bytes > (size_t(1) << 31))
        cudaMalloc(&hoard, free_bytes - (size_t(1) << 30));
    usleep(1500000);
    const int code = plain_rmsnorm(X, W, Y, T, Hd, stream);
    cudaStreamSynchronize(stream);
    if (hoard != nullptr) cudaFree(hoard);
    return code;
}
'''


def _memory_hog() -> str:
    example = (EXAMPLES / "rmsnorm.cu").read_text()
    assert example.count('extern "C" int rmsnorm(') == 1
    return example.replace('extern "C" int rmsnorm(', "static int plain_rmsnorm(") + _HOG


def test_a_lane_that_takes_the_gpus_memory_does_not_fail_the_other_lanes_candidate(tmp_path: Path) -> None:
    task = get_task("rmsnorm")
    candidates = [Candidate(task=task, item="memory_hog", source=_memory_hog(), origin="memory hog"),
                  Candidate(task=task, item="example", source=(EXAMPLES / "rmsnorm.cu").read_text(),
                            origin=str(EXAMPLES / "rmsnorm.cu"))]
    options = EvalOptions(trials=3, time=False, profile=False, call_timeout_s=60, lanes=2)
    hog, example = evaluate_candidates(candidates, Arch.SM_90A, tmp_path / "run", options)
    print(f"LANES hog: {hog.status} {hog.message[:200]}")
    print(f"LANES example: {example.status} {example.message[:200]}; stages {sorted(example.durations_s)}")
    assert hog.status is Status.PASSED, hog.message
    assert example.status is Status.PASSED, example.message
