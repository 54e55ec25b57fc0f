#include "ptx_wrappers.cuh"
// softmax (expert reference, sm_90a): Y[r, :] = exp(X[r, :] - max) / sum(exp(X[r, :] - max)) for every row of a
// bf16 X [R, C], fp32 arithmetic, bf16 Y.
//
// Memory-bound: the minimum traffic is one read of X and one write of Y, and that is only possible if
// a row stays on chip between the reduction (max, sum) and the normalisation. The kernel therefore
// keeps every row in shared memory, and when a row is too long for one SM (vocabulary-sized rows:
// 151936 bf16 = 297 KB > 227 KB), it splits the row over a CLUSTER of CTAs, each holding one slice of
// it, and combines their partial results through distributed shared memory (DSMEM).
//
// Design
// - Work unit: one row, processed by a cluster of n CTAs (n = 1, 2, 4 or 8, chosen on the host).
//   CTA `rank` of the cluster owns columns [rank * slice, min(C, (rank + 1) * slice)) of every row the
//   cluster processes; clusters are persistent and take rows c, c + G, c + 2G, ... (G clusters).
// - Each CTA streams its slices through a ring of S stages with ONE bulk copy (cp.async.bulk, copy
//   engine) per slice, completing on the stage's mbarrier (transaction count = slice bytes). Thread 0
//   is the producer; all 512 threads consume. The ring keeps S - 1 slices loading while one is being
//   computed: for C = 32768 (64 KB rows, n = 1) that is 3 stages = 192 KB, one CTA per SM with 128 KB
//   requested ahead; for short rows (<= 16 KB) the ring holds ~64 KB and several CTAs share an SM.
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
// penalty per doubling of n for the exchange. Requirements of the copy engine, checked on the host:
// X and Y 16-byte aligned, C a multiple of 8 (the task guarantees 64). Otherwise, or when no plan fits,
// the call falls back to a plain CUDA kernel that is correct for any size and alignment.
// Remainders: the last CTA of a cluster gets a shorter slice (C - (n-1) * slice elements, still a
// multiple of 8, i.e. 16 bytes); the last clusters get one row fewer than the others.

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxStages = 8;
constexpr int kMaxCluster = 8;                        // portable cluster size limit
constexpr uint32_t kSmallSlice = 16 * 1024;           // slices up to this size: several CTAs per SM
constexpr uint32_t kBytesInFlightPerCta = 64 * 1024;  // ring size aimed at for small slices
constexpr float kLog2e = 1.4426950408889634f;

// Shared-memory layout (host and device agree):
//   [0, S * pitch)  the ring (pitch = slice bytes rounded up to 128)
//   full[kMaxStages] mbarriers, xbar[2] exchange mbarriers, xpart[2][kMaxCluster] float2, red[kWarps] float2.
constexpr uint32_t kTailBytes = 8 * kMaxStages + 8 * 2 + 8 * 2 * kMaxCluster + 8 * kWarps;
__host__ __device__ constexpr uint32_t slice_pitch(uint32_t slice_bytes) { return (slice_bytes + 127u) & ~127u; }
__host__ __device__ constexpr uint32_t smem_bytes(uint32_t pitch, uint32_t stages) { return stages * pitch + kTailBytes; }

__device__ __forceinline__ float fast_exp2(float x) {  // MUFU.EX2; 2^-large -> +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Like ptx::mbar_wait, but with acquire at CLUSTER scope: the phase is completed by other CTAs'
// mbarrier.arrive.release.cluster (ptx::mbar_arrive_cluster), and what they wrote into this CTA's
// shared memory before arriving must be visible after the wait.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n"
      ::"r"(ptx::smem_u32(bar)), "r"(parity) : "memory");
}

// st.async: store two floats into a peer CTA's shared memory (a shared::cluster address from mapa) and
// complete 8 bytes of transactions on the peer's mbarrier (also a shared::cluster address) when they have
// landed. No fence and no arrive are needed on the sending side; the receiver's barrier phase completes
// when its own expect_tx arrival and all announced bytes are in.
__device__ __forceinline__ void st_async_v2_f32(uint32_t remote_addr, float a, float b, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               ::"r"(remote_addr), "f"(a), "f"(b), "r"(remote_bar) : "memory");
}

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
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
  float t = (m == -INFINITY) ? 0.f : s * fast_exp2((m - M) * kLog2e);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
  return make_float2(M, t);
}

__global__ void __launch_bounds__(kThreads, 1)
softmax_bulk_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R, int64_t C,
                    int slice_elems, int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
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

  int s = 0;           // k % stages
  uint32_t phase = 0;  // (k / stages) & 1
  for (int64_t k = 0; k < my_rows; ++k) {
    const int64_t row = cluster + k * nclusters;
    const uint4* const x4 = reinterpret_cast<const uint4*>(ring + uint32_t(s) * pitch);
    ptx::mbar_wait(&full[s], phase);

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
        sum += fast_exp2(fmaf(bf16_lo(w[i]), kLog2e, -mL)) + fast_exp2(fmaf(bf16_hi(w[i]), kLog2e, -mL));
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
        st_async_v2_f32(ptx::map_to_rank(&slots[rank], p), part.x, part.y, ptx::map_to_rank(&xbar[b], p));
      }
      mbar_wait_cluster(&xbar[b], uint32_t(k >> 1) & 1u);  // phase (k >> 1) of xbar[b]
      const float2 q = lane < int(csize) ? slots[lane] : make_float2(-INFINITY, 0.f);
      part = warp_merge(q.x, q.y);
    }
    const float bias = fmaf(part.x, kLog2e, fast_log2(part.y));  // M log2e + log2 S; S >= 1

    // B: y = 2^(x log2e - bias) = exp(x - M) / S; 16-byte stores, 512 contiguous bytes per warp.
    uint4* const y4 = reinterpret_cast<uint4*>(Y + row * C + col0);
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) {
      const uint4 r = x4[v];
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
      uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[i] = ptx::pack_bf16x2(fast_exp2(fmaf(bf16_lo(w[i]), kLog2e, -bias)),
                                fast_exp2(fmaf(bf16_hi(w[i]), kLog2e, -bias)));
      y4[v] = make_uint4(o[0], o[1], o[2], o[3]);
    }

    __syncthreads();  // (B) stage s and `red` are no longer read
    if (tid == 0 && k + stages < my_rows) issue_slice(k + stages, s);
    if (++s == stages) {
      s = 0;
      phase ^= 1;
    }
  }
  if (csize > 1) ptx::cluster_sync();  // no CTA exits while a peer may still write its slots
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
      for (int64_t i = threadIdx.x; i < C; i += kThreads) sum += fast_exp2((__bfloat162float(x[i]) - m) * kLog2e);
    float2 part = warp_merge(m, sum);
    if (lane == 0) red[warp] = part;
    __syncthreads();
    part = lane < kWarps ? red[lane] : make_float2(-INFINITY, 0.f);
    part = warp_merge(part.x, part.y);
    const float inv = 1.f / part.y;
    for (int64_t i = threadIdx.x; i < C; i += kThreads)
      Y[row * C + i] = __float2bfloat16(fast_exp2((__bfloat162float(x[i]) - part.x) * kLog2e) * inv);
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
  int log2n = 0;
  for (int csize = 1; csize <= kMaxCluster; csize *= 2, ++log2n) {
    int64_t slice = C;
    if (csize > 1) {
      slice = ((C + csize - 1) / csize + 63) / 64 * 64;  // 128-byte aligned slices
      if ((csize - 1) * slice >= C) continue;            // every CTA must own columns
    }
    const uint64_t pitch = (uint64_t(slice) * 2 + 127) / 128 * 128;
    if (pitch * 2 + kTailBytes > limit) continue;  // at least two stages
    uint64_t stages = (limit - kTailBytes) / pitch;
    if (stages > kMaxStages) stages = kMaxStages;
    if (pitch <= kSmallSlice) {
      const uint64_t want = kBytesInFlightPerCta / pitch;
      if (stages > want) stages = want < 2 ? 2 : want;
    }
    const uint32_t smem = smem_bytes(uint32_t(pitch), uint32_t(stages));
    const int64_t units = resident_units(f, csize, smem);
    if (units <= 0) continue;
    const int64_t used = R < units ? R : units;
    const int64_t waves = (R + used - 1) / used;
    const double cost = double(waves * used) * (1.0 + 0.03 * log2n);
    if (best.csize == 0 || cost < best_cost) {
      best_cost = cost;
      best = {csize, int(slice), int(stages), smem, used};
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
