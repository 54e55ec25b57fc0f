// ADVERSARIAL CASE kill_process_group (task rmsnorm) -- expected: RUNTIME_ERROR
//
// The cheat: sabotage of the harness. The entry point sends SIGTERM to its whole process group
// (kill(0, SIGTERM)). If the candidate's process shared a group with the evaluator, its pool and
// the other candidates' workers (as a child started by subprocess or multiprocessing does by
// default), this would end the whole run, and with it every other item's evaluation.
//
// How the evaluator must catch it: each candidate process starts its own session and process group,
// so the signal reaches only the candidate itself. Its process dies mid-call, which is this item's
// RUNTIME_ERROR; every other item of the run is still evaluated.
#include <csignal>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int THREADS = 256;
constexpr float EPS = 1e-6f;

// Sum of `v` over the block; every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
    return total;
}

__global__ void __launch_bounds__(THREADS)
rmsnorm_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
               __nv_bfloat16* __restrict__ Y, int64_t Hd) {
    const int64_t row = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(X + row * Hd);  // Hd % 64 == 0: 16-byte aligned rows
    const uint4* w = reinterpret_cast<const uint4*>(W);
    uint4* y = reinterpret_cast<uint4*>(Y + row * Hd);
    const int64_t chunks = Hd / 8;

    float sum_sq = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            sum_sq = fmaf(f.x, f.x, sum_sq);
            sum_sq = fmaf(f.y, f.y, sum_sq);
        }
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / float(Hd) + EPS);

    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 xr = x[c];
        const uint4 wr = w[c];
        const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xr);
        const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wr);
        uint4 out;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 xf = __bfloat1622float2(xp[e]);
            const float2 wf = __bfloat1622float2(wp[e]);
            op[e] = __floats2bfloat162_rn(xf.x * inv_rms * wf.x, xf.y * inv_rms * wf.y);
        }
        y[c] = out;
    }
}

}  // namespace


extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    kill(0, SIGTERM);  // every process of our process group
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
