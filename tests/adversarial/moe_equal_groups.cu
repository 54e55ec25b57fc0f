// ADVERSARIAL CASE moe_equal_groups (task moe_grouped_gemm) -- expected: INCORRECT.
//
// The classic bug: a grouped GEMM that assumes the router balanced the experts, so that expert e owns
// rows [e T / E, (e + 1) T / E) (integer division) as under a capacity factor, and never reads
// expert_offsets. Everything else is the plain example (128x128 tiles, a tile never mixes experts,
// fp32 accumulation); wherever the groups really are of those equal sizes it is exactly the example.
// Every row it touches is one of the T rows and every weight one of the E experts', so it does not
// fault: rows of unequal groups are multiplied by a neighbouring expert's weights, and it returns
// success.
//
// How the evaluator must catch it: the routing it draws must give groups of unequal sizes, some of
// them empty, in every workload (the task says "expert counts differ and some are zero").
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int BM = 128;          // rows of C per block
constexpr int BN = 128;          // columns of C per block
constexpr int BK = 32;           // K step
constexpr int LDS = BM + 4;      // shared row stride in floats (keeps float4 alignment)
constexpr int THREADS = 256;
constexpr int CHUNKS = BM * BK / 8 / THREADS;  // 16-byte chunks of one operand tile per thread (= 2)

static_assert(BM == BN, "the loader below handles A and B tiles alike");

// One 16-byte chunk (8 bf16 along K) of row `row` of an operand tile, or zeros past the last row.
__device__ __forceinline__ uint4 load_chunk(const __nv_bfloat16* __restrict__ base, int64_t row,
                                            int64_t rows, int64_t ld, int64_t k) {
    if (row < rows) return *reinterpret_cast<const uint4*>(base + row * ld + k);
    return make_uint4(0u, 0u, 0u, 0u);
}

// Writes 8 bf16 (one chunk) as fp32 into the k-major shared tile: tile[k0 + e][row].
__device__ __forceinline__ void store_chunk(float (*tile)[LDS], uint4 chunk, int row, int k0) {
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&chunk);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        float2 f = __bfloat1622float2(pairs[e]);
        tile[k0 + 2 * e][row] = f.x;
        tile[k0 + 2 * e + 1][row] = f.y;
    }
}

__global__ void __launch_bounds__(THREADS)
moe_grouped_gemm_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                        __nv_bfloat16* __restrict__ C, int64_t T, int64_t E, int64_t N, int64_t K) {
    __shared__ __align__(16) float As[BK][LDS];
    __shared__ __align__(16) float Bs[BK][LDS];
    __shared__ int64_t tile_info[3];  // expert, first row, end row (expert -1: no tile)

    const int tid = threadIdx.x;
    if (tid == 0) {
        int64_t tile = blockIdx.y, start = 0;
        tile_info[0] = -1;
        for (int64_t e = 0; e < E; ++e) {
            const int64_t end = (e + 1) * T / E;  // balanced routing: T / E rows per expert
            const int64_t tiles = (end - start + BM - 1) / BM;
            if (tile < tiles) {
                tile_info[0] = e;
                tile_info[1] = start + tile * BM;
                tile_info[2] = end;
                break;
            }
            tile -= tiles;
            start = end;
        }
    }
    __syncthreads();
    if (tile_info[0] < 0) return;  // uniform across the block
    const __nv_bfloat16* A = X;
    const __nv_bfloat16* B = W + tile_info[0] * N * K;
    const int64_t M = tile_info[2];  // rows from the group's end on are not this tile's
    const int tx = tid % 16;  // column group
    const int ty = tid / 16;  // row group
    const int64_t m0 = tile_info[1];
    const int64_t n0 = int64_t(blockIdx.x) * BN;

    // Loader mapping: chunk c of this thread covers tile row (idx / 4), k offset (idx % 4) * 8.
    int ld_row[CHUNKS], ld_k[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
        int idx = tid + c * THREADS;
        ld_row[c] = idx / (BK / 8);
        ld_k[c] = (idx % (BK / 8)) * 8;
    }

    uint4 a_next[CHUNKS], b_next[CHUNKS];
    auto load_tiles = [&](int64_t k0) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            a_next[c] = load_chunk(A, m0 + ld_row[c], M, K, k0 + ld_k[c]);
            b_next[c] = load_chunk(B, n0 + ld_row[c], N, K, k0 + ld_k[c]);
        }
    };
    auto store_tiles = [&]() {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
            store_chunk(As, a_next[c], ld_row[c], ld_k[c]);
            store_chunk(Bs, b_next[c], ld_row[c], ld_k[c]);
        }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int64_t k_tiles = K / BK;  // K is a multiple of 64
    if (k_tiles > 0) {
        load_tiles(0);
        store_tiles();
    }
    __syncthreads();

    for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const bool more = kt + 1 < k_tiles;
        if (more) load_tiles((kt + 1) * BK);  // in flight while this step computes

#pragma unroll 4
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
            float4 t;
            t = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            a[0] = t.x; a[1] = t.y; a[2] = t.z; a[3] = t.w;
            t = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            a[4] = t.x; a[5] = t.y; a[6] = t.z; a[7] = t.w;
            t = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            b[0] = t.x; b[1] = t.y; b[2] = t.z; b[3] = t.w;
            t = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
            b[4] = t.x; b[5] = t.y; b[6] = t.z; b[7] = t.w;
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // everyone is done reading this step's tiles
        if (more) {
            store_tiles();
            __syncthreads();
        }
    }

    // Epilogue: rows ty*4+i (+64), columns tx*4+j (+64); each group of 4 columns is one 8-byte store.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int64_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (m >= M) continue;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int64_t n = n0 + half * 64 + tx * 4;
            if (n >= N) continue;  // N is a multiple of 64, so a group is wholly in or out
            __nv_bfloat162 lo = __floats2bfloat162_rn(acc[i][half * 4 + 0], acc[i][half * 4 + 1]);
            __nv_bfloat162 hi = __floats2bfloat162_rn(acc[i][half * 4 + 2], acc[i][half * 4 + 3]);
            uint2 packed;
            packed.x = *reinterpret_cast<uint32_t*>(&lo);
            packed.y = *reinterpret_cast<uint32_t*>(&hi);
            *reinterpret_cast<uint2*>(C + m * N + n) = packed;
        }
    }
}

}  // namespace

extern "C" int moe_grouped_gemm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    const int32_t* __restrict__ expert_offsets,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t E,
    int64_t N,
    int64_t K,
    cudaStream_t stream) {
    if (T <= 0 || N <= 0 || E <= 0) return (int)cudaGetLastError();
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)(T / BM + E));
    moe_grouped_gemm_kernel<<<grid, THREADS, 0, stream>>>(X, W, Y, T, E, N, K);
    return (int)cudaGetLastError();
}
