// gemm_n256_k1024 (imported FlashInfer-Trace gemm): C[M, N] = A[M, K] @ B[N, K]^T in fp16, fp32 accumulation.
// Approach: one 16x16 block per 32x32 tile of C, each thread four outputs; the K loop stages 32-wide slices
// of A and B in shared memory. Plain CUDA for the GPU test of imported tasks: no tensor cores, no copy
// engine, so it lacks the task's required features (that test checks it is correct).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace {

constexpr int TILE = 32;
constexpr int BK = 32;

__global__ void __launch_bounds__(256)
gemm_kernel(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
            int64_t M, int64_t N, int64_t K) {
    __shared__ float a_s[TILE][BK + 1];
    __shared__ float b_s[TILE][BK + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t row0 = int64_t(blockIdx.y) * TILE, col0 = int64_t(blockIdx.x) * TILE;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < TILE * BK; i += 256) {
            const int r = i / BK, c = i % BK;
            const int64_t k = k0 + c;
            a_s[r][c] = (row0 + r < M && k < K) ? __half2float(A[(row0 + r) * K + k]) : 0.f;
            b_s[r][c] = (col0 + r < N && k < K) ? __half2float(B[(col0 + r) * K + k]) : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int c = 0; c < BK; ++c) {
            const float a0 = a_s[ty][c], a1 = a_s[ty + 16][c];
            const float b0 = b_s[tx][c], b1 = b_s[tx + 16][c];
            acc[0][0] += a0 * b0; acc[0][1] += a0 * b1;
            acc[1][0] += a1 * b0; acc[1][1] += a1 * b1;
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            const int64_t r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N) C[r * N + c] = __float2half_rn(acc[i][j]);
        }
}

}  // namespace

extern "C" int gemm_n256_k1024(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
                               int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return (int)cudaGetLastError();
    const dim3 grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    gemm_kernel<<<grid, 256, 0, stream>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
