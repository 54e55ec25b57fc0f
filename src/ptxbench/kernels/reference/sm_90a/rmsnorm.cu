#include "ptx_wrappers.cuh"
// rmsnorm (expert reference, sm_90a): Y[t, i] = X[t, i] / sqrt(mean_j X[t, j]^2 + 1e-6) * W[i], bf16 in and out,
// fp32 arithmetic.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, the best baseline timed in the
// same run): behind torch.compile's kernel on every workload: t16384-h4096 0.0722 against 0.0644 ms (89 %; 86.6 %
// of the measured copy bandwidth, where compile's reaches about 97 %), t4096-h8192 96 %, and the 32-row decode
// 0.0049 against Liger's 0.0042 ms (86 %). Target: >= the library everywhere, >= 95 % of copy bandwidth.
// What ncu showed (t16384-h4096, one call of each, benchmarks/results/ncu_rmsnorm_t16384-h4096_h200.md): the same
// L2 bytes as compile's kernel (414 against 418 MB), so no extra traffic, but L2 throughput 79.9 % against 92.2 %:
// this kernel's 396 persistent CTAs stall mostly on shared-memory reads of the ring (short scoreboard, 4.4 cycles
// per issue) where compile's 8,192 CTAs keep more global loads in flight. More bytes in flight per SM is the next
// step; the variants timed on 2026-12-04 (benchmarks/variants/rmsnorm.*: the row in registers, bulk stores, ring
// sizing, 128 threads) did not get there (best: 95.2 % of compile at t16384-h4096 with 128 threads, but behind at
// t4096-h8192). At the decode (ncu_rmsnorm_t32-h4096-decode_h200.md) latency decides: the row's trip through the
// bulk-copy ring and back out of shared memory costs 4.0 against Liger's 2.75 us. Why each workload misses:
// benchmarks/reference_limits.toml.
//
// The task is memory-bound: every byte of X is read once and every byte of Y written once, so the
// kernel's only job is to keep enough bytes in flight to saturate HBM (~4.3 TB/s measured copy on the
// H200) while doing a little arithmetic per element.
//
// Design
// - Persistent grid: as many CTAs as fit on the GPU at once (occupancy query, several per SM). CTA b
//   handles rows b, b + G, b + 2G, ... (G = grid size), so every CTA has the same number of rows
//   up to one.
// - A row (Hd bf16 = 8 to 16 KB on the benchmark's shapes) fits in shared memory. Each CTA owns a ring
//   of S row-sized stages. One thread (thread 0) streams rows into the ring with ONE bulk copy per
//   row (cp.async.bulk, the copy engine: no address arithmetic, no registers, no per-thread loads),
//   each completing on the stage's mbarrier with a transaction count of the row's bytes. S is chosen
//   so that about 64 KB of rows are in flight per CTA (2 to 8 stages), and 3-4 CTAs share an SM:
//   >= 150 KB requested per SM, far more than HBM latency x bandwidth needs (~30 KB per SM).
// - The weight W is bulk-copied into shared memory once per CTA.
// - Per row: all 256 threads wait on the stage's mbarrier (parity = how many times the stage has
//   been used, mod 2), sum squares with 16-byte shared loads, reduce across the block (warp
//   shuffles + one __syncthreads), then re-read the row (shared memory is cheap: ~3 row-sized
//   shared reads per row against ~20x that budget) and write Y with 16-byte coalesced global stores
//   straight from registers (no staging needed on the way out).
// - Stage release: a second __syncthreads after the row is consumed proves that no thread still reads
//   the stage; thread 0 then immediately issues the bulk copy of the row S ahead into it. The
//   barrier that ends row k therefore doubles as the "empty" barrier, and no extra mbarrier is needed.
//   (Ordinary shared reads followed, after a barrier, by an async-proxy write is the same write-after-
//   read pattern CUTLASS pipelines use; no proxy fence is required for it.)
//
// Requirements of the copy engine, checked on the host: X, W and Y 16-byte aligned and Hd * 2 a
// multiple of 16 (the task guarantees Hd % 64 == 0, and torch allocations are 256-byte aligned, so all
// rows are aligned when the base is). If any of that fails, or a row does not fit in shared memory,
// the whole call falls back to a plain CUDA kernel (correct for any size and alignment, not fast).
// Rows are whole units of work, so there is no partial-row remainder: a row of any length that is a
// multiple of 8 elements is one bulk copy, and the last CTA simply gets one row fewer.

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxStages = 8;
constexpr uint32_t kBytesInFlightPerCta = 64 * 1024;  // target size of one CTA's ring
constexpr float kEps = 1e-6f;

// Shared-memory layout, computed identically on host and device:
//   [0, S * pitch)          the ring: stage s at s * pitch (pitch = row bytes rounded up to 128)
//   [S * pitch, +pitch)     W
//   then kMaxStages + 1 mbarriers (full[s] and the W barrier), then kWarps floats for the reduction.
__host__ __device__ constexpr uint32_t row_pitch(uint32_t row_bytes) { return (row_bytes + 127u) & ~127u; }
__host__ __device__ constexpr uint32_t smem_bytes(uint32_t pitch, uint32_t stages) {
  return (stages + 1) * pitch + 8 * (kMaxStages + 1) + 4 * kWarps;
}

__device__ __forceinline__ float sum_squares(const uint4& r, float acc) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float lo = ptx::bf16_lo(w[i]), hi = ptx::bf16_hi(w[i]);
    acc = fmaf(lo, lo, acc);
    acc = fmaf(hi, hi, acc);
  }
  return acc;
}

// Eight outputs: (x * inv_rms) * w, rounded to bf16 (the reference's order of operations).
__device__ __forceinline__ uint4 scale_row_chunk(const uint4& x, const uint4& w, float inv_rms) {
  const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ws[4] = {w.x, w.y, w.z, w.w};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    o[i] = ptx::pack_bf16x2(ptx::bf16_lo(xs[i]) * inv_rms * ptx::bf16_lo(ws[i]),
                            ptx::bf16_hi(xs[i]) * inv_rms * ptx::bf16_hi(ws[i]));
  return make_uint4(o[0], o[1], o[2], o[3]);
}

__global__ void __launch_bounds__(kThreads)
rmsnorm_bulk_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                    __nv_bfloat16* __restrict__ Y, int64_t T, int Hd, int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
  ptx::RingState at;  // the consumers' place: local row k is in stage k % stages, of parity (k / stages) & 1
  const uint32_t row_bytes = uint32_t(Hd) * 2u;
  const uint32_t pitch = row_pitch(row_bytes);
  uint8_t* const ring = smem;
  uint8_t* const wbuf = smem + uint32_t(stages) * pitch;
  uint64_t* const full = reinterpret_cast<uint64_t*>(wbuf + pitch);  // 128-byte aligned: 8-byte alignment holds
  uint64_t* const wbar = full + kMaxStages;
  float* const red = reinterpret_cast<float*>(wbar + 1);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t grid = gridDim.x;
  const int64_t first_row = blockIdx.x;
  // Rows first_row, first_row + grid, ... below T.
  const int64_t my_rows = first_row < T ? (T - first_row + grid - 1) / grid : 0;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbar_init(&full[s], 1);  // one arrival (the producer's) per phase
    ptx::mbar_init(wbar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the initialised barriers are visible to every thread (and to the copy engine)

  // Producer step for local row k into stage s: arm the barrier with the bytes to expect, then one
  // bulk copy of the whole row. The phase completes when the arrival and all bytes are in.
  auto issue_row = [&](int64_t k, int s) {
    const int64_t row = first_row + k * grid;
    ptx::mbar_arrive_expect_tx(&full[s], row_bytes);
    ptx::bulk_load(ring + uint32_t(s) * pitch, X + row * Hd, row_bytes, &full[s]);
  };

  if (tid == 0) {
    ptx::mbar_arrive_expect_tx(wbar, row_bytes);
    ptx::bulk_load(wbuf, W, row_bytes, wbar);
    const int prologue = my_rows < stages ? int(my_rows) : stages;
    for (int s = 0; s < prologue; ++s) issue_row(s, s);  // fill the ring: stage s gets local row s
  }
  ptx::mbar_wait(wbar, 0);  // W's only phase

  const int nvec = Hd / 8;  // 16-byte chunks per row
  const uint4* const w4 = reinterpret_cast<const uint4*>(wbuf);
  for (int64_t k = 0; k < my_rows; ++k) {
    const int64_t row = first_row + k * grid;
    const uint4* const x4 = reinterpret_cast<const uint4*>(ring + uint32_t(at.stage) * pitch);
    ptx::mbar_wait(&full[at.stage], at.phase);  // the row has landed

    // Pass 1: sum of squares. Lane-contiguous 16-byte reads: a warp reads 512 contiguous bytes, no
    // bank conflicts.
    float ss = 0.f;
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) ss = sum_squares(x4[v], ss);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) red[warp] = ss;
    __syncthreads();  // (A) partial sums visible; `red` is next written after (B) of this row
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += red[w];
    const float inv_rms = rsqrtf(total / float(Hd) + kEps);

    // Pass 2: normalise, weight, store. Each warp stores 512 contiguous bytes per instruction.
    uint4* const y4 = reinterpret_cast<uint4*>(Y + row * Hd);
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) y4[v] = scale_row_chunk(x4[v], w4[v], inv_rms);

    __syncthreads();  // (B) no thread reads stage s (or `red`) any more: the stage is empty
    if (tid == 0 && k + stages < my_rows) issue_row(k + stages, at.stage);  // refill it S rows ahead
    at.advance(stages);
  }
}

// Fallback for inputs the copy engine cannot take (misaligned pointers, Hd not a multiple of 8, rows
// too large for shared memory): one CTA per row, scalar accesses, correct for anything.
__global__ void __launch_bounds__(kThreads)
rmsnorm_plain_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                     __nv_bfloat16* __restrict__ Y, int64_t T, int64_t Hd) {
  __shared__ float red[kWarps];
  for (int64_t row = blockIdx.x; row < T; row += gridDim.x) {
    const __nv_bfloat16* x = X + row * Hd;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < Hd; i += kThreads) {
      const float v = __bfloat162float(x[i]);
      ss = fmaf(v, v, ss);
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += red[w];
    const float inv_rms = rsqrtf(total / float(Hd) + kEps);
    for (int64_t i = threadIdx.x; i < Hd; i += kThreads)
      Y[row * Hd + i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(W[i]));
    __syncthreads();  // `red` is rewritten by the next row
  }
}

// Per-device facts, queried once (the entry point is called many times; host time between the
// caller's start event and the launch counts in the measurement). Not thread-safe, like the harness.
struct DeviceFacts {
  bool ready = false;
  int sms = 0;
  int smem_optin = 0;
  int cached_smem = -1;  // occupancy of the bulk kernel for this dynamic smem size ...
  int cached_blocks = 0;  // ... is this many CTAs per SM
};

DeviceFacts* device_facts() {
  static DeviceFacts facts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  DeviceFacts& f = facts[dev];
  if (!f.ready) {
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncSetAttribute(rmsnorm_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, f.smem_optin) !=
            cudaSuccess) {
      cudaGetLastError();  // clear it: the fallback kernel is launched instead
      return nullptr;
    }
    f.ready = true;
  }
  return &f;
}

}  // namespace

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
  if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();

  const bool aligned = (reinterpret_cast<uintptr_t>(X) % 16 == 0) && (reinterpret_cast<uintptr_t>(W) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(Y) % 16 == 0) && (Hd % 8 == 0);
  DeviceFacts* dev = device_facts();
  bool fast = aligned && dev != nullptr && Hd <= (int64_t(1) << 20);
  uint32_t stages = 0, smem = 0;
  if (fast) {
    const uint32_t pitch = row_pitch(uint32_t(Hd) * 2u);
    stages = kBytesInFlightPerCta / pitch;
    stages = stages < 2 ? 2 : (stages > kMaxStages ? kMaxStages : stages);
    while (stages > 2 && smem_bytes(pitch, stages) > uint32_t(dev->smem_optin)) --stages;
    smem = smem_bytes(pitch, stages);
    fast = smem <= uint32_t(dev->smem_optin);
  }
  if (fast && dev->cached_smem != int(smem)) {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, rmsnorm_bulk_kernel, kThreads, smem) != cudaSuccess) {
      cudaGetLastError();  // clear it: the fallback kernel is launched instead
      blocks = 0;
    }
    dev->cached_smem = int(smem);
    dev->cached_blocks = blocks;
  }
  if (fast && dev->cached_blocks > 0) {
    const int64_t resident = int64_t(dev->sms) * dev->cached_blocks;
    const unsigned grid = unsigned(T < resident ? T : resident);
    rmsnorm_bulk_kernel<<<grid, kThreads, smem, stream>>>(X, W, Y, T, int(Hd), int(stages));
  } else {
    const unsigned grid = unsigned(T < 65535 * 16 ? T : 65535 * 16);
    rmsnorm_plain_kernel<<<grid, kThreads, 0, stream>>>(X, W, Y, T, Hd);
  }
  return (int)cudaGetLastError();
}
