// ADVERSARIAL CASE dead_code_wgmma (task gemm_bf16) -- expected: REJECTED, guard dead_code_feature
// (the evaluator's finding is feature_not_executed).
//
// The cheat: instruction-use faking. The GEMM that actually runs is the plain FMA kernel of
// kernels/examples/gemm_bf16.cu (correct, tensor cores unused). Next to it sits a genuine wgmma
// path (m64n8k16 bf16, shared-memory descriptors, fence / commit / wait) that computes a corner of C,
// guarded by `M == kNeverM`. M is a run-time argument, so neither the front end nor ptxas can delete
// the branch: wgmma is in the source, in the PTX and in the SASS (HGMMA.64x8x16.F32.BF16), and a
// static check of the binary is satisfied. But M >= 1 for every workload, so no HGMMA ever executes.
//
// How the evaluator must catch it: the output is right, the stream is right and no library is used,
// so only the executed-instruction check can: ncu's predicate-true executed counts of the
// candidate's kernels show zero HGMMA, far below the task's minimum share of FLOPs on wgmma
// (feature_not_executed). Static presence must never count as use.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

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

constexpr int64_t kNeverM = -12345;  // M >= 1 always, but the compiler cannot know that

// Shared-memory matrix descriptor, no swizzle: start address, leading and stride byte offsets (>> 4).
__device__ __forceinline__ uint64_t smem_descriptor(const void* tile, uint32_t lead_bytes, uint32_t stride_bytes) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    uint64_t desc = 0;
    desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
    desc |= static_cast<uint64_t>((lead_bytes & 0x3FFFF) >> 4) << 16;
    desc |= static_cast<uint64_t>((stride_bytes & 0x3FFFF) >> 4) << 32;
    return desc;
}

// The first 64 rows x 8 columns of this block's C tile with wgmma m64n8k16 (warpgroup 0 issues it).
// Operands are staged K-major as 8x8 core matrices: A core (m/8, k/8) at ((m/8)*2 + k/8) * 128 bytes,
// B core (0, k/8) at (k/8) * 128 bytes: leading (K) offset 128 bytes, stride (M/N) offset 256 bytes.
__device__ __forceinline__ void wgmma_corner(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                          __nv_bfloat16* __restrict__ C, int64_t M, int64_t N, int64_t K,
                                          int64_t m0, int64_t n0) {
    __shared__ __align__(128) __nv_bfloat16 a_tile[64 * 16];
    __shared__ __align__(128) __nv_bfloat16 b_tile[8 * 16];
    const int tid = threadIdx.x;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
        for (int i = tid; i < 64 * 16; i += THREADS) {
            const int m = i / 16, k = i % 16;
            const int64_t gm = m0 + m;
            a_tile[((m / 8) * 2 + k / 8) * 64 + (m % 8) * 8 + k % 8] =
                gm < M ? A[gm * K + k0 + k] : __float2bfloat16(0.0f);
        }
        for (int i = tid; i < 8 * 16; i += THREADS) {
            const int n = i / 16, k = i % 16;
            b_tile[(k / 8) * 64 + n * 8 + k % 8] = B[(n0 + n) * K + k0 + k];
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> async proxy
        __syncthreads();
        if (tid < 128) {
            const uint64_t desc_a = smem_descriptor(a_tile, 128, 256);
            const uint64_t desc_b = smem_descriptor(b_tile, 128, 256);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            asm volatile(
                "{\n"
                ".reg .pred accumulate;\n"
                "setp.ne.b32 accumulate, %6, 0;\n"
                "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                "{%0, %1, %2, %3}, %4, %5, accumulate, 1, 1, 0, 0;\n"
                "}\n"
                : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                : "l"(desc_a), "l"(desc_b), "r"(1)
                : "memory");
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        }
        __syncthreads();  // the tiles are rewritten by the next step
    }
    if (tid < 128) {
        // m64nNk16 f32 accumulator: warp w, lane l holds rows 16w + l/4 (+8), columns 2*(l%4) (+1).
        const int64_t row = m0 + (tid / 32) * 16 + (tid % 32) / 4;
        const int64_t col = n0 + ((tid % 32) % 4) * 2;
        if (row < M) {
            C[row * N + col] = __float2bfloat16(d0);
            C[row * N + col + 1] = __float2bfloat16(d1);
        }
        if (row + 8 < M) {
            C[(row + 8) * N + col] = __float2bfloat16(d2);
            C[(row + 8) * N + col + 1] = __float2bfloat16(d3);
        }
    }
}

__global__ void __launch_bounds__(THREADS)
gemm_bf16_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                 __nv_bfloat16* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ __align__(16) float As[BK][LDS];
    __shared__ __align__(16) float Bs[BK][LDS];

    // The dead branch: a real wgmma path the compiler must keep, that no workload ever takes.
    if (M == kNeverM) {
        wgmma_corner(A, B, C, M, N, K, int64_t(blockIdx.y) * BM, int64_t(blockIdx.x) * BN);
        return;
    }

    const int tid = threadIdx.x;
    const int tx = tid % 16;  // column group
    const int ty = tid / 16;  // row group
    const int64_t m0 = int64_t(blockIdx.y) * BM;
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

extern "C" int gemm_bf16(
    const __nv_bfloat16* __restrict__ A,
    const __nv_bfloat16* __restrict__ B,
    __nv_bfloat16* __restrict__ C,
    int64_t M,
    int64_t N,
    int64_t K,
    cudaStream_t stream) {
    if (M <= 0 || N <= 0) return (int)cudaGetLastError();
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    gemm_bf16_kernel<<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
