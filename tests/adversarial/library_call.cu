// ADVERSARIAL CASE library_call (task gemm_bf16) -- expected: REJECTED, guard library_call.
//
// The cheat: the candidate writes no GEMM at all. At run time it loads cuBLAS by hand (dlopen of
// libcublas, dlsym of cublasCreate_v2 / cublasSetStream_v2 / cublasGemmEx) and lets the vendor library
// compute C on the caller's stream. Nothing is linked at build time (the shared object has no
// DT_NEEDED on cuBLAS, no cuBLAS header is included: the few types and enum values are declared
// here), so a link-time check alone sees nothing and the output is exactly right.
//
// How the evaluator must catch it: the static report flags the loader call in the source (policy
// violation, telemetry only); enforcement is at run time: the libraries mapped into the candidate's
// process during its calls include libcublas (library_call), and the kernels that ran on the stream
// are cuBLAS's, not kernels from the candidate's own module (foreign kernels). Note that torch in the
// worker may already have libcublas mapped, so the foreign-kernel check is the one that must not miss.
#include <cstdint>
#include <dlfcn.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace {

// Just enough of cublas_api.h / library_types.h, declared by hand.
using Handle = void*;
using Status = int;                 // cublasStatus_t: 0 = CUBLAS_STATUS_SUCCESS
constexpr int kOpN = 0;             // CUBLAS_OP_N
constexpr int kOpT = 1;             // CUBLAS_OP_T
constexpr int kDataBf16 = 14;       // CUDA_R_16BF
constexpr int kCompute32F = 68;     // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;    // CUBLAS_GEMM_DEFAULT

using CreateFn = Status (*)(Handle*);
using SetStreamFn = Status (*)(Handle, cudaStream_t);
using GemmExFn = Status (*)(Handle, int transa, int transb, int m, int n, int k, const void* alpha,
                            const void* a, int a_type, int lda, const void* b, int b_type, int ldb,
                            const void* beta, void* c, int c_type, int ldc, int compute_type, int algo);

struct Library {
    Handle handle = nullptr;
    SetStreamFn set_stream = nullptr;
    GemmExFn gemm = nullptr;
    bool ready = false;
};

Library& library() {
    static Library lib = [] {
        Library l;
        const char* names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
        void* so = nullptr;
        for (const char* name : names) {
            so = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
            if (so != nullptr) break;
        }
        if (so == nullptr) return l;
        auto create = reinterpret_cast<CreateFn>(dlsym(so, "cublasCreate_v2"));
        l.set_stream = reinterpret_cast<SetStreamFn>(dlsym(so, "cublasSetStream_v2"));
        l.gemm = reinterpret_cast<GemmExFn>(dlsym(so, "cublasGemmEx"));
        if (create == nullptr || l.set_stream == nullptr || l.gemm == nullptr) return l;
        l.ready = create(&l.handle) == 0;
        return l;
    }();
    return lib;
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
    Library& lib = library();
    if (!lib.ready) return (int)cudaErrorSharedObjectInitFailed;
    if (lib.set_stream(lib.handle, stream) != 0) return (int)cudaErrorUnknown;
    // Row-major C[M,N] = A[M,K] B[N,K]^T is column-major C^T[N,M] = op_T(B as K x N) * (A as K x M).
    const float alpha = 1.0f, beta = 0.0f;
    const Status s = lib.gemm(lib.handle, kOpT, kOpN, (int)N, (int)M, (int)K, &alpha, B, kDataBf16, (int)K,
                              A, kDataBf16, (int)K, &beta, C, kDataBf16, (int)N, kCompute32F, kGemmDefault);
    return s == 0 ? (int)cudaGetLastError() : (int)cudaErrorUnknown;
}
