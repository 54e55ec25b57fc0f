// gqa_paged_decode_h8_kv2_d128_ps16 (imported FlashInfer-Trace gqa_paged): one query token per sequence over a
// paged KV cache [pages, page_size, kv_heads, 128], query head h reading kv head h / (H / KH); the output in
// bf16 and the base-2 log-sum-exp of the scaled logits (sm_scale = 1/sqrt(128), fixed by the workloads).
// Approach: one block of 4 warps per (sequence, query head); warp w takes keys w, w + 4, ...; a lane holds 4
// of the 128 dimensions, so a key row is one 256-byte read reduced with shuffles; an online softmax per warp
// (base 2, fp32), merged through shared memory. Plain CUDA for the GPU test of imported tasks: plain loads,
// no copy engine, so it lacks the task's required features (that test checks it is correct).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int DIM = 128;
constexpr int WARPS = 4;
constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ void load4(const __nv_bfloat16* __restrict__ p, float out[4]) {
    const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(p);
    const float2 a = __bfloat1622float2(pair[0]), b = __bfloat1622float2(pair[1]);
    out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
}

__global__ void __launch_bounds__(WARPS * 32)
decode_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
              const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ indptr,
              const int32_t* __restrict__ indices, const int32_t* __restrict__ last_len,
              __nv_bfloat16* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int page_size) {
    const int b = blockIdx.y, h = blockIdx.x, kvh = h / (heads / kv_heads);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t row = int64_t(b) * heads + h;
    const int first = indptr[b], pages = indptr[b + 1] - first;
    const int keys = pages > 0 ? (pages - 1) * page_size + last_len[b] : 0;

    float qv[4];
    load4(q + row * DIM + lane * 4, qv);
    const float scale = LOG2E * rsqrtf(float(DIM));  // logits in base-2 units
#pragma unroll
    for (int i = 0; i < 4; ++i) qv[i] *= scale;

    const int64_t token_stride = int64_t(kv_heads) * DIM, page_stride = int64_t(page_size) * token_stride;
    float m = -INFINITY, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int t = warp; t < keys; t += WARPS) {
        const int64_t at = int64_t(indices[first + t / page_size]) * page_stride + int64_t(t % page_size) * token_stride
                           + int64_t(kvh) * DIM + lane * 4;
        float kv[4], vv[4];
        load4(k_cache + at, kv);
        load4(v_cache + at, vv);
        float s = qv[0] * kv[0] + qv[1] * kv[1] + qv[2] * kv[2] + qv[3] * kv[3];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        const float m_new = fmaxf(m, s), alpha = exp2f(m - m_new), p = exp2f(s - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i] = acc[i] * alpha + p * vv[i];
        m = m_new;
    }

    __shared__ float s_m[WARPS], s_l[WARPS], s_acc[WARPS][DIM];
    if (lane == 0) { s_m[warp] = m; s_l[warp] = l; }
#pragma unroll
    for (int i = 0; i < 4; ++i) s_acc[warp][lane * 4 + i] = acc[i];
    __syncthreads();
    if (warp == 0) {
        float top = -INFINITY;
        for (int w = 0; w < WARPS; ++w) top = fmaxf(top, s_m[w]);
        float total = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
        for (int w = 0; w < WARPS; ++w) {
            if (s_m[w] == -INFINITY) continue;  // a warp that saw no key
            const float f = exp2f(s_m[w] - top);
            total += s_l[w] * f;
#pragma unroll
            for (int i = 0; i < 4; ++i) o[i] += s_acc[w][lane * 4 + i] * f;
        }
        const float inv = total > 0.f ? 1.f / total : 0.f;  // a sequence without keys: zeros, lse -inf (as run())
        __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + row * DIM + lane * 4);
        dst[0] = __floats2bfloat162_rn(o[0] * inv, o[1] * inv);
        dst[1] = __floats2bfloat162_rn(o[2] * inv, o[3] * inv);
        if (lane == 0) lse[row] = total > 0.f ? top + log2f(total) : -INFINITY;
    }
}

}  // namespace

extern "C" int gqa_paged_decode_h8_kv2_d128_ps16(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ kv_indptr,
    const int32_t* __restrict__ kv_indices, const int32_t* __restrict__ kv_last_page_len,
    __nv_bfloat16* __restrict__ output, float* __restrict__ lse, int64_t batch_size, int64_t num_qo_heads,
    int64_t num_kv_heads, int64_t head_dim, int64_t page_size, int64_t num_pages, int64_t len_indptr,
    int64_t num_kv_indices, int64_t kv_tokens, cudaStream_t stream) {
    if (head_dim != DIM || num_kv_heads <= 0 || num_qo_heads % num_kv_heads != 0) return (int)cudaErrorInvalidValue;
    if (batch_size <= 0) return (int)cudaGetLastError();
    const dim3 grid((unsigned)num_qo_heads, (unsigned)batch_size);
    decode_kernel<<<grid, WARPS * 32, 0, stream>>>(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
                                                   output, lse, (int)num_qo_heads, (int)num_kv_heads, (int)page_size);
    return (int)cudaGetLastError();
}
