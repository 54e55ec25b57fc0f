// attention_bwd: dQ, dK, dV of softmax(Q·Kᵀ / sqrt(D), causal mask optional) · V for bf16 [B, H, S, D],
// D = 64, 128 or 256 and any S, given O, dO and the forward's natural-log LSE; no scratch memory, fp32
// accumulation. Approach: one block per (b, h, 64 keys) walks the query tiles accumulating dV = Pᵀ·dO,
// dK = dSᵀ·Q / sqrt(D); one block per (b, h, 64 queries) walks the key tiles accumulating dQ = dS·K / sqrt(D).
// Both recompute P = exp(scores - LSE) and D_i = rowsum(dO ⊙ O) (given bf16 O, as stated). A partial last
// tile (S not a multiple of 64) is zero-filled in shared memory, its missing rows masked out of P and never
// stored. Operand tiles sit in shared memory as fp32 at D = 64 and 128; at D = 256 four fp32 tiles alone would
// take 260 KB, so they stay bf16 there (the values are bf16 anyway) and are widened when read: 172.5 KB for
// the dK/dV kernel. Plain FMA example, not the expert.
#include <cstdint>
#include <type_traits>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int TILE = 64;      // queries or keys per tile
constexpr int THREADS = 256;  // 16 x 16: ty picks tile rows ty + 16a, tx picks columns
constexpr int PS_LD = 80;     // row stride of the 64x64 probability tiles (two rows of a warp 16 banks apart)
constexpr float LOG2E = 1.4426950408889634f;

// The element type of the shared operand tiles (fp32 up to D = 128, bf16 at D = 256) and their row
// stride in elements (rows 16 bytes apart, padded against bank conflicts).
template <int D>
using Elem = typename std::conditional<(D > 128), __nv_bfloat16, float>::type;
template <int D>
constexpr int TILE_LD = D > 128 ? D + 8 : D + 4;

// Shared memory of either kernel: four [64][TILE_LD] operand tiles, `score_tiles` [64][PS_LD] fp32 tiles,
// and the LSE and D_i of 64 queries.
template <int D>
constexpr size_t smem_bytes(int score_tiles) {
    return sizeof(Elem<D>) * 4 * size_t(TILE) * TILE_LD<D>
           + sizeof(float) * (size_t(score_tiles) * TILE * PS_LD + 2 * TILE);
}

static_assert(smem_bytes<256>(2) <= 227 * 1024, "the dK/dV kernel's shared memory must fit an SM at D = 256");

// Four consecutive elements of a shared operand tile as fp32.
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Eight bf16 values (one 16-byte chunk of a global row) into a shared tile of either element type.
__device__ __forceinline__ void store8(float* dst, uint4 raw) {
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    float2 f0 = __bfloat1622float2(pairs[0]), f1 = __bfloat1622float2(pairs[1]);
    float2 f2 = __bfloat1622float2(pairs[2]), f3 = __bfloat1622float2(pairs[3]);
    *reinterpret_cast<float4*>(dst) = make_float4(f0.x, f0.y, f1.x, f1.y);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(f2.x, f2.y, f3.x, f3.y);
}
__device__ __forceinline__ void store8(__nv_bfloat16* dst, uint4 raw) { *reinterpret_cast<uint4*>(dst) = raw; }

// Copies the first `rows` rows (at most 64) of a bf16 tile (contiguous rows of D) into a shared [64][TILE_LD]
// tile; the rows past `rows` (the tail of the sequence) are zero.
template <int D>
__device__ __forceinline__ void load_tile(Elem<D>* __restrict__ dst, const __nv_bfloat16* __restrict__ src,
                                          int64_t rows) {
    constexpr int CHUNKS_PER_ROW = D / 8;
#pragma unroll
    for (int i = 0; i < TILE * CHUNKS_PER_ROW / THREADS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        const int row = idx / CHUNKS_PER_ROW;
        const int col = (idx % CHUNKS_PER_ROW) * 8;
        const uint4 raw = row < rows ? *reinterpret_cast<const uint4*>(src + int64_t(row) * D + col)
                                     : make_uint4(0u, 0u, 0u, 0u);  // bf16 zeros
        store8(dst + row * TILE_LD<D> + col, raw);
    }
}

// For the 64 queries starting at `q` (pointers already at the head and at that row), of which the first
// `rows` exist: Ls[i] = LSE * log2(e) and Ds[i] = sum_d dO[i][d] * O[i][d], four threads per row; zero for
// the rows past S (their probabilities are masked).
template <int D>
__device__ __forceinline__ void load_row_terms(float* __restrict__ Ls, float* __restrict__ Ds,
                                               const __nv_bfloat16* __restrict__ O,
                                               const __nv_bfloat16* __restrict__ dO,
                                               const float* __restrict__ LSE, int64_t rows) {
    const int row = threadIdx.x / 4;
    const int part = threadIdx.x % 4;
    const bool inside = row < rows;
    const __nv_bfloat16* o = O + int64_t(row) * D + part * (D / 4);
    const __nv_bfloat16* g = dO + int64_t(row) * D + part * (D / 4);
    float sum = 0.0f;
    if (inside) {  // rows past S read nothing, but every lane still takes part in the shuffles below
#pragma unroll
        for (int c = 0; c < D / 4; c += 8) {
            const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
            const uint4 gv = *reinterpret_cast<const uint4*>(g + c);
            const __nv_bfloat162* op = reinterpret_cast<const __nv_bfloat162*>(&ov);
            const __nv_bfloat162* gp = reinterpret_cast<const __nv_bfloat162*>(&gv);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 of = __bfloat1622float2(op[e]);
                const float2 gf = __bfloat1622float2(gp[e]);
                sum = fmaf(of.x, gf.x, sum);
                sum = fmaf(of.y, gf.y, sum);
            }
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (part == 0) {
        Ds[row] = sum;
        Ls[row] = inside ? LSE[row] * LOG2E : 0.0f;
    }
}

// out[a][b] = sum_d X[ty + 16a][d] * Y[tx + 16b][d] for shared operand tiles.
template <int D>
__device__ __forceinline__ void tile_dot(float (&out)[4][4], const Elem<D>* __restrict__ X,
                                         const Elem<D>* __restrict__ Y, int ty, int tx) {
    constexpr int LD = TILE_LD<D>;
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) out[a][b] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
        float4 x[4], y[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) x[a] = load4(X + (ty + 16 * a) * LD + d);
#pragma unroll
        for (int b = 0; b < 4; ++b) y[b] = load4(Y + (tx + 16 * b) * LD + d);
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                out[a][b] = fmaf(x[a].x, y[b].x, out[a][b]);
                out[a][b] = fmaf(x[a].y, y[b].y, out[a][b]);
                out[a][b] = fmaf(x[a].z, y[b].z, out[a][b]);
                out[a][b] = fmaf(x[a].w, y[b].w, out[a][b]);
            }
    }
}

// acc[a][c][e] += sum_j W[ty + 16a][j] * Z[j][c * 64 + tx * 4 + e], W a [64][PS_LD] fp32 tile, Z an operand tile.
template <int D>
__device__ __forceinline__ void tile_accumulate(float (&acc)[4][D / 64][4], const float* __restrict__ W,
                                                const Elem<D>* __restrict__ Z, int ty, int tx) {
    constexpr int LD = TILE_LD<D>;
    constexpr int C4 = D / 64;
#pragma unroll 2
    for (int j = 0; j < TILE; j += 4) {
        float4 w[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) w[a] = *reinterpret_cast<const float4*>(W + (ty + 16 * a) * PS_LD + j);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            float4 z[C4];
#pragma unroll
            for (int c = 0; c < C4; ++c) z[c] = load4(Z + (j + jj) * LD + c * 64 + tx * 4);
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                const float wa = jj == 0 ? w[a].x : jj == 1 ? w[a].y : jj == 2 ? w[a].z : w[a].w;
#pragma unroll
                for (int c = 0; c < C4; ++c) {
                    acc[a][c][0] = fmaf(wa, z[c].x, acc[a][c][0]);
                    acc[a][c][1] = fmaf(wa, z[c].y, acc[a][c][1]);
                    acc[a][c][2] = fmaf(wa, z[c].z, acc[a][c][2]);
                    acc[a][c][3] = fmaf(wa, z[c].w, acc[a][c][3]);
                }
            }
        }
    }
}

// Writes rows ty + 16a (those below `rows`), columns c * 64 + tx * 4 + e of a [64, D] bf16 tile, each value
// times `mul`.
template <int D>
__device__ __forceinline__ void store_tile(__nv_bfloat16* __restrict__ dst, const float (&acc)[4][D / 64][4],
                                           float mul, int ty, int tx, int64_t rows) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        if (ty + 16 * a >= rows) continue;
#pragma unroll
        for (int c = 0; c < D / 64; ++c) {
            __nv_bfloat162 lo = __floats2bfloat162_rn(acc[a][c][0] * mul, acc[a][c][1] * mul);
            __nv_bfloat162 hi = __floats2bfloat162_rn(acc[a][c][2] * mul, acc[a][c][3] * mul);
            uint2 packed;
            packed.x = *reinterpret_cast<uint32_t*>(&lo);
            packed.y = *reinterpret_cast<uint32_t*>(&hi);
            *reinterpret_cast<uint2*>(dst + int64_t(ty + 16 * a) * D + c * 64 + tx * 4) = packed;
        }
    }
}

// dK and dV for 64 keys of one (b, h): tile rows are keys j, tile columns are queries i.
template <int D>
__global__ void __launch_bounds__(THREADS, 1)
attention_bwd_dkdv_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                          const __nv_bfloat16* __restrict__ V, const __nv_bfloat16* __restrict__ O,
                          const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
                          __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int64_t S, int causal) {
    constexpr int LD = TILE_LD<D>;
    constexpr int C4 = D / 64;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Elem<D>* Ks = reinterpret_cast<Elem<D>*>(smem_raw);
    Elem<D>* Vs = Ks + TILE * LD;
    Elem<D>* Qs = Vs + TILE * LD;
    Elem<D>* dOs = Qs + TILE * LD;
    float* Ps = reinterpret_cast<float*>(dOs + TILE * LD);   // P[j][i] (the operand tiles end 16-byte aligned)
    float* dSs = Ps + TILE * PS_LD;  // dS[j][i]
    float* Ls = dSs + TILE * PS_LD;
    float* Ds = Ls + TILE;

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    const int64_t n_blocks = (S + TILE - 1) / TILE;
    // Causal: the key blocks with the most query tiles (the first ones) start first; that is the natural order.
    const int64_t kb = blockIdx.x;
    const int64_t k0 = kb * TILE;
    const int64_t keys = S - k0 < TILE ? S - k0 : TILE;  // keys of this block inside S
    const int64_t head = blockIdx.y;  // b * H + h
    const int64_t base = head * S * D;
    const float c2 = LOG2E * rsqrtf(float(D));  // score -> base-2 exponent

    load_tile<D>(Ks, K + base + k0 * D, keys);
    load_tile<D>(Vs, V + base + k0 * D, keys);

    float dk[4][C4][4], dv[4][C4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < C4; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) dk[a][c][e] = dv[a][c][e] = 0.0f;

    // Causal: query i sees key j only when j <= i, so query tiles before this key block contribute nothing.
    for (int64_t qt = causal ? kb : 0; qt < n_blocks; ++qt) {
        const int64_t q0 = qt * TILE;
        const int64_t queries = S - q0 < TILE ? S - q0 : TILE;  // queries of this tile inside S
        __syncthreads();  // the previous tile's Q, dO, P, dS are no longer read
        load_tile<D>(Qs, Q + base + q0 * D, queries);
        load_tile<D>(dOs, dO + base + q0 * D, queries);
        load_row_terms<D>(Ls, Ds, O + base + q0 * D, dO + base + q0 * D, LSE + head * S + q0, queries);
        __syncthreads();

        float p[4][4], dp[4][4];
        tile_dot<D>(p, Ks, Qs, ty, tx);   // raw scores K_j · Q_i
        tile_dot<D>(dp, Vs, dOs, ty, tx);  // dP[i][j] = dO_i · V_j
        const bool diagonal = causal && qt == kb;
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int j = ty + 16 * a;
                const int i = tx + 16 * b;
                float prob = exp2f(fmaf(p[a][b], c2, -Ls[i]));
                if ((diagonal && i < j) || i >= queries || j >= keys) prob = 0.0f;  // masked, or past S
                Ps[j * PS_LD + i] = prob;
                dSs[j * PS_LD + i] = prob * (dp[a][b] - Ds[i]);
            }
        __syncthreads();

        tile_accumulate<D>(dv, Ps, dOs, ty, tx);  // dV_j += sum_i P[i][j] dO_i
        tile_accumulate<D>(dk, dSs, Qs, ty, tx);  // dK_j += sum_i dS[i][j] Q_i  (scaled at the end)
    }

    store_tile<D>(dK + base + k0 * D, dk, rsqrtf(float(D)), ty, tx, keys);
    store_tile<D>(dV + base + k0 * D, dv, 1.0f, ty, tx, keys);
}

// dQ for 64 queries of one (b, h): tile rows are queries i, tile columns are keys j.
template <int D>
__global__ void __launch_bounds__(THREADS, 1)
attention_bwd_dq_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                        const __nv_bfloat16* __restrict__ V, const __nv_bfloat16* __restrict__ O,
                        const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
                        __nv_bfloat16* __restrict__ dQ, int64_t S, int causal) {
    constexpr int LD = TILE_LD<D>;
    constexpr int C4 = D / 64;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Elem<D>* Qs = reinterpret_cast<Elem<D>*>(smem_raw);
    Elem<D>* dOs = Qs + TILE * LD;
    Elem<D>* Ks = dOs + TILE * LD;
    Elem<D>* Vs = Ks + TILE * LD;
    float* dSs = reinterpret_cast<float*>(Vs + TILE * LD);  // dS[i][j]
    float* Ls = dSs + TILE * PS_LD;
    float* Ds = Ls + TILE;

    const int tid = threadIdx.x;
    const int tx = tid % 16;
    const int ty = tid / 16;
    // Causal: the heaviest query blocks (most key tiles) start first.
    const int64_t qb = causal ? (int64_t(gridDim.x) - 1 - blockIdx.x) : int64_t(blockIdx.x);
    const int64_t q0 = qb * TILE;
    const int64_t queries = S - q0 < TILE ? S - q0 : TILE;  // queries of this block inside S
    const int64_t head = blockIdx.y;
    const int64_t base = head * S * D;
    const float c2 = LOG2E * rsqrtf(float(D));

    load_tile<D>(Qs, Q + base + q0 * D, queries);
    load_tile<D>(dOs, dO + base + q0 * D, queries);
    load_row_terms<D>(Ls, Ds, O + base + q0 * D, dO + base + q0 * D, LSE + head * S + q0, queries);

    float dq[4][C4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < C4; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) dq[a][c][e] = 0.0f;

    const int64_t n_tiles = causal ? qb + 1 : (S + TILE - 1) / TILE;
    for (int64_t kt = 0; kt < n_tiles; ++kt) {
        const int64_t k0 = kt * TILE;
        const int64_t keys = S - k0 < TILE ? S - k0 : TILE;  // keys of this tile inside S
        __syncthreads();  // the previous tile's K, V and dS are no longer read (and Ls, Ds are written)
        load_tile<D>(Ks, K + base + k0 * D, keys);
        load_tile<D>(Vs, V + base + k0 * D, keys);
        __syncthreads();

        float p[4][4], dp[4][4];
        tile_dot<D>(p, Qs, Ks, ty, tx);
        tile_dot<D>(dp, dOs, Vs, ty, tx);
        const bool diagonal = causal && k0 == q0;
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int i = ty + 16 * a;
            const float li = Ls[i];
            const float di = Ds[i];
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int j = tx + 16 * b;
                float prob = exp2f(fmaf(p[a][b], c2, -li));
                if ((diagonal && j > i) || j >= keys) prob = 0.0f;  // masked, or a key past S
                dSs[i * PS_LD + j] = prob * (dp[a][b] - di);
            }
        }
        __syncthreads();

        tile_accumulate<D>(dq, dSs, Ks, ty, tx);  // dQ_i += sum_j dS[i][j] K_j  (scaled at the end)
    }

    store_tile<D>(dQ + base + q0 * D, dq, rsqrtf(float(D)), ty, tx, queries);
}

template <int D>
int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, const __nv_bfloat16* O,
           const __nv_bfloat16* dO, const float* LSE, __nv_bfloat16* dQ, __nv_bfloat16* dK, __nv_bfloat16* dV,
           int64_t B, int64_t H, int64_t S, int64_t causal, cudaStream_t stream) {
    const size_t smem_dkdv = smem_bytes<D>(2);
    const size_t smem_dq = smem_bytes<D>(1);
    cudaError_t err = cudaFuncSetAttribute(attention_bwd_dkdv_kernel<D>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_dkdv));
    if (err != cudaSuccess) return (int)err;
    err = cudaFuncSetAttribute(attention_bwd_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(smem_dq));
    if (err != cudaSuccess) return (int)err;
    const dim3 grid((unsigned)((S + TILE - 1) / TILE), (unsigned)(B * H));
    const int c = causal ? 1 : 0;
    attention_bwd_dkdv_kernel<D><<<grid, THREADS, smem_dkdv, stream>>>(Q, K, V, O, dO, LSE, dK, dV, S, c);
    attention_bwd_dq_kernel<D><<<grid, THREADS, smem_dq, stream>>>(Q, K, V, O, dO, LSE, dQ, S, c);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" int attention_bwd(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    const __nv_bfloat16* __restrict__ O,
    const __nv_bfloat16* __restrict__ dO,
    const float* __restrict__ LSE,
    __nv_bfloat16* __restrict__ dQ,
    __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV,
    int64_t B,
    int64_t H,
    int64_t S,
    int64_t D,
    int64_t causal,
    cudaStream_t stream) {
    if (B * H * S == 0) return (int)cudaGetLastError();
    if (D == 64) return launch<64>(Q, K, V, O, dO, LSE, dQ, dK, dV, B, H, S, causal, stream);
    if (D == 128) return launch<128>(Q, K, V, O, dO, LSE, dQ, dK, dV, B, H, S, causal, stream);
    if (D == 256) return launch<256>(Q, K, V, O, dO, LSE, dQ, dK, dV, B, H, S, causal, stream);
    return (int)cudaErrorInvalidValue;
}
