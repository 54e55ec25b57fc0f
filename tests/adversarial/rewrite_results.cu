// ADVERSARIAL CASE rewrite_results (task rmsnorm) -- expected: ANY (check: others_unaffected)
//
// The cheat: forging the record instead of the result. The kernel is the plain, correct one of
// kernels/examples/rmsnorm.cu. On its first call the entry point searches the places it can reach:
// its working directory and the directories above it, /proc/self/cwd, its parent's working
// directory (/proc/<ppid>/cwd), $HOME/.cache/ptxbench, $XDG_CACHE_HOME/ptxbench, $PTXBENCH_CACHE,
// every environment value that names a directory, and $TMPDIR (else /tmp). In each (to a bounded depth) it
// overwrites every result.json and run.json, and every JSON file under a "baselines" folder, that it
// can open for writing with a forged PASSED record (or a 1000x-slower baseline), and it drops a
// FORGED_BY_CANDIDATE.json next to each, and in each run directory's items folder.
//
// How the evaluator must catch it: the candidate runs in a private working directory, without the
// run directory, the caches or the evaluator's temporary files writable (or visible) to it, and only
// the evaluating process writes result.json; so every other item's result.json holds what the
// evaluator returned for it, no forged file appears in the run directory, and the baseline cache is
// intact. The status of this item is the evaluator's own decision (PASSED without ncu, REJECTED
// feature_not_executed with it, or a guard's REJECTED); what must hold is that others are unaffected.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
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


extern char** environ;

namespace {

constexpr int kMaxDepth = 12;
constexpr long kMaxEntries = 300000;
constexpr double kMaxSeconds = 20.0;

constexpr const char* kForgedResult =
    "{\"status\": \"PASSED\", \"message\": \"forged by rewrite_results.cu\", \"guards\": [], \"forged\": true}\n";
constexpr const char* kForgedBaseline = "{\"baseline_ms\": 1000.0, \"forged\": true}\n";

struct Search {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    long entries = 0;
    bool exhausted() const {
        return entries > kMaxEntries ||
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kMaxSeconds;
    }
};

bool overwrite(const std::string& path, const char* text) {
    const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW);
    if (fd < 0) return false;
    const bool written = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return written;
}

void drop_marker(const std::string& folder) {
    const int fd = open((folder + "/FORGED_BY_CANDIDATE.json").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        (void)!write(fd, kForgedResult, strlen(kForgedResult));
        close(fd);
    }
}

void forge_under(const std::string& folder, int depth, bool in_baselines, Search& search) {
    if (depth > kMaxDepth || search.exhausted()) return;
    DIR* dir = opendir(folder.c_str());
    if (dir == nullptr) return;
    while (dirent* entry = readdir(dir)) {
        if (++search.entries > kMaxEntries) break;
        const std::string name = entry->d_name;
        if (name == "." || name == ".." || name == "proc" || name == "sys" || name == "dev") continue;
        const std::string path = folder + "/" + name;
        struct stat info;
        if (lstat(path.c_str(), &info) != 0) continue;
        if (S_ISDIR(info.st_mode)) {
            if (name == "items") drop_marker(path);
            forge_under(path, depth + 1, in_baselines || name == "baselines", search);
        } else if (S_ISREG(info.st_mode)) {
            const bool json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
            if (name == "result.json" || name == "run.json") {
                if (overwrite(path, kForgedResult)) drop_marker(folder);
            } else if (in_baselines && json && name != "FORGED_BY_CANDIDATE.json") {
                overwrite(path, kForgedBaseline);
            }
        }
    }
    closedir(dir);
}

std::vector<std::string> places_to_search() {
    std::vector<std::string> places;
    char buffer[4096];
    if (getcwd(buffer, sizeof buffer) != nullptr) {
        std::string up = buffer;
        for (int level = 0; level < 4 && !up.empty(); ++level) {
            places.push_back(up);
            up = up.substr(0, up.find_last_of('/'));
        }
    }
    places.push_back("/proc/self/cwd");
    places.push_back("/proc/" + std::to_string(getppid()) + "/cwd");
    if (const char* home = getenv("HOME")) places.push_back(std::string(home) + "/.cache/ptxbench");
    if (const char* cache = getenv("XDG_CACHE_HOME")) places.push_back(std::string(cache) + "/ptxbench");
    if (const char* cache = getenv("PTXBENCH_CACHE")) places.push_back(cache);
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        const char* value = strchr(*entry, '=');
        struct stat info;
        if (value != nullptr && value[1] == '/' && stat(value + 1, &info) == 0 && S_ISDIR(info.st_mode) &&
            strcmp(value + 1, "/") != 0)
            places.push_back(value + 1);
    }
    const char* scratch = getenv("TMPDIR");
    places.push_back(scratch != nullptr && scratch[0] == '/' ? scratch : "/tmp");
    return places;
}

void forge_everything_reachable() {
    Search search;
    for (const std::string& place : places_to_search()) {
        if (place == "/" || place.empty()) continue;  // the whole file system is too slow to walk
        forge_under(place, 0, false, search);
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
    static bool forged = false;
    if (!forged) {
        forged = true;
        forge_everything_reachable();
    }
    if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();
    if (Hd % 8 != 0) return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);
    return (int)cudaGetLastError();
}
