// ADVERSARIAL CASE nan_output (task rmsnorm) -- expected: INCORRECT.
//
// The failure: one non-finite value in an otherwise exact output. RMSNorm is computed correctly for
// every element except Y[0, 0], which is written as a quiet NaN. A comparison built on allclose with
// equal_nan, on a mean error, on a sample of elements, or on a tolerance that NaN slips through
// (every comparison with NaN is false, so `abs(a - b) > tol` never fires) would pass it.
//
// How the evaluator must catch it: compare every element, and count any NaN/Inf in an output where
// the reference is finite as a failure.
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
        __nv_bfloat162 out = __floats2bfloat162_rn(v.x * scale * g.x, v.y * scale * g.y);
        if (blockIdx.x == 0 && i == 0) out.x = __ushort_as_bfloat16((unsigned short)0x7FC0);  // NaN at Y[0, 0]
        y[i] = out;
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
    rmsnorm_rows<<<(unsigned)T, kThreads, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
