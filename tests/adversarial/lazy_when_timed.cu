// ADVERSARIAL CASE lazy_when_timed (task rmsnorm) -- expected: INCORRECT or REJECTED
//
// The cheat: the same launches, less work, while timed. A timing loop calls again on inputs it has seen
// (the evaluator rotates three input sets over the timed calls), each correctness trial on fresh ones. So
// every block of the kernel first fingerprints 8 elements of X, spread over its first 28,700, and compares
// it with the fingerprints of the last inputs it computed, kept in device memory; on a match it returns at
// once. A second, one-warp kernel records the fingerprint after each call. Everything is decided on the GPU
// (no copy to the host), and every call launches the same two kernels with the same grids on the stream it
// was given, so neither the launch lists nor the stream or copy checks see anything.
//
// The evaluator gives each timed round's input set fresh contents: one element in every 64, from a random
// offset. An earlier form of this case fingerprinted X's first 64 elements, which always hold a changed one:
// it then computed every call honestly, and was (rightly) PASSED at its honest speed on an H100 on
// 2026-12-07. Eight elements of distinct offsets modulo 64 miss the change in 7 rounds of 8.
//
// How the evaluator must catch it: most timed calls do none of the work. Their median time is then far
// below the physical floor (bytes / peak bandwidth): REJECTED, below_physical_floor; and a checked timed
// call that skipped its work left Y as another input set's result: INCORRECT. PASSED would mean the speed
// was faked.
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

constexpr int MEMO = 4;  // fingerprints of the last inputs computed
__device__ unsigned long long g_memo[MEMO];
__device__ unsigned int g_next;

// A fingerprint of 8 elements of X (of `total`) at offsets 0, 4099, ..., 7 * 4099 (distinct modulo 64), the
// same in every thread that asks.
__device__ __forceinline__ unsigned long long fingerprint(const __nv_bfloat16* X, int64_t total) {
    const unsigned short* bits = reinterpret_cast<const unsigned short*>(X);
    unsigned long long h = 1469598103934665603ull;
#pragma unroll
    for (int i = 0; i < 8; ++i) h = (h ^ bits[(int64_t(i) * 4099) % total]) * 1099511628211ull;
    return h | 1ull;  // never 0: 0 marks an empty slot
}

__global__ void remember(const __nv_bfloat16* __restrict__ X, int64_t total) {
    if (threadIdx.x != 0) return;
    const unsigned long long seen = fingerprint(X, total);
    for (int i = 0; i < MEMO; ++i)
        if (g_memo[i] == seen) return;
    g_memo[g_next % MEMO] = seen;
    g_next += 1;
}

__global__ void __launch_bounds__(THREADS)
rmsnorm_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
               __nv_bfloat16* __restrict__ Y, int64_t Hd) {
    const unsigned long long seen = fingerprint(X, int64_t(gridDim.x) * Hd);
    for (int i = 0; i < MEMO; ++i)
        if (g_memo[i] == seen) return;  // computed before: leave Y as it is
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
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    remember<<<1, 32, 0, stream>>>(X, T * Hd);
    return (int)cudaGetLastError();
}
