// rope: NeoX rotate-half rotary embedding of bf16 Q [T, Hq, D] and K [T, Hkv, D] at int32 positions:
// for i < D / 2, angle = positions[t] * theta^(-2 i / D); out[i] = x[i] cos - x[i + D/2] sin and
// out[i + D/2] = x[i + D/2] cos + x[i] sin, written to Q_out and K_out.
// Approach: one block of 128 threads per token; thread (group, i) computes the angle of pair i in
// double precision (exact enough at any position) and its cos and sin once, then rotates pair i of
// every (128 / (D / 2))-th head of Q and K, reading and writing bf16 elements one by one.
// A plain CUDA example for PTXBench (plain loads, no bulk copies): not the expert kernel.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int THREADS = 128;

__device__ __forceinline__ void rotate_heads(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out,
                                             int64_t heads, int64_t D, int pair, int group, int groups,
                                             float c, float s) {
    const int64_t half = D / 2;
    for (int64_t h = group; h < heads; h += groups) {
        const float a = __bfloat162float(in[h * D + pair]);
        const float b = __bfloat162float(in[h * D + half + pair]);
        out[h * D + pair] = __float2bfloat16_rn(a * c - b * s);
        out[h * D + half + pair] = __float2bfloat16_rn(b * c + a * s);
    }
}

__global__ void __launch_bounds__(THREADS)
rope_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
            const int32_t* __restrict__ positions, __nv_bfloat16* __restrict__ Q_out,
            __nv_bfloat16* __restrict__ K_out, int64_t Hq, int64_t Hkv, int64_t D, int64_t theta) {
    const int64_t t = blockIdx.x;
    const int half = int(D / 2);  // D is 64 or 128: half divides THREADS
    const int groups = THREADS / half;
    const int pair = threadIdx.x % half;
    const int group = threadIdx.x / half;

    const double inv_freq = pow(double(theta), -2.0 * pair / double(D));
    double s, c;
    sincos(double(positions[t]) * inv_freq, &s, &c);

    rotate_heads(Q + t * Hq * D, Q_out + t * Hq * D, Hq, D, pair, group, groups, float(c), float(s));
    rotate_heads(K + t * Hkv * D, K_out + t * Hkv * D, Hkv, D, pair, group, groups, float(c), float(s));
}

}  // namespace

extern "C" int rope(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const int32_t* __restrict__ positions,
    __nv_bfloat16* __restrict__ Q_out,
    __nv_bfloat16* __restrict__ K_out,
    int64_t T,
    int64_t Hq,
    int64_t Hkv,
    int64_t D,
    int64_t theta,
    cudaStream_t stream) {
    if (T <= 0) return (int)cudaGetLastError();
    if (D != 64 && D != 128) return (int)cudaErrorInvalidValue;
    rope_kernel<<<(unsigned)T, THREADS, 0, stream>>>(Q, K, positions, Q_out, K_out, Hq, Hkv, D, theta);
    return (int)cudaGetLastError();
}
