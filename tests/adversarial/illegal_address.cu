// ADVERSARIAL CASE illegal_address (task transpose) -- expected: RUNTIME_ERROR.
//
// The failure: a store far outside every allocation. The transpose itself is right, but one thread
// also writes an element 64 TiB past the end of Y, where nothing is mapped, so the kernel dies with
// an illegal-address fault (cudaErrorIllegalAddress). The entry point still returns 0, because the
// launch succeeded; the error surfaces only at the next synchronisation, and it is sticky: the CUDA
// context of the process is unusable afterwards.
//
// How the evaluator must catch it: run the candidate in its own process, synchronise after the call
// and report the fault as RUNTIME_ERROR, then throw the poisoned process away (never reuse it for
// the next candidate or for the reference).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kTile = 32;

__global__ void transpose_tiles(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R,
                                int64_t C) {
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
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
        // 2^45 elements (64 TiB) beyond the end of Y: no allocation of any process is there.
        volatile __nv_bfloat16* far = Y + R * C + (int64_t(1) << 45);
        *far = __float2bfloat16(1.0f);
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
    transpose_tiles<<<grid, dim3(kTile, 8), 0, stream>>>(X, Y, R, C);
    return (int)cudaGetLastError();  // 0: the fault happens later, on the GPU
}
