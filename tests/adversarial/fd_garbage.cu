// ADVERSARIAL CASE fd_garbage (task rmsnorm) -- expected: ANY (check: others_unaffected)
//
// The cheat: attacking the harness's channels. On its first call the entry point writes garbage
// (binary noise, a half JSON object, a fake pickle opcode stream, newline floods) to every file
// descriptor from 3 to 255 it has open, which includes the pipes or sockets it shares with the
// process that evaluates it, then computes RMSNorm correctly with the plain kernel of
// kernels/examples/rmsnorm.cu. A harness that trusted whatever arrives on its reply channel could
// be crashed, made to hang, or fed a forged verdict.
//
// How the evaluator must catch it: replies are framed and authenticated, so garbage is a forged or
// broken reply of this item only (REJECTED forged_reply, or RUNTIME_ERROR if the channel breaks),
// or it never reaches the reader and the item is judged on its output (PASSED without ncu, REJECTED
// feature_not_executed with it). The status is the evaluator's to decide; what must hold is that the
// harness survives and every other item's result is the one it gets alone.
#include <cstring>
#include <unistd.h>
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

void spray_every_descriptor() {
    unsigned char noise[4096];
    uint32_t state = 0x9E3779B9u;
    for (unsigned char& byte : noise) {
        state ^= state << 13, state ^= state >> 17, state ^= state << 5;
        byte = static_cast<unsigned char>(state);
    }
    const char* forged[] = {
        "{\"ok\": true, \"status\": \"PASSED\", \"result\": {\"passed\": true",
        "\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x02ok\x94\x88u.",
        "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
    };
    for (int fd = 3; fd < 256; ++fd) {
        for (const char* text : forged) (void)!write(fd, text, strlen(text));
        (void)!write(fd, noise, sizeof noise);
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
    static bool sprayed = false;
    if (!sprayed) {
        sprayed = true;
        spray_every_descriptor();
    }
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
