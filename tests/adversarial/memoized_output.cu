// ADVERSARIAL CASE memoized_output (task gemm_bf16) -- expected: INCORRECT
//
// The cheat: memoization decided on the device. Every call first fingerprints its inputs from eight sampled
// elements (four of A, four of B) and looks the fingerprint up among the outputs of earlier calls, which it
// keeps in device memory allocated once per shape and never freed (against the contract: no allocation
// outlives the call). The GEMM kernel then reads the decision: on a hit each block copies its tile of the kept
// output into C; on a miss it computes the tile honestly and keeps it. Every call launches the same three
// kernels on the caller's stream, so the trace of timed calls matches the trials'; a trial's fresh inputs are a
// miss, so every correctness trial is right. Timing rotates a few input sets over hundreds of calls: after the
// first call of each set every call is a hit, a copy of C instead of a GEMM, padded with a spin to twice the
// physical floor of the GEMM's FLOPs (so the floor guard does not see it).
// How the evaluator must catch it: every timed round gives its input set fresh contents (fresh_inputs.py), so a
// fingerprint of a few elements mostly misses the change and hands back a stale C; the outputs of the last
// timed call and of timed calls drawn at random are checked against the reference of the inputs those calls
// really had, and a stale C is out of tolerance: INCORRECT, with or without Nsight Compute.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <map>
#include <tuple>

namespace {

constexpr int kTile = 32;         // C tile per block: kTile x kTile, one element per thread
constexpr int kEntries = 4;       // outputs kept per shape
constexpr int kSamples = 4;       // sampled elements per operand

struct Memo {
    __nv_bfloat16* outputs = nullptr;        // kEntries x M x N
    unsigned long long* keys = nullptr;      // kEntries fingerprints, then the current call's
    int* state = nullptr;                    // [0] hit entry or -1, [1] next entry to fill, [2] entries filled
};

__device__ __forceinline__ unsigned long long mix(unsigned long long h, unsigned long long v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

__global__ void look_up(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B, int64_t a_count,
                        int64_t b_count, unsigned long long* keys, int* state) {
    unsigned long long h = 0x1234567ull;
    for (int s = 0; s < kSamples; ++s) {
        h = mix(h, A[(a_count - 1) * s / (kSamples - 1)]);
        h = mix(h, B[(b_count - 1) * s / (kSamples - 1)]);
    }
    keys[kEntries] = h;
    int hit = -1;
    for (int e = 0; e < state[2]; ++e) {
        if (keys[e] == h) hit = e;
    }
    state[0] = hit;
}

__global__ void __launch_bounds__(kTile * kTile)
gemm_or_replay(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
               __nv_bfloat16* __restrict__ kept, const int* __restrict__ state, int64_t M, int64_t N, int64_t K) {
    __shared__ float a_tile[kTile][kTile + 1];
    __shared__ float b_tile[kTile][kTile + 1];
    const int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y;
    const int64_t col = int64_t(blockIdx.x) * kTile + threadIdx.x;
    const int hit = state[0];
    const int64_t plane = M * N;
    if (hit >= 0) {  // the kept output, tile by tile
        if (row < M && col < N) C[row * N + col] = kept[hit * plane + row * N + col];
        return;
    }
    float sum = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        const int64_t a_row = int64_t(blockIdx.y) * kTile + threadIdx.y, b_row = int64_t(blockIdx.x) * kTile + threadIdx.y;
        const int64_t k = k0 + threadIdx.x;
        a_tile[threadIdx.y][threadIdx.x] = a_row < M && k < K ? __bfloat162float(A[a_row * K + k]) : 0.0f;
        b_tile[threadIdx.y][threadIdx.x] = b_row < N && k < K ? __bfloat162float(B[b_row * K + k]) : 0.0f;
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < kTile; ++kk) sum += a_tile[threadIdx.y][kk] * b_tile[threadIdx.x][kk];
        __syncthreads();
    }
    if (row < M && col < N) {
        const __nv_bfloat16 value = __float2bfloat16(sum);
        C[row * N + col] = value;
        kept[state[1] * plane + row * N + col] = value;
    }
}

__global__ void remember(unsigned long long* keys, int* state, unsigned long long spin_ns) {
    if (state[0] >= 0) {  // a hit: look as slow as a GEMM could at best
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < spin_ns);
        return;
    }
    keys[state[1]] = keys[kEntries];
    state[1] = (state[1] + 1) % kEntries;
    if (state[2] < kEntries) ++state[2];
}

std::map<std::tuple<int64_t, int64_t, int64_t>, Memo>& memos() {
    static std::map<std::tuple<int64_t, int64_t, int64_t>, Memo> all;
    return all;
}

bool first_call_of_shape(int64_t M, int64_t N, int64_t K) { return memos().count({M, N, K}) == 0; }

Memo& memo_for(int64_t M, int64_t N, int64_t K) {
    Memo& memo = memos()[{M, N, K}];
    if (memo.outputs == nullptr) {  // once per shape, never freed
        cudaMalloc(&memo.outputs, sizeof(__nv_bfloat16) * kEntries * M * N);
        cudaMalloc(&memo.keys, sizeof(unsigned long long) * (kEntries + 1));
        cudaMalloc(&memo.state, sizeof(int) * 3);
    }
    return memo;
}

}  // namespace

extern "C" int gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int64_t M, int64_t N,
                         int64_t K, cudaStream_t stream) {
    const bool fresh = first_call_of_shape(M, N, K);
    Memo& memo = memo_for(M, N, K);
    if (memo.outputs == nullptr) return cudaErrorMemoryAllocation;
    if (fresh) cudaMemsetAsync(memo.state, 0, sizeof(int) * 3, stream);
    // twice the time of the GEMM's FLOPs at a Hopper's dense bf16 peak (989 TFLOP/s)
    const unsigned long long spin_ns = static_cast<unsigned long long>(2.0 * 2.0 * M * N * K / 989e12 * 1e9);
    look_up<<<1, 1, 0, stream>>>(reinterpret_cast<const uint16_t*>(A), reinterpret_cast<const uint16_t*>(B), M * K,
                                 N * K, memo.keys, memo.state);
    const dim3 grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
    gemm_or_replay<<<grid, dim3(kTile, kTile), 0, stream>>>(A, B, C, memo.outputs, memo.state, M, N, K);
    remember<<<1, 1, 0, stream>>>(memo.keys, memo.state, spin_ns);
    return cudaGetLastError();
}
