// add_rmsnorm: S = bf16(X + R) (written to R_out), Y = S / sqrt(mean_j S[t, j]^2 + 1e-6) * W, for bf16
// X, R [T, Hd] and W [Hd], the norm in fp32.
// Approach: one block of 256 threads per row; pass 1 adds the rows with 16-byte loads, writes the
// rounded sum and sums its squares with a block reduction; pass 2 re-reads X and R (now in L1/L2),
// forms the same rounded sum again, scales it and writes bf16 Y.
// A plain CUDA example for PTXBench (plain vector loads, no bulk copies): not the expert kernel.
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

// The rounded residual sum of 8 elements (one 16-byte chunk of each operand).
__device__ __forceinline__ uint4 add_chunk(uint4 x, uint4 r) {
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    const __nv_bfloat162* rp = reinterpret_cast<const __nv_bfloat162*>(&r);
    uint4 out;
    __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(xp[e]);
        const float2 b = __bfloat1622float2(rp[e]);
        op[e] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
    }
    return out;
}

__global__ void __launch_bounds__(THREADS)
add_rmsnorm_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ R,
                   const __nv_bfloat16* __restrict__ W, __nv_bfloat16* __restrict__ Y,
                   __nv_bfloat16* __restrict__ R_out, int64_t Hd) {
    const int64_t row = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(X + row * Hd);  // Hd % 64 == 0: 16-byte aligned rows
    const uint4* r = reinterpret_cast<const uint4*>(R + row * Hd);
    const uint4* w = reinterpret_cast<const uint4*>(W);
    uint4* y = reinterpret_cast<uint4*>(Y + row * Hd);
    uint4* s_out = reinterpret_cast<uint4*>(R_out + row * Hd);
    const int64_t chunks = Hd / 8;

    float sum_sq = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 s = add_chunk(x[c], r[c]);
        s_out[c] = s;
        const __nv_bfloat162* sp = reinterpret_cast<const __nv_bfloat162*>(&s);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(sp[e]);
            sum_sq = fmaf(f.x, f.x, sum_sq);
            sum_sq = fmaf(f.y, f.y, sum_sq);
        }
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / float(Hd) + EPS);

    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 s = add_chunk(x[c], r[c]);
        const uint4 wr = w[c];
        const __nv_bfloat162* sp = reinterpret_cast<const __nv_bfloat162*>(&s);
        const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wr);
        uint4 out;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 sf = __bfloat1622float2(sp[e]);
            const float2 wf = __bfloat1622float2(wp[e]);
            op[e] = __floats2bfloat162_rn(sf.x * inv_rms * wf.x, sf.y * inv_rms * wf.y);
        }
        y[c] = out;
    }
}

}  // namespace

extern "C" int add_rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ R,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    __nv_bfloat16* __restrict__ R_out,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;  // the task guarantees Hd % 64 == 0
    add_rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, R, W, Y, R_out, Hd);
    return (int)cudaGetLastError();
}
