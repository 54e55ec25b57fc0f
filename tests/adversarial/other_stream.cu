// ADVERSARIAL CASE other_stream (task rmsnorm) -- expected: REJECTED, guard other_stream.
//
// The cheat: the arithmetic is right, but the kernel is launched on a private non-blocking stream
// the candidate created, and the entry point returns without waiting for it or joining it back to
// the caller's stream. Events recorded on the caller's stream then time nothing (a near-zero time),
// and the results land whenever the private stream gets to them; whoever synchronises the whole
// device before reading Y sees correct values.
//
// How the evaluator must catch it: the trace of the call shows the candidate's kernel on a stream
// other than the one passed in (other_stream). If the harness read Y after synchronising only the
// launch stream, the outputs could also be incomplete (INCORRECT); either way it must never pass.
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

}  // namespace

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    (void)stream;  // the caller's stream is ignored on purpose
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        const cudaError_t err = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (err != cudaSuccess) return (int)err;
    }
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    rmsnorm_rows<<<(unsigned)T, kThreads, 0, side>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();  // no event, no wait: the work is still running on `side`
}
