// attention_fwd, expert reference for sm_90a (H100/H200): O = softmax(Q·Kᵀ / sqrt(D), causal mask optional) · V
// and LSE (natural log) per query, for bf16 Q, K, V [B, H, S, D], D = 64, 128 or 256, any S >= 1.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, against the fastest of cuDNN and
// FlashAttention-2 timed in the same run): correct on every workload, held-out ones included, and on 84 edge
// lengths; hd128-s4096 0.818 ms = 672 TFLOP/s, 101.6 % of cuDNN (0.831 ms); hd128-s4096 causal 97.9 %;
// hd256-s2048 causal 120 %; hd64-s2048 99.1 %, hd64-s577 102.8 % (three consumers at D = 64, below).
// The order of its steps is also checked on the CPU by a NumPy model of the same tiling
// (tests/test_reference_attention_model.py).
//
// Design (FlashAttention-3 style; one CTA per (query tile, batch x head): a producer warpgroup and two consumer
// warpgroups (128 query rows, 384 threads) at D = 128 and 256, three (192 rows, 512 threads) at D = 64):
//   * warpgroup 0 is the producer: one thread loads the CTA's Q tile once (TMA, 128-byte swizzle) and then
//     streams the K and V tiles of the head through two rings of shared-memory stages (K ring, V ring, each
//     with full/empty mbarriers). K and V have separate rings because K_j is read (and released) one step
//     before V_j, so the next K load starts while the consumers still multiply by V.
//   * the other warpgroups are consumers, each owning 64 query rows. Per KV tile j:
//       S_j = Q · K_jᵀ        wgmma m64nBKVk16, A = Q and B = K from shared memory (both K-major);
//       online softmax        in registers: row max over a quad of lanes (shuffles), the scale folded into one
//                             FMA before ex2 (base 2), the running sum kept per thread and summed at the end;
//       O += P_j · V_j        wgmma m64nDk16 with P from registers as the A operand (the accumulator layout of
//                             S packed pairwise to bf16 is exactly the A fragment) and V MN-major from shared.
//     The two GEMMs of a warpgroup overlap: S_{j+1} is issued before P_j · V_j, and the softmax of S_{j+1} runs
//     while P_j · V_j is still in the tensor cores; the rescale of O waits for that product. The consumer
//     warpgroups interleave on their own (one's softmax alongside the others' wgmmas).
//   * setmaxnreg: producer 24 registers, consumers 240 with two (128 x (24 + 2 x 240) = 64512 <= 65536) or 160
//     with three (128 x (24 + 3 x 160) = 64512): O (D/2 fp32), S (BKV/2), P (BKV/4) and the addressing fit
//     without spills (at D = 64 with 160: O 32 + S 64 + P 32).
//   * Epilogue: O / l to bf16 into the warpgroup's own part of the Q buffer (free once its last S wgmma is
//     done), then TMA stores of 64 x 64 boxes; LSE = (m + log2 l) · ln 2 stored directly, rows < S only.
//
// Tiles per head dimension (shared memory <= 227 KB, one CTA per SM):
//     D = 64:  192 rows, BKV = 128, 4 stages: Q 24 KB + K, V 4 x 16 KB each = 152 KB
//     D = 128: 128 rows, BKV = 128, 2 stages: Q 32 KB + K, V 2 x 32 KB each = 160 KB
//     D = 256: 128 rows, BKV = 64,  2 stages: Q 64 KB + K, V 2 x 32 KB each = 192 KB (a 64 x 256 O accumulator is
//              128 registers per thread: BKV = 64 keeps S and P at 32 + 16)
//
// Masking and partial tiles: Q, K, V, O are 3-D tensor maps [B*H][S][D], so a tile that runs past S reads zeros
// (TMA out-of-bounds fill) from the same head, and the TMA store of O clips rows >= S. Keys >= S are masked to
// -inf in the last KV tile; causal masking is applied only on tiles that cross the diagonal of a warpgroup's
// rows, and KV tiles wholly past the CTA's last query are never loaded (a warpgroup whose rows end before a
// loaded tile only hands it back). A warpgroup whose 64 rows all lie past S (the later ones of the last query
// tile of a short sequence) gets no Q, computes nothing and hands every tile back, so no TMA box is ever wholly
// out of bounds. Tiles are visited from key 0 upwards, so key 0, visible to every row, comes first and the
// running max is finite from the first tile on. Causal grids start with the heaviest query tiles (the last ones)
// so the last wave is short.
//
// What ncu showed at hd128-s4096 (the evaluator's profile of the timed workload): HGMMA.64x128x16.F32.BF16 doing
// all the FLOPs, UTMALDG.3D for Q/K/V, SYNCS mbarrier traffic. With two consumers the kernel lost about 17 % to
// cuDNN at D = 64: one call each under ncu at hd64-s2048 (benchmarks/results/ncu_attention_fwd_hd64-s2048_h200.md,
// the two-consumer kernel): 372.8 against cuDNN's 310.5 us, tensor pipe active 40.3 % against 48.9 %, issue slots
// 35 % against 51 % busy, MIO-throttle stalls 0.86 against 0.05 cycles per issue, and 1.29 x cuDNN's L2 bytes.
// At D = 64 one score costs one MUFU.EX2 per 256 tensor FLOPs, about what an SM does of each per clock, so a
// warpgroup's exponentials are as long as its GEMMs; a third consumer gives the SM a third independent stream
// (one or two can have GEMMs queued while another is in its softmax) and serves each K and V tile to 192 rows
// instead of 128 (a third less L2-to-SM traffic per FLOP, a third fewer CTAs). Timed side by side
// (benchmarks/results/kernel_variants_h200.md, 2026-12-04): three consumers 98.5 % / 102.0 % of cuDNN at
// hd64-s2048 / hd64-s577, against 93.8 / 94.1 % for a ping-pong of two (named-barrier turns), 82.3 / 82.9 % and
// 85.5 / 74.7 % for 160- and 192-key tiles with two, and 82.5 / 83.4 % for the two-consumer kernel in the same
// run. At D = 128 and 256 a third consumer would need narrower key tiles (160 registers hold no 64 x 128 O
// accumulator beside a 128-key S and P); the two-consumer kernel already meets its targets there, so that was
// not tried.
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int MAX_ROWS = 192;  // query rows per CTA at most (three consumer warpgroups x 64)
constexpr float LN2 = 0.6931471805599453f;

template <int D>
struct Config {
  static constexpr int CONSUMERS = D == 64 ? 3 : 2;        // consumer warpgroups, 64 query rows each
  static constexpr int ROWS = 64 * CONSUMERS;              // query rows per CTA
  static constexpr int THREADS = 128 * (1 + CONSUMERS);    // the producer warpgroup and the consumers
  static constexpr uint32_t PRODUCER_REGS = 24;
  static constexpr uint32_t CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
  static constexpr int BKV = D == 256 ? 64 : 128;         // keys per tile
  static constexpr int STAGES = D == 64 ? 4 : 2;
  static constexpr int SLABS = D / 64;                     // 64-column (128-byte) slabs of a row
  static constexpr uint32_t Q_BYTES = ROWS * D * 2;
  static constexpr uint32_t KV_BYTES = BKV * D * 2;        // one K or one V tile
  static constexpr int S_ACC = BKV / 2;                    // fp32 score registers per consumer thread
  static constexpr int O_ACC = D / 2;                      // fp32 output registers per consumer thread
  static constexpr int P_STEPS = BKV / 16;                 // k16 steps of P · V
  static_assert(ROWS <= MAX_ROWS, "row bound of the entry point's index check");
  static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 65536, "register file");
};

// Q (and later O): [consumer][slab][64 rows][64 columns]; K and V: [slab][BKV rows][64 columns]; every box is
// 128-byte swizzled and starts on a 1024-byte boundary (all sizes are multiples of 1024).
template <int D>
struct Shared {
  static constexpr int STAGES = Config<D>::STAGES;
  __nv_bfloat16 q[Config<D>::ROWS * D];
  __nv_bfloat16 k[STAGES][Config<D>::BKV * D];
  __nv_bfloat16 v[STAGES][Config<D>::BKV * D];
  ptx::RingBarriers<STAGES> k_ring;  // full: producer arrive + TMA bytes; empty: every consumer warpgroup
  ptx::RingBarriers<STAGES> v_ring;
  uint64_t q_full;
};
template <int D>
constexpr size_t smem_bytes() { return sizeof(Shared<D>) + 1024; }  // slack to align the base to 1024 B
static_assert(smem_bytes<64>() <= 227 * 1024 && smem_bytes<128>() <= 227 * 1024 && smem_bytes<256>() <= 227 * 1024,
              "shared memory plan");

// Where one CTA works: its head (b * H + h), its first query row, and how many KV tiles it loads.
struct Work {
  int head, q0, kv_tiles;
};

template <int D>
__device__ __forceinline__ Work cta_work(int S, int causal, int heads) {
  constexpr int ROWS = Config<D>::ROWS, BKV = Config<D>::BKV;
  const int q_tiles = (S + ROWS - 1) / ROWS;
  const int t = static_cast<int>(blockIdx.x);
  Work w;
  if (causal) {  // heaviest (last) query tiles first, across all heads
    w.head = t % heads;
    w.q0 = (q_tiles - 1 - t / heads) * ROWS;
    const int last_key = min(S, w.q0 + ROWS);  // keys [0, last_key) are visible to some row of the tile
    w.kv_tiles = (last_key + BKV - 1) / BKV;
  } else {  // a head's query tiles side by side: they share its K and V in L2
    w.head = t / q_tiles;
    w.q0 = (t % q_tiles) * ROWS;
    w.kv_tiles = (S + BKV - 1) / BKV;
  }
  return w;
}

// KV tiles a consumer warpgroup with rows [q0w, q0w + 64) computes: the first ones up to its last visible key.
__device__ __forceinline__ int warpgroup_tiles(const Work& w, int q0w, int S, int causal, int bkv) {
  if (!causal) return w.kv_tiles;
  const int last_key = min(S, q0w + 64);
  return min(w.kv_tiles, (last_key + bkv - 1) / bkv);
}

// Producer (one thread): the Q tile, then every KV tile of the CTA into the K and V rings.
template <int D>
__device__ __forceinline__ void producer_loop(Shared<D>& s, const CUtensorMap* map_q, const CUtensorMap* map_k,
                                              const CUtensorMap* map_v, const Work& w, int S) {
  using C = Config<D>;
  ptx::tma_prefetch_map(map_q);
  ptx::tma_prefetch_map(map_k);
  ptx::tma_prefetch_map(map_v);
  // A consumer's 64 rows wholly past S are neither loaded nor computed.
  const int parts = min(C::CONSUMERS, (S - w.q0 + 63) / 64);
  ptx::mbar_arrive_expect_tx(&s.q_full, parts * C::Q_BYTES / C::CONSUMERS);
  for (int part = 0; part < parts; ++part)
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.q + (part * C::SLABS + slab) * 64 * 64, map_q, &s.q_full, slab * 64, w.q0 + part * 64, w.head);
  ptx::RingState at;
  for (int j = 0; j < w.kv_tiles; ++j) {
    uint64_t* full = s.k_ring.producer_acquire(at, C::KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.k[at.stage] + slab * C::BKV * 64, map_k, full, slab * 64, j * C::BKV, w.head);
    full = s.v_ring.producer_acquire(at, C::KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.v[at.stage] + slab * C::BKV * 64, map_v, full, slab * 64, j * C::BKV, w.head);
    at.advance(C::STAGES);
  }
}

// S = Q · K_tileᵀ for this warpgroup's 64 rows (issued and committed, not waited for).
template <int D>
__device__ __forceinline__ void issue_scores(Shared<D>& s, int stage, int consumer, float (&acc)[Config<D>::S_ACC]) {
  using C = Config<D>;
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // slab kk / 4, +32 bytes (+2) per 16 columns inside it
    const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q + (consumer * C::SLABS + kk / 4) * 64 * 64) + 2 * (kk % 4);
    const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.k[stage] + (kk / 4) * C::BKV * 64) + 2 * (kk % 4);
    ptx::wgmma_bf16<C::BKV>(acc, q_desc, k_desc, kk > 0 ? 1 : 0);
  }
  ptx::wgmma_commit();
}

// O (+)= P · V_tile: P from registers (k16 block k is p[k]), V MN-major in 64-column slabs of BKV rows.
// accumulate = false overwrites O on the first step (O is never zeroed).
template <int D>
__device__ __forceinline__ void issue_pv(Shared<D>& s, int stage, const uint32_t (&p)[Config<D>::P_STEPS][4],
                                         float (&o)[Config<D>::O_ACC], bool accumulate) {
  using C = Config<D>;
  const uint64_t v_desc = ptx::wgmma_desc_mn_sw128(s.v[stage], C::BKV * 128);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < C::P_STEPS; ++k)  // 16 key rows = 2048 bytes = +128 in the descriptor
    ptx::wgmma_bf16_rs<D, 1>(o, p[k], v_desc + 128 * k, (accumulate || k > 0) ? 1 : 0);
  ptx::wgmma_commit();
}

// Keys >= S, and with the causal mask keys after the query, get -inf. Only called on tiles that need it.
template <int N>
__device__ __forceinline__ void mask_scores(float (&acc)[N], int k0, int q0w, int S, bool causal) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int key = k0 + ptx::wgmma_acc_col(i);
    const int query = q0w + ptx::wgmma_acc_row(i);
    if (key >= S || (causal && key > query)) acc[i] = -INFINITY;
  }
}

// The four lanes of a quad hold one row's columns: reduce across them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Online softmax of one score tile, in place (scores -> unnormalised probabilities). Each thread holds two
// rows (register i is in row half (i >> 1) & 1). m: running max of the scaled scores in base-2 units; l: this
// thread's share of the running sum; alpha: how much the old O and l shrink (2^(m_old - m_new)).
template <int N>
__device__ __forceinline__ void online_softmax(float (&acc)[N], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float row_max = -INFINITY;
#pragma unroll
    for (int i = 2 * h; i < N; i += 4) row_max = fmaxf(row_max, fmaxf(acc[i], acc[i + 1]));
    const float m_new = fmaxf(m[h], quad_max(row_max) * scale_log2);
    // A row with nothing visible yet keeps m = -inf; subtracting 0 then gives 2^-inf = 0, never NaN.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::ex2_approx(m[h] - m_use);
    m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int i = 2 * h; i < N; i += 4) {
      acc[i] = ptx::ex2_approx(fmaf(acc[i], scale_log2, -m_use));
      acc[i + 1] = ptx::ex2_approx(fmaf(acc[i + 1], scale_log2, -m_use));
      sum += acc[i] + acc[i + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// Probabilities to bf16 A fragments: registers 8k..8k+7 of the score accumulator are k16 block k of P.
template <int D>
__device__ __forceinline__ void pack_p(const float (&acc)[Config<D>::S_ACC], uint32_t (&p)[Config<D>::P_STEPS][4]) {
#pragma unroll
  for (int k = 0; k < Config<D>::P_STEPS; ++k)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[k][r] = ptx::pack_bf16x2(acc[8 * k + 2 * r], acc[8 * k + 2 * r + 1]);
}

template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[Config<D>::O_ACC], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < Config<D>::O_ACC; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// Tiles loaded for the other warpgroups' rows only: each waited for and handed back unread.
template <int D>
__device__ __forceinline__ void skip_tiles(Shared<D>& s, ptx::RingState& at, int count, bool signals) {
  for (int j = 0; j < count; ++j) {
    s.k_ring.consumer_wait(at);
    if (signals) s.k_ring.consumer_release(at.stage);
    s.v_ring.consumer_wait(at);
    if (signals) s.v_ring.consumer_release(at.stage);
    at.advance(Config<D>::STAGES);
  }
}

// Consumer main loop: this warpgroup's tiles, S of the next tile overlapping P · V of the current one, then
// the CTA's remaining tiles (past this warpgroup's last visible key) handed back unread. One `signals`
// thread per warpgroup releases stages.
template <int D>
__device__ __forceinline__ void consumer_mainloop(Shared<D>& s, const Work& w, int consumer, int q0w, int S, int causal,
                                                  float scale_log2, bool signals, float (&o)[Config<D>::O_ACC],
                                                  float (&m)[2], float (&l)[2]) {
  using C = Config<D>;
  const int tiles = warpgroup_tiles(w, q0w, S, causal, C::BKV);
  // A tile needs the mask when it runs past S or, causal, has a key after the warpgroup's first row.
  auto needs_mask = [&](int j) { return j * C::BKV + C::BKV > S || (causal && j * C::BKV + C::BKV - 1 > q0w); };
  float acc[C::S_ACC];
  uint32_t p[C::P_STEPS][4];
  float alpha[2];
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  ptx::RingState at;
  s.k_ring.consumer_wait(at);
  issue_scores<D>(s, at.stage, consumer, acc);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  if (signals) s.k_ring.consumer_release(at.stage);
  if (needs_mask(0)) mask_scores(acc, 0, q0w, S, causal != 0);
  online_softmax(acc, m, l, alpha, scale_log2);  // alpha = 0: O has no old value to shrink
  pack_p<D>(acc, p);

  for (int j = 1; j < tiles; ++j) {
    const ptx::RingState prev = at;
    at.advance(C::STAGES);
    s.k_ring.consumer_wait(at);
    issue_scores<D>(s, at.stage, consumer, acc);  // S_j ...
    s.v_ring.consumer_wait(prev);
    issue_pv<D>(s, prev.stage, p, o, j > 1);  // ... while P_{j-1} · V_{j-1} follows it
    ptx::wgmma_wait<1>();                      // S_j is done (groups complete in order)
    ptx::wgmma_fence_acc(acc);
    if (signals) s.k_ring.consumer_release(at.stage);
    if (needs_mask(j)) mask_scores(acc, j * C::BKV, q0w, S, causal != 0);
    online_softmax(acc, m, l, alpha, scale_log2);
    ptx::wgmma_wait<0>();                      // P_{j-1} · V_{j-1} is done: O may be rescaled, V released
    ptx::wgmma_fence_acc(o);
    if (signals) s.v_ring.consumer_release(prev.stage);
    rescale_o<D>(o, alpha);
    pack_p<D>(acc, p);
  }
  s.v_ring.consumer_wait(at);
  issue_pv<D>(s, at.stage, p, o, tiles > 1);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(o);
  if (signals) s.v_ring.consumer_release(at.stage);
  at.advance(C::STAGES);

  skip_tiles<D>(s, at, w.kv_tiles - tiles, signals);
}

// Epilogue: LSE straight to global (rows < S), O / l as bf16 into this warpgroup's part of the Q buffer
// (its own S wgmmas, the last readers, are done), then one thread stores the 64 x 64 boxes; TMA clips
// rows >= S.
template <int D>
__device__ __forceinline__ void epilogue(Shared<D>& s, const CUtensorMap* map_o, float* __restrict__ LSE,
                                         const float (&o)[Config<D>::O_ACC], const float (&m)[2], const float (&l)[2],
                                         const Work& w, int consumer, int q0w, int S, bool signals) {
  using C = Config<D>;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float total = quad_sum(l[h]);  // > 0: every row has a visible key, the max among them gives 1
    inv[h] = 1.0f / total;
    const int row = q0w + ptx::wgmma_acc_row(2 * h);
    if (threadIdx.x % 4 == 0 && row < S)
      LSE[static_cast<int64_t>(w.head) * S + row] = (m[h] + ptx::lg2_approx(total)) * LN2;
  }
  uint8_t* staging = reinterpret_cast<uint8_t*>(s.q + consumer * C::SLABS * 64 * 64);
  ptx::fence_proxy_async_smem();  // the async-proxy reads of Q (wgmma) before these generic writes
#pragma unroll
  for (int i = 0; i < C::O_ACC; i += 2) {
    const int row = ptx::wgmma_acc_row(i), col = ptx::wgmma_acc_col(i);
    const float scale = inv[(i >> 1) & 1];
    *reinterpret_cast<__nv_bfloat162*>(staging + (col / 64) * 8192 + ptx::sw128_offset(row, (col % 64) * 2)) =
        __floats2bfloat162_rn(o[i] * scale, o[i + 1] * scale);
  }
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(1 + consumer, 128);  // this consumer warpgroup
  if (signals) {
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab) ptx::tma_store_3d(map_o, staging + slab * 8192, slab * 64, q0w, w.head);
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();  // the buffer must outlive the stores reading it
  }
}

template <int D>
__global__ void __launch_bounds__(Config<D>::THREADS, 1)
attention_fwd_sm90a(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                    const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o,
                    float* __restrict__ LSE, int S, int heads, int causal, float scale_log2) {
  extern __shared__ uint8_t smem_raw[];
  using C = Config<D>;
  Shared<D>& s = *ptx::align_smem<Shared<D>>(smem_raw);
  const Work w = cta_work<D>(S, causal, heads);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.k_ring.init(C::STAGES, C::CONSUMERS);  // empty: one arrive per consumer warpgroup
    s.v_ring.init(C::STAGES, C::CONSUMERS);
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x == 0) producer_loop<D>(s, &map_q, &map_k, &map_v, w, S);
    return;
  }

  ptx::setmaxnreg_inc<C::CONSUMER_REGS>();
  const int consumer = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const int q0w = w.q0 + consumer * 64;
  const bool signals = threadIdx.x % 128 == 0;
  if (q0w >= S) {  // every row of this warpgroup is past S (the last query tile of a short sequence)
    ptx::RingState at;
    skip_tiles<D>(s, at, w.kv_tiles, signals);
    return;
  }
  float o[C::O_ACC], m[2], l[2];
  ptx::mbar_wait(&s.q_full, 0);
  consumer_mainloop<D>(s, w, consumer, q0w, S, causal, scale_log2, signals, o, m, l);
  epilogue<D>(s, &map_o, LSE, o, m, l, w, consumer, q0w, S, signals);
}

// A [B*H][S][D] bf16 tensor read or written in boxes of `rows` x 64 columns (one 128-byte swizzle row).
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t heads, int64_t S, int D, int rows) {
  const uint64_t dims[3] = {static_cast<uint64_t>(D), static_cast<uint64_t>(S), static_cast<uint64_t>(heads)};
  const uint64_t strides[2] = {static_cast<uint64_t>(D) * 2, static_cast<uint64_t>(S) * D * 2};
  const uint32_t box[3] = {64, static_cast<uint32_t>(rows), 1};
  return ptx::make_tma_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_128B);
}

template <int D>
int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* LSE,
           int64_t heads, int64_t S, int causal, cudaStream_t stream) {
  using C = Config<D>;
  CUtensorMap map_q, map_k, map_v, map_o;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k, K, heads, S, D, C::BKV)) != cudaSuccess ||
      (err = make_map(&map_v, V, heads, S, D, C::BKV)) != cudaSuccess ||
      (err = make_map(&map_o, O, heads, S, D, 64)) != cudaSuccess)
    return static_cast<int>(err);
  constexpr size_t smem = smem_bytes<D>();
  if ((err = cudaFuncSetAttribute(attention_fwd_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem))) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t ctas = heads * ((S + C::ROWS - 1) / C::ROWS);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  attention_fwd_sm90a<D><<<static_cast<unsigned>(ctas), C::THREADS, smem, stream>>>(
      map_q, map_k, map_v, map_o, LSE, static_cast<int>(S), static_cast<int>(heads), causal, scale_log2);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int attention_fwd(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t H,
    int64_t S,
    int64_t D,
    int64_t causal,
    cudaStream_t stream) {
  if (B <= 0 || H <= 0 || S <= 0) return static_cast<int>(cudaGetLastError());
  const int64_t heads = B * H;
  // int indices inside the kernel: rows (up to S + MAX_ROWS) and the CTA index (at most 128 rows each) must fit.
  if (S > INT32_MAX - 2 * MAX_ROWS || heads > INT32_MAX || heads * ((S + 127) / 128) > INT32_MAX)
    return static_cast<int>(cudaErrorInvalidValue);
  const int c = causal != 0 ? 1 : 0;
  switch (D) {
    case 64: return launch<64>(Q, K, V, O, LSE, heads, S, c, stream);
    case 128: return launch<128>(Q, K, V, O, LSE, heads, S, c, stream);
    case 256: return launch<256>(Q, K, V, O, LSE, heads, S, c, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}
