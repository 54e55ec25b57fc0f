// ADVERSARIAL CASE prefill_equal_lengths (task prefill_gqa_ragged) -- expected: INCORRECT.
//
// The classic bug: a ragged-batch attention kernel that assumes every sequence has the same length,
// T / B tokens (the last one taking what integer division leaves), and finds a row's sequence by
// division instead of reading seq_indptr. Everything else is the plain example (one block per token
// row and kv head, causal within the sequence, online softmax in fp32); wherever the lengths are
// equal, and for a batch of one sequence, it is exactly the example. Every key it reads is one of the
// T rows, so it does not fault: rows near a boundary attend across it, or miss keys of their own
// sequence, and it returns success.
//
// How the evaluator must catch it: the batches it draws must hold sequences of unequal lengths in
// every workload with more than one sequence (the task's lengths step down by DS > 0).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int DIM = 128;
constexpr int WARPS = 4;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ void load4(const __nv_bfloat16* __restrict__ p, float out[4]) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
}

template <int G>
__global__ void __launch_bounds__(WARPS * 32)
prefill_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
               const __nv_bfloat16* __restrict__ V, int64_t T, int B,
               __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int H, int KH) {
    const int64_t row = blockIdx.x;
    const int kvh = blockIdx.y;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;

    const int64_t length = T / B;  // every sequence holds T / B tokens; the last one also the remainder
    const int64_t start = min(row / length, int64_t(B) - 1) * length;

    float q[G][4];
    const float qscale = LOG2E * rsqrtf(float(DIM));
#pragma unroll
    for (int g = 0; g < G; ++g) {
        load4(Q + (row * H + int64_t(kvh) * G + g) * DIM + lane * 4, q[g]);
#pragma unroll
        for (int i = 0; i < 4; ++i) q[g][i] *= qscale;
    }
    float m[G], l[G], acc[G][4];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[g][i] = 0.0f;
    }

    for (int64_t j = start + warp; j <= row; j += WARPS) {
        float k[4], v[4];
        load4(K + (j * KH + kvh) * DIM + lane * 4, k);
        load4(V + (j * KH + kvh) * DIM + lane * 4, v);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float s = q[g][0] * k[0] + q[g][1] * k[1] + q[g][2] * k[2] + q[g][3] * k[3];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            const float m_new = fmaxf(m[g], s);
            const float alpha = exp2f(m[g] - m_new);
            const float p = exp2f(s - m_new);
            l[g] = l[g] * alpha + p;
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[g][i] = acc[g][i] * alpha + p * v[i];
            m[g] = m_new;
        }
    }

    __shared__ float s_m[WARPS][G], s_l[WARPS][G];
    __shared__ float s_acc[WARPS][G][DIM];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (lane == 0) { s_m[warp][g] = m[g]; s_l[warp][g] = l[g]; }
#pragma unroll
        for (int i = 0; i < 4; ++i) s_acc[warp][g][lane * 4 + i] = acc[g][i];
    }
    __syncthreads();
    // warp w finishes query heads g = w, w + 4, ...
    for (int g = warp; g < G; g += WARPS) {
        float top = -INFINITY;
        for (int w = 0; w < WARPS; ++w) top = fmaxf(top, s_m[w][g]);
        float total = 0.0f, out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int w = 0; w < WARPS; ++w) {
            if (s_m[w][g] == -INFINITY) continue;  // a warp that saw no key
            const float f = exp2f(s_m[w][g] - top);
            total += s_l[w][g] * f;
#pragma unroll
            for (int i = 0; i < 4; ++i) out[i] += s_acc[w][g][lane * 4 + i] * f;
        }
        const float inv = 1.0f / total;
        const int64_t head = int64_t(kvh) * G + g;
        __nv_bfloat162 a = __floats2bfloat162_rn(out[0] * inv, out[1] * inv);
        __nv_bfloat162 b = __floats2bfloat162_rn(out[2] * inv, out[3] * inv);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&a);
        packed.y = *reinterpret_cast<uint32_t*>(&b);
        *reinterpret_cast<uint2*>(O + (row * H + head) * DIM + lane * 4) = packed;
        if (lane == 0) LSE[row * H + head] = top * LN2 + logf(total);
    }
}

template <int G>
int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
           __nv_bfloat16* O, float* LSE, int64_t B, int64_t T, int64_t H, int64_t KH, cudaStream_t stream) {
    dim3 grid((unsigned)T, (unsigned)KH);
    prefill_kernel<G><<<grid, WARPS * 32, 0, stream>>>(Q, K, V, T, (int)B, O, LSE, (int)H, (int)KH);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int prefill_gqa_ragged(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    const int32_t* __restrict__ seq_indptr,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t S,
    int64_t DS,
    int64_t T,
    int64_t H,
    int64_t KH,
    cudaStream_t stream) {
    if (T == 0 || H == 0) return (int)cudaGetLastError();
    if (KH <= 0 || H % KH != 0) return (int)cudaErrorInvalidValue;
    switch (H / KH) {
        case 1: return launch<1>(Q, K, V, O, LSE, B, T, H, KH, stream);
        case 4: return launch<4>(Q, K, V, O, LSE, B, T, H, KH, stream);
        case 8: return launch<8>(Q, K, V, O, LSE, B, T, H, KH, stream);
        default: return (int)cudaErrorInvalidValue;  // group sizes 1, 4 and 8 (the suite's): others not handled by this example
    }
}
