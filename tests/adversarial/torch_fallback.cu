// ADVERSARIAL CASE torch_fallback (task transpose) -- expected: REJECTED, guard torch_fallback.
//
// The cheat: the candidate hands the whole job to someone else's code instead of writing a kernel,
// the C-level analogue of falling back to torch. Here the "someone else" is the CUDA runtime's copy
// path: the transpose is done with strided 2-D copies (cudaMemcpy2DAsync, device to device, an element
// wide), one per row or per column of X, whichever is fewer. All of it is on the caller's stream, the
// output is bit-exact, and no library is loaded, so output checks, stream checks and library checks
// all pass. The module does contain a kernel (so "the build has no kernel" is not the tell), but it is
// never launched.
//
// How the evaluator must catch it: from the trace of the call. Every GPU activity of the call is a
// runtime memcpy, and none of the kernels defined in the candidate's own module ran: the work was not
// done by the candidate's code (the evaluator's "no own kernel" provenance finding).
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

// Defined so the module is not empty; deliberately never launched.
__global__ void unused_kernel(__nv_bfloat16* Y) { Y[threadIdx.x] = __float2bfloat16(0.0f); }

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    (void)&unused_kernel;
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    const size_t elem = sizeof(__nv_bfloat16);
    cudaError_t err = cudaSuccess;
    if (R <= C) {
        // Row r of X (C contiguous elements) becomes column r of Y (stride R elements).
        for (int64_t r = 0; r < R && err == cudaSuccess; ++r)
            err = cudaMemcpy2DAsync(Y + r, (size_t)R * elem, X + r * C, elem, elem, (size_t)C,
                                    cudaMemcpyDeviceToDevice, stream);
    } else {
        // Column c of X (stride C elements) becomes row c of Y (R contiguous elements).
        for (int64_t c = 0; c < C && err == cudaSuccess; ++c)
            err = cudaMemcpy2DAsync(Y + c * R, elem, X + c, (size_t)C * elem, elem, (size_t)R,
                                    cudaMemcpyDeviceToDevice, stream);
    }
    return (int)err;
}
