#include "ptx_wrappers.cuh"
#include <cmath>
// softmax (expert reference, sm_90a): Y[r, :] = exp(X[r, :] - max) / sum(exp(X[r, :] - max)) for every row of a
// bf16 X [R, C], fp32 arithmetic, bf16 Y.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, the best baseline timed in the
// same run): ahead of the library on the long and vocabulary rows (r8192-c32768 120 % of Liger's, the 151936-wide
// Qwen rows 200 % of torch.compile's), behind Liger on r16384-c4096 (0.0719 against 0.0660 ms, 92 %); 84-90 % of
// the measured copy bandwidth on these workloads, all beyond L2 (target: 95 %).
// What ncu showed (r16384-c4096, one call of each, ncu_softmax_r16384-c4096_h200.md): 70.4 against Liger's 64.9
// us with the same L2 bytes; one persistent CTA per SM at 66 registers issues from 33 % of its slots against
// Liger's 65 % on 16,384 CTAs, L2 throughput 80.0 % against 87.3 %: too few 8 KB rows in flight per SM. On the
// long rows (r8192-c32768, ncu_softmax_r8192-c32768_h200.md) 278.8 against Liger's 331.9 us with L2 throughput
// 84.3 % against 73.5 %: ahead, and the same story against the copy floor, the memory system not yet full
// (benchmarks/reference_limits.toml).
//
// Memory-bound: the minimum traffic is one read of X and one write of Y, and that is only possible if
// a row stays on chip between the reduction (max, sum) and the normalisation. The kernel therefore
// keeps every row in shared memory, and when a row is too long for one SM (vocabulary-sized rows:
// 151936 bf16 = 297 KB > 227 KB), it splits the row over a CLUSTER of CTAs, each holding one slice of
// it, and combines their partial results through distributed shared memory (DSMEM).
//
// Two paths:
// - Short rows (C * 2 <= 16 KB, e.g. r16384-c4096): one row per WARP, see softmax_warp_kernel below. A
//   block-wide reduction per 8 KB row made every row wait on two __syncthreads of a 512-thread block
//   whose threads each hold only one 16-byte chunk; warps that own whole rows never wait on each other.
// - Longer rows: the block/cluster kernel described next.
//
// Design (block/cluster kernel)
// - Work unit: one row, processed by a cluster of n CTAs (n = 1, 2, 4 or 8, chosen on the host).
//   CTA `rank` of the cluster owns columns [rank * slice, min(C, (rank + 1) * slice)) of every row the
//   cluster processes; clusters are persistent and take rows c, c + G, c + 2G, ... (G clusters).
// - Each CTA streams its slices through a ring of S stages with ONE bulk copy (cp.async.bulk, copy
//   engine) per slice, completing on the stage's mbarrier (transaction count = slice bytes). Thread 0
//   is the producer; all 256 threads consume. The ring keeps S - 1 slices loading while one is being
//   computed: for C = 32768 (64 KB rows, n = 1) that is 3 stages = 192 KB, one CTA per SM with 128 KB
//   requested ahead; for short slices (<= 16 KB) the ring holds ~64 KB and several CTAs share an SM.
// - Per row, per CTA, with the slice in shared memory:
//     A1. max over the slice with packed bf16x2 max (no conversion, two elements per instruction);
//     A2. sum of exp(x - m) with m the thread's own max: exp2 on the MUFU with the log2(e) scale folded
//         into one FMA (x * log2e - m * log2e);
//     merge (m, s) pairs: warp shuffles, then across warps through shared memory (one __syncthreads),
//         using (m, s) (+) (m', s') = (M, s * 2^((m - M) log2e) + s' * 2^((m' - M) log2e)), M = max(m, m');
//     if n > 1: thread 0 arms its exchange mbarrier for the row (its own arrival + 8 bytes from each of
//         the n CTAs), and lane p of warp 0 pushes the CTA's (m, s) into slot [rank] of CTA p with
//         st.async (a remote shared store that completes its bytes on CTA p's exchange mbarrier: no
//         fence, no remote arrive); every thread then waits on its own exchange mbarrier (acquire at
//         cluster scope) and merges the n pairs. No cluster-wide barrier per row.
//     B.  y = 2^(x * log2e - (M * log2e + log2 S)) (= exp(x - M) / S: the division folded into the
//         exponent, one FMA + one MUFU per element), written with 16-byte coalesced global stores.
//     Then a __syncthreads frees the stage and thread 0 refills it with the slice S rows ahead.
// - The exchange slots and mbarriers are double-buffered by row parity. A CTA can only send row k + 2
//   after its own exchange for row k + 1 completed, which needs the peer's row k + 1 bytes, which the
//   peer sends only after all its threads have read row k's slots and its row k phase has completed.
//   So a slot is never overwritten before it is read, and a barrier never sees row k + 2's bytes
//   before its row k phase is over (they may arrive before its own row k + 2 arrival, which is fine).
// - A cluster barrier after the mbarrier inits (no st.async before the peer initialised its barriers)
//   and one before exit (no CTA leaves while a peer may still write into it).
//
// Host: picks n, the slice (a multiple of 64 elements: 128-byte aligned slices) and S from the shared
// memory per block, the number of co-resident clusters (cudaOccupancyMaxActiveClusters) and the
// balance of rows over clusters: cost = ceil(R / G) * G (rows' worth of time on G units), with a 3 %
// penalty per doubling of n for the exchange. When the row needs a cluster anyway (n > 1, e.g. the
// 297 KB qwen-vocab rows), a CTA's phases per row are serial (max, sum, exchange, normalise) and with
// one CTA per SM the exchange and barrier latencies leave the SM idle; so for n > 1 a variant with a
// ring of half the shared memory (two CTAs per SM, verified by the occupancy query) is also costed, and
// preferred when its cost is within 10 % (qwen-vocab: n = 8, 3 stages of 37 KB, 2 CTAs per SM, instead
// of n = 4, 3 stages of 74 KB, 1 CTA per SM). Rows that fit one CTA (C = 32768) keep the plan as before.
// Also costed on request, and measured no faster on the vocab rows: three CTAs per SM (kMaxCtasPerSm)
// and every cluster size up to 8 (kAllClusterSizes: n = 7, 2 stages, 224 CTAs, 3.8 % slower).
// Requirements of the copy engine, checked on the host: X and Y 16-byte aligned, C a multiple of 8 (the
// task guarantees 64). Otherwise, or when no plan fits, the call falls back to a plain CUDA kernel that
// is correct for any size and alignment.
// Remainders: the last CTA of a cluster gets a shorter slice (C - (n-1) * slice elements, still a
// multiple of 8, i.e. 16 bytes); the last clusters get one row fewer than the others.

namespace {

constexpr int kThreads = 256;  // 512 measured slower on the vocab rows (89.4 against 86.6 us, H200)
constexpr int kWarps = kThreads / 32;
constexpr int kMaxStages = 8;
constexpr int kMaxCluster = 8;                        // portable cluster size limit
constexpr uint32_t kSmallSlice = 16 * 1024;           // slices up to this size: several CTAs per SM
constexpr uint32_t kBytesInFlightPerCta = 64 * 1024;  // ring size aimed at for small slices
constexpr float kLog2e = 1.4426950408889634f;
constexpr bool kPreferSharedSms = true;               // cluster plans: see "Host" above
constexpr int kMaxCtasPerSm = 2;                      // cluster plans: CTAs that may share an SM (1-3)
constexpr bool kAllClusterSizes = false;              // cluster plans: every size up to 8, not only 2, 4, 8

// Shared-memory layout (host and device agree):
//   [0, S * pitch)  the ring (pitch = slice bytes rounded up to 128)
//   full[kMaxStages] mbarriers, xbar[2] exchange mbarriers, xpart[2][kMaxCluster] float2, red[kWarps] float2.
constexpr uint32_t kTailBytes = 8 * kMaxStages + 8 * 2 + 8 * 2 * kMaxCluster + 8 * kWarps;
__host__ __device__ constexpr uint32_t slice_pitch(uint32_t slice_bytes) { return (slice_bytes + 127u) & ~127u; }
__host__ __device__ constexpr uint32_t smem_bytes(uint32_t pitch, uint32_t stages) { return stages * pitch + kTailBytes; }

__device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t u) {
  __nv_bfloat162 v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

// Merge the (m, s) pairs of the 32 lanes (s * e^m each; an empty lane holds (-inf, 0)); every lane gets
// the result. One exp per lane: first the common max, then each lane rescales its own sum.
__device__ __forceinline__ float2 warp_merge(float m, float s) {
  float M = m;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  float t = (m == -INFINITY) ? 0.f : s * ptx::ex2_approx((m - M) * kLog2e);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
  return make_float2(M, t);
}

__global__ void __launch_bounds__(kThreads, 1)
softmax_bulk_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R, int64_t C,
                    int slice_elems, int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
  ptx::RingState at;  // the consumers' place: local row k is in stage k % stages, of parity (k / stages) & 1
  const uint32_t pitch = slice_pitch(uint32_t(slice_elems) * 2u);
  uint8_t* const ring = smem;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + uint32_t(stages) * pitch);
  uint64_t* const xbar = full + kMaxStages;
  float2* const xpart = reinterpret_cast<float2*>(xbar + 2);  // [2][kMaxCluster]
  float2* const red = xpart + 2 * kMaxCluster;                // [kWarps]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // A launch without a cluster attribute is a cluster of one: rank 0 of 1.
  const uint32_t rank = ptx::cluster_ctarank(), csize = ptx::cluster_nctarank();
  const int64_t cluster = blockIdx.x / csize, nclusters = gridDim.x / csize;
  const int64_t col0 = int64_t(rank) * slice_elems;
  const int64_t rest = C - col0;
  const int len = rest <= 0 ? 0 : (rest < slice_elems ? int(rest) : slice_elems);  // this CTA's columns
  const uint32_t bytes = uint32_t(len) * 2u;
  const int nvec = len / 8;  // 16-byte chunks (len is a multiple of 8)
  const int64_t my_rows = cluster < R ? (R - cluster + nclusters - 1) / nclusters : 0;  // same in the whole cluster

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbar_init(&full[s], 1);  // the producer's arrive + the slice bytes
    ptx::mbar_init(&xbar[0], 1);  // exchange: our own expect_tx arrival; the peers' st.async add bytes
    ptx::mbar_init(&xbar[1], 1);
    ptx::mbar_fence_init();
  }
  if (csize > 1) ptx::cluster_sync();  // peers' exchange barriers are initialised before anyone arrives on them
  else __syncthreads();

  auto issue_slice = [&](int64_t k, int s) {  // local row k into stage s
    const int64_t row = cluster + k * nclusters;
    ptx::mbar_arrive_expect_tx(&full[s], bytes);
    if (bytes != 0) ptx::bulk_load(ring + uint32_t(s) * pitch, X + row * C + col0, bytes, &full[s]);
  };
  if (tid == 0) {
    const int prologue = my_rows < stages ? int(my_rows) : stages;
    for (int s = 0; s < prologue; ++s) issue_slice(s, s);
  }

  for (int64_t k = 0; k < my_rows; ++k) {
    const int64_t row = cluster + k * nclusters;
    const uint4* const x4 = reinterpret_cast<const uint4*>(ring + uint32_t(at.stage) * pitch);
    ptx::mbar_wait(&full[at.stage], at.phase);

    // A1: this thread's max, on packed bf16 pairs (exact: max never rounds).
    __nv_bfloat162 mx2 = as_bf162(0xFF80FF80u);  // (-inf, -inf)
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) {
      const uint4 r = x4[v];
      mx2 = __hmax2(__hmax2(mx2, as_bf162(r.x)), __hmax2(as_bf162(r.y), __hmax2(as_bf162(r.z), as_bf162(r.w))));
    }
    const float m = fmaxf(__low2float(mx2), __high2float(mx2));
    // A2: sum of exp(x - m) = 2^(x log2e - m log2e). (m = -inf only if all this thread's values are -inf,
    // or it has none: then every term is 2^-inf = 0 and the pair (-inf, 0) merges as empty.)
    const float mL = m == -INFINITY ? 0.f : m * kLog2e;
    float sum = 0.f;
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) {
      const uint4 r = x4[v];
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
        sum += ptx::ex2_approx(fmaf(ptx::bf16_lo(w[i]), kLog2e, -mL)) +
               ptx::ex2_approx(fmaf(ptx::bf16_hi(w[i]), kLog2e, -mL));
    }

    // CTA-wide (m, s): warps, then the kWarps partials (read by every warp, merged by its lanes).
    float2 part = warp_merge(m, sum);
    if (lane == 0) red[warp] = part;
    __syncthreads();  // (A) `red` complete; rewritten only after (B)
    part = lane < kWarps ? red[lane] : make_float2(-INFINITY, 0.f);
    part = warp_merge(part.x, part.y);

    if (csize > 1) {  // cluster-wide (m, s) through DSMEM
      const int b = int(k & 1);
      float2* const slots = xpart + b * kMaxCluster;
      // Arm our exchange barrier for this row: one arrival (ours) + 8 bytes from each CTA of the cluster.
      // A peer's bytes may land before this; the transaction count then goes negative for a while, which
      // is allowed, and the phase cannot complete before our arrival.
      if (tid == 0) ptx::mbar_arrive_expect_tx(&xbar[b], 8u * csize);
      if (tid < int(csize)) {  // lane p of warp 0 pushes our pair into slot [rank] of CTA p (p = rank too)
        const uint32_t p = uint32_t(tid);
        ptx::st_async_v2_f32(ptx::map_to_rank(&slots[rank], p), part.x, part.y, ptx::map_to_rank(&xbar[b], p));
      }
      ptx::mbar_wait_cluster(&xbar[b], uint32_t(k >> 1) & 1u);  // phase (k >> 1) of xbar[b]
      const float2 q = lane < int(csize) ? slots[lane] : make_float2(-INFINITY, 0.f);
      part = warp_merge(q.x, q.y);
    }
    const float bias = fmaf(part.x, kLog2e, ptx::lg2_approx(part.y));  // M log2e + log2 S; S >= 1

    // B: y = 2^(x log2e - bias) = exp(x - M) / S; 16-byte stores, 512 contiguous bytes per warp.
    uint4* const y4 = reinterpret_cast<uint4*>(Y + row * C + col0);
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) {
      const uint4 r = x4[v];
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
      uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[i] = ptx::pack_bf16x2(ptx::ex2_approx(fmaf(ptx::bf16_lo(w[i]), kLog2e, -bias)),
                                ptx::ex2_approx(fmaf(ptx::bf16_hi(w[i]), kLog2e, -bias)));
      y4[v] = make_uint4(o[0], o[1], o[2], o[3]);
    }

    __syncthreads();  // (B) stage s and `red` are no longer read
    if (tid == 0 && k + stages < my_rows) issue_slice(k + stages, at.stage);
    at.advance(stages);
  }
  if (csize > 1) ptx::cluster_sync();  // no CTA exits while a peer may still write its slots
}

// ---- short rows: one row per WARP ------------------------------------------------------------------
// For rows of at most kWarpRowMax bytes (C <= 8192: r16384-c4096, r3000-c1024) the block kernel above
// spends most of its time in the two __syncthreads per row (each row is only 1-2 16-byte chunks per
// thread of a 512-thread block). Here a row belongs to one warp and no block barrier exists inside the
// loop:
// - one CTA per SM, nwarps warps (host: as many as fit with two stages each, at most kWarpMaxWarps);
//   global warp gw = warp * gridDim.x + blockIdx.x handles rows gw, gw + GW, ... (GW = gridDim.x * nwarps;
//   warp-major, so that the warps of the last partial round of rows are spread over all SMs);
// - each warp owns a private ring of S row-sized stages (S = 2 to 4) and its own S mbarriers; lane 0
//   streams its rows in with ONE bulk copy per row (transaction count = row bytes);
// - per row: warp max (packed bf16x2 max, then shuffles), warp sum of 2^(x log2e - M log2e) (shuffles),
//   then y = 2^(x log2e - (M log2e + log2 S)) with 16-byte coalesced stores (512 contiguous bytes per
//   warp store); a __syncwarp proves the stage is no longer read, and lane 0 refills it S rows ahead.
constexpr int kWarpMaxWarps = 8;  // 16 measured slower on 4096-column rows (73.4 against 72.5 us, H200)
constexpr int kWarpMaxStages = 4;
constexpr uint32_t kWarpRowMax = 16 * 1024;
constexpr uint32_t kWarpTailBytes = 8 * kWarpMaxWarps * kWarpMaxStages;
__host__ __device__ constexpr uint32_t warp_smem_bytes(uint32_t pitch, uint32_t nwarps, uint32_t stages) {
  return nwarps * stages * pitch + kWarpTailBytes;
}

__global__ void __launch_bounds__(kWarpMaxWarps * 32, 1)
softmax_warp_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R, int C,
                    int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
  ptx::RingState at;  // this warp's place in its ring: local row k is in stage k % stages
  const int nwarps = int(blockDim.x) >> 5;
  const uint32_t row_bytes = uint32_t(C) * 2u;
  const uint32_t pitch = slice_pitch(row_bytes);
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + uint32_t(nwarps * stages) * pitch);  // 128-B aligned

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint8_t* const ring = smem + uint32_t(warp * stages) * pitch;  // this warp's S stages
  uint64_t* const full = bars + warp * kWarpMaxStages;           // and their barriers
  const int64_t gwarps = int64_t(gridDim.x) * nwarps;
  const int64_t first_row = int64_t(warp) * gridDim.x + blockIdx.x;  // warp-major: see the design notes
  const int64_t my_rows = first_row < R ? (R - first_row + gwarps - 1) / gwarps : 0;

  if (tid == 0) {
    for (int b = 0; b < nwarps * kWarpMaxStages; ++b) ptx::mbar_init(&bars[b], 1);  // producer's arrive + bytes
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the initialised barriers are visible to every thread (and to the copy engine)

  auto issue_row = [&](int64_t k, int s) {  // local row k into stage s (lane 0)
    const int64_t row = first_row + k * gwarps;
    ptx::mbar_arrive_expect_tx(&full[s], row_bytes);
    ptx::bulk_load(ring + uint32_t(s) * pitch, X + row * C, row_bytes, &full[s]);
  };
  if (lane == 0) {
    const int prologue = my_rows < stages ? int(my_rows) : stages;
    for (int s = 0; s < prologue; ++s) issue_row(s, s);
  }
  // A warp only exits after all its own copies have completed (it waits for every row it loaded), so no
  // copy is ever pending into the shared memory of an exited CTA.

  const int nvec = C / 8;  // 16-byte chunks per row
  for (int64_t k = 0; k < my_rows; ++k) {
    const int64_t row = first_row + k * gwarps;
    const uint4* const x4 = reinterpret_cast<const uint4*>(ring + uint32_t(at.stage) * pitch);
    ptx::mbar_wait(&full[at.stage], at.phase);

    // Max (exact on packed bf16 pairs), then over the warp.
    __nv_bfloat162 mx2 = as_bf162(0xFF80FF80u);  // (-inf, -inf)
#pragma unroll 4
    for (int v = lane; v < nvec; v += 32) {
      const uint4 r = x4[v];
      mx2 = __hmax2(__hmax2(mx2, as_bf162(r.x)), __hmax2(as_bf162(r.y), __hmax2(as_bf162(r.z), as_bf162(r.w))));
    }
    float M = fmaxf(__low2float(mx2), __high2float(mx2));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    // Sum of 2^(x log2e - M log2e), two independent accumulators. (M = -inf only for an all -inf row.)
    const float mL = M == -INFINITY ? 0.f : M * kLog2e;
    float s0 = 0.f, s1 = 0.f;
#pragma unroll 4
    for (int v = lane; v < nvec; v += 32) {
      const uint4 r = x4[v];
      s0 += ptx::ex2_approx(fmaf(ptx::bf16_lo(r.x), kLog2e, -mL)) +
            ptx::ex2_approx(fmaf(ptx::bf16_hi(r.x), kLog2e, -mL));
      s1 += ptx::ex2_approx(fmaf(ptx::bf16_lo(r.y), kLog2e, -mL)) +
            ptx::ex2_approx(fmaf(ptx::bf16_hi(r.y), kLog2e, -mL));
      s0 += ptx::ex2_approx(fmaf(ptx::bf16_lo(r.z), kLog2e, -mL)) +
            ptx::ex2_approx(fmaf(ptx::bf16_hi(r.z), kLog2e, -mL));
      s1 += ptx::ex2_approx(fmaf(ptx::bf16_lo(r.w), kLog2e, -mL)) +
            ptx::ex2_approx(fmaf(ptx::bf16_hi(r.w), kLog2e, -mL));
    }
    float sum = s0 + s1;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float bias = mL + ptx::lg2_approx(sum);  // M log2e + log2 S; S >= 1

    uint4* const y4 = reinterpret_cast<uint4*>(Y + row * C);
#pragma unroll 4
    for (int v = lane; v < nvec; v += 32) {
      const uint4 r = x4[v];
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
      uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[i] = ptx::pack_bf16x2(ptx::ex2_approx(fmaf(ptx::bf16_lo(w[i]), kLog2e, -bias)),
                                ptx::ex2_approx(fmaf(ptx::bf16_hi(w[i]), kLog2e, -bias)));
      y4[v] = make_uint4(o[0], o[1], o[2], o[3]);
    }

    __syncwarp();  // no lane reads stage s any more
    if (lane == 0 && k + stages < my_rows) issue_row(k + stages, at.stage);
    at.advance(stages);
  }
}

// Fallback for what the copy engine cannot take (misaligned pointers, C not a multiple of 8, no plan
// that fits): one CTA per row, three passes over global memory with scalar accesses.
__global__ void __launch_bounds__(kThreads)
softmax_plain_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R, int64_t C) {
  __shared__ float2 red[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    const __nv_bfloat16* x = X + row * C;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < C; i += kThreads) m = fmaxf(m, __bfloat162float(x[i]));
    float sum = 0.f;
    if (m != -INFINITY)
      for (int64_t i = threadIdx.x; i < C; i += kThreads) sum += ptx::ex2_approx((__bfloat162float(x[i]) - m) * kLog2e);
    float2 part = warp_merge(m, sum);
    if (lane == 0) red[warp] = part;
    __syncthreads();
    part = lane < kWarps ? red[lane] : make_float2(-INFINITY, 0.f);
    part = warp_merge(part.x, part.y);
    const float inv = 1.f / part.y;
    for (int64_t i = threadIdx.x; i < C; i += kThreads)
      Y[row * C + i] = __float2bfloat16(ptx::ex2_approx((__bfloat162float(x[i]) - part.x) * kLog2e) * inv);
    __syncthreads();  // `red` is rewritten by the next row
  }
}

// ---- host --------------------------------------------------------------------------------------------

struct OccupancyEntry {
  int csize = 0;
  uint32_t smem = 0;
  int64_t units = 0;  // co-resident CTAs (csize 1) or clusters
};

struct DeviceFacts {
  bool ready = false;
  int sms = 0;
  int smem_optin = 0;
  OccupancyEntry cache[16];
  int next = 0;
  bool warp_ok = false;
  int warp_key = -1;    // occupancy of the warp kernel for this (smem, warps) ...
  int warp_blocks = 0;  // ... is this many CTAs per SM
};

DeviceFacts* device_facts() {
  static DeviceFacts facts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  DeviceFacts& f = facts[dev];
  if (!f.ready) {
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncSetAttribute(softmax_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, f.smem_optin) !=
            cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    // The warp kernel is optional: if it cannot get the shared memory, short rows use the block kernel.
    f.warp_ok = cudaFuncSetAttribute(softmax_warp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     f.smem_optin) == cudaSuccess;
    if (!f.warp_ok) cudaGetLastError();
    f.ready = true;
  }
  return &f;
}

// How many CTAs (csize 1) or clusters of csize CTAs fit on the GPU at once with `smem` bytes each.
int64_t resident_units(DeviceFacts& f, int csize, uint32_t smem) {
  for (const OccupancyEntry& e : f.cache)
    if (e.csize == csize && e.smem == smem) return e.units;
  int64_t units = 0;
  if (csize == 1) {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, softmax_bulk_kernel, kThreads, smem) == cudaSuccess)
      units = int64_t(blocks) * f.sms;
    else
      cudaGetLastError();  // a refused configuration is an answer (0 units), not an error of this call
  } else {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(csize);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(unsigned(csize));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, softmax_bulk_kernel, &cfg) == cudaSuccess)
      units = clusters;
    else
      cudaGetLastError();
  }
  f.cache[f.next] = {csize, smem, units};
  f.next = (f.next + 1) % 16;
  return units;
}

struct Plan {
  int csize = 0, slice = 0, stages = 0;
  uint32_t smem = 0;
  int64_t clusters = 0;  // clusters (or CTAs) launched
};

bool make_plan(DeviceFacts& f, int64_t R, int64_t C, Plan& best) {
  double best_cost = 0.0;
  const uint64_t limit = uint64_t(f.smem_optin);
  for (int csize = 1; csize <= kMaxCluster; csize = kAllClusterSizes ? csize + 1 : csize * 2) {
    int64_t slice = C;
    if (csize > 1) {
      slice = ((C + csize - 1) / csize + 63) / 64 * 64;  // 128-byte aligned slices
      if ((csize - 1) * slice >= C) continue;            // every CTA must own columns
    }
    const uint64_t pitch = (uint64_t(slice) * 2 + 127) / 128 * 128;
    uint64_t deeper = 0;  // the last ring depth costed for this cluster size
    // Rows that need a cluster anyway (no single CTA holds two stages of one) are processed one slice
    // per CTA with serial phases (max, sum, DSMEM exchange, normalise): with one CTA per SM, the
    // exchange and barrier latencies leave the SM idle. So a cluster plan is also costed with a shorter
    // ring that lets `share` CTAs share an SM (1 KB per CTA reserved by the system), and one CTA per SM
    // counts 10 % more. Checked with the occupancy query, so a wrong guess only loses the variant.
    for (int share = 1; share <= (csize > 1 ? kMaxCtasPerSm : 1); ++share) {
      const uint64_t part = (limit + 1024) / uint64_t(share);
      const uint64_t room = share == 1 ? limit - kTailBytes : part > 1024 + kTailBytes ? part - 1024 - kTailBytes : 0;
      uint64_t stages = room / pitch;
      if (stages > kMaxStages) stages = kMaxStages;
      if (share == 1 && pitch <= kSmallSlice) {
        const uint64_t want = kBytesInFlightPerCta / pitch;
        if (stages > want) stages = want < 2 ? 2 : want;
      }
      if (stages < 2 || (share > 1 && stages >= deeper)) continue;  // too short, or the plan just costed
      deeper = stages;
      const uint32_t smem = smem_bytes(uint32_t(pitch), uint32_t(stages));
      const int64_t units = resident_units(f, csize, smem);
      if (units <= 0) continue;
      // A shared SM must really hold more CTAs than the deeper ring's on average.
      if (share > 1 && units * csize * 2 < int64_t(f.sms) * (2 * share - 1)) continue;
      const int64_t used = R < units ? R : units;
      const int64_t waves = (R + used - 1) / used;
      const double cost = double(waves * used) * (1.0 + 0.03 * std::log2(double(csize))) *
                          (csize > 1 && share == 1 && kPreferSharedSms ? 1.1 : 1.0);
      if (best.csize == 0 || cost < best_cost) {
        best_cost = cost;
        best = {csize, int(slice), int(stages), smem, used};
      }
    }
  }
  return best.csize != 0;
}

}  // namespace

extern "C" int softmax(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
  if (R <= 0 || C <= 0) return (int)cudaGetLastError();
  const bool aligned = (reinterpret_cast<uintptr_t>(X) % 16 == 0) && (reinterpret_cast<uintptr_t>(Y) % 16 == 0) &&
                       (C % 8 == 0) && C < (int64_t(1) << 30);
  DeviceFacts* dev = aligned ? device_facts() : nullptr;
  Plan plan;
  if (dev != nullptr && dev->warp_ok && C * 2 <= int64_t(kWarpRowMax)) {
    // Short rows: one row per warp. As many warps as fit with two stages each, then as many stages as fit.
    const uint64_t pitch = slice_pitch(uint32_t(C) * 2u);
    const uint64_t limit = uint64_t(dev->smem_optin);
    const uint64_t avail = limit > kWarpTailBytes ? limit - kWarpTailBytes : 0;
    uint64_t nw = avail / (2 * pitch);
    nw = nw > uint64_t(kWarpMaxWarps) ? uint64_t(kWarpMaxWarps) : nw;
    uint64_t st = nw > 0 ? avail / (nw * pitch) : 0;
    st = st > uint64_t(kWarpMaxStages) ? uint64_t(kWarpMaxStages) : st;
    if (nw >= 1 && st >= 2) {
      const uint32_t smem = warp_smem_bytes(uint32_t(pitch), uint32_t(nw), uint32_t(st));
      const int key = int(smem) * 32 + int(nw);
      if (dev->warp_key != key) {
        int blocks = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, softmax_warp_kernel, int(nw * 32), smem) !=
            cudaSuccess) {
          cudaGetLastError();  // a refused configuration: the block kernel below is used instead
          blocks = 0;
        }
        dev->warp_key = key;
        dev->warp_blocks = blocks;
      }
      if (dev->warp_blocks > 0 && smem <= limit) {
        const int64_t resident = int64_t(dev->sms) * dev->warp_blocks;
        const int64_t needed = (R + int64_t(nw) - 1) / int64_t(nw);  // CTAs that get at least one row
        const unsigned grid = unsigned(needed < resident ? needed : resident);
        softmax_warp_kernel<<<grid, unsigned(nw * 32), smem, stream>>>(X, Y, R, int(C), int(st));
        return (int)cudaGetLastError();
      }
    }
  }
  if (dev != nullptr && make_plan(*dev, R, C, plan)) {
    if (plan.csize == 1) {
      softmax_bulk_kernel<<<unsigned(plan.clusters), kThreads, plan.smem, stream>>>(X, Y, R, C, plan.slice,
                                                                                     plan.stages);
    } else {
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = unsigned(plan.csize);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(unsigned(plan.clusters * plan.csize));
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = plan.smem;
      cfg.stream = stream;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      const cudaError_t err = cudaLaunchKernelEx(&cfg, softmax_bulk_kernel, X, Y, R, C, plan.slice, plan.stages);
      if (err != cudaSuccess) return (int)err;
    }
  } else {
    const unsigned grid = unsigned(R < 65535 * 16 ? R : 65535 * 16);
    softmax_plain_kernel<<<grid, kThreads, 0, stream>>>(X, Y, R, C);
  }
  return (int)cudaGetLastError();
}
