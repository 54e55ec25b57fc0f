// ADVERSARIAL CASE mla_last_page_full (task mla_decode_paged) -- expected: INCORRECT.
//
// The classic bug: a paged-attention kernel that assumes every page is full. It takes sequence b's
// length to be pages_b * P and never reads kv_last_page_len, so it also attends to the slots of the
// last page past the sequence's end, which hold stale data (the harness fills every slot of the pool,
// as a serving engine's reused pages are never cleared). Everything else is the plain example (pages looked up through kv_indices, online
// softmax in fp32); wherever every last page is full, and with pages of one token, it is exactly the
// example. Those slots lie inside the page, so it does not fault, and it returns success.
//
// How the evaluator must catch it: the sequences it draws must end in partial last pages in every
// workload whose page size is above 1, so the extra slots change the softmax of those sequences.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

constexpr int LATENT = 512;
constexpr int ROPE = 64;
constexpr int DIM = LATENT + ROPE;        // 576: the score's dot product
constexpr int ROW = DIM + 8;              // shared-memory row stride in elements (1168 bytes)
constexpr int HEADS = 16;                 // heads per block
constexpr int WARPS = HEADS / 2;          // two heads per warp
constexpr int TILE = 32;                  // tokens per tile: one per lane
constexpr int CHUNKS = DIM / 8;           // 16-byte pieces of a token row (64 latent, 8 rope)
constexpr size_t SMEM = size_t(HEADS) * DIM * sizeof(float) + size_t(TILE) * ROW * sizeof(__nv_bfloat16);
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ void unpack8(const uint4 raw, float out[8]) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ void __launch_bounds__(WARPS * 32)
mla_decode_kernel(const __nv_bfloat16* __restrict__ q_nope, const __nv_bfloat16* __restrict__ q_pe,
                  const __nv_bfloat16* __restrict__ ckv, const __nv_bfloat16* __restrict__ kpe,
                  const int32_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                  const float* __restrict__ sm_scale,
                  __nv_bfloat16* __restrict__ out, float* __restrict__ lse, int H, int P) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* q_s = reinterpret_cast<float*>(smem);                                       // [HEADS][DIM]
    __nv_bfloat16* kv_s = reinterpret_cast<__nv_bfloat16*>(smem + HEADS * DIM * sizeof(float));  // [TILE][ROW]

    const int b = blockIdx.y;
    const int h0 = blockIdx.x * HEADS;
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;

    // queries of the block's heads, scaled so that scores come out in base-2 units (zero past H)
    const float scale2 = sm_scale[0] * LOG2E;
    for (int i = tid; i < HEADS * DIM; i += WARPS * 32) {
        const int h = h0 + i / DIM;
        const int d = i % DIM;
        float v = 0.0f;
        if (h < H) {
            const int64_t row = int64_t(b) * H + h;
            v = d < LATENT ? __bfloat162float(q_nope[row * LATENT + d])
                           : __bfloat162float(q_pe[row * ROPE + d - LATENT]);
        }
        q_s[i] = v * scale2;
    }

    const int first_page = indptr[b];
    const int n = (indptr[b + 1] - first_page) * P;  // every page of the sequence holds P tokens
    const float* qa = q_s + (2 * warp) * DIM;
    const float* qb = qa + DIM;

    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[2][16];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[0][i] = acc[1][i] = 0.0f;

    for (int t0 = 0; t0 < n; t0 += TILE) {
        __syncthreads();  // the previous tile is consumed (and, the first time, the queries are written)
        for (int i = tid; i < TILE * CHUNKS; i += WARPS * 32) {
            const int k = i / CHUNKS;
            const int c = i % CHUNKS;
            const int t = t0 + k;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (t < n) {
                const int64_t row = int64_t(indices[first_page + t / P]) * P + t % P;
                v = c < LATENT / 8 ? reinterpret_cast<const uint4*>(ckv + row * LATENT)[c]
                                   : reinterpret_cast<const uint4*>(kpe + row * ROPE)[c - LATENT / 8];
            }
            *reinterpret_cast<uint4*>(kv_s + k * ROW + c * 8) = v;
        }
        __syncthreads();

        // scores of token t0 + lane for the warp's two heads
        float s[2] = {0.0f, 0.0f};
        const __nv_bfloat16* krow = kv_s + lane * ROW;
#pragma unroll 4
        for (int d = 0; d < DIM; d += 8) {
            float k[8];
            unpack8(*reinterpret_cast<const uint4*>(krow + d), k);
            const float4 a0 = *reinterpret_cast<const float4*>(qa + d);
            const float4 a1 = *reinterpret_cast<const float4*>(qa + d + 4);
            const float4 b0 = *reinterpret_cast<const float4*>(qb + d);
            const float4 b1 = *reinterpret_cast<const float4*>(qb + d + 4);
            s[0] += a0.x * k[0] + a0.y * k[1] + a0.z * k[2] + a0.w * k[3]
                  + a1.x * k[4] + a1.y * k[5] + a1.z * k[6] + a1.w * k[7];
            s[1] += b0.x * k[0] + b0.y * k[1] + b0.z * k[2] + b0.w * k[3]
                  + b1.x * k[4] + b1.y * k[5] + b1.z * k[6] + b1.w * k[7];
        }
        const bool valid = t0 + lane < n;
        float p[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float score = valid ? s[hh] : -INFINITY;
            const float m_new = fmaxf(m[hh], warp_max(score));  // finite: every tile has a valid token
            const float alpha = exp2f(m[hh] - m_new);            // 0 on the first tile
            p[hh] = exp2f(score - m_new);
            l[hh] = l[hh] * alpha + warp_sum(p[hh]);
            m[hh] = m_new;
#pragma unroll
            for (int i = 0; i < 16; ++i) acc[hh][i] *= alpha;
        }

        // P·C over the tile's tokens: lane owns dims lane*8 .. +7 and 256 + lane*8 .. +7
        const int count = min(TILE, n - t0);
        for (int k = 0; k < count; ++k) {
            const float pa = __shfl_sync(0xffffffffu, p[0], k);
            const float pb = __shfl_sync(0xffffffffu, p[1], k);
            const __nv_bfloat16* vrow = kv_s + k * ROW + lane * 8;
            float lo[8], hi[8];
            unpack8(*reinterpret_cast<const uint4*>(vrow), lo);
            unpack8(*reinterpret_cast<const uint4*>(vrow + 256), hi);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                acc[0][j] = fmaf(pa, lo[j], acc[0][j]);
                acc[0][8 + j] = fmaf(pa, hi[j], acc[0][8 + j]);
                acc[1][j] = fmaf(pb, lo[j], acc[1][j]);
                acc[1][8 + j] = fmaf(pb, hi[j], acc[1][8 + j]);
            }
        }
    }

#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int h = h0 + 2 * warp + hh;
        if (h >= H) continue;
        const float inv = 1.0f / l[hh];
        __nv_bfloat16* dst = out + (int64_t(b) * H + h) * LATENT + lane * 8;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            uint32_t words[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const __nv_bfloat162 pair =
                    __floats2bfloat162_rn(acc[hh][half * 8 + 2 * j] * inv, acc[hh][half * 8 + 2 * j + 1] * inv);
                words[j] = *reinterpret_cast<const uint32_t*>(&pair);
            }
            *reinterpret_cast<uint4*>(dst + half * 256) = make_uint4(words[0], words[1], words[2], words[3]);
        }
        if (lane == 0) lse[int64_t(b) * H + h] = (m[hh] + log2f(l[hh])) * LN2;
    }
}

}  // namespace

extern "C" int mla_decode_paged(
    const __nv_bfloat16* __restrict__ q_nope,
    const __nv_bfloat16* __restrict__ q_pe,
    const __nv_bfloat16* __restrict__ ckv_cache,
    const __nv_bfloat16* __restrict__ kpe_cache,
    const int32_t* __restrict__ kv_indptr,
    const int32_t* __restrict__ kv_indices,
    const int32_t* __restrict__ kv_last_page_len,
    const float* __restrict__ sm_scale,
    __nv_bfloat16* __restrict__ output,
    float* __restrict__ lse,
    int64_t B,
    int64_t H,
    int64_t P,
    int64_t NP,
    int64_t L,
    cudaStream_t stream) {
    if (B == 0 || H == 0) return (int)cudaGetLastError();
    cudaError_t err = cudaFuncSetAttribute(mla_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM);
    if (err != cudaSuccess) return (int)err;
    dim3 grid((unsigned)((H + HEADS - 1) / HEADS), (unsigned)B);
    mla_decode_kernel<<<grid, WARPS * 32, SMEM, stream>>>(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices,
                                                          sm_scale, output, lse, (int)H, (int)P);
    return (int)cudaGetLastError();
}
