#include "ptx_wrappers.cuh"
// rope (expert reference, sm_90a): rotary position embedding of bf16 Q [T, Hq, D] and K [T, Hkv, D] in the NeoX
// rotate-half layout. For token t at p = positions[t] and pair i < D / 2 (element i with element i + D / 2),
// angle = p * theta^(-2 i / D); out[i] = x[i] cos - x[i + D/2] sin, out[i + D/2] = x[i + D/2] cos + x[i] sin,
// written to Q_out and K_out in bf16; fp32 rotation, cos and sin from a float64 angle.
//
// Correct on every workload and its edge shapes on an H100 (2026-12-07, benchmarks/results/new_references_h100_80gb_hbm3.md); checked on the CPU (it builds for sm_90a with bulk.copy and mbarrier in
// the SASS, no spills, no local memory; tests/test_reference_memory_bound_model.py models its units, copies,
// thread indexing and cos/sin in NumPy against the task's reference). Its speed and executed features on an H100 are still
// to be measured. Target: >= the best baseline (eager, torch.compile) on every workload and >= 90 % of copy
// bandwidth on the prefill shapes.
//
// Memory-bound: Q and K are read once and Q_out and K_out written once; the trigonometry is per (token, pair),
// D / 2 values shared by all Hq + Hkv heads of the token (40 heads at Llama-3-8B: 1/80 of an evaluation per
// element), so it costs little even done carefully.
//
// Design
// - Work unit: a run of head-rows of one token. The token's Hq query heads and Hkv key heads are numbered
//   0 .. Hq + Hkv - 1 (queries first) and cut into runs of `hpu` heads; a run is at most two bulk copies
//   (cp.async.bulk, the copy engine): its query heads, contiguous in Q, and its key heads, contiguous in K,
//   landing back to back in the stage so that head-row h of the run sits at (h - h0) * D * 2 bytes whatever
//   tensor it came from. Both copies complete on the stage's mbarrier, armed with the run's bytes. hpu is the
//   whole token (Hq + Hkv) when there are at least two tokens per SM and its heads fit 32 KB, so a prefill
//   token is one unit of 10 KB (Llama-3-8B) to 18 KB (70B); at decode the tokens are cut finer, down to one
//   head, until every SM gets two units (T = 3, 48 heads: 144 units of one head). Units are numbered
//   token-major.
// - Persistent grid: as many CTAs as fit at once (occupancy query), CTA b takes units b, b + G, b + 2G, ...
//   (G = grid size), so the grid walks Q and K front to back. Each CTA owns a ring of S stages (S for about
//   64 KB in flight per CTA, 2 to 8 stages); thread 0 issues the copies.
// - cos and sin: a table of D / 2 (cos, sin) pairs per unit, in shared memory, double-buffered by unit parity.
//   Thread i < D / 2 owns pair i: it computes inv_freq_i = 2^(-(2 i / D) log2 theta) once, in float64, and per
//   unit angle = p * inv_freq_i in float64 (exact to ~1e-11 rad at p < 32768), reduced by the nearest multiple
//   of pi / 2 (Cody-Waite, pi / 2 in two doubles) and evaluated with Taylor polynomials to r^13 / r^12 on
//   [-pi/4, pi/4] (truncation < 1e-12), then rounded to fp32. No MUFU.SIN/COS (inaccurate for large angles)
//   and no sincosf (its huge-argument path keeps an array in local memory).
// - Per unit: the table threads first load the NEXT unit's position (a plain 4-byte load, consumed at the end
//   of this unit, so its latency hides behind this one); all threads wait on the stage's mbarrier; then thread
//   tid handles the 16-byte vector j = tid % (D / 16) of the first half of head-rows tid / (D / 16),
//   + 256 / (D / 16), ... of the run, with the matching vector of the second half (D bytes further): its 8 cos
//   and 8 sin values are the same for every head it visits (4 shared loads per unit), and each head costs two
//   16-byte shared loads, 32 FMA-class instructions and two 16-byte global stores (per store a warp writes four
//   128-byte runs of Q_out or K_out at D = 128, eight 64-byte runs at D = 64). Then the table threads fill the
//   other table with the next unit's cos and sin.
// - Stage release: ONE __syncthreads per unit: it proves the stage and this unit's table are no longer read
//   (thread 0 then refills the stage with the unit S ahead) and publishes the next unit's table. (Ordinary
//   shared reads, then after a barrier an async-proxy write: no proxy fence needed.)
//
// Requirements of the copy engine, checked on the host: Q, K, Q_out and K_out 16-byte aligned, D a multiple of
// 16 of at most 256 with D / 16 dividing 256 (the task has D = 64 and 128), and a head fits a stage. Otherwise
// the call falls back to a plain CUDA kernel (one CTA per token, scalar accesses, the same trigonometry).
// Remainders: the last run of a token is shorter (Hq + Hkv - (runs - 1) * hpu heads), runs may straddle Q and
// K (then two copies), and the last CTAs get one unit fewer. positions needs no alignment.

namespace {

constexpr int kThreads = 256;
constexpr int kMaxStages = 8;
constexpr int kMaxHalf = 128;                         // D <= 256
constexpr uint32_t kBytesInFlightPerCta = 64 * 1024;  // target size of one CTA's ring
constexpr uint32_t kMaxStageBytes = 32 * 1024;        // a unit holds at most this many bytes of heads

// Shared-memory layout (host and device agree; pitch = the unit's bytes rounded up to 128):
//   [0, S * pitch)   the ring: stage s at s * pitch
//   then float cos[2][kMaxHalf], float sin[2][kMaxHalf] (the tables, by unit parity), then kMaxStages mbarriers.
constexpr uint32_t kTableBytes = 4 * kMaxHalf * 4;
__host__ __device__ constexpr uint32_t unit_pitch(uint32_t unit_bytes) { return (unit_bytes + 127u) & ~127u; }
__host__ __device__ constexpr uint32_t smem_bytes(uint32_t pitch, uint32_t stages) {
  return stages * pitch + kTableBytes + 8 * kMaxStages;
}

// theta^(-2 i / D) in float64.
__device__ __forceinline__ double inverse_frequency(int i, int D, int64_t theta) {
  return exp2(-(double(2 * i) / double(D)) * log2(double(theta)));
}

// cos and sin of a float64 angle (|a| well below 2^40), each rounded to fp32: a = q pi/2 + r with q the nearest
// integer to a 2/pi, r = a - q pi/2 by two FMAs with pi/2 split in two doubles (the product's error stays below
// 1e-12 rad for q < 2^30), then Taylor polynomials on |r| <= pi/4 and the quadrant q mod 4.
__device__ __forceinline__ void cos_sin(double a, float& c_out, float& s_out) {
  constexpr double kTwoOverPi = 0.63661977236758134308;
  constexpr double kPiOver2Hi = 1.5707963267948965580e+00;  // the double nearest pi / 2
  constexpr double kPiOver2Lo = 6.1232339957367658e-17;     // pi / 2 minus kPiOver2Hi
  const double q = rint(a * kTwoOverPi);
  double r = fma(-q, kPiOver2Hi, a);
  r = fma(-q, kPiOver2Lo, r);
  const double r2 = r * r;
  // sin r = r - r^3/3! + ... + r^13/13!; cos r = 1 - r^2/2! + ... + r^12/12! (Horner in r^2).
  double sn = 1.0 / 6227020800.0;
  sn = fma(sn, r2, -1.0 / 39916800.0);
  sn = fma(sn, r2, 1.0 / 362880.0);
  sn = fma(sn, r2, -1.0 / 5040.0);
  sn = fma(sn, r2, 1.0 / 120.0);
  sn = fma(sn, r2, -1.0 / 6.0);
  sn = fma(sn * r2, r, r);
  double cs = 1.0 / 479001600.0;
  cs = fma(cs, r2, -1.0 / 3628800.0);
  cs = fma(cs, r2, 1.0 / 40320.0);
  cs = fma(cs, r2, -1.0 / 720.0);
  cs = fma(cs, r2, 1.0 / 24.0);
  cs = fma(cs, r2, -0.5);
  cs = fma(cs, r2, 1.0);
  const int quadrant = int(int64_t(q) & 3);  // a = r + quadrant * pi/2 (mod 2 pi)
  const double c = quadrant == 0 ? cs : quadrant == 1 ? -sn : quadrant == 2 ? -cs : sn;
  const double s = quadrant == 0 ? sn : quadrant == 1 ? cs : quadrant == 2 ? -sn : -cs;
  c_out = float(c);
  s_out = float(s);
}

// Eight pairs rotated: a holds elements 8j .. 8j+7 of the first half, b the same of the second half, c and s
// their cos and sin. oa = a cos - b sin, ob = b cos + a sin, rounded to bf16.
__device__ __forceinline__ void rotate8(const uint4& a, const uint4& b, const float (&c)[8], const float (&s)[8],
                                        uint4& oa, uint4& ob) {
  const uint32_t as[4] = {a.x, a.y, a.z, a.w}, bs[4] = {b.x, b.y, b.z, b.w};
  uint32_t o1[4], o2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a0 = ptx::bf16_lo(as[i]), a1 = ptx::bf16_hi(as[i]);
    const float b0 = ptx::bf16_lo(bs[i]), b1 = ptx::bf16_hi(bs[i]);
    const float c0 = c[2 * i], c1 = c[2 * i + 1], s0 = s[2 * i], s1 = s[2 * i + 1];
    o1[i] = ptx::pack_bf16x2(fmaf(a0, c0, -b0 * s0), fmaf(a1, c1, -b1 * s1));
    o2[i] = ptx::pack_bf16x2(fmaf(b0, c0, a0 * s0), fmaf(b1, c1, a1 * s1));
  }
  oa = make_uint4(o1[0], o1[1], o1[2], o1[3]);
  ob = make_uint4(o2[0], o2[1], o2[2], o2[3]);
}

__global__ void __launch_bounds__(kThreads)
rope_bulk_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                 const int32_t* __restrict__ positions, __nv_bfloat16* __restrict__ Q_out,
                 __nv_bfloat16* __restrict__ K_out, int64_t T, int Hq, int Hkv, int D, int64_t theta,
                 int hpu, int runs, int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
  ptx::RingState at;  // the consumers' place: local unit k is in stage k % stages, of parity (k / stages) & 1
  const int H = Hq + Hkv, half = D / 2;
  const uint32_t head_bytes = uint32_t(D) * 2u;
  const uint32_t pitch = unit_pitch(uint32_t(hpu) * head_bytes);
  uint8_t* const ring = smem;
  float* const cos_tab = reinterpret_cast<float*>(smem + uint32_t(stages) * pitch);  // [2][kMaxHalf]
  float* const sin_tab = cos_tab + 2 * kMaxHalf;                                      // [2][kMaxHalf]
  uint64_t* const full = reinterpret_cast<uint64_t*>(sin_tab + 2 * kMaxHalf);

  const int tid = threadIdx.x;
  const int64_t units = T * runs;
  const int64_t grid = gridDim.x;
  const int64_t first_unit = blockIdx.x;
  // Units first_unit, first_unit + grid, ... below `units`.
  const int64_t my_units = first_unit < units ? (units - first_unit + grid - 1) / grid : 0;

  // Local unit k: its token, its first head-row and its number of head-rows.
  auto locate = [&](int64_t k, int64_t& t, int& h0, int& nh) {
    const int64_t unit = first_unit + k * grid;
    t = unit / runs;
    h0 = int(unit - t * runs) * hpu;
    nh = H - h0 < hpu ? H - h0 : hpu;
  };

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbar_init(&full[s], 1);  // one arrival (the producer's) per phase
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the initialised barriers are visible to every thread (and to the copy engine)

  // Producer step for local unit k into stage s: arm the barrier with the run's bytes, then one bulk copy of its
  // query heads (if any) and one of its key heads (if any), back to back in the stage.
  auto issue_unit = [&](int64_t k, int s) {
    int64_t t;
    int h0, nh;
    locate(k, t, h0, nh);
    uint8_t* const stage = ring + uint32_t(s) * pitch;
    ptx::mbar_arrive_expect_tx(&full[s], uint32_t(nh) * head_bytes);
    const int q_end = h0 + nh < Hq ? h0 + nh : Hq;  // query heads [h0, q_end)
    if (h0 < Hq) ptx::bulk_load(stage, Q + (t * Hq + h0) * D, uint32_t(q_end - h0) * head_bytes, &full[s]);
    const int k_begin = h0 > Hq ? h0 : Hq;          // key heads [k_begin, h0 + nh), numbered after the queries
    if (h0 + nh > Hq)
      ptx::bulk_load(stage + uint32_t(k_begin - h0) * head_bytes, K + (t * Hkv + (k_begin - Hq)) * D,
                     uint32_t(h0 + nh - k_begin) * head_bytes, &full[s]);
  };
  if (tid == 0) {
    const int prologue = my_units < stages ? int(my_units) : stages;
    for (int s = 0; s < prologue; ++s) issue_unit(s, s);  // fill the ring: stage s gets local unit s
  }

  // Table threads: pair tid's inverse frequency, and the first unit's cos and sin into table 0.
  const bool table_thread = tid < half;
  const double inv_freq = table_thread ? inverse_frequency(tid, D, theta) : 0.0;
  auto fill_table = [&](int parity, int32_t position) {
    cos_sin(double(position) * inv_freq, cos_tab[parity * kMaxHalf + tid], sin_tab[parity * kMaxHalf + tid]);
  };
  if (table_thread && my_units > 0) {
    int64_t t;
    int h0, nh;
    locate(0, t, h0, nh);
    fill_table(0, positions[t]);
  }
  __syncthreads();  // table 0 is visible

  const int vecs = D / 16;                 // 16-byte vectors per half head (4 or 8): divides kThreads
  const int j = tid % vecs;                // this thread's vector in every half head it visits
  const int first_head = tid / vecs, head_step = kThreads / vecs;
  for (int64_t k = 0; k < my_units; ++k) {
    const int parity = int(k & 1);
    int64_t t;
    int h0, nh;
    locate(k, t, h0, nh);
    const bool more = k + 1 < my_units;
    int32_t next_position = 0;
    if (table_thread && more) {  // issued now, used after this unit's rotation
      int64_t t1;
      int h1, n1;
      locate(k + 1, t1, h1, n1);
      next_position = positions[t1];
    }
    const uint8_t* const stage = ring + uint32_t(at.stage) * pitch;
    ptx::mbar_wait(&full[at.stage], at.phase);  // the run's heads have landed

    if (first_head < nh) {
      float c[8], s[8];
      const float4* const c4 = reinterpret_cast<const float4*>(cos_tab + parity * kMaxHalf + 8 * j);
      const float4* const s4 = reinterpret_cast<const float4*>(sin_tab + parity * kMaxHalf + 8 * j);
      const float4 ca = c4[0], cb = c4[1], sa = s4[0], sb = s4[1];
      c[0] = ca.x; c[1] = ca.y; c[2] = ca.z; c[3] = ca.w; c[4] = cb.x; c[5] = cb.y; c[6] = cb.z; c[7] = cb.w;
      s[0] = sa.x; s[1] = sa.y; s[2] = sa.z; s[3] = sa.w; s[4] = sb.x; s[5] = sb.y; s[6] = sb.z; s[7] = sb.w;
#pragma unroll 2
      for (int hl = first_head; hl < nh; hl += head_step) {
        const uint8_t* const head = stage + uint32_t(hl) * head_bytes;
        const uint4 a = *reinterpret_cast<const uint4*>(head + 16 * j);
        const uint4 b = *reinterpret_cast<const uint4*>(head + D + 16 * j);  // element half + 8j: D bytes on
        uint4 oa, ob;
        rotate8(a, b, c, s, oa, ob);
        const int h = h0 + hl;
        __nv_bfloat16* const out = h < Hq ? Q_out + (t * Hq + h) * D : K_out + (t * Hkv + (h - Hq)) * D;
        *reinterpret_cast<uint4*>(out + 8 * j) = oa;
        *reinterpret_cast<uint4*>(out + half + 8 * j) = ob;
      }
    }
    if (table_thread && more) fill_table(parity ^ 1, next_position);  // the next unit's table

    __syncthreads();  // the stage and table `parity` are no longer read; table `parity ^ 1` is visible
    if (tid == 0 && k + stages < my_units) issue_unit(k + stages, at.stage);  // refill it S units ahead
    at.advance(stages);
  }
}

// Fallback for what the copy engine cannot take (misaligned pointers, an unusual D): one CTA per token, the
// token's table in shared memory, then every pair of every head with scalar accesses.
__global__ void __launch_bounds__(kThreads)
rope_plain_kernel(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ K,
                  const int32_t* __restrict__ positions, __nv_bfloat16* __restrict__ Q_out,
                  __nv_bfloat16* __restrict__ K_out, int64_t T, int64_t Hq, int64_t Hkv, int D, int64_t theta) {
  __shared__ float cos_tab[kMaxHalf], sin_tab[kMaxHalf];
  const int half = D / 2;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const double p = double(positions[t]);
    for (int i = threadIdx.x; i < half; i += kThreads)
      cos_sin(p * inverse_frequency(i, D, theta), cos_tab[i], sin_tab[i]);
    __syncthreads();
    for (int64_t e = threadIdx.x; e < (Hq + Hkv) * half; e += kThreads) {
      const int64_t h = e / half;
      const int i = int(e - h * half);
      const __nv_bfloat16* const in = h < Hq ? Q + (t * Hq + h) * D : K + (t * Hkv + (h - Hq)) * D;
      __nv_bfloat16* const out = h < Hq ? Q_out + (t * Hq + h) * D : K_out + (t * Hkv + (h - Hq)) * D;
      const float a = __bfloat162float(in[i]), b = __bfloat162float(in[i + half]);
      out[i] = __float2bfloat16(fmaf(a, cos_tab[i], -b * sin_tab[i]));
      out[i + half] = __float2bfloat16(fmaf(b, cos_tab[i], a * sin_tab[i]));
    }
    __syncthreads();  // the table is rewritten by the next token
  }
}

// Per-device facts, queried once (the entry point is called many times; host time between the caller's start
// event and the launch counts in the measurement). Not thread-safe, like the harness.
struct DeviceFacts {
  bool ready = false;
  int sms = 0;
  int smem_optin = 0;
  int cached_smem = -1;   // occupancy of the bulk kernel for this dynamic smem size ...
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
        cudaFuncSetAttribute(rope_bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, f.smem_optin) !=
            cudaSuccess) {
      cudaGetLastError();  // clear it: the fallback kernel is launched instead
      return nullptr;
    }
    f.ready = true;
  }
  return &f;
}

}  // namespace

extern "C" int rope(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const int32_t* __restrict__ positions,
    __nv_bfloat16* __restrict__ Q_out,
    __nv_bfloat16* __restrict__ K_out,
    int64_t T,
    int64_t Hq,
    int64_t Hkv,
    int64_t D,
    int64_t theta,
    cudaStream_t stream) {
  if (T <= 0 || Hq <= 0 || Hkv <= 0) return (int)cudaGetLastError();
  if (D <= 0 || D % 2 != 0 || D > 2 * kMaxHalf) return (int)cudaErrorInvalidValue;

  const bool aligned = (reinterpret_cast<uintptr_t>(Q) % 16 == 0) && (reinterpret_cast<uintptr_t>(K) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(Q_out) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(K_out) % 16 == 0) && D % 16 == 0 && kThreads % (D / 16) == 0 &&
                       Hq + Hkv < (int64_t(1) << 24);
  DeviceFacts* dev = aligned ? device_facts() : nullptr;
  if (dev != nullptr) {
    // Heads per unit: the whole token, unless a token is more than a stage holds or there are fewer than two
    // units per SM; then equal runs of the token's head-rows.
    const int64_t H = Hq + Hkv;
    const int64_t head_bytes = D * 2;
    const int64_t most = int64_t(kMaxStageBytes) / head_bytes;
    int64_t runs = (H + most - 1) / most;
    const int64_t wanted = (2 * int64_t(dev->sms) + T - 1) / T;
    if (runs < wanted) runs = wanted < H ? wanted : H;
    const int64_t hpu = (H + runs - 1) / runs;
    runs = (H + hpu - 1) / hpu;  // every run holds heads; the last one the remainder
    const int64_t units = T * runs;
    const uint32_t pitch = unit_pitch(uint32_t(hpu * head_bytes));
    uint32_t stages = kBytesInFlightPerCta / pitch;
    stages = stages < 2 ? 2 : (stages > kMaxStages ? kMaxStages : stages);
    const uint32_t smem = smem_bytes(pitch, stages);
    if (smem <= uint32_t(dev->smem_optin) && units < (int64_t(1) << 40)) {
      if (dev->cached_smem != int(smem)) {
        int blocks = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, rope_bulk_kernel, kThreads, smem) !=
            cudaSuccess) {
          cudaGetLastError();  // clear it: the fallback kernel is launched instead
          blocks = 0;
        }
        dev->cached_smem = int(smem);
        dev->cached_blocks = blocks;
      }
      if (dev->cached_blocks > 0) {
        const int64_t resident = int64_t(dev->sms) * dev->cached_blocks;
        const unsigned grid = unsigned(units < resident ? units : resident);
        rope_bulk_kernel<<<grid, kThreads, smem, stream>>>(Q, K, positions, Q_out, K_out, T, int(Hq), int(Hkv),
                                                           int(D), theta, int(hpu), int(runs), int(stages));
        return (int)cudaGetLastError();
      }
    }
  }
  const unsigned grid = unsigned(T < 65535 * 16 ? T : 65535 * 16);
  rope_plain_kernel<<<grid, kThreads, 0, stream>>>(Q, K, positions, Q_out, K_out, T, Hq, Hkv, int(D), theta);
  return (int)cudaGetLastError();
}
