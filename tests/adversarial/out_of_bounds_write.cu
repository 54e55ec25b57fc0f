// ADVERSARIAL CASE out_of_bounds_write (task rmsnorm) -- expected: REJECTED, guard out_of_bounds_write.
//
// The failure: a silent out-of-bounds store. RMSNorm is exact, but the last block also writes 8
// bytes (four bf16 zeros) just past the end of Y, as an off-by-one tail loop would. The bytes land in
// memory the same allocation granule already maps, so nothing faults, compute-sanitizer is not in the
// loop, and Y itself compares equal; in a real model the store would corrupt a neighbouring tensor.
//
// How the evaluator must catch it: allocate each output inside guard bytes of a known value
// (canaries before and after) and check after the call that every guard byte is unchanged
// (out_of_bounds_write).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
rmsnorm_rows(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
             __nv_bfloat16* __restrict__ Y, int64_t T, int64_t Hd) {
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
    // The stray store: two bf16 pairs right after the last row, i.e. Y[T * Hd .. T * Hd + 3].
    if (blockIdx.x == T - 1 && threadIdx.x == 0) {
        const __nv_bfloat162 zero = __floats2bfloat162_rn(0.0f, 0.0f);
        y[pairs] = zero;
        y[pairs + 1] = zero;
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
    rmsnorm_rows<<<(unsigned)T, kThreads, 0, stream>>>(X, W, Y, T, Hd);
    return (int)cudaGetLastError();
}
