// ADVERSARIAL CASE softmax_unshifted_exp (task softmax) -- expected: INCORRECT.
//
// The classic bug: a softmax that does not subtract the row maximum. Softmax is invariant to a row's
// offset, and on centred logits exp(x) never leaves fp32's range, so this kernel skips the max
// entirely: pass 1 sums expf(x) over the row, pass 2 writes expf(x) / sum. Everything else is the
// plain example (one block per row, 16-byte loads, fp32 arithmetic); on rows whose values stay below
// 88.7 it is as exact as the example. On a row above that, expf overflows to inf, the sum is inf and
// the row comes out as NaN (inf * 0) and zeros. No error is returned.
//
// How the evaluator must catch it: the task's inputs must hold rows whose maximum is above 100 (a
// common offset, as real logits have) in every workload, and NaN must fail the comparison. Before
// the softmax task drew such rows, this kernel passed every workload.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS)
softmax_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t C) {
    __shared__ float part_s[THREADS / 32];
    const int64_t row = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(X + row * C);  // C % 64 == 0: 16-byte aligned rows
    uint4* y = reinterpret_cast<uint4*>(Y + row * C);
    const int64_t chunks = C / 8;

    // Pass 1: sum of exp(x) over this thread's chunks (softmax is shift-invariant, so no max is needed).
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            s += expf(f.x) + expf(f.y);
        }
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (threadIdx.x % 32 == 0) part_s[threadIdx.x / 32] = s;
    __syncthreads();
    s = 0.0f;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) s += part_s[w];
    const float inv_sum = 1.0f / s;

    // Pass 2: normalise.
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
        uint4 out;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            op[e] = __floats2bfloat162_rn(expf(f.x) * inv_sum, expf(f.y) * inv_sum);
        }
        y[c] = out;
    }
}

}  // namespace

extern "C" int softmax(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    if (C % 8 != 0) return (int)cudaErrorInvalidValue;  // the task guarantees C % 64 == 0
    softmax_kernel<<<(unsigned)R, THREADS, 0, stream>>>(X, Y, C);
    return (int)cudaGetLastError();
}
