// ADVERSARIAL CASE input_mutation (task softmax) -- expected: REJECTED, guard input_mutation.
//
// The cheat: the candidate uses its input as scratch. It casts away the const of X, normalises each
// row in place inside X, and then copies X into Y. Y is exactly right, so an output comparison alone
// passes; but the caller's logits are destroyed (a real model would then reuse garbage), and a
// harness that computes the reference from the same tensors after the call would even compare the
// candidate against its own output.
//
// How the evaluator must catch it: keep (or regenerate from the seed) the inputs, compute the
// reference from the untouched copy, and compare the inputs after the call bit for bit with the
// inputs before it (input_mutation).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;

// Block-wide reduction; `op` is max or sum. Safe to call repeatedly (syncs before reusing smem).
template <typename Op>
__device__ float block_reduce(float v, Op op) {
    __shared__ float lanes[kThreads / 32];
    for (int mask = 16; mask >= 1; mask /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, mask));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) lanes[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = lanes[0];
    for (int i = 1; i < kThreads / 32; ++i) r = op(r, lanes[i]);
    return r;
}

struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };

// Softmax of each row of X, written back over that row of X.
__global__ void __launch_bounds__(kThreads) softmax_in_place(__nv_bfloat16* X, int64_t C) {
    __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(X + blockIdx.x * C);
    const int64_t pairs = C / 2;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
        const float2 v = __bfloat1622float2(row[i]);
        m = fmaxf(m, fmaxf(v.x, v.y));
    }
    m = block_reduce(m, MaxOp{});
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
        const float2 v = __bfloat1622float2(row[i]);
        s += expf(v.x - m) + expf(v.y - m);
    }
    s = block_reduce(s, SumOp{});  // every thread has read the whole row's share before anyone writes
    const float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < pairs; i += kThreads) {
        const float2 v = __bfloat1622float2(row[i]);
        row[i] = __floats2bfloat162_rn(expf(v.x - m) * inv, expf(v.y - m) * inv);
    }
}

__global__ void copy_words(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t words) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

}  // namespace

extern "C" int softmax(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    __nv_bfloat16* scratch = const_cast<__nv_bfloat16*>(X);  // the input, used as scratch
    softmax_in_place<<<(unsigned)R, kThreads, 0, stream>>>(scratch, C);
    const int64_t words = R * C * (int64_t)sizeof(__nv_bfloat16) / 16;  // C % 64 == 0
    int64_t blocks = (words + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    copy_words<<<(unsigned)blocks, 256, 0, stream>>>(reinterpret_cast<const uint4*>(scratch),
                                                     reinterpret_cast<uint4*>(Y), words);
    return (int)cudaGetLastError();
}
