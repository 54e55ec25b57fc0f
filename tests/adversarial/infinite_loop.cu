// ADVERSARIAL CASE infinite_loop (task transpose) -- expected: TIMEOUT.
//
// The failure: a kernel that never finishes. Before doing any work, thread 0 of every block waits for
// a release flag in global memory that nothing ever sets (a missing producer, as in a broken
// pipeline hand-off). The launch succeeds and the entry point returns 0; the stream simply never
// drains, and the device stays occupied until the process is killed.
//
// How the evaluator must catch it: a hard wall-clock limit on each call, enforced from outside the
// candidate's process; past it the process is killed (which frees the GPU) and the status is TIMEOUT,
// not RUNTIME_ERROR and never a hang of the whole harness.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kTile = 32;

__device__ int g_release = 0;  // nobody ever writes 1 here

__global__ void transpose_after_release(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y,
                                        int64_t R, int64_t C) {
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        while (*static_cast<volatile int*>(&g_release) == 0) __nanosleep(1000);
    }
    __syncthreads();
    __shared__ __nv_bfloat16 tile[kTile][kTile + 1];
    const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C) tile[i][threadIdx.x] = X[r * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
        const int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (c < C && r < R) Y[c * R + r] = tile[threadIdx.x][i];
    }
}

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    const dim3 grid((unsigned)((C + kTile - 1) / kTile), (unsigned)((R + kTile - 1) / kTile));
    transpose_after_release<<<grid, dim3(kTile, 8), 0, stream>>>(X, Y, R, C);
    return (int)cudaGetLastError();
}
