// ADVERSARIAL CASE cached_output (task rmsnorm) -- expected: INCORRECT.
//
// The cheat: replaying outputs across calls. The first call for a shape (T, Hd) computes RMSNorm
// correctly and keeps a copy of Y in a device buffer that outlives the call; every later call with
// the same shape copies that saved result into Y (with the candidate's own copy kernel, on the
// caller's stream) without reading X or W at all. A harness that checks one call per shape, or times
// repeated calls on the same inputs, sees a correct and very fast kernel.
//
// How the evaluator must catch it: fresh inputs from an unknown seed for every trial, several trials
// per workload in the same process, and the outputs of timed calls re-checked. The second trial of
// the first workload already gets the first trial's answer, which is wrong for its inputs.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
rmsnorm_rows(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
             __nv_bfloat16* __restrict__ Y, int64_t Hd) {
    __shared__ float warp_sums[kThreads / 32];
    const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(X + blockIdx.x * Hd);
    const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(W);
    __nv_bfloat162* y = reinterpret_cast<__nv_bfloat162*>(Y + blockIdx.x * Hd);
    const int64_t pairs = Hd / 2;

    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
        const float2 v = __bfloat1622float2(x[i]);
        acc += v.x * v.x + v.y * v.y;
    }
    for (int lane_mask = 16; lane_mask >= 1; lane_mask /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, lane_mask);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
    const float scale = rsqrtf(total / (float)Hd + 1e-6f);

    for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
        const float2 v = __bfloat1622float2(x[i]);
        const float2 g = __bfloat1622float2(w[i]);
        y[i] = __floats2bfloat162_rn(v.x * scale * g.x, v.y * scale * g.y);
    }
}

// A plain grid-stride copy of 16-byte words (T * Hd * 2 bytes is a multiple of 128).
__global__ void copy_words(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t words) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

struct Cache {
    void* data = nullptr;
    int64_t T = -1, Hd = -1;
};

cudaError_t copy(const void* src, void* dst, int64_t bytes, cudaStream_t stream) {
    const int64_t words = bytes / 16;
    int64_t blocks = (words + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    if (blocks < 1) blocks = 1;
    copy_words<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words);
    return cudaGetLastError();
}

}  // namespace

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    static Cache cache;
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    const int64_t bytes = T * Hd * (int64_t)sizeof(__nv_bfloat16);
    if (cache.data != nullptr && cache.T == T && cache.Hd == Hd) {
        return (int)copy(cache.data, Y, bytes, stream);  // replay: X and W are never read
    }
    // First call for this shape: compute for real, then remember the answer.
    rmsnorm_rows<<<(unsigned)T, kThreads, 0, stream>>>(X, W, Y, Hd);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    if (cache.data != nullptr) {
        cudaStreamSynchronize(stream);
        cudaFree(cache.data);
        cache.data = nullptr;
    }
    err = cudaMalloc(&cache.data, (size_t)bytes);
    if (err != cudaSuccess) {
        cache.data = nullptr;
        cudaGetLastError();
        return (int)cudaSuccess;  // no cache this time; the output is still correct
    }
    cache.T = T;
    cache.Hd = Hd;
    return (int)copy(Y, cache.data, bytes, stream);
}
