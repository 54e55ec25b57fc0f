// attention_bwd, expert reference for sm_90a (H100/H200): dQ, dK, dV of O = softmax(Q·Kᵀ / sqrt(D), causal mask
// optional) · V from the given O, dO and the forward's natural-log LSE, bf16 [B, H, S, D], D = 64, 128 or 256,
// any S >= 1.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, against the fastest of cuDNN's
// and FlashAttention-2's backward alone, timed in the same run): correct on every workload of the task, held-out
// ones included, with wgmma, TMA and mbarrier executed (ncu: wgmma did 1.40 x the task's FLOPs, the recomputation
// below), and at 78 lengths around its tile edges (D 64/128/256, causal or not). Speed: hd128-s4096 2.95 ms =
// 465 TFLOP/s of the task's work against cuDNN's 2.44 ms (82.5 %); hd128-s2048 causal 92.9 %; hd64-s2048 78.1 %;
// hd64-s577 86.2 %; hd256-s2048 causal 101.1 %: behind cuDNN but at D = 256, as the design predicted (the last
// paragraph says why). The order of its steps is also checked on the CPU by a NumPy model of the same tiling
// (tests/test_reference_attention_bwd_model.py).
//
// This kernel takes no workspace, so there is no fp32 dQ accumulator for the key-tile CTAs to add into
// (FlashAttention-2/3's atomics). Instead three kernels on the given stream, each writing its outputs once:
//   1. delta:  delta_i = rowsum(dO_i ⊙ O_i) in fp32, parked in the dQ output (4 bytes of a 2·D-byte row);
//   2. dK, dV: one CTA per (key tile, batch x head) walks the query tiles: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (wgmma,
//              both operands from shared memory), Pᵀ = 2^(Sᵀ·scale·log2 e − LSE·log2 e), dSᵀ = Pᵀ ⊙ (dPᵀ − delta),
//              then dV += Pᵀ·dO and dK += dSᵀ·Q with Pᵀ and dSᵀ packed to bf16 as the register A operand and
//              dO, Q read MN-major from the same shared tiles;
//   3. dQ:     one CTA per (128 queries, batch x head) walks the key tiles: S = Q·Kᵀ, dP = dO·Vᵀ, the same P and
//              dS, dQ += dS·K (K MN-major). It computes its rows' delta itself (from O and dO, once), since it
//              overwrites the parked values.
// So S and dP are computed twice (7 GEMMs of the 5 a fused kernel needs, 1.4x the tensor work): the price of no
// workspace and no atomics. Both main kernels are warp-specialised like the forward: warpgroup 0 produces (one
// thread issues the TMA loads into rings of stages with full/empty mbarriers; in the dK/dV kernel a second warp
// copies each query tile's LSE·log2 e and delta into a small ring of its own, whose full barrier counts its 32
// lanes), warpgroups 1 and 2 consume. setmaxnreg 24 / 240: 128 x (24 + 2 x 240) = 64512 = 384 x 168, exactly
// the registers the CTA is launched with (more would leave the consumers' increase waiting forever); the
// producers fit in 24 with their slab loops rolled, the consumers use up to R232 (D = 128 and 256). Per step a
// consumer issues its two score GEMMs back to back, turns the first into P while the second runs, and issues
// the first accumulation (dV) before it forms dS.
//
// Tiles (shared memory <= 227 KB, one CTA per SM):
//   dK/dV: 64 queries a step; D = 64, 128: 128 keys a CTA, each consumer warpgroup owns 64 keys and all D
//          columns of their dK and dV (2 x D/2 fp32 registers); D = 256: 64 keys a CTA and each warpgroup owns
//          half the columns of dK and dV (2 x 64 registers: 2 x 128 would not fit), both computing the same Sᵀ
//          and dPᵀ (so at D = 256 the three kernels do 9 GEMMs' work of 5, not 7). Stages of Q + dO: 4 (D = 64,
//          96 KB), 3 (D = 128, 160 KB), 2 (D = 256, 192 KB).
//   dQ:    128 queries a CTA (64 a warpgroup), keys 64 a step (32 at D = 256: dQ alone is 128 registers);
//          stages of K + V: 4 (D = 64, 96 KB), 3 (D = 128, 160 KB), 2 (D = 256, 192 KB).
//
// Masking and partial tiles: all tensors are 3-D tensor maps [B*H][S][D], so tiles past S read zeros from the
// same head and stores clip rows >= S. A query row >= S gets LSE = +inf (P = 0) and delta = 0, which removes it
// from dK and dV; keys >= S are masked to P = 0 in the dQ kernel's last tile. With the causal mask the dK/dV
// kernel starts at the query tile holding its first key and masks only tiles that cross a warpgroup's diagonal;
// the dQ kernel stops at its last visible key as the forward does (a warpgroup whose rows end earlier hands the
// rest back unread). Causal grids start with the heaviest CTAs (dK/dV: the first key tiles; dQ: the last query
// tiles). No TMA box lies wholly past S, loads or stores.
//
// What ncu showed at hd128-s4096 (the evaluator's profile of the timed workload): HGMMA.64x64x16 (Sᵀ, dPᵀ and the
// dQ kernel's S, dP) and HGMMA.64x128x16 with a register A operand (dV, dK, dQ), 1.40 x the task's FLOPs in all;
// UTMALDG.3D for Q, K, V, dO; SYNCS mbarrier traffic. The 2.95 ms are 650 TFLOP/s of tensor work actually done
// (1.92e12 FLOPs), more than cuDNN's 563 on the task's 1.37e12: the recomputation is the gap (the same rate on
// 1.0 x the work would take about 2.1 ms). Behind that rate: one 64-query step at a time per warpgroup (a step's
// exponentials do not overlap the previous step's accumulations; only the other warpgroup fills the gap) and no
// persistent scheduling. The next step: an fp32 dQ workspace (a candidate may allocate one on its stream) that the
// dK/dV kernel adds into with red.global.add, which removes the dQ kernel's S and dP at D = 64 and 128; prepared as
// benchmarks/variants/attention_bwd.dq_workspace.cu, which builds but is not yet timed. Issuing the score GEMMs one
// step ahead was timed and gains at most 2.3 points (kernel_variants_h200.md).
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int THREADS = 384;
constexpr int ROWS = 64;  // rows of a consumer warpgroup's wgmma tile (M)
constexpr float LOG2E = 1.4426950408889634f;

// ================================================================================================
// 1. delta = rowsum(dO ⊙ O), D / 8 lanes a row, 16 bytes of each tensor a lane.
// ================================================================================================

__device__ __forceinline__ float dot8_bf16(uint4 a, uint4 b) {
  const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    sum = fmaf(ptx::bf16_lo(x[e]), ptx::bf16_lo(y[e]), sum);
    sum = fmaf(ptx::bf16_hi(x[e]), ptx::bf16_hi(y[e]), sum);
  }
  return sum;
}

template <int D>
__global__ void __launch_bounds__(256) attention_bwd_delta(const __nv_bfloat16* __restrict__ O,
                                                           const __nv_bfloat16* __restrict__ dO,
                                                           float* __restrict__ delta, int64_t rows) {
  constexpr int LANES = D / 8;  // 8, 16 or 32: a power of two dividing the warp
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (256 / LANES) + threadIdx.x / LANES;
  const int part = threadIdx.x % LANES;
  float sum = 0.0f;
  if (row < rows) {
    const uint4 o = *reinterpret_cast<const uint4*>(O + row * D + part * 8);
    const uint4 g = *reinterpret_cast<const uint4*>(dO + row * D + part * 8);
    sum = dot8_bf16(o, g);
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (row < rows && part == 0) delta[row] = sum;
}

// ================================================================================================
// Steps shared by both main kernels
// ================================================================================================

// C (+)= A · Bᵀ over D: A rows from `a` (64 rows of 64-column slabs `a_slab` elements apart), B rows from `b`
// (N rows, slabs `b_slab` apart), both K-major 128-byte-swizzled tiles (slabs a multiple of 8 elements apart).
// Issued and committed, not waited for.
template <int N, int D>
__device__ __forceinline__ void issue_scores(float (&acc)[N / 2], const __nv_bfloat16* a, int a_slab,
                                             const __nv_bfloat16* b, int b_slab) {
  // One descriptor per operand, stepped by constants (the address field is bytes >> 4): at D = 256 a
  // descriptor per slab would hold 16 registers more across the loop.
  const uint64_t a_desc = ptx::wgmma_desc_k_sw128(a), b_desc = ptx::wgmma_desc_k_sw128(b);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)  // slab kk / 4, +32 bytes (+2) per 16 columns inside it
    ptx::wgmma_bf16<N>(acc, a_desc + (kk / 4) * (a_slab / 8) + 2 * (kk % 4),
                       b_desc + (kk / 4) * (b_slab / 8) + 2 * (kk % 4), kk > 0 ? 1 : 0);
  ptx::wgmma_commit();
}

// C += A · B with A (64 x 16·STEPS, bf16) from registers and B MN-major: `b` holds 16·STEPS K-rows of 64-column
// slabs `slab_bytes` apart, N columns from the first. Issued and committed.
template <int N, int STEPS>
__device__ __forceinline__ void issue_accumulate(float (&acc)[N / 2], const uint32_t (&a)[STEPS][4],
                                                 const __nv_bfloat16* b, uint32_t slab_bytes) {
  const uint64_t b_desc = ptx::wgmma_desc_mn_sw128(b, slab_bytes);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < STEPS; ++k)  // 16 K-rows = 2048 bytes = +128 in the descriptor
    ptx::wgmma_bf16_rs<N, 1>(acc, a[k], b_desc + 128 * k, 1);
  ptx::wgmma_commit();
}

// An accumulator to bf16 A fragments: registers 8k..8k+7 are k16 block k (the layouts coincide).
template <int N>
__device__ __forceinline__ void pack_a(const float (&acc)[N], uint32_t (&a)[N / 8][4]) {
#pragma unroll
  for (int k = 0; k < N / 8; ++k)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[k][r] = ptx::pack_bf16x2(acc[8 * k + 2 * r], acc[8 * k + 2 * r + 1]);
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
}

// A 64-row x `cols` accumulator, times `scale`, as bf16 into 64 x 64 staging boxes (128-byte swizzle): column c
// lands in box c / 64, each box `box_stride` elements after the previous.
template <int N>
__device__ __forceinline__ void stage_rows(const float (&acc)[N], float scale, __nv_bfloat16* staging,
                                           int box_stride) {
  uint8_t* base = reinterpret_cast<uint8_t*>(staging);
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const int row = ptx::wgmma_acc_row(i), col = ptx::wgmma_acc_col(i);
    *reinterpret_cast<__nv_bfloat162*>(base + (col / 64) * box_stride * 2 + ptx::sw128_offset(row, (col % 64) * 2)) =
        __floats2bfloat162_rn(acc[i] * scale, acc[i + 1] * scale);
  }
}

// ================================================================================================
// 2. dK and dV: one CTA per (key tile, head), walking the query tiles
// ================================================================================================

template <int D>
struct KeyConfig {
  static constexpr bool SPLIT = D == 256;             // the two warpgroups share the keys, split the columns
  static constexpr int BN = SPLIT ? 64 : 128;          // keys per CTA
  static constexpr int BQ = 64;                        // queries per step
  static constexpr int COLS = SPLIT ? D / 2 : D;       // dK / dV columns per warpgroup
  static constexpr int STAGES = D == 64 ? 4 : (D == 128 ? 3 : 2);
  static constexpr int SLABS = D / 64;
  static constexpr uint32_t KV_BYTES = BN * D * 2;     // the K tile, or the V tile
  static constexpr uint32_t STEP_BYTES = BQ * D * 2;   // one Q tile, or one dO tile
};

// K, V: [slab][BN rows][64]; Q, dO stages: [slab][64 rows][64]; all 1024-byte aligned, 128-byte swizzled.
template <int D>
struct KeyShared {
  using C = KeyConfig<D>;
  __nv_bfloat16 k[C::BN * D];
  __nv_bfloat16 v[C::BN * D];
  __nv_bfloat16 q[C::STAGES][C::BQ * D];
  __nv_bfloat16 dout[C::STAGES][C::BQ * D];
  float lse2[C::STAGES][C::BQ];    // LSE · log2 e of the step's queries (+inf past S)
  float delta[C::STAGES][C::BQ];   // delta of the step's queries (0 past S)
  ptx::RingBarriers<C::STAGES> qdo_ring;  // full: producer arrive + TMA bytes of Q and dO
  ptx::RingBarriers<C::STAGES> row_ring;  // full: the 32 lanes of the row warp (initialised by hand)
  uint64_t kv_full;
};

// Where a dK/dV CTA works: head, first key, first query tile and how many it walks.
struct KeyWork {
  int head, k0, q_first, q_tiles;
};

__device__ __forceinline__ KeyWork key_work(int S, int causal, int heads, int bn, int bq) {
  const int k_tiles = (S + bn - 1) / bn;
  const int t = static_cast<int>(blockIdx.x);
  KeyWork w;
  int kt;
  if (causal) {  // the first key tiles see the most queries: they go first, across all heads
    w.head = t % heads;
    kt = t / heads;
  } else {  // a head's key tiles side by side: they share its Q and dO in L2
    w.head = t / k_tiles;
    kt = t % k_tiles;
  }
  w.k0 = kt * bn;
  w.q_first = causal ? w.k0 / bq : 0;  // queries before the first key see none of the tile's keys
  w.q_tiles = (S + bq - 1) / bq - w.q_first;
  return w;
}

// Producer thread: K and V once, then Q and dO of every query tile into the ring.
template <int D>
__device__ __forceinline__ void key_producer(KeyShared<D>& s, const CUtensorMap* map_k, const CUtensorMap* map_v,
                                             const CUtensorMap* map_q, const CUtensorMap* map_do, const KeyWork& w) {
  using C = KeyConfig<D>;
  ptx::tma_prefetch_map(map_q);
  ptx::tma_prefetch_map(map_do);
  ptx::mbar_arrive_expect_tx(&s.kv_full, 2 * C::KV_BYTES);
#pragma unroll
  for (int slab = 0; slab < C::SLABS; ++slab) {
    ptx::tma_load_3d(s.k + slab * C::BN * 64, map_k, &s.kv_full, slab * 64, w.k0, w.head);
    ptx::tma_load_3d(s.v + slab * C::BN * 64, map_v, &s.kv_full, slab * 64, w.k0, w.head);
  }
  ptx::RingState at;
  for (int t = 0; t < w.q_tiles; ++t) {
    const int q0 = (w.q_first + t) * C::BQ;
    uint64_t* full = s.qdo_ring.producer_acquire(at, 2 * C::STEP_BYTES);
#pragma unroll 1  // rolled: unrolled, the stages' slab addresses outgrow the producer's 24 registers at D = 256
    for (int slab = 0; slab < C::SLABS; ++slab) {
      ptx::tma_load_3d(s.q[at.stage] + slab * C::BQ * 64, map_q, full, slab * 64, q0, w.head);
      ptx::tma_load_3d(s.dout[at.stage] + slab * C::BQ * 64, map_do, full, slab * 64, q0, w.head);
    }
    at.advance(C::STAGES);
  }
}

// Row warp: each step's LSE · log2 e and delta (two rows a lane); rows >= S get +inf and 0.
template <int D>
__device__ __forceinline__ void key_rows(KeyShared<D>& s, const float* __restrict__ LSE,
                                         const float* __restrict__ delta, const KeyWork& w, int S) {
  using C = KeyConfig<D>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t head_row = static_cast<int64_t>(w.head) * S;
  ptx::RingState at;
  for (int t = 0; t < w.q_tiles; ++t) {
    const int q0 = (w.q_first + t) * C::BQ;
    ptx::mbar_wait(&s.row_ring.empty[at.stage], at.phase ^ 1);  // released (a fresh stage counts as released)
#pragma unroll
    for (int r = lane; r < C::BQ; r += 32) {
      const int row = q0 + r;
      s.lse2[at.stage][r] = row < S ? LSE[head_row + row] * LOG2E : INFINITY;
      s.delta[at.stage][r] = row < S ? delta[head_row + row] : 0.0f;
    }
    ptx::mbar_arrive(&s.row_ring.full[at.stage]);  // every lane arrives (release): its stores reach the waiters
    at.advance(C::STAGES);
  }
}

template <int D>
__device__ __forceinline__ void key_consumer(KeyShared<D>& s, const CUtensorMap* map_dk, const CUtensorMap* map_dv,
                                             const KeyWork& w, int half, int S, int causal, float scale_log2,
                                             float scale) {
  using C = KeyConfig<D>;
  constexpr int STEPS = C::BQ / 16;
  const int kw = C::SPLIT ? 0 : half * ROWS;      // this warpgroup's keys within the tile
  const int col0 = C::SPLIT ? half * C::COLS : 0;  // and its columns of dK and dV
  const int kw0 = w.k0 + kw;
  const bool signals = threadIdx.x % 128 == 0;
  float dv[C::COLS / 2], dk[C::COLS / 2];
  float sacc[C::BQ / 2], dpacc[C::BQ / 2];
  uint32_t pa[STEPS][4], dsa[STEPS][4];
  zero(dv);
  zero(dk);
  ptx::mbar_wait(&s.kv_full, 0);

  ptx::RingState at;
  for (int t = 0; t < w.q_tiles; ++t) {
    const int q0 = (w.q_first + t) * C::BQ;
    s.qdo_ring.consumer_wait(at);
    issue_scores<C::BQ, D>(sacc, s.k + kw * 64, C::BN * 64, s.q[at.stage], C::BQ * 64);     // Sᵀ = K Qᵀ
    issue_scores<C::BQ, D>(dpacc, s.v + kw * 64, C::BN * 64, s.dout[at.stage], C::BQ * 64);  // dPᵀ = V dOᵀ
    s.row_ring.consumer_wait(at);
    const float* lse2 = s.lse2[at.stage];
    const float* delta = s.delta[at.stage];
    ptx::wgmma_wait<1>();  // Sᵀ is done
    ptx::wgmma_fence_acc(sacc);
    // Pᵀ: key row, query column; keys after the query are masked only where the tile crosses the diagonal.
    const bool diagonal = causal && q0 < kw0 + ROWS - 1;
#pragma unroll
    for (int i = 0; i < C::BQ / 2; ++i) {
      const int col = ptx::wgmma_acc_col(i);
      float x = fmaf(sacc[i], scale_log2, -lse2[col]);
      if (diagonal && kw0 + ptx::wgmma_acc_row(i) > q0 + col) x = -INFINITY;
      sacc[i] = ptx::ex2_approx(x);
    }
    pack_a(sacc, pa);
    // dV += Pᵀ dO
    issue_accumulate<C::COLS, STEPS>(dv, pa, s.dout[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
    ptx::wgmma_wait<1>();  // dPᵀ is done (dV may still run)
    ptx::wgmma_fence_acc(dpacc);
#pragma unroll
    for (int i = 0; i < C::BQ / 2; ++i) dpacc[i] = sacc[i] * (dpacc[i] - delta[ptx::wgmma_acc_col(i)]);
    pack_a(dpacc, dsa);
    issue_accumulate<C::COLS, STEPS>(dk, dsa, s.q[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);  // dK += dSᵀ Q
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(dv);
    ptx::wgmma_fence_acc(dk);
    if (signals) {
      s.qdo_ring.consumer_release(at.stage);
      s.row_ring.consumer_release(at.stage);
    }
    at.advance(C::STAGES);
  }

  // Epilogue: both warpgroups are done reading K and V (at D = 256 each reads the other's columns), so each
  // stages its dK and dV in its own part of those tiles, then one thread stores 64 x 64 boxes.
  ptx::named_barrier_sync(1, 256);
  ptx::fence_proxy_async_smem();
  __nv_bfloat16* k_staging = s.k + (col0 / 64) * C::BN * 64 + kw * 64;
  __nv_bfloat16* v_staging = s.v + (col0 / 64) * C::BN * 64 + kw * 64;
  stage_rows(dk, scale, k_staging, C::BN * 64);
  stage_rows(dv, 1.0f, v_staging, C::BN * 64);
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(2 + half, 128);
  if (signals && kw0 < S) {  // a warpgroup whose keys all lie past S stores nothing
#pragma unroll
    for (int box = 0; box < C::COLS / 64; ++box) {
      ptx::tma_store_3d(map_dk, k_staging + box * C::BN * 64, col0 + box * 64, kw0, w.head);
      ptx::tma_store_3d(map_dv, v_staging + box * C::BN * 64, col0 + box * 64, kw0, w.head);
    }
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS, 1) attention_bwd_dkdv_sm90a(
    const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
    const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
    const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
    const float* __restrict__ LSE, const float* __restrict__ delta, int S, int heads, int causal, float scale_log2,
    float scale) {
  using C = KeyConfig<D>;
  extern __shared__ uint8_t smem_raw[];
  KeyShared<D>& s = *ptx::align_smem<KeyShared<D>>(smem_raw);
  const KeyWork w = key_work(S, causal, heads, C::BN, C::BQ);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.qdo_ring.init(C::STAGES, 2);  // empty: one arrive per consumer warpgroup
    for (int i = 0; i < C::STAGES; ++i) {  // the row ring: full after the row warp's 32 lanes arrive
      ptx::mbar_init(&s.row_ring.full[i], 32);
      ptx::mbar_init(&s.row_ring.empty[i], 2);
    }
    ptx::mbar_init(&s.kv_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<24>();
    const uint32_t warp = ptx::warp_idx();
    if (warp == 0 && threadIdx.x == 0) key_producer<D>(s, &map_k, &map_v, &map_q, &map_do, w);
    if (warp == 1) key_rows<D>(s, LSE, delta, w, S);
    return;
  }
  ptx::setmaxnreg_inc<240>();
  key_consumer<D>(s, &map_dk, &map_dv, w, static_cast<int>(warpgroup) - 1, S, causal, scale_log2, scale);
}

// ================================================================================================
// 3. dQ: one CTA per (128 queries, head), walking the key tiles
// ================================================================================================

constexpr int BM = 128;  // queries per dQ CTA: two consumer warpgroups x 64

template <int D>
struct QueryConfig {
  static constexpr int BN = D == 256 ? 32 : 64;  // keys per step (dQ is D / 2 registers)
  static constexpr int STAGES = D == 64 ? 4 : (D == 128 ? 3 : 2);
  static constexpr int SLABS = D / 64;
  static constexpr uint32_t Q_BYTES = BM * D * 2;
  static constexpr uint32_t KV_BYTES = BN * D * 2;
};

// Q, dO: [half][slab][64 rows][64]; K, V stages: [slab][BN rows][64].
template <int D>
struct QueryShared {
  using C = QueryConfig<D>;
  __nv_bfloat16 q[BM * D];
  __nv_bfloat16 dout[BM * D];
  __nv_bfloat16 k[C::STAGES][C::BN * D];
  __nv_bfloat16 v[C::STAGES][C::BN * D];
  ptx::RingBarriers<C::STAGES> kv_ring;  // full: producer arrive + TMA bytes of K and V
  uint64_t q_full;
};

template <int D>
constexpr size_t key_smem_bytes() { return sizeof(KeyShared<D>) + 1024; }  // slack to align the base
template <int D>
constexpr size_t query_smem_bytes() { return sizeof(QueryShared<D>) + 1024; }
static_assert(key_smem_bytes<64>() <= 227 * 1024 && key_smem_bytes<128>() <= 227 * 1024 &&
                  key_smem_bytes<256>() <= 227 * 1024, "dK/dV shared memory plan");
static_assert(query_smem_bytes<64>() <= 227 * 1024 && query_smem_bytes<128>() <= 227 * 1024 &&
                  query_smem_bytes<256>() <= 227 * 1024, "dQ shared memory plan");

// Where a dQ CTA works: its head, first query row, and how many key tiles it loads.
struct QueryWork {
  int head, q0, kv_tiles;
};

__device__ __forceinline__ QueryWork query_work(int S, int causal, int heads, int bn) {
  const int q_tiles = (S + BM - 1) / BM;
  const int t = static_cast<int>(blockIdx.x);
  QueryWork w;
  if (causal) {  // heaviest (last) query tiles first
    w.head = t % heads;
    w.q0 = (q_tiles - 1 - t / heads) * BM;
    w.kv_tiles = (min(S, w.q0 + BM) + bn - 1) / bn;
  } else {
    w.head = t / q_tiles;
    w.q0 = (t % q_tiles) * BM;
    w.kv_tiles = (S + bn - 1) / bn;
  }
  return w;
}

template <int D>
__device__ __forceinline__ void query_producer(QueryShared<D>& s, const CUtensorMap* map_q,
                                               const CUtensorMap* map_do, const CUtensorMap* map_k,
                                               const CUtensorMap* map_v, const QueryWork& w, int S) {
  using C = QueryConfig<D>;
  ptx::tma_prefetch_map(map_k);
  ptx::tma_prefetch_map(map_v);
  const int halves = w.q0 + ROWS < S ? 2 : 1;  // a half wholly past S is neither loaded nor computed
  ptx::mbar_arrive_expect_tx(&s.q_full, halves * C::Q_BYTES);  // Q and dO: two tensors of halves x 64 rows
  for (int half = 0; half < halves; ++half)
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab) {
      const int offset = (half * C::SLABS + slab) * 64 * 64;
      ptx::tma_load_3d(s.q + offset, map_q, &s.q_full, slab * 64, w.q0 + half * ROWS, w.head);
      ptx::tma_load_3d(s.dout + offset, map_do, &s.q_full, slab * 64, w.q0 + half * ROWS, w.head);
    }
  ptx::RingState at;
  for (int j = 0; j < w.kv_tiles; ++j) {
    uint64_t* full = s.kv_ring.producer_acquire(at, 2 * C::KV_BYTES);
#pragma unroll 1  // rolled, as in the dK/dV producer
    for (int slab = 0; slab < C::SLABS; ++slab) {
      ptx::tma_load_3d(s.k[at.stage] + slab * C::BN * 64, map_k, full, slab * 64, j * C::BN, w.head);
      ptx::tma_load_3d(s.v[at.stage] + slab * C::BN * 64, map_v, full, slab * 64, j * C::BN, w.head);
    }
    at.advance(C::STAGES);
  }
}

// This thread's two rows (r and r + 8 of the warpgroup's tile): LSE · log2 e (+inf past S) and delta (0 past
// S), the latter summed over the quad of lanes that shares the rows, each lane a quarter of the columns.
template <int D>
__device__ __forceinline__ void query_rows(const __nv_bfloat16* __restrict__ O, const __nv_bfloat16* __restrict__ dO,
                                           const float* __restrict__ LSE, int head, int q0w, int S,
                                           float (&lse2)[2], float (&delta)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = q0w + ptx::wgmma_acc_row(2 * h);
    const int64_t at = static_cast<int64_t>(head) * S + row;
    float sum = 0.0f;
    if (row < S) {
      const int first = static_cast<int>(threadIdx.x % 4) * (D / 4);
#pragma unroll
      for (int c = 0; c < D / 4; c += 8)
        sum += dot8_bf16(*reinterpret_cast<const uint4*>(O + at * D + first + c),
                         *reinterpret_cast<const uint4*>(dO + at * D + first + c));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    delta[h] = sum + __shfl_xor_sync(0xffffffffu, sum, 2);
    lse2[h] = row < S ? LSE[at] * LOG2E : INFINITY;
  }
}

template <int D>
__device__ __forceinline__ void query_skip(QueryShared<D>& s, ptx::RingState& at, int count, bool signals) {
  for (int j = 0; j < count; ++j) {
    s.kv_ring.consumer_wait(at);
    if (signals) s.kv_ring.consumer_release(at.stage);
    at.advance(QueryConfig<D>::STAGES);
  }
}

template <int D>
__device__ __forceinline__ void query_consumer(QueryShared<D>& s, const CUtensorMap* map_dq,
                                               const __nv_bfloat16* __restrict__ O,
                                               const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
                                               const QueryWork& w, int half, int S, int causal, float scale_log2,
                                               float scale) {
  using C = QueryConfig<D>;
  constexpr int STEPS = C::BN / 16;
  const int q0w = w.q0 + half * ROWS;
  const bool signals = threadIdx.x % 128 == 0;
  ptx::RingState at;
  if (q0w >= S) {  // every row of this warpgroup is past S
    query_skip<D>(s, at, w.kv_tiles, signals);
    return;
  }
  float lse2[2], delta[2];
  query_rows<D>(O, dO, LSE, w.head, q0w, S, lse2, delta);
  // Key tiles up to this warpgroup's last visible key; a tile needs the mask where it runs past S or, causal,
  // holds a key after the warpgroup's first row.
  const int tiles = causal ? min(w.kv_tiles, (min(S, q0w + ROWS) + C::BN - 1) / C::BN) : w.kv_tiles;
  float dq[D / 2], sacc[C::BN / 2], dpacc[C::BN / 2];
  uint32_t dsa[STEPS][4];
  zero(dq);
  const __nv_bfloat16* q = s.q + half * C::SLABS * 64 * 64;
  const __nv_bfloat16* dout = s.dout + half * C::SLABS * 64 * 64;
  ptx::mbar_wait(&s.q_full, 0);

  for (int j = 0; j < tiles; ++j) {
    const int k0 = j * C::BN;
    s.kv_ring.consumer_wait(at);
    issue_scores<C::BN, D>(sacc, q, 64 * 64, s.k[at.stage], C::BN * 64);      // S = Q Kᵀ
    issue_scores<C::BN, D>(dpacc, dout, 64 * 64, s.v[at.stage], C::BN * 64);  // dP = dO Vᵀ
    ptx::wgmma_wait<1>();
    ptx::wgmma_fence_acc(sacc);
    const bool masked = k0 + C::BN > S || (causal && k0 + C::BN - 1 > q0w);
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) {
      const int h = (i >> 1) & 1;
      float x = fmaf(sacc[i], scale_log2, -lse2[h]);
      const int key = k0 + ptx::wgmma_acc_col(i);
      if (masked && (key >= S || (causal && key > q0w + ptx::wgmma_acc_row(i)))) x = -INFINITY;
      sacc[i] = ptx::ex2_approx(x);
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(dpacc);
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) dpacc[i] = sacc[i] * (dpacc[i] - delta[(i >> 1) & 1]);
    pack_a(dpacc, dsa);
    issue_accumulate<D, STEPS>(dq, dsa, s.k[at.stage], C::BN * 128);  // dQ += dS K
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(dq);
    if (signals) s.kv_ring.consumer_release(at.stage);
    at.advance(C::STAGES);
  }
  query_skip<D>(s, at, w.kv_tiles - tiles, signals);

  // Epilogue: dQ · scale as bf16 into this warpgroup's half of the Q buffer (its own wgmmas, the last readers,
  // are done), then one thread stores the 64 x 64 boxes; TMA clips rows >= S.
  __nv_bfloat16* staging = s.q + half * C::SLABS * 64 * 64;
  ptx::fence_proxy_async_smem();
  stage_rows(dq, scale, staging, 64 * 64);
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(1 + half, 128);
  if (signals) {
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_store_3d(map_dq, staging + slab * 64 * 64, slab * 64, q0w, w.head);
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS, 1) attention_bwd_dq_sm90a(
    const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
    const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
    const __grid_constant__ CUtensorMap map_dq, const __nv_bfloat16* __restrict__ O,
    const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE, int S, int heads, int causal,
    float scale_log2, float scale) {
  using C = QueryConfig<D>;
  extern __shared__ uint8_t smem_raw[];
  QueryShared<D>& s = *ptx::align_smem<QueryShared<D>>(smem_raw);
  const QueryWork w = query_work(S, causal, heads, C::BN);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.kv_ring.init(C::STAGES, 2);
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) query_producer<D>(s, &map_q, &map_do, &map_k, &map_v, w, S);
    return;
  }
  ptx::setmaxnreg_inc<240>();
  query_consumer<D>(s, &map_dq, O, dO, LSE, w, static_cast<int>(warpgroup) - 1, S, causal, scale_log2, scale);
}

// ================================================================================================
// Host
// ================================================================================================

// A [B*H][S][D] bf16 tensor read or written in boxes of `rows` x 64 columns (one 128-byte swizzle row).
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t heads, int64_t S, int D, int rows) {
  const uint64_t dims[3] = {static_cast<uint64_t>(D), static_cast<uint64_t>(S), static_cast<uint64_t>(heads)};
  const uint64_t strides[2] = {static_cast<uint64_t>(D) * 2, static_cast<uint64_t>(S) * D * 2};
  const uint32_t box[3] = {64, static_cast<uint32_t>(rows), 1};
  return ptx::make_tma_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_128B);
}

template <int D>
int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, const __nv_bfloat16* O,
           const __nv_bfloat16* dO, const float* LSE, __nv_bfloat16* dQ, __nv_bfloat16* dK, __nv_bfloat16* dV,
           int64_t heads, int64_t S, int causal, cudaStream_t stream) {
  using KC = KeyConfig<D>;
  using QC = QueryConfig<D>;
  CUtensorMap map_q, map_do, map_k_tile, map_v_tile, map_dk, map_dv, map_k_step, map_v_step, map_dq;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_do, dO, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k_tile, K, heads, S, D, KC::BN)) != cudaSuccess ||
      (err = make_map(&map_v_tile, V, heads, S, D, KC::BN)) != cudaSuccess ||
      (err = make_map(&map_dk, dK, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_dv, dV, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k_step, K, heads, S, D, QC::BN)) != cudaSuccess ||
      (err = make_map(&map_v_step, V, heads, S, D, QC::BN)) != cudaSuccess ||
      (err = make_map(&map_dq, dQ, heads, S, D, 64)) != cudaSuccess)
    return static_cast<int>(err);
  constexpr size_t key_smem = key_smem_bytes<D>(), query_smem = query_smem_bytes<D>();
  if ((err = cudaFuncSetAttribute(attention_bwd_dkdv_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(key_smem))) != cudaSuccess ||
      (err = cudaFuncSetAttribute(attention_bwd_dq_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(query_smem))) != cudaSuccess)
    return static_cast<int>(err);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  float* delta = reinterpret_cast<float*>(dQ);  // 4 bytes a row in the 2·D bytes of dQ's row, until step 3
  const int64_t rows = heads * S;
  constexpr int rows_per_block = 256 / (D / 8);
  attention_bwd_delta<D><<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), 256, 0, stream>>>(
      O, dO, delta, rows);
  const int64_t key_ctas = heads * ((S + KC::BN - 1) / KC::BN);
  attention_bwd_dkdv_sm90a<D><<<static_cast<unsigned>(key_ctas), THREADS, key_smem, stream>>>(
      map_q, map_k_tile, map_v_tile, map_do, map_dk, map_dv, LSE, delta, static_cast<int>(S),
      static_cast<int>(heads), causal, scale_log2, scale);
  const int64_t query_ctas = heads * ((S + BM - 1) / BM);
  attention_bwd_dq_sm90a<D><<<static_cast<unsigned>(query_ctas), THREADS, query_smem, stream>>>(
      map_q, map_k_step, map_v_step, map_do, map_dq, O, dO, LSE, static_cast<int>(S), static_cast<int>(heads),
      causal, scale_log2, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int attention_bwd(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    const __nv_bfloat16* __restrict__ O,
    const __nv_bfloat16* __restrict__ dO,
    const float* __restrict__ LSE,
    __nv_bfloat16* __restrict__ dQ,
    __nv_bfloat16* __restrict__ dK,
    __nv_bfloat16* __restrict__ dV,
    int64_t B,
    int64_t H,
    int64_t S,
    int64_t D,
    int64_t causal,
    cudaStream_t stream) {
  if (B <= 0 || H <= 0 || S <= 0) return static_cast<int>(cudaGetLastError());
  const int64_t heads = B * H;
  // int indices inside the kernels: rows (up to S + 128) and the CTA indices must fit.
  if (S > INT32_MAX - 2 * BM || heads > INT32_MAX || heads * ((S + 63) / 64) > INT32_MAX)
    return static_cast<int>(cudaErrorInvalidValue);
  const int c = causal != 0 ? 1 : 0;
  switch (D) {
    case 64: return launch<64>(Q, K, V, O, dO, LSE, dQ, dK, dV, heads, S, c, stream);
    case 128: return launch<128>(Q, K, V, O, dO, LSE, dQ, dK, dV, heads, S, c, stream);
    case 256: return launch<256>(Q, K, V, O, dO, LSE, dQ, dK, dV, heads, S, c, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
