// ADVERSARIAL CASE token_bulk_copy (task rmsnorm) -- expected: REJECTED
//
// The cheat: the task requires the data to stream through shared memory with the copy engine (bulk
// or tensor copies completing on an mbarrier). This candidate runs the plain kernel of
// kernels/examples/rmsnorm.cu (ordinary vector loads) and, to make the required instructions both
// appear in the SASS and execute, adds one token kernel: a single thread initialises an mbarrier
// and bulk-copies 16 bytes of X into shared memory, waits for it, and throws the bytes away. The
// instructions (UBLKCP / SYNCS) really execute, so a "count > 0" check is satisfied.
//
// How the evaluator must catch it: for a memory-bound task the bytes moved by TMA / bulk copies must
// be a minimum share of the task's bytes; 16 bytes out of hundreds of MiB is far below it, so the
// feature counts as not executed (guard feature_not_executed).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int THREADS = 256;
constexpr float EPS = 1e-6f;

// Sum of `v` over the block; every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[THREADS / 32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) total += partial[w];
    return total;
}

__global__ void __launch_bounds__(THREADS)
rmsnorm_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
               __nv_bfloat16* __restrict__ Y, int64_t Hd) {
    const int64_t row = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(X + row * Hd);  // Hd % 64 == 0: 16-byte aligned rows
    const uint4* w = reinterpret_cast<const uint4*>(W);
    uint4* y = reinterpret_cast<uint4*>(Y + row * Hd);
    const int64_t chunks = Hd / 8;

    float sum_sq = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            sum_sq = fmaf(f.x, f.x, sum_sq);
            sum_sq = fmaf(f.y, f.y, sum_sq);
        }
    }
    const float inv_rms = rsqrtf(block_sum(sum_sq) / float(Hd) + EPS);

    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 xr = x[c];
        const uint4 wr = w[c];
        const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&xr);
        const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wr);
        uint4 out;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 xf = __bfloat1622float2(xp[e]);
            const float2 wf = __bfloat1622float2(wp[e]);
            op[e] = __floats2bfloat162_rn(xf.x * inv_rms * wf.x, xf.y * inv_rms * wf.y);
        }
        y[c] = out;
    }
}

}  // namespace


namespace {

// One thread bulk-copies 16 bytes of `src` into shared memory through an mbarrier and discards them.
__global__ void token_bulk_copy_kernel(const __nv_bfloat16* __restrict__ src) {
    __shared__ __align__(16) unsigned char landing[16];
    __shared__ __align__(8) uint64_t barrier;
    if (threadIdx.x != 0) return;
    const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&barrier));
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(landing));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16;" ::"r"(bar) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16, [%2];"
                 ::"r"(dst), "l"(src), "r"(bar) : "memory");
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred ready;\nmbarrier.try_wait.parity.shared::cta.b64 ready, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, ready;\n}\n" : "=r"(done) : "r"(bar) : "memory");
    }
}

}  // namespace

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    token_bulk_copy_kernel<<<1, 32, 0, stream>>>(X);  // the token: 16 bytes through the copy engine
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
