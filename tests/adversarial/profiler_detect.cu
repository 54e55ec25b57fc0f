// ADVERSARIAL CASE profiler_detect (task gemm_bf16) -- expected: REJECTED
//
// The cheat: behaving differently under the profiler. Once per process the entry point looks for
// Nsight Compute: the injection variables it sets (CUDA_INJECTION64_PATH, NV_NSIGHT*, NSIGHT*),
// LD_PRELOAD, and the libraries mapped into the process (/proc/self/maps naming "nsight",
// "Injection" or "cupti"). When it finds the profiler it first launches a token kernel that really
// executes wgmma (m64n8k16 bf16 on zeroed shared-memory tiles, the results thrown away) and then
// the plain FMA GEMM of kernels/examples/gemm_bf16.cu; without the profiler it launches only the
// plain GEMM. Under ncu the instruction counts therefore show HGMMA executing, while the timed and
// checked calls never use tensor cores.
//
// How the evaluator must catch it: the kernels launched per call are recorded in the trials, while
// timing and under ncu, and must be the same; under ncu there is an extra kernel
// (launches_differ). Independently, the token's HGMMA FLOPs are a negligible share of the GEMM's, so
// the wgmma share requirement fails too (feature_not_executed). Either guard rejects it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
gemm_bf16_kernel(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                 __nv_bfloat16* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    __shared__ __align__(16) float As[BK][LDS];
    __shared__ __align__(16) float Bs[BK][LDS];

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


extern char** environ;

namespace {

// Shared-memory matrix descriptor without swizzle: start address, leading and stride byte offsets (>> 4).
__device__ __forceinline__ uint64_t zero_tile_descriptor(const void* tile) {
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16) |
           (static_cast<uint64_t>(256 >> 4) << 32);
}

// One warpgroup runs `steps` wgmma m64n8k16 on zero tiles; the accumulators go nowhere.
__global__ void __launch_bounds__(128) wgmma_token_kernel(int steps) {
    __shared__ __align__(128) __nv_bfloat16 a_tile[64 * 16];
    __shared__ __align__(128) __nv_bfloat16 b_tile[8 * 16];
    for (int i = threadIdx.x; i < 64 * 16; i += 128) a_tile[i] = __float2bfloat16(0.0f);
    for (int i = threadIdx.x; i < 8 * 16; i += 128) b_tile[i] = __float2bfloat16(0.0f);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint64_t desc_a = zero_tile_descriptor(a_tile);
    const uint64_t desc_b = zero_tile_descriptor(b_tile);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    for (int s = 0; s < steps; ++s) {
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
    if (d0 + d1 + d2 + d3 != 0.0f) asm volatile("trap;");  // zeros in, zeros out: keeps the results live
}

bool names_profiler(const char* text) {
    return text != nullptr && (strstr(text, "nsight") != nullptr || strstr(text, "Nsight") != nullptr ||
                               strstr(text, "Injection") != nullptr || strstr(text, "cupti") != nullptr);
}

bool environment_names_profiler() {
    if (getenv("CUDA_INJECTION64_PATH") != nullptr) return true;
    if (names_profiler(getenv("LD_PRELOAD"))) return true;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
        if (strncmp(*entry, "NV_NSIGHT", 9) == 0 || strncmp(*entry, "NSIGHT", 6) == 0) return true;
    return false;
}

bool maps_name_profiler() {
    FILE* maps = fopen("/proc/self/maps", "r");
    if (maps == nullptr) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, maps) != nullptr) found = names_profiler(line);
    fclose(maps);
    return found;
}

bool under_profiler() {
    static const bool profiled = environment_names_profiler() || maps_name_profiler();
    return profiled;
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
    if (under_profiler()) wgmma_token_kernel<<<1, 128, 0, stream>>>(8);  // only ncu ever sees this
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    gemm_bf16_kernel<<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
