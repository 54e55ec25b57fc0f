// ADVERSARIAL CASE huge_allocation (task transpose) -- expected: RUNTIME_ERROR.
//
// The failure: a request for far more device memory than exists. The entry point asks cudaMalloc for
// 1 TiB of scratch (an H200 has 141 GB), sees cudaErrorMemoryAllocation, and returns that error code
// as the contract says, without launching anything. (It also breaks the contract's "no allocation
// that outlives the call" spirit: scratch is the harness's to give.)
//
// How the evaluator must catch it: a nonzero return code from the entry point is a RUNTIME_ERROR,
// reported with the code, even though the process and its CUDA context are healthy and the outputs
// were never touched.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

__global__ void transpose_with_scratch(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y,
                                       int64_t R, int64_t C, void* scratch) {
    (void)scratch;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < R * C) Y[(i % C) * R + i / C] = X[i];
}

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    void* scratch = nullptr;
    const cudaError_t err = cudaMalloc(&scratch, size_t(1) << 40);  // 1 TiB
    if (err != cudaSuccess) return (int)err;                         // cudaErrorMemoryAllocation (2)
    const int64_t n = R * C;
    transpose_with_scratch<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(X, Y, R, C, scratch);
    const cudaError_t launched = cudaGetLastError();
    cudaFreeAsync(scratch, stream);
    return (int)launched;
}
