// ADVERSARIAL CASE tamper_harness (task rmsnorm) -- expected: ANY (check: harness_unchanged)
//
// The cheat: changing the judge instead of the answer. The kernel is the plain, correct one of
// kernels/examples/rmsnorm.cu. On its first call the entry point appends a marker line to the code the
// harness runs, wherever it can find it: the ptxbench package (its __init__.py, the verdict module, the
// rmsnorm task file) under every PYTHONPATH entry, and ptxbench, torch and pydantic under every
// site-packages folder it sees mapped into its own process (/proc/self/maps); each path also through its
// parent's view of the file system (/proc/<ppid>/root). A harness whose code a candidate can rewrite
// judges every later candidate with the candidate's code (a process started later imports it).
//
// How the evaluator must catch it: candidate processes see the machine read-only except scratch space,
// and the folders the harness imports from read-only even there, and cannot reach into the harness's
// process (no CAP_SYS_PTRACE); so no file of the package, the task suite, torch or pydantic carries the
// marker after the run. This item's own status is the evaluator's decision.
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

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <string>
#include <unistd.h>

namespace {

constexpr const char* kMarker = "\n# TAMPERED-BY-CANDIDATE (tamper_harness.cu)\n";

// Appends the marker to `path` if it exists and can be opened for writing; true when written.
bool append_marker(const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW);
    if (fd < 0) return false;
    const bool written = write(fd, kMarker, strlen(kMarker)) == (ssize_t)strlen(kMarker);
    close(fd);
    return written;
}

// Folders that may hold the harness's Python packages.
std::set<std::string> package_roots() {
    std::set<std::string> roots;
    if (const char* python_path = getenv("PYTHONPATH")) {
        std::string entries = python_path;
        size_t start = 0;
        while (start <= entries.size()) {
            const size_t end = entries.find(':', start);
            const std::string entry = entries.substr(start, end == std::string::npos ? std::string::npos : end - start);
            if (!entry.empty()) roots.insert(entry);
            if (end == std::string::npos) break;
            start = end + 1;
        }
    }
    if (FILE* maps = fopen("/proc/self/maps", "r")) {
        char line[4096];
        while (fgets(line, sizeof line, maps)) {
            const char* slash = strchr(line, '/');
            if (!slash) continue;
            const std::string path = slash;
            for (const char* folder : {"/site-packages/", "/dist-packages/"}) {
                const size_t at = path.find(folder);
                if (at != std::string::npos) roots.insert(path.substr(0, at + strlen(folder) - 1));
            }
        }
        fclose(maps);
    }
    return roots;
}

int tamper_once() {
    static int tampered = -1;
    if (tampered >= 0) return tampered;
    tampered = 0;
    const char* targets[] = {"ptxbench/__init__.py", "ptxbench/evaluate/judgement/verdict.py",
                             "ptxbench/tasks/suite/rmsnorm.toml", "torch/__init__.py", "pydantic/__init__.py"};
    const std::string parent_root = "/proc/" + std::to_string(getppid()) + "/root";
    for (const std::string& root : package_roots()) {
        for (const char* target : targets) {
            for (const std::string& prefix : {std::string(), parent_root}) {
                if (append_marker(prefix + root + "/" + target)) ++tampered;
            }
        }
    }
    fprintf(stderr, "tamper_harness: marked %d file(s)\n", tampered);
    return tampered;
}

}  // namespace

extern "C" int rmsnorm(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                       __nv_bfloat16* __restrict__ Y, int64_t T, int64_t Hd, cudaStream_t stream) {
    tamper_once();
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
