// attention_fwd: O = softmax(Q·Kᵀ / sqrt(D), causal mask optional) · V and LSE = natural-log
// log-sum-exp of the scaled, masked scores, for bf16 Q, K, V [B, H, S, D] with D = 64, 128 or 256 and any S.
// Approach: one block of 256 threads per (b, h, 64 queries); Q stays in shared memory (fp32, scaled by
// log2(e)/sqrt(D)), K and V tiles of 64 keys pass through one shared buffer; an online (flash-style)
// softmax in base 2 rescales the fp32 output accumulators per tile. A partial last tile (S not a multiple
// of 64) is zero-filled in shared memory, its missing keys masked and its missing queries never stored.
// Shared memory: 4 * (2 * 64 * (D + 4) + 64 * 80) bytes, 150 KB at D = 256. Plain FMA example, not the
// expert kernel.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int BQ = 64;        // queries per block
constexpr int BKV = 64;       // keys per tile
constexpr int THREADS = 256;  // 16 x 16: ty picks rows ty + 16a, tx picks columns
constexpr int PS_LD = 80;     // row stride of the probability tile (two rows of a warp 16 banks apart)
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

template <int D>
constexpr size_t smem_bytes() {
    return sizeof(float) * (size_t(BQ) * (D + 4) + size_t(BKV) * (D + 4) + size_t(BQ) * PS_LD);
}

static_assert(smem_bytes<256>() <= 227 * 1024, "shared memory must fit an SM at D = 256");

// Copies the first `rows` rows (at most 64) of a [rows, D] bf16 tile (contiguous rows of D) into shared fp32
// [64][D + 4], multiplied by `mul`; the rows past `rows` (the tail of the sequence) are zero.
template <int D>
__device__ __forceinline__ void load_tile(float* __restrict__ dst, const __nv_bfloat16* __restrict__ src,
                                          float mul, int64_t rows) {
    constexpr int CHUNKS_PER_ROW = D / 8;
#pragma unroll
    for (int i = 0; i < 64 * CHUNKS_PER_ROW / THREADS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        const int row = idx / CHUNKS_PER_ROW;
        const int col = (idx % CHUNKS_PER_ROW) * 8;
        if (row >= rows) {
            *reinterpret_cast<float4*>(dst + row * (D + 4) + col) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *reinterpret_cast<float4*>(dst + row * (D + 4) + col + 4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            continue;
        }
        const uint4 raw = *reinterpret_cast<const uint4*>(src + int64_t(row) * D + col);
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
        float4 lo, hi;
        float2 f;
        f = __bfloat1622float2(pairs[0]); lo.x = f.x * mul; lo.y = f.y * mul;
        f = __bfloat1622float2(pairs[1]); lo.z = f.x * mul; lo.w = f.y * mul;
        f = __bfloat1622float2(pairs[2]); hi.x = f.x * mul; hi.y = f.y * mul;
        f = __bfloat1622float2(pairs[3]); hi.z = f.x * mul; hi.w = f.y * mul;
        *reinterpret_cast<float4*>(dst + row * (D + 4) + col) = lo;
        *reinterpret_cast<float4*>(dst + row * (D + 4) + col + 4) = hi;
    }
}

// Two blocks per SM at D = 64 and 128; at D = 256 one block holds 150 KB and all the registers it wants.
template <int D>
__global__ void __launch_bounds__(THREADS, D == 256 ? 1 : 2)
attention_fwd_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                     const __nv_bfloat16* __restrict__ V, __nv_bfloat16* __restrict__ O,
                     float* __restrict__ LSE, int64_t S, int causal) {
    constexpr int LD = D + 4;
    constexpr int C4 = D / 64;  // float4 column groups per thread: columns c4 * 64 + tx * 4 + e
    extern __shared__ __align__(16) float smem[];
    float* Qs = smem;                 // [BQ][LD], pre-scaled by log2(e) / sqrt(D)
    float* KVs = Qs + BQ * LD;        // [BKV][LD], K then V of the current tile
    float* Ps = KVs + BKV * LD;       // [BQ][PS_LD], probabilities of the current tile

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    // Causal: the heaviest query blocks (most key tiles) start first.
    const int64_t qb = causal ? (int64_t(gridDim.x) - 1 - blockIdx.x) : int64_t(blockIdx.x);
    const int64_t q0 = qb * BQ;
    const int64_t head = blockIdx.y;  // b * H + h
    const int64_t head_base = head * S * D;

    load_tile<D>(Qs, Q + head_base + q0 * D, LOG2E * rsqrtf(float(D)), S - q0);

    float o[4][C4][4];
    float m[4], l[4];  // running max (base-2 units) and this thread's partial running sum, per row
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int c = 0; c < C4; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[a][c][e] = 0.0f;
    }

    // Every tile visited has a key each row sees (key k0 <= q0 <= row when causal, k0 < S always), so the
    // running max is finite from the first tile on, padded query rows included.
    const int64_t n_tiles = causal ? qb + 1 : (S + BKV - 1) / BKV;
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t k0 = t * BKV;
        const int64_t keys = S - k0 < BKV ? S - k0 : BKV;  // valid keys in this tile
        __syncthreads();  // the previous tile's V and P are no longer read
        load_tile<D>(KVs, K + head_base + k0 * D, 1.0f, keys);
        __syncthreads();

        // Scores s[a][b] for query row ty + 16a, key column tx + 16b (base-2 units).
        float s[4][4];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) s[a][b] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 q[4], k[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) q[a] = *reinterpret_cast<const float4*>(Qs + (ty + 16 * a) * LD + d);
#pragma unroll
            for (int b = 0; b < 4; ++b) k[b] = *reinterpret_cast<const float4*>(KVs + (tx + 16 * b) * LD + d);
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    s[a][b] = fmaf(q[a].x, k[b].x, s[a][b]);
                    s[a][b] = fmaf(q[a].y, k[b].y, s[a][b]);
                    s[a][b] = fmaf(q[a].z, k[b].z, s[a][b]);
                    s[a][b] = fmaf(q[a].w, k[b].w, s[a][b]);
                }
        }
        // Causal: only the diagonal tile (k0 == q0) is partly masked; tiles past it are never visited.
        if (causal && k0 == q0) {
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b)
                    if (tx + 16 * b > ty + 16 * a) s[a][b] = -INFINITY;
        }
        // The last tile of a ragged length: keys past S are not part of the sequence.
        if (keys < BKV) {
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b)
                    if (tx + 16 * b >= keys) s[a][b] = -INFINITY;
        }

        // Online softmax: the 16 threads sharing ty hold a row; they are lanes of one half-warp.
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            float tile_max = fmaxf(fmaxf(s[a][0], s[a][1]), fmaxf(s[a][2], s[a][3]));
#pragma unroll
            for (int off = 8; off > 0; off >>= 1)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
            // Key 0 is visible to every query, so m_new is finite from the first tile on.
            const float m_new = fmaxf(m[a], tile_max);
            const float alpha = exp2f(m[a] - m_new);  // exp2(-inf) = 0 on the first tile
            m[a] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const float p = exp2f(s[a][b] - m_new);  // masked: exp2(-inf) = 0
                Ps[(ty + 16 * a) * PS_LD + tx + 16 * b] = p;
                sum += p;
            }
            l[a] = l[a] * alpha + sum;
#pragma unroll
            for (int c = 0; c < C4; ++c)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[a][c][e] *= alpha;
        }

        __syncthreads();  // scores done: K may be overwritten, P is complete
        load_tile<D>(KVs, V + head_base + k0 * D, 1.0f, keys);  // zeros past S: 0 * 0, never 0 * garbage
        __syncthreads();

        // o[row][col] += sum_j P[row][j] * V[j][col]
#pragma unroll 2
        for (int j = 0; j < BKV; j += 4) {
            float4 p[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) p[a] = *reinterpret_cast<const float4*>(Ps + (ty + 16 * a) * PS_LD + j);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                float4 v[C4];
#pragma unroll
                for (int c = 0; c < C4; ++c)
                    v[c] = *reinterpret_cast<const float4*>(KVs + (j + jj) * LD + c * 64 + tx * 4);
#pragma unroll
                for (int a = 0; a < 4; ++a) {
                    const float pa = jj == 0 ? p[a].x : jj == 1 ? p[a].y : jj == 2 ? p[a].z : p[a].w;
#pragma unroll
                    for (int c = 0; c < C4; ++c) {
                        o[a][c][0] = fmaf(pa, v[c].x, o[a][c][0]);
                        o[a][c][1] = fmaf(pa, v[c].y, o[a][c][1]);
                        o[a][c][2] = fmaf(pa, v[c].z, o[a][c][2]);
                        o[a][c][3] = fmaf(pa, v[c].w, o[a][c][3]);
                    }
                }
            }
        }
    }

    // Finish: total row sums, normalise, write O (bf16) and LSE (natural log) of the rows inside S.
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        float total = l[a];
#pragma unroll
        for (int off = 8; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
        const float inv = 1.0f / total;
        const int64_t row = q0 + ty + 16 * a;
        if (row >= S) continue;  // after the shuffles: every lane of the half-warp took part
        __nv_bfloat16* out = O + head_base + row * D;
#pragma unroll
        for (int c = 0; c < C4; ++c) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(o[a][c][0] * inv, o[a][c][1] * inv);
            __nv_bfloat162 hi = __floats2bfloat162_rn(o[a][c][2] * inv, o[a][c][3] * inv);
            uint2 packed;
            packed.x = *reinterpret_cast<uint32_t*>(&lo);
            packed.y = *reinterpret_cast<uint32_t*>(&hi);
            *reinterpret_cast<uint2*>(out + c * 64 + tx * 4) = packed;
        }
        if (tx == 0) LSE[head * S + row] = m[a] * LN2 + logf(total);
    }
}

template <int D>
int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O,
           float* LSE, int64_t B, int64_t H, int64_t S, int64_t causal, cudaStream_t stream) {
    const size_t smem = smem_bytes<D>();
    cudaError_t err = cudaFuncSetAttribute(attention_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smem));
    if (err != cudaSuccess) return (int)err;
    dim3 grid((unsigned)((S + BQ - 1) / BQ), (unsigned)(B * H));
    attention_fwd_kernel<D><<<grid, THREADS, smem, stream>>>(Q, K, V, O, LSE, S, causal ? 1 : 0);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int attention_fwd(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t H,
    int64_t S,
    int64_t D,
    int64_t causal,
    cudaStream_t stream) {
    if (B * H * S == 0) return (int)cudaGetLastError();
    if (D == 64) return launch<64>(Q, K, V, O, LSE, B, H, S, causal, stream);
    if (D == 128) return launch<128>(Q, K, V, O, LSE, B, H, S, causal, stream);
    if (D == 256) return launch<256>(Q, K, V, O, LSE, B, H, S, causal, stream);
    return (int)cudaErrorInvalidValue;
}
