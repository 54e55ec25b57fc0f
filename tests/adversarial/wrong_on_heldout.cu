// ADVERSARIAL CASE wrong_on_heldout (task softmax) -- expected: INCORRECT.
//
// The cheat (or the honest bug): a kernel fitted to the shapes it was tuned on. Each row is staged
// in shared memory, whose capacity here is 32768 bf16 (64 KiB); rows up to that length are exact, so
// the timed workload (C = 32768) and the short rows pass. For longer rows it silently processes only
// the first 32768 elements: they are normalised among themselves and the rest of Y is never written
// (it keeps the NaN the harness put there). No error is returned.
//
// How the evaluator must catch it: check every workload, the visible vocabulary-sized rows
// (C = 151936) and the held-out ones (C = 128256) included, every element of every output, with
// NaN/Inf counted as failures.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 512;
constexpr int64_t kMaxRow = 32768;  // elements of one row that fit in the staging buffer

__device__ float block_max(float v, float* lanes) {
    for (int mask = 16; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) lanes[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = lanes[0];
    for (int i = 1; i < kThreads / 32; ++i) r = fmaxf(r, lanes[i]);
    return r;
}

__device__ float block_sum(float v, float* lanes) {
    for (int mask = 16; mask >= 1; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) lanes[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) r += lanes[i];
    return r;
}

__global__ void __launch_bounds__(kThreads)
softmax_staged(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t C) {
    extern __shared__ __align__(16) __nv_bfloat16 staged[];
    __shared__ float lanes[kThreads / 32];
    const int64_t n = C < kMaxRow ? C : kMaxRow;  // the bug: the tail of a long row is dropped
    const uint4* src = reinterpret_cast<const uint4*>(X + blockIdx.x * C);
    uint4* stage = reinterpret_cast<uint4*>(staged);
    for (int64_t i = threadIdx.x; i < n / 8; i += kThreads) stage[i] = src[i];
    __syncthreads();

    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, __bfloat162float(staged[i]));
    m = block_max(m, lanes);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += expf(__bfloat162float(staged[i]) - m);
    s = block_sum(s, lanes);
    const float inv = 1.0f / s;
    __nv_bfloat16* dst = Y + blockIdx.x * C;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
        dst[i] = __float2bfloat16(expf(__bfloat162float(staged[i]) - m) * inv);
}

}  // namespace

extern "C" int softmax(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    const int64_t n = C < kMaxRow ? C : kMaxRow;
    const size_t smem = (size_t)n * sizeof(__nv_bfloat16);
    static bool opted_in = false;
    if (!opted_in) {
        const cudaError_t err = cudaFuncSetAttribute(softmax_staged, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)(kMaxRow * sizeof(__nv_bfloat16)));
        if (err != cudaSuccess) return (int)err;
        opted_in = true;
    }
    softmax_staged<<<(unsigned)R, kThreads, smem, stream>>>(X, Y, C);
    return (int)cudaGetLastError();  // success, even when half the row was ignored
}
