// prefill_gqa_ragged, expert reference for sm_90a (H100/H200): causal attention over a ragged batch of sequences
// packed one after another (Q [T, H, 128], K and V [T, KH, 128] bf16, sequence b = rows seq_indptr[b] ..
// seq_indptr[b + 1] - 1, as many queries as keys), grouped-query heads (query head h reads kv head h / (H / KH)),
// O = softmax(q·kᵀ / sqrt(128), key <= query within the sequence) · V in bf16 and LSE (natural log) in fp32.
//
// Status: NOT YET MEASURED ON A GPU. Written 2026-12-07 from the GPU-proven attention_fwd reference (same
// producer / consumer split, rings, online softmax and wgmma steps, unchanged); checked on the CPU only:
// `ptxbench check` (builds for sm_90a, wgmma / TMA / mbarrier in the SASS, 168 registers, no spills) and a NumPy
// model of its work list, head packing, tiles, masks and stores, judged by the task's own comparison
// (tests/test_reference_prefill_ragged_model.py). Correctness and speed figures go here once
// tests/gpu/test_reference_gpu.py and benchmarks/reference_kernels.py have run it.
//
// Design (FlashAttention-3 style, as attention_fwd at D = 128: one CTA of a producer warpgroup and two consumer
// warpgroups, 384 threads, a 128-row query tile, 128-key K and V tiles in two rings of two stages):
//   * Grouped heads packed into the rows. A CTA serves P query heads that share one kv head (P = the largest power
//     of two dividing H / KH, at most 8) and 128 / P consecutive tokens of one sequence: tile row r is token
//     r / P, head r % P. Q, O are [T][H][128], so the P heads of a token are adjacent: Q is one TMA box
//     {64 columns, P heads, 64 / P tokens} per consumer and 64-column slab, which lands as 64 rows of 128 bytes in
//     the (token, head) order above, 128-byte swizzled exactly like a plain 64-row box. Every K and V tile the
//     CTA loads serves P heads at once, and a tile of the short sequences of chunked prefill (25 to 97 tokens)
//     is mostly full instead of mostly empty.
//   * Work list from the device indptr, no host copy: the grid is B x (query tiles of the longest sequence, S) x
//     (H / P head units), sequence-major: sequence b's blocks come together, its tiles from the last (heaviest)
//     down, its head units innermost; a block whose tile starts at or past its sequence's length (a shorter
//     sequence) exits before touching shared memory. So the CTAs in flight read the K and V of one or two
//     sequences (at most S · KH · 512 bytes each: 12 MB at S = 3001, KH = 8), which stay in L2 and are shared by
//     the ~16 CTAs per kv head in flight, instead of every sequence's K and V at once (62 MB on the timed
//     workload, more than L2). A sequence of the timed workload is several waves of CTAs, so the heaviest-first
//     order inside it still keeps the tail short.
//   * warpgroup 0, the producer: one thread loads the Q parts (each consumer's 64 rows, skipped when all its
//     tokens are past the sequence's end, so no box is wholly out of bounds), then K and V tiles 0 .. kv_tiles - 1
//     of the sequence from row seq_start + 128 j, 3-D maps [T][KH][128] with boxes {64, 1, 128}. A tile that
//     runs past the sequence's end reads the next sequence's rows (or zeros past T): those keys are masked, below.
//   * warpgroups 1 and 2, the consumers, 64 rows each: S_j = Q·K_jᵀ (wgmma m64n128k16, both from shared), online
//     softmax in registers (base 2, scale folded into one FMA before ex2), O += P_j·V_j (wgmma with P from
//     registers as A, V MN-major), S_{j+1} issued before P_j·V_j so the two overlap; setmaxnreg 24 / 240.
//   * Masking: key k of a row with token i (both within the sequence) is -inf when k > i or k >= len; only tiles
//     that cross the diagonal of the warpgroup's first token or the sequence's end are masked. Key 0 is visible
//     to every row and comes first, so the running max is finite from the first tile on and no row is fully
//     masked (rows of tokens past the sequence's end compute on finite data and are never stored).
//   * Epilogue: LSE = (m + log2 l)·ln 2 stored per row whose token is inside the sequence; O / l to bf16 into the
//     warpgroup's own part of the Q buffer (its last reader, the S wgmma, is done), then the warpgroup copies it
//     out in 16-byte vectors, 512 contiguous bytes per warp when P >= 2, skipping rows past the sequence's end: a
//     TMA store would clip only at T and overwrite the next sequence's rows.
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int D = 128;                 // head dimension
constexpr int CONSUMERS = 2;           // consumer warpgroups, 64 rows each
constexpr int ROWS = 64 * CONSUMERS;   // (token, head) rows per CTA
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr uint32_t PRODUCER_REGS = 24;
constexpr uint32_t CONSUMER_REGS = 240;
constexpr int BKV = 128;               // keys per tile
constexpr int STAGES = 2;
constexpr int SLABS = D / 64;          // 64-column (128-byte) slabs of a row
constexpr uint32_t Q_BYTES = ROWS * D * 2;
constexpr uint32_t KV_BYTES = BKV * D * 2;
constexpr int S_ACC = BKV / 2;         // fp32 score registers per consumer thread
constexpr int O_ACC = D / 2;           // fp32 output registers per consumer thread
constexpr int P_STEPS = BKV / 16;      // k16 steps of P · V
constexpr int MAX_PACK = 8;            // query heads packed into one tile at most
constexpr float LN2 = 0.6931471805599453f;
static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 65536, "register file");

// Q (later O): [consumer][slab][64 rows][64 columns]; K and V: [slab][BKV rows][64 columns]; 128-byte swizzled,
// every box on a 1024-byte boundary.
struct Shared {
  __nv_bfloat16 q[ROWS * D];
  __nv_bfloat16 k[STAGES][BKV * D];
  __nv_bfloat16 v[STAGES][BKV * D];
  ptx::RingBarriers<STAGES> k_ring;  // full: producer arrive + TMA bytes; empty: every consumer warpgroup
  ptx::RingBarriers<STAGES> v_ring;
  uint64_t q_full;
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 B
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan");

// One CTA's work: its sequence (first row, length), first token of the tile, first query head, kv head, and the
// KV tiles it loads. log_pack: log2 of the heads per tile; tokens per consumer = 64 >> log_pack.
struct Work {
  int start, len, q0, head0, kvh, kv_tiles;
};

// KV tiles a warpgroup whose first token is t0 computes: up to its last visible key.
__device__ __forceinline__ int tiles_up_to(int t0, int tokens, int len) {
  const int last_key = min(len, t0 + tokens);  // keys [0, last_key) are visible to some row
  return (last_key + BKV - 1) / BKV;
}

// Producer (one thread): the Q parts, then every KV tile of the CTA into the K and V rings.
__device__ __forceinline__ void producer_loop(Shared& s, const CUtensorMap* map_q, const CUtensorMap* map_k,
                                              const CUtensorMap* map_v, const Work& w, int log_pack) {
  ptx::tma_prefetch_map(map_q);
  ptx::tma_prefetch_map(map_k);
  ptx::tma_prefetch_map(map_v);
  const int tokens_w = 64 >> log_pack;
  // A consumer's rows whose tokens are all past the sequence's end are neither loaded nor computed.
  const int parts = min(CONSUMERS, (w.len - w.q0 + tokens_w - 1) / tokens_w);
  ptx::mbar_arrive_expect_tx(&s.q_full, parts * (Q_BYTES / CONSUMERS));
  for (int part = 0; part < parts; ++part)
#pragma unroll
    for (int slab = 0; slab < SLABS; ++slab)
      ptx::tma_load_3d(s.q + (part * SLABS + slab) * 64 * 64, map_q, &s.q_full, slab * 64, w.head0,
                       w.start + w.q0 + part * tokens_w);
  ptx::RingState at;
  for (int j = 0; j < w.kv_tiles; ++j) {
    uint64_t* full = s.k_ring.producer_acquire(at, KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < SLABS; ++slab)
      ptx::tma_load_3d(s.k[at.stage] + slab * BKV * 64, map_k, full, slab * 64, w.kvh, w.start + j * BKV);
    full = s.v_ring.producer_acquire(at, KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < SLABS; ++slab)
      ptx::tma_load_3d(s.v[at.stage] + slab * BKV * 64, map_v, full, slab * 64, w.kvh, w.start + j * BKV);
    at.advance(STAGES);
  }
}

// S = Q · K_tileᵀ for this warpgroup's 64 rows (issued and committed, not waited for).
__device__ __forceinline__ void issue_scores(Shared& s, int stage, int consumer, float (&acc)[S_ACC]) {
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // slab kk / 4, +32 bytes (+2) per 16 columns inside it
    const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q + (consumer * SLABS + kk / 4) * 64 * 64) + 2 * (kk % 4);
    const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.k[stage] + (kk / 4) * BKV * 64) + 2 * (kk % 4);
    ptx::wgmma_bf16<BKV>(acc, q_desc, k_desc, kk > 0 ? 1 : 0);
  }
  ptx::wgmma_commit();
}

// O (+)= P · V_tile: P from registers (k16 block k is p[k]), V MN-major in 64-column slabs of BKV rows.
// accumulate = false overwrites O on the first step (O is never zeroed).
__device__ __forceinline__ void issue_pv(Shared& s, int stage, const uint32_t (&p)[P_STEPS][4], float (&o)[O_ACC],
                                         bool accumulate) {
  const uint64_t v_desc = ptx::wgmma_desc_mn_sw128(s.v[stage], BKV * 128);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < P_STEPS; ++k)  // 16 key rows = 2048 bytes = +128 in the descriptor
    ptx::wgmma_bf16_rs<D, 1>(o, p[k], v_desc + 128 * k, (accumulate || k > 0) ? 1 : 0);
  ptx::wgmma_commit();
}

// Keys past the row's token (causal) or at or past the sequence's end get -inf. Row r of the warpgroup is token
// t0 + (r >> log_pack). Only called on tiles that need it.
__device__ __forceinline__ void mask_scores(float (&acc)[S_ACC], int k0, int t0, int log_pack, int len) {
#pragma unroll
  for (int i = 0; i < S_ACC; ++i) {
    const int key = k0 + ptx::wgmma_acc_col(i);
    const int token = t0 + (ptx::wgmma_acc_row(i) >> log_pack);
    if (key > token || key >= len) acc[i] = -INFINITY;
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
__device__ __forceinline__ void online_softmax(float (&acc)[S_ACC], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float row_max = -INFINITY;
#pragma unroll
    for (int i = 2 * h; i < S_ACC; i += 4) row_max = fmaxf(row_max, fmaxf(acc[i], acc[i + 1]));
    const float m_new = fmaxf(m[h], quad_max(row_max) * scale_log2);
    // A row with nothing visible yet keeps m = -inf; subtracting 0 then gives 2^-inf = 0, never NaN.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    alpha[h] = ptx::ex2_approx(m[h] - m_use);
    m[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int i = 2 * h; i < S_ACC; i += 4) {
      acc[i] = ptx::ex2_approx(fmaf(acc[i], scale_log2, -m_use));
      acc[i + 1] = ptx::ex2_approx(fmaf(acc[i + 1], scale_log2, -m_use));
      sum += acc[i] + acc[i + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// Probabilities to bf16 A fragments: registers 8k..8k+7 of the score accumulator are k16 block k of P.
__device__ __forceinline__ void pack_p(const float (&acc)[S_ACC], uint32_t (&p)[P_STEPS][4]) {
#pragma unroll
  for (int k = 0; k < P_STEPS; ++k)
#pragma unroll
    for (int r = 0; r < 4; ++r) p[k][r] = ptx::pack_bf16x2(acc[8 * k + 2 * r], acc[8 * k + 2 * r + 1]);
}

__device__ __forceinline__ void rescale_o(float (&o)[O_ACC], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < O_ACC; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// Tiles loaded for the other warpgroup's rows only: each waited for and handed back unread.
__device__ __forceinline__ void skip_tiles(Shared& s, ptx::RingState& at, int count, bool signals) {
  for (int j = 0; j < count; ++j) {
    s.k_ring.consumer_wait(at);
    if (signals) s.k_ring.consumer_release(at.stage);
    s.v_ring.consumer_wait(at);
    if (signals) s.v_ring.consumer_release(at.stage);
    at.advance(STAGES);
  }
}

// Consumer main loop: this warpgroup's tiles (first token t0), S of the next tile overlapping P · V of the
// current one, then the CTA's remaining tiles handed back unread. One `signals` thread releases stages.
__device__ __forceinline__ void consumer_mainloop(Shared& s, const Work& w, int consumer, int t0, int log_pack,
                                                  float scale_log2, bool signals, float (&o)[O_ACC], float (&m)[2],
                                                  float (&l)[2]) {
  const int tiles = min(w.kv_tiles, tiles_up_to(t0, 64 >> log_pack, w.len));
  // A tile needs the mask when it runs past the sequence or has a key after the warpgroup's first token.
  auto needs_mask = [&](int j) { return j * BKV + BKV > w.len || j * BKV + BKV - 1 > t0; };
  float acc[S_ACC];
  uint32_t p[P_STEPS][4];
  float alpha[2];
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  ptx::RingState at;
  s.k_ring.consumer_wait(at);
  issue_scores(s, at.stage, consumer, acc);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  if (signals) s.k_ring.consumer_release(at.stage);
  if (needs_mask(0)) mask_scores(acc, 0, t0, log_pack, w.len);
  online_softmax(acc, m, l, alpha, scale_log2);  // alpha = 0: O has no old value to shrink
  pack_p(acc, p);

  for (int j = 1; j < tiles; ++j) {
    const ptx::RingState prev = at;
    at.advance(STAGES);
    s.k_ring.consumer_wait(at);
    issue_scores(s, at.stage, consumer, acc);  // S_j ...
    s.v_ring.consumer_wait(prev);
    issue_pv(s, prev.stage, p, o, j > 1);      // ... while P_{j-1} · V_{j-1} follows it
    ptx::wgmma_wait<1>();                      // S_j is done (groups complete in order)
    ptx::wgmma_fence_acc(acc);
    if (signals) s.k_ring.consumer_release(at.stage);
    if (needs_mask(j)) mask_scores(acc, j * BKV, t0, log_pack, w.len);
    online_softmax(acc, m, l, alpha, scale_log2);
    ptx::wgmma_wait<0>();                      // P_{j-1} · V_{j-1} is done: O may be rescaled, V released
    ptx::wgmma_fence_acc(o);
    if (signals) s.v_ring.consumer_release(prev.stage);
    rescale_o(o, alpha);
    pack_p(acc, p);
  }
  s.v_ring.consumer_wait(at);
  issue_pv(s, at.stage, p, o, tiles > 1);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(o);
  if (signals) s.v_ring.consumer_release(at.stage);
  at.advance(STAGES);

  skip_tiles(s, at, w.kv_tiles - tiles, signals);
}

// Epilogue: LSE straight to global, O / l as bf16 into this warpgroup's part of the Q buffer, then the warpgroup
// copies its 64 rows x 256 bytes out in 16-byte vectors. Rows whose token is past the sequence's end are skipped.
__device__ __forceinline__ void epilogue(Shared& s, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                                         const float (&o)[O_ACC], const float (&m)[2], const float (&l)[2],
                                         const Work& w, int consumer, int t0, int log_pack, int heads) {
  const int pack_mask = (1 << log_pack) - 1;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float total = quad_sum(l[h]);  // > 0: every row has a visible key, the max among them gives 1
    inv[h] = 1.0f / total;
    const int row = ptx::wgmma_acc_row(2 * h);
    const int token = t0 + (row >> log_pack);
    if (threadIdx.x % 4 == 0 && token < w.len)
      LSE[static_cast<int64_t>(w.start + token) * heads + w.head0 + (row & pack_mask)] =
          (m[h] + ptx::lg2_approx(total)) * LN2;
  }
  uint8_t* staging = reinterpret_cast<uint8_t*>(s.q + consumer * SLABS * 64 * 64);
  ptx::fence_proxy_async_smem();  // the async-proxy reads of Q (wgmma) before these generic writes
#pragma unroll
  for (int i = 0; i < O_ACC; i += 2) {
    const int row = ptx::wgmma_acc_row(i), col = ptx::wgmma_acc_col(i);
    const float scale = inv[(i >> 1) & 1];
    *reinterpret_cast<__nv_bfloat162*>(staging + (col / 64) * 8192 + ptx::sw128_offset(row, (col % 64) * 2)) =
        __floats2bfloat162_rn(o[i] * scale, o[i + 1] * scale);
  }
  ptx::named_barrier_sync(1 + consumer, 128);  // this consumer warpgroup's writes before its reads
  const int lane = static_cast<int>(threadIdx.x % 128);
#pragma unroll
  for (int c = lane; c < 64 * 16; c += 128) {  // 16-byte chunk c: row c / 16, chunk c % 16 of its 256 bytes
    const int row = c >> 4, chunk = c & 15;
    const int token = t0 + (row >> log_pack);
    if (token < w.len) {
      const uint4 value = *reinterpret_cast<const uint4*>(staging + (chunk >> 3) * 8192 +
                                                          ptx::sw128_offset(row, (chunk & 7) * 16));
      const int64_t out_row = static_cast<int64_t>(w.start + token) * heads + w.head0 + (row & pack_mask);
      *reinterpret_cast<uint4*>(O + out_row * D + chunk * 8) = value;
    }
  }
}

__global__ void __launch_bounds__(THREADS, 1)
prefill_gqa_ragged_sm90a(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                         const __grid_constant__ CUtensorMap map_v, const int32_t* __restrict__ seq_indptr,
                         __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int n_tiles, int heads,
                         int group, int log_pack, float scale_log2) {
  extern __shared__ uint8_t smem_raw[];
  const int units = heads >> log_pack;  // head units of 2^log_pack query heads
  const int t = static_cast<int>(blockIdx.x);
  const int unit = t % units;
  const int seq = t / units / n_tiles;                    // sequence-major: one sequence's K and V in L2 at a time
  const int tile = n_tiles - 1 - (t / units) % n_tiles;   // within it the last tiles, the heaviest, first
  Work w;
  w.start = __ldg(seq_indptr + seq);
  w.len = __ldg(seq_indptr + seq + 1) - w.start;
  w.q0 = tile * (ROWS >> log_pack);
  if (w.q0 >= w.len) return;  // a shorter sequence: no rows here (uniform over the CTA, before any barrier)
  w.head0 = unit << log_pack;
  w.kvh = w.head0 / group;
  w.kv_tiles = tiles_up_to(w.q0, ROWS >> log_pack, w.len);

  Shared& s = *ptx::align_smem<Shared>(smem_raw);
  const uint32_t warpgroup = ptx::warpgroup_idx();
  if (threadIdx.x == 0) {
    s.k_ring.init(STAGES, CONSUMERS);  // empty: one arrive per consumer warpgroup
    s.v_ring.init(STAGES, CONSUMERS);
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) producer_loop(s, &map_q, &map_k, &map_v, w, log_pack);
    return;
  }

  ptx::setmaxnreg_inc<CONSUMER_REGS>();
  const int consumer = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const int t0 = w.q0 + consumer * (64 >> log_pack);     // its first token
  const bool signals = threadIdx.x % 128 == 0;
  if (t0 >= w.len) {  // every token of this warpgroup is past the sequence's end
    ptx::RingState at;
    skip_tiles(s, at, w.kv_tiles, signals);
    return;
  }
  float o[O_ACC], m[2], l[2];
  ptx::mbar_wait(&s.q_full, 0);
  consumer_mainloop(s, w, consumer, t0, log_pack, scale_log2, signals, o, m, l);
  epilogue(s, O, LSE, o, m, l, w, consumer, t0, log_pack, heads);
}

// A [T][heads][128] bf16 tensor read in boxes of {64 columns, box_heads heads, box_rows tokens}.
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t T, int64_t heads, int box_heads, int box_rows) {
  const uint64_t dims[3] = {static_cast<uint64_t>(D), static_cast<uint64_t>(heads), static_cast<uint64_t>(T)};
  const uint64_t strides[2] = {static_cast<uint64_t>(D) * 2, static_cast<uint64_t>(heads) * D * 2};
  const uint32_t box[3] = {64, static_cast<uint32_t>(box_heads), static_cast<uint32_t>(box_rows)};
  return ptx::make_tma_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

extern "C" int prefill_gqa_ragged(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K,
    const __nv_bfloat16* __restrict__ V,
    const int32_t* __restrict__ seq_indptr,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t S,
    int64_t DS,
    int64_t T,
    int64_t H,
    int64_t KH,
    cudaStream_t stream) {
  (void)DS;  // the lengths come from seq_indptr on the device
  if (B <= 0 || S <= 0 || T <= 0 || H <= 0 || KH <= 0 || H % KH != 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t group = H / KH;
  int log_pack = 0;  // pack 2^log_pack heads of one kv head into a tile: the largest power of two dividing group
  while ((1 << (log_pack + 1)) <= MAX_PACK && group % (int64_t{1} << (log_pack + 1)) == 0) ++log_pack;
  const int64_t tokens = ROWS >> log_pack;
  const int64_t n_tiles = (S + tokens - 1) / tokens;
  const int64_t ctas = n_tiles * B * (H >> log_pack);
  // int indices inside the kernel: rows (up to T + a tile) and the CTA index must fit.
  if (T > INT32_MAX - 2 * ROWS || ctas > INT32_MAX || S > T)
    return static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map_q, map_k, map_v;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, T, H, 1 << log_pack, 64 >> log_pack)) != cudaSuccess ||
      (err = make_map(&map_k, K, T, KH, 1, BKV)) != cudaSuccess ||
      (err = make_map(&map_v, V, T, KH, 1, BKV)) != cudaSuccess)
    return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(prefill_gqa_ragged_sm90a, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  prefill_gqa_ragged_sm90a<<<static_cast<unsigned>(ctas), THREADS, SMEM_BYTES, stream>>>(
      map_q, map_k, map_v, seq_indptr, O, LSE, static_cast<int>(n_tiles), static_cast<int>(H),
      static_cast<int>(group), log_pack, scale_log2);
  return static_cast<int>(cudaGetLastError());
}
