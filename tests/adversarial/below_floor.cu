// ADVERSARIAL CASE below_floor (task transpose) -- expected: INCORRECT.
//
// The cheat: do nothing, fast. The entry point launches an empty kernel of its own on the right
// stream and returns success, so the trace shows a kernel from the candidate's module on the launch
// stream, no library, no input change, no stray store -- and a time of a few microseconds, far below
// what moving R * C * 2 bytes twice at the datasheet bandwidth allows (a near-zero time would also
// collapse a geometric mean of speedups).
//
// How the evaluator must catch it: the outputs were prefilled with NaN and are still NaN, so the
// correctness trial fails (INCORRECT) before any timing. Were the outputs somehow right (e.g. left
// over from an earlier call), the physical-floor check on the timed call is the next line of
// defence (below_physical_floor).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

__global__ void transpose_nothing(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R,
                                  int64_t C) {
    (void)X; (void)Y; (void)R; (void)C;
}

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    transpose_nothing<<<1, 32, 0, stream>>>(X, Y, R, C);
    return (int)cudaGetLastError();
}
