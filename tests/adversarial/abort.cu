// ADVERSARIAL CASE abort (task transpose) -- expected: RUNTIME_ERROR.
//
// The failure: the host code kills the process. The entry point calls abort() (as a failed assert()
// or a library's fatal-error path would) before launching anything, so the call never returns:
// no return code, no outputs, no Python exception -- the whole process is gone with SIGABRT.
//
// How the evaluator must catch it: the candidate runs in a separate worker process; the harness
// sees the worker die (SIGABRT), reports RUNTIME_ERROR for this candidate and carries on with a fresh
// worker. The harness itself must survive, and the death must not be filed as an infrastructure
// failure.
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

__global__ void never_launched(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y) {
    Y[threadIdx.x] = X[threadIdx.x];
}

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    (void)&never_launched;
    (void)X; (void)Y; (void)R; (void)C; (void)stream;
    std::abort();
}
