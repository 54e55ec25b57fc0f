// ADVERSARIAL CASE daemon_escape (task rmsnorm) -- expected: ANY (check: no_survivors)
//
// The cheat: leaving a process behind. On its first call the entry point clears its own
// child-subreaper flag (prctl(PR_SET_CHILD_SUBREAPER, 0)), forks, and the child starts a new session
// (setsid) and forks again, so the grandchild is a daemon outside the candidate's process group and
// session, reparented away from the candidate. The daemon renames itself "ptxb_daemon" (so tests can
// find it), closes nothing, writes nothing and sleeps 600 s; a real one could keep the GPU busy
// during other candidates' timing or wait to tamper with files. Then the call computes RMSNorm
// correctly with the plain kernel of kernels/examples/rmsnorm.cu.
//
// How the evaluator must catch it: candidate processes are confined so that all their descendants
// are killed with them (a cgroup killed as a whole, or the evaluator's subreaper collecting every
// orphan), whatever sessions or groups they made. The item's status is the evaluator's to decide
// (the output is right); what must hold is that no "ptxb_daemon" survives the evaluation.
#include <sys/prctl.h>
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

// Forks twice, the middle process leaving the session, so the sleeper belongs to nobody we know.
void leave_a_daemon() {
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
    const pid_t child = fork();
    if (child != 0) return;  // the caller (or a failed fork) carries on with the call
    setsid();
    if (fork() != 0) _exit(0);  // the middle process exits, orphaning the daemon
    prctl(PR_SET_NAME, "ptxb_daemon", 0, 0, 0);
    for (int i = 0; i < 600; ++i) sleep(1);
    _exit(0);
}

}  // namespace

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
    static bool forked = false;
    if (!forked) {
        forked = true;
        leave_a_daemon();
    }
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
