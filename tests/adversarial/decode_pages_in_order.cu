// ADVERSARIAL CASE decode_pages_in_order (task decode_gqa_paged) -- expected: INCORRECT.
//
// The classic bug: a paged-attention kernel that assumes the page table is in order. It takes the pool
// to be laid out sequence after sequence, so that sequence b's j-th page is page kv_indptr[b] + j, and
// never reads kv_indices. Everything else is the plain example (one block per sequence and query head,
// online softmax in fp32, the last page's length honoured); wherever kv_indices is the identity
// (0, 1, ..., NP - 1) it is exactly the example. Every page it reads lies in the pool, so it does not
// fault: it attends to other sequences' keys and values and returns success.
//
// How the evaluator must catch it: the page tables it draws must be shuffled over the pool in every
// workload (the task says "scattered over the pool in no particular order"), so the keys a sequence
// really owns differ from the ones this kernel reads.
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

__global__ void __launch_bounds__(WARPS * 32)
decode_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
              const __nv_bfloat16* __restrict__ V, const int32_t* __restrict__ indptr,
              const int32_t* __restrict__ last_len,
              __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int H, int KH, int P) {
    const int b = blockIdx.y;
    const int h = blockIdx.x;
    const int kvh = h / (H / KH);
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;

    float q[4];
    load4(Q + (int64_t(b) * H + h) * DIM + lane * 4, q);
    const float qscale = LOG2E * rsqrtf(float(DIM));  // scores in base-2 units
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] *= qscale;

    const int first_page = indptr[b];
    const int pages = indptr[b + 1] - first_page;
    const int n = (pages - 1) * P + last_len[b];
    const int64_t row_stride = int64_t(KH) * DIM;  // between tokens of a page
    const int64_t page_stride = int64_t(P) * row_stride;

    float m = -INFINITY, l = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = warp; t < n; t += WARPS) {
        const int64_t page = first_page + t / P;  // the pool holds each sequence's pages in order
        const int64_t offset = page * page_stride + int64_t(t % P) * row_stride + int64_t(kvh) * DIM + lane * 4;
        float k[4], v[4];
        load4(K + offset, k);
        load4(V + offset, v);
        float s = q[0] * k[0] + q[1] * k[1] + q[2] * k[2] + q[3] * k[3];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        const float m_new = fmaxf(m, s);
        const float alpha = exp2f(m - m_new);  // 0 on the first key
        const float p = exp2f(s - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = acc[i] * alpha + p * v[i];
        m = m_new;
    }

    __shared__ float s_m[WARPS], s_l[WARPS];
    __shared__ float s_acc[WARPS][DIM];
    if (lane == 0) { s_m[warp] = m; s_l[warp] = l; }
#pragma unroll
    for (int i = 0; i < 4; ++i) s_acc[warp][lane * 4 + i] = acc[i];
    __syncthreads();
    if (warp == 0) {
        float top = -INFINITY;
        for (int w = 0; w < WARPS; ++w) top = fmaxf(top, s_m[w]);
        float total = 0.0f, out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int w = 0; w < WARPS; ++w) {
            if (s_m[w] == -INFINITY) continue;  // a warp that saw no key (n < WARPS)
            const float f = exp2f(s_m[w] - top);
            total += s_l[w] * f;
#pragma unroll
            for (int i = 0; i < 4; ++i) out[i] += s_acc[w][lane * 4 + i] * f;
        }
        const float inv = 1.0f / total;
        __nv_bfloat162 lo = __floats2bfloat162_rn(out[0] * inv, out[1] * inv);
        __nv_bfloat162 hi = __floats2bfloat162_rn(out[2] * inv, out[3] * inv);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(O + (int64_t(b) * H + h) * DIM + lane * 4) = packed;
        if (lane == 0) LSE[int64_t(b) * H + h] = top * LN2 + logf(total);
    }
}

}  // namespace

extern "C" int decode_gqa_paged(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K_cache,
    const __nv_bfloat16* __restrict__ V_cache,
    const int32_t* __restrict__ kv_indptr,
    const int32_t* __restrict__ kv_indices,
    const int32_t* __restrict__ kv_last_page_len,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t H,
    int64_t KH,
    int64_t P,
    int64_t NP,
    int64_t L,
    cudaStream_t stream) {
    if (B == 0 || H == 0) return (int)cudaGetLastError();
    if (KH <= 0 || H % KH != 0) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)H, (unsigned)B);
    decode_kernel<<<grid, WARPS * 32, 0, stream>>>(Q, K_cache, V_cache, kv_indptr, kv_last_page_len, O, LSE,
                                                   (int)H, (int)KH, (int)P);
    return (int)cudaGetLastError();
}
