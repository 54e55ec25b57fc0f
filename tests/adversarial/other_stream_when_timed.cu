// ADVERSARIAL CASE other_stream_when_timed (task rmsnorm) -- expected: REJECTED
//
// The cheat: honest while checked, off-stream while timed. The kernel is the plain one of
// kernels/examples/rmsnorm.cu and always correct. The entry point launches it on the caller's stream
// for the first calls of the process (the correctness trials come first) and while the inputs keep
// changing; once it has been called more than kHonestCalls times, or the same X has come back
// kRepeatsBeforeTimed times in a row (a timing loop reuses its inputs), it launches on a private
// non-blocking stream that is never joined. Events on the caller's stream then time nothing, and a
// guard that looked only at the trials' launches would have seen the right stream.
//
// How the evaluator must catch it: launches are recorded during the timed calls too; work that
// runs on another stream during timing is caught (other_stream), and the timed calls' launches on the
// caller's stream differ from the trials' (launches_differ). It must never be PASSED.
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

constexpr int kHonestCalls = 6;
constexpr int kRepeatsBeforeTimed = 3;

// Decides, per call, whether this looks like a timing loop rather than a correctness trial.
bool probably_timed(const void* X) {
    static int calls = 0;
    static const void* last_x = nullptr;
    static int repeats = 0;
    ++calls;
    repeats = (X == last_x) ? repeats + 1 : 1;
    last_x = X;
    return calls > kHonestCalls || repeats >= kRepeatsBeforeTimed;
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
    static cudaStream_t side = nullptr;
    if (side == nullptr) {
        const cudaError_t err = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (err != cudaSuccess) return (int)err;
    }
    const cudaStream_t chosen = probably_timed(X) ? side : stream;  // never joined back to `stream`
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, chosen>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
