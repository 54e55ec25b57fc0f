// ADVERSARIAL CASE host_compute (task softmax) -- expected: REJECTED
//
// The cheat: computing on the CPU. The entry point copies X to the host (cudaMemcpyAsync
// device-to-host on the caller's stream, then a stream synchronisation), computes the softmax of
// every row with the host's threads in fp32, copies Y back to the device on the same stream, and
// launches a token kernel of its own so that "the candidate launched one of its kernels" holds. The
// output is correct; no GPU kernel computed it.
//
// How the evaluator must catch it: the trace of the call shows a device-to-host copy of task data;
// any device-to-host transfer inside the call is REJECTED (guard host_transfer), whatever else the
// call launched.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int THREADS = 256;

// (m, s) stands for s * exp(m); merging two such pairs. A thread that saw nothing has (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float m_new = fmaxf(m, m2);
    const float a = (m == -INFINITY) ? 0.0f : s * expf(m - m_new);
    const float b = (m2 == -INFINITY) ? 0.0f : s2 * expf(m2 - m_new);
    m = m_new;
    s = a + b;
}

__global__ void __launch_bounds__(THREADS)
softmax_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t C) {
    __shared__ float part_m[THREADS / 32], part_s[THREADS / 32];
    const int64_t row = blockIdx.x;
    const uint4* x = reinterpret_cast<const uint4*>(X + row * C);  // C % 64 == 0: 16-byte aligned rows
    uint4* y = reinterpret_cast<uint4*>(Y + row * C);
    const int64_t chunks = C / 8;

    // Pass 1: running max m and sum s of exp(x - m) over this thread's chunks.
    float m = -INFINITY, s = 0.0f;
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
        float v[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            v[2 * e] = f.x;
            v[2 * e + 1] = f.y;
        }
        float chunk_max = v[0];
#pragma unroll
        for (int e = 1; e < 8; ++e) chunk_max = fmaxf(chunk_max, v[e]);
        if (chunk_max > m) {
            s *= expf(m - chunk_max);  // exp(-inf) = 0 on the first chunk, when s is 0 anyway
            m = chunk_max;
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) s += expf(v[e] - m);
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    if (threadIdx.x % 32 == 0) {
        part_m[threadIdx.x / 32] = m;
        part_s[threadIdx.x / 32] = s;
    }
    __syncthreads();
    m = part_m[0];
    s = part_s[0];
#pragma unroll
    for (int w = 1; w < THREADS / 32; ++w) merge(m, s, part_m[w], part_s[w]);
    const float inv_sum = 1.0f / s;

    // Pass 2: normalise.
    for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
        const uint4 raw = x[c];
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
        uint4 out;
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(pairs[e]);
            op[e] = __floats2bfloat162_rn(expf(f.x - m) * inv_sum, expf(f.y - m) * inv_sum);
        }
        y[c] = out;
    }
}

}  // namespace


namespace {

// Writes Y[0] = Y[0]: a kernel of the candidate's own on the stream, doing nothing useful.
__global__ void token_kernel(__nv_bfloat16* __restrict__ Y) {
    if (threadIdx.x == 0 && blockIdx.x == 0) Y[0] = Y[0];
}

void softmax_rows_on_host(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t first, int64_t last, int64_t C) {
    std::vector<float> row(static_cast<size_t>(C));
    for (int64_t r = first; r < last; ++r) {
        float peak = -INFINITY;
        for (int64_t c = 0; c < C; ++c) peak = std::max(peak, row[c] = __bfloat162float(x[r * C + c]));
        double total = 0.0;
        for (int64_t c = 0; c < C; ++c) total += (row[c] = std::exp(row[c] - peak));
        const float inverse = static_cast<float>(1.0 / total);
        for (int64_t c = 0; c < C; ++c) y[r * C + c] = __float2bfloat16(row[c] * inverse);
    }
}

}  // namespace

extern "C" int softmax(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    const size_t bytes = static_cast<size_t>(R * C) * sizeof(__nv_bfloat16);
    std::vector<__nv_bfloat16> host_x(static_cast<size_t>(R * C)), host_y(static_cast<size_t>(R * C));
    cudaError_t err = cudaMemcpyAsync(host_x.data(), X, bytes, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) return (int)err;

    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(R, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < workers; ++w)
        pool.emplace_back(softmax_rows_on_host, host_x.data(), host_y.data(), R * w / workers, R * (w + 1) / workers, C);
    for (std::thread& t : pool) t.join();

    err = cudaMemcpyAsync(Y, host_y.data(), bytes, cudaMemcpyHostToDevice, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);  // host_y is freed on return
    if (err != cudaSuccess) return (int)err;
    token_kernel<<<1, 32, 0, stream>>>(Y);
    return (int)cudaGetLastError();
}
