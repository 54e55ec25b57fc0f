// decode_gqa_paged, expert reference for sm_90a (H100/H200): one decoding step of grouped-query attention over a
// paged KV cache. Q [B, H, 128] bf16; K_cache, V_cache [NP, P, KH, 128] bf16 (NHD); sequence b owns the pages
// kv_indices[kv_indptr[b] .. kv_indptr[b + 1]), all full but the last (kv_last_page_len[b] tokens). Outputs
// O = softmax(q·Kᵀ / sqrt(128)) · V (bf16) and LSE (natural log, fp32) per sequence and query head.
//
// Correct on every workload and 11 edge shapes on an H100 (2026-12-07, benchmarks/results/new_references_h100_80gb_hbm3.md); checked on the CPU (`ptxbench check`, the static reference tests, and the
// NumPy model tests/test_reference_decode_model.py of its walk, its fragment and swizzle addressing, its online
// softmax and its merge). Its speed is to be measured: figures go here once benchmarks/reference_kernels.py
// have run it. It grew out of the project's split-KV control (tests/adversarial/split_kv_decode.cu: bulk-copied
// rows, tiles round-robin over the warps, ceil-sized splits in about three waves), measured at 0.161 ms on the
// H200 on the timed workload, about 39 % of the copy bandwidth for its 268 MB; what changed, and why, is below.
//
// Decode is bound by streaming K and V once (nearly all of the task's bytes); the arithmetic is 2 FLOPs per byte.
// So the design is about the copy engine, bytes in flight, and every SM busy from start to end:
//
//   * Split-KV over a balanced, flattened key space. For each kv head, the keys of the whole batch are laid out
//     page after page in page-table order (page-list position p = kv_indptr[b] + i holds keys P·i .. P·i + P - 1
//     of sequence b), cut into 16-key tiles (one tile = 16 token slots of one page; P is 16 or 64, so a page is 1
//     or 4 tiles). The T = NP · P/16 tiles are cut into `splits` equal chunks, one CTA per (chunk, kv head, block
//     of 16 query heads), and `splits` is chosen so that all CTAs are resident at once (one wave, the occupancy
//     the driver reports): every CTA streams the same number of bytes, whatever the lengths, the page size or the
//     batch. A chunk may begin and end inside a sequence and may hold several short ones; the CTA keeps one
//     online softmax per piece of a sequence (a "segment") and writes its partial when the piece ends. Tiles past
//     the end of a sequence's last page fill (up to 3 with P = 64) are skipped, never loaded.
//   * The merge. Piece (CTA chunk c, sequence b) goes to workspace slot c + b: unique, because pieces are ordered
//     by key position and each new one starts at a chunk edge or a sequence start (test: the NumPy model). A
//     sequence held by one CTA alone (the usual case for short ones) is written straight to O and LSE by that CTA;
//     the merge kernel (one warp per sequence and query head) combines the others: M = max lse2_s,
//     w_s = 2^(lse2_s - M), O = Σ w_s O_s / Σ w_s, LSE = (M + log2 Σ w_s) · ln 2. It is launched with programmatic
//     dependent launch, so its CTAs are scheduled while the decode kernel drains and wait (griddepcontrol.wait,
//     in every thread) for the decode grid to end: no launch gap between the two, no overlap of their work.
//     Partials are fp32 (O_s already divided by its own sum).
//   * The copy engine. One producer warp per CTA walks the chunk's tiles and, per tile, waits for a free stage of
//     an 8-stage ring (RingBarriers: full = producer's arrive + transaction bytes, empty = one arrive per consumer
//     warp) and issues four TMA loads of 2 KB (3-D tensor maps over each cache as [NP·P tokens][KH][128]: box
//     {64 dims, 1 head, 16 tokens} at token page·P + 16·sub, K and V, two 64-dim halves each) with the 128-byte
//     swizzle, so ldmatrix reads them without bank conflicts. Each load is 16 rows of 128 bytes; the control's
//     one bulk copy per 256-byte row needed 8x as many copy instructions. Page numbers, sequence ends and last-page
//     fills are read 32 at a time by the warp's lanes (the next 32 prefetched) and broadcast by shuffles. With
//     pages of 16 every tile holds keys, so the ring's first 8 stages are issued as soon as the page numbers are
//     in, before the walk has found its first sequence.
//   * Four consumer warps share every tile. Each computes the whole S = Q Kᵀ for the tile (mma.sync m16n8k16,
//     the group's query heads as the 16 rows of A, rows past the group zero and never stored; 16 mma.sync) and the
//     same online softmax (base 2, the scale log2(e)/sqrt(128) folded into one FMA before ex2), and then O += P V
//     for its own 32 of the 128 output dims (P rounded to bf16 as the A operand straight from the S accumulators,
//     Vᵀ fragments by ldmatrix.trans; 4 mma.sync). No warp waits for another and no cross-warp merge is needed at
//     a segment's end: each warp writes its 32 dims. The redundant S costs 4x its mma.sync, about 80 per 8 KB
//     tile and CTA, far below what keeps pace with memory. A stage is released as soon as its V fragments are in
//     registers, before the softmax.
//   * Each consumer warp walks the same tiles as the producer with its own copy of the walk (TileWalk: the same
//     page table, the same order), so they agree on every stage and segment without talking. A segment's query
//     rows are loaded into registers when it starts; the next sequence's are prefetched into L2 then (holding
//     them in registers too would cost 32 more a thread, past the 128 that three CTAs per SM allow).
//   * Partial last tiles: keys past the sequence's end get score -inf (selected, not multiplied) and their V rows
//     are zeroed in registers, so whatever the cache holds in the unused slots of a last page (even NaN) cannot
//     reach the output.
//   * Workspace: the partials (fp32, (splits + B - 1) slots x H x (128 + 1) floats, about 2 MB on the timed
//     workload) come from cudaMallocAsync on the caller's stream and go back with cudaFreeAsync after the merge;
//     the contract lets no allocation outlive the call and offers no scratch of its own, and a stream-ordered
//     pool allocation costs host time only (the harness's launch gate keeps host time out of the event times).
//     The device's memory pool is left as it is (its release threshold is process state the harness owns).
//
// Targets (issue 38): PASSED on every workload, held-out ones included; >= the best baseline and >= 70 % of the
// copy bandwidth (>= 95 % where the data exceeds L2, the memory-bound rule of benchmarks/reference_kernels.py) on
// the timed workload l8b-b64-p16 (268 MB of K and V: about 0.062 ms at the H200's 4.3 TB/s).
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int kDim = 128;
constexpr int kTile = 16;                 // keys per tile: one TMA box of 16 token rows
constexpr int kRows = 16;                 // query heads per CTA at most: the M of mma.m16n8k16
constexpr int kConsumerWarps = 4;         // each owns 32 of the 128 output dims
constexpr int kDimsPerWarp = kDim / kConsumerWarps;
constexpr int kThreads = 32 * (kConsumerWarps + 1);  // the consumers, then the producer warp
constexpr int kStages = 8;                // 64 KB of K and V in flight per CTA
constexpr int kCtasPerSm = 3;             // what the launch bounds plan for (the driver's occupancy decides)
constexpr int kMinChunkTiles = 4;         // a CTA streams at least 64 keys, so partials stay small beside them
constexpr uint32_t kBoxBytes = kTile * 128;        // 16 rows of 64 dims (128 bytes, swizzled)
constexpr uint32_t kStageBytes = 4 * kBoxBytes;    // K dims 0-63, K dims 64-127, V 0-63, V 64-127
constexpr float kScaleLog2 = 1.4426950408889634f * 0.08838834764831845f;  // log2(e) / sqrt(128)
constexpr float kLn2 = 0.6931471805599453f;
static_assert(kDimsPerWarp == 32, "the PV step below covers 32 dims a warp (two ldmatrix.x4.trans)");

struct Shared {
  __nv_bfloat16 kv[kStages][4][kTile * 64];  // each box 2048 bytes, every box on a 1024-byte boundary
  ptx::RingBarriers<kStages> ring;           // full: the producer's arrive + the stage's bytes; empty: 4 warps
};
constexpr size_t kSmemBytes = sizeof(Shared) + 1024;  // slack to align the base to 1024 (128-byte swizzle)
static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "three CTAs per SM fit in shared memory");

// ---- the walk over a CTA's tiles ----------------------------------------------------------------------

// The sequence whose pages include page-list position p: the last b in [0, B) with kv_indptr[b] <= p. A 32-way
// search by the whole warp (two rounds of loads up to B = 1024), the same answer in every lane.
__device__ __forceinline__ int find_sequence(const int32_t* __restrict__ indptr, int B, int p, int lane) {
  int lo = 0, hi = B;  // indptr[lo] <= p, and hi == B or indptr[hi] > p
  while (hi - lo > 1) {
    const int step = (hi - lo + 31) / 32;
    const int probe = lo + lane * step;
    const bool at_or_before = probe < hi && __ldg(indptr + probe) <= p;
    const int count = __popc(__ballot_sync(0xffffffffu, at_or_before));  // >= 1: lane 0 probes lo
    lo += (count - 1) * step;
    hi = min(hi, lo + step);
  }
  return lo;
}

// A CTA's tiles [t0, t1) of its kv head, in order, skipping those past their sequence's end. Run by whole warps:
// the lanes hold the page-table ends and last-page fills of 32 sequences (and the 32 after), and every lane keeps
// the same copy of the rest. The producer and each consumer warp walk it alike, so they agree on every tile.
struct TileWalk {
  const int32_t* indptr;
  const int32_t* last_len;
  int B, P, per_page, t1, lane;
  int next_tile;
  // The current tile: its page-list position, 16-slot block in the page, first key in the sequence, keys used.
  int tile, p, sub, key0, valid;
  bool ends_segment;    // this CTA's last tile of the sequence (the sequence's last, or the chunk's)
  bool whole_sequence;  // ... and the CTA holds all of it: O and LSE are written directly
  // The current sequence: pages [first_page, end_page), n keys; the first tile of the chunk t0.
  int b, first_page, end_page, n, t0;
  int base;                      // sequences base .. base + 31 are in `ends`, `lasts`; the next 32 in next_*
  int ends, lasts, next_ends, next_lasts;

  __device__ __forceinline__ void load_batch(int from, int& end, int& last) const {
    const int s = from + lane;
    end = s < B ? __ldg(indptr + s + 1) : 0;
    last = s < B ? __ldg(last_len + s) : 0;
  }

  __device__ __forceinline__ void begin(const int32_t* indptr_, const int32_t* last_len_, int B_, int P_, int t0_,
                                        int t1_, int lane_) {
    indptr = indptr_;
    last_len = last_len_;
    B = B_;
    P = P_;
    per_page = P_ / kTile;
    t0 = t0_;
    t1 = t1_;
    lane = lane_;
    next_tile = t0_;
    b = find_sequence(indptr_, B_, t0_ / per_page, lane_);
    base = b;
    load_batch(base, ends, lasts);
    load_batch(base + 32, next_ends, next_lasts);
    first_page = __ldg(indptr_ + b);
    end_page = __shfl_sync(0xffffffffu, ends, 0);
    n = (end_page - first_page - 1) * P_ + __shfl_sync(0xffffffffu, lasts, 0);
  }

  __device__ __forceinline__ void next_sequence() {
    ++b;
    if (b - base == 32) {
      base += 32;
      ends = next_ends;
      lasts = next_lasts;
      load_batch(base + 32, next_ends, next_lasts);
    }
    first_page = end_page;
    end_page = __shfl_sync(0xffffffffu, ends, b - base);
    n = (end_page - first_page - 1) * P + __shfl_sync(0xffffffffu, lasts, b - base);
  }

  // Moves to the next tile that holds keys; false past the chunk's end.
  __device__ __forceinline__ bool next() {
    while (next_tile < t1) {
      tile = next_tile++;
      p = tile / per_page;
      sub = tile - p * per_page;
      while (p >= end_page && b + 1 < B) next_sequence();  // every sequence has a page: at most once a tile
      key0 = (p - first_page) * P + sub * kTile;
      if (key0 >= n) continue;  // slots past the last page's fill
      valid = min(kTile, n - key0);
      const bool last_of_sequence = key0 + kTile >= n;
      ends_segment = last_of_sequence || tile + 1 == t1;
      whole_sequence = last_of_sequence && first_page * per_page >= t0;
      return true;
    }
    return false;
  }
};

// Page numbers of page-list positions, 32 at a time in the lanes (the next 32 prefetched), for the producer.
struct PageBatch {
  const int32_t* indices;
  int NP, lane, base, cur, nxt;

  __device__ __forceinline__ int load(int at) const { return at + lane < NP ? __ldg(indices + at + lane) : 0; }
  __device__ __forceinline__ void begin(const int32_t* indices_, int NP_, int first, int lane_) {
    indices = indices_;
    NP = NP_;
    lane = lane_;
    base = first;
    cur = load(base);
    nxt = load(base + 32);
  }
  __device__ __forceinline__ int page(int p) {
    while (p - base >= 32) {
      base += 32;
      cur = nxt;
      nxt = load(base + 32);
    }
    return __shfl_sync(0xffffffffu, cur, p - base);
  }
};

// ---- the steps ----------------------------------------------------------------------------------------

// Producer warp: every tile of the chunk into the ring, four 2 KB TMA boxes each; lane 0 waits and issues.
__device__ __forceinline__ void producer_loop(Shared& s, const CUtensorMap* map_k, const CUtensorMap* map_v,
                                              const int32_t* indptr, const int32_t* indices, const int32_t* last_len,
                                              int B, int P, int NP, int kv_head, int t0, int t1, int lane) {
  if (lane == 0) {
    ptx::tma_prefetch_map(map_k);
    ptx::tma_prefetch_map(map_v);
  }
  PageBatch pages;  // first: its loads are in flight while the walk searches for its first sequence
  pages.begin(indices, NP, t0 / (P / kTile), lane);
  auto issue = [&](const ptx::RingState& at, int token) {  // lane 0: tile rows token .. token + 15
    uint64_t* full = s.ring.producer_acquire(at, kStageBytes);
    ptx::tma_load_3d(s.kv[at.stage][0], map_k, full, 0, kv_head, token);
    ptx::tma_load_3d(s.kv[at.stage][1], map_k, full, 64, kv_head, token);
    ptx::tma_load_3d(s.kv[at.stage][2], map_v, full, 0, kv_head, token);
    ptx::tma_load_3d(s.kv[at.stage][3], map_v, full, 64, kv_head, token);
  };
  // With pages of 16 every tile holds keys (a page has at least one), so the ring's first fill needs only the page
  // numbers: it goes out before the sequence search, and the walk below skips what it issued.
  const int early = P == kTile ? min(kStages, t1 - t0) : 0;
  ptx::RingState at;
  for (int i = 0; i < early; ++i) {
    const int token = pages.page(t0 / (P / kTile) + i) * P;
    if (lane == 0) issue(at, token);
    __syncwarp();
    at.advance(kStages);
  }
  TileWalk walk;
  walk.begin(indptr, last_len, B, P, t0, t1, lane);
  while (walk.next()) {
    if (walk.tile < t0 + early) continue;  // issued above, in the same stages
    const int token = pages.page(walk.p) * P + walk.sub * kTile;  // row of the [NP·P][KH][128] view
    if (lane == 0) issue(at, token);
    __syncwarp();
    at.advance(kStages);
  }
}

// D += A · B, m16n8k16, bf16 operands, fp32 accumulators (the PTX ISA's fragment layouts).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// Q of sequence b as the A fragments of the 8 k-steps (16 dims each): rows r = lane / 4 and r + 8 of the CTA's
// 16 query heads, dims 16 ks + 2 (lane % 4) + {0, 1} and + 8. Rows past the group's heads are zero.
__device__ __forceinline__ void load_q(uint32_t (&q)[8][4], const __nv_bfloat16* __restrict__ Q, int b, int H,
                                       int head0, int rows_active, int lane) {
  const int r = lane >> 2, t = lane & 3;
  const uint32_t* row0 = reinterpret_cast<const uint32_t*>(Q + (int64_t(b) * H + head0 + r) * kDim) + t;
  const uint32_t* row1 = row0 + 8 * kDim / 2;
  const bool use0 = r < rows_active, use1 = r + 8 < rows_active;
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) {
    q[ks][0] = use0 ? __ldg(row0 + ks * 8) : 0u;
    q[ks][1] = use1 ? __ldg(row1 + ks * 8) : 0u;
    q[ks][2] = use0 ? __ldg(row0 + ks * 8 + 4) : 0u;
    q[ks][3] = use1 ? __ldg(row1 + ks * 8 + 4) : 0u;
  }
}

// Starts moving the query rows of sequence b into L2 (one 128-byte line a lane), for load_q at its segment's start.
__device__ __forceinline__ void prefetch_q(const __nv_bfloat16* __restrict__ Q, int b, int H, int head0,
                                           int rows_active, int lane) {
  if (lane < 2 * rows_active) {
    const __nv_bfloat16* line = Q + (int64_t(b) * H + head0 + lane / 2) * kDim + (lane % 2) * 64;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
  }
}

// Where this consumer's running state goes at a segment's end: O and LSE when the CTA held the whole sequence,
// else the partial's slot (normalised fp32 output and the log2-sum-exp).
struct Outputs {
  __nv_bfloat16* O;
  float* LSE;
  float* part_o;
  float* part_lse;
  int H, head0, rows_active, chunk_index;
};

// Rows r and r + 8 of this warp's 32 dims: o[nt] holds dims 32 w + 8 nt + 2 (lane % 4) + {0, 1}.
__device__ __forceinline__ void write_segment(const Outputs& out, int b, bool whole, const float (&o)[4][4],
                                              const float (&m)[2], const float (&l)[2], int warp, int lane) {
  const int r = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r + 8 * h;
    const float total = quad_sum(l[h]);  // >= 1: the max's own term
    if (row >= out.rows_active) continue;
    const float inv = 1.0f / total;
    const float lse2 = m[h] + log2f(total);
    const int64_t head = int64_t(out.head0) + row;
    if (whole) {
      __nv_bfloat16* dst = out.O + (int64_t(b) * out.H + head) * kDim + warp * kDimsPerWarp + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        *reinterpret_cast<uint32_t*>(dst + 8 * nt) = ptx::pack_bf16x2(o[nt][2 * h] * inv, o[nt][2 * h + 1] * inv);
      if (warp == 0 && t == 0) out.LSE[int64_t(b) * out.H + head] = lse2 * kLn2;
    } else {
      const int64_t slot = int64_t(out.chunk_index) + b;
      float* dst = out.part_o + (slot * out.H + head) * kDim + warp * kDimsPerWarp + 2 * t;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(o[nt][2 * h] * inv, o[nt][2 * h + 1] * inv);
      if (warp == 0 && t == 0) out.part_lse[slot * out.H + head] = lse2;
    }
  }
}

// Consumer warp `warp`: every tile of the chunk. Per tile: S for all 16 keys, the online softmax, O += P V for
// dims 32 warp .. + 31; at a segment's end its output, then a fresh state for the next sequence.
__device__ __forceinline__ void consumer_loop(Shared& s, const __nv_bfloat16* __restrict__ Q, const int32_t* indptr,
                                              const int32_t* last_len, const Outputs& out, int B, int P, int t0,
                                              int t1, int warp, int lane) {
  const int t = lane & 3;
  TileWalk walk;
  walk.begin(indptr, last_len, B, P, t0, t1, lane);

  // Byte offsets in a stage (128-byte swizzle: 16-byte chunk c of row r at r * 128 + ((c ^ (r % 8)) << 4); rows
  // r here have r % 8 = lane % 8). ldmatrix: lane l gives row l % 8 of matrix l / 8.
  const uint32_t sw = uint32_t(lane & 7);
  // K, non-transposed: matrix i = dims chunk 4 kp + i of keys 8 j + l % 8 (kp = 0..3, j = 0, 1).
  const uint32_t k_lane = sw * 128;
  const uint32_t k_chunk = uint32_t(lane >> 3);  // + 4 (kp % 2), XOR sw
  // V, transposed: matrices (keys 0-7, chunk c), (keys 8-15, c), (0-7, c + 1), (8-15, c + 1), c = 4 warp + 2 dp.
  const uint32_t v_row = uint32_t(((lane >> 3) & 1) * 8) + sw;
  const uint32_t v_base = 2 * kBoxBytes + uint32_t(warp >> 1) * kBoxBytes + v_row * 128;
  const uint32_t v_chunk = uint32_t(4 * (warp & 1) + (lane >> 4));  // + 2 dp, XOR sw

  uint32_t q[8][4];
  int q_seq = -1;

  float o[4][4], m[2], l[2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  ptx::RingState at;
  while (walk.next()) {
    if (walk.b != q_seq) {  // a new segment: its query rows (from L2: prefetched at the last segment's start)
      q_seq = walk.b;
      load_q(q, Q, q_seq, out.H, out.head0, out.rows_active, lane);
      if (q_seq + 1 < B) prefetch_q(Q, q_seq + 1, out.H, out.head0, out.rows_active, lane);
    }
    const uint8_t* stage = reinterpret_cast<const uint8_t*>(s.kv[at.stage]);
    s.ring.consumer_wait(at);

    // S = Q Kᵀ: n-tile j holds keys 8 j .. 8 j + 7.
    float sc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
      for (int kp = 0; kp < 4; ++kp) {  // 32 dims: k-steps 2 kp and 2 kp + 1
        uint32_t b0, b1, b2, b3;
        const uint32_t chunk = (k_chunk + 4 * (kp & 1)) ^ sw;
        ptx::ldmatrix_x4(stage + (kp >> 1) * kBoxBytes + j * 8 * 128 + k_lane + (chunk << 4), b0, b1, b2, b3);
        mma_bf16(sc[j], q[2 * kp], b0, b1);
        mma_bf16(sc[j], q[2 * kp + 1], b2, b3);
      }
    }
    // Vᵀ fragments of this warp's 32 dims: v[dp][0..1] keys 0-15 of chunk 4 warp + 2 dp, v[dp][2..3] the next.
    uint32_t v[2][4];
#pragma unroll
    for (int dp = 0; dp < 2; ++dp)
      ptx::ldmatrix_x4_trans(stage + v_base + (((v_chunk + 2 * dp) ^ sw) << 4), v[dp][0], v[dp][1], v[dp][2],
                             v[dp][3]);
    __syncwarp();  // every lane's reads of the stage are done
    if (lane == 0) s.ring.consumer_release(at.stage);
    at.advance(kStages);

    // Keys past the sequence's end (only in its last tile): score -inf, V rows zero.
    if (walk.valid < kTile) {
      const int valid = walk.valid;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (8 * j + 2 * t + (e & 1) >= valid) sc[j][e] = -INFINITY;
      // b0 / b2 hold keys 2t, 2t + 1; b1 / b3 keys 8 + 2t, 9 + 2t (low half first).
      const uint32_t keep_lo = (2 * t < valid ? 0x0000ffffu : 0u) | (2 * t + 1 < valid ? 0xffff0000u : 0u);
      const uint32_t keep_hi = (2 * t + 8 < valid ? 0x0000ffffu : 0u) | (2 * t + 9 < valid ? 0xffff0000u : 0u);
#pragma unroll
      for (int dp = 0; dp < 2; ++dp) {
        v[dp][0] &= keep_lo;
        v[dp][2] &= keep_lo;
        v[dp][1] &= keep_hi;
        v[dp][3] &= keep_hi;
      }
    }

    // Online softmax in base 2: rows r (h = 0: registers 0, 1) and r + 8 (h = 1: registers 2, 3).
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row_max = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
      const float m_new = fmaxf(m[h], quad_max(row_max) * kScaleLog2);  // finite: key 0 of a tile is valid
      alpha[h] = ptx::ex2_approx(m[h] - m_new);                           // 0 on a segment's first tile
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        sc[j][2 * h] = ptx::ex2_approx(fmaf(sc[j][2 * h], kScaleLog2, -m_new));
        sc[j][2 * h + 1] = ptx::ex2_approx(fmaf(sc[j][2 * h + 1], kScaleLog2, -m_new));
        sum += sc[j][2 * h] + sc[j][2 * h + 1];
      }
      l[h] = l[h] * alpha[h] + sum;
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
    // O += P V: P (16 rows x 16 keys) as the A fragment, straight from the score registers.
    const uint32_t pa[4] = {ptx::pack_bf16x2(sc[0][0], sc[0][1]), ptx::pack_bf16x2(sc[0][2], sc[0][3]),
                            ptx::pack_bf16x2(sc[1][0], sc[1][1]), ptx::pack_bf16x2(sc[1][2], sc[1][3])};
#pragma unroll
    for (int dp = 0; dp < 2; ++dp) {
      mma_bf16(o[2 * dp], pa, v[dp][0], v[dp][1]);
      mma_bf16(o[2 * dp + 1], pa, v[dp][2], v[dp][3]);
    }

    if (walk.ends_segment) {
      write_segment(out, walk.b, walk.whole_sequence, o, m, l, warp, lane);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
    }
  }
}

// ---- the kernels --------------------------------------------------------------------------------------

// One CTA per (chunk, kv head, block of 16 query heads): tiles [chunk · c, chunk · (c + 1)) of the kv head.
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
decode_split_kernel(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                    const __nv_bfloat16* __restrict__ Q, const int32_t* __restrict__ indptr,
                    const int32_t* __restrict__ indices, const int32_t* __restrict__ last_len,
                    __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, float* __restrict__ part_o,
                    float* __restrict__ part_lse, int B, int H, int KH, int P, int NP, int chunk, int tiles) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *ptx::align_smem<Shared>(smem_raw);
  // The merge kernel may be scheduled from now on; it waits for this whole grid before reading the partials.
  ptx::griddep_launch_dependents();

  const int warp = int(ptx::warp_idx()), lane = int(threadIdx.x & 31);
  const int c = int(blockIdx.x), kv_head = int(blockIdx.y);
  const int t0 = c * chunk, t1 = min(t0 + chunk, tiles);
  const int group = H / KH;
  Outputs out;
  out.O = O;
  out.LSE = LSE;
  out.part_o = part_o;
  out.part_lse = part_lse;
  out.H = H;
  out.head0 = kv_head * group + int(blockIdx.z) * kRows;
  out.rows_active = min(kRows, group - int(blockIdx.z) * kRows);
  out.chunk_index = c;

  if (threadIdx.x == 0) s.ring.init(kStages, kConsumerWarps);
  __syncthreads();

  if (warp == kConsumerWarps) {
    producer_loop(s, &map_k, &map_v, indptr, indices, last_len, B, P, NP, kv_head, t0, t1, lane);
    return;
  }
  consumer_loop(s, Q, indptr, last_len, out, B, P, t0, t1, warp, lane);
}

// One warp per (sequence, query head); lane l owns dims 4 l .. 4 l + 3. Sequences one CTA held whole were written
// by it; the others' partials are slots c + b for the chunks c from the one of the sequence's first tile to the
// one of its last.
__global__ void __launch_bounds__(128)
decode_merge_kernel(const float* __restrict__ part_o, const float* __restrict__ part_lse,
                    const int32_t* __restrict__ indptr, const int32_t* __restrict__ last_len,
                    __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int H, int P, int chunk) {
  // Every thread waits for the decode kernel to finish (and its partials to be visible), even one with nothing to
  // merge: so the merge grid cannot end before the decode grid, and what follows on the stream follows both.
  ptx::griddep_wait();
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int head_groups = (H + 3) / 4;
  const int b = int(blockIdx.x) / head_groups;
  const int h = (int(blockIdx.x) % head_groups) * 4 + warp;
  if (h >= H) return;  // warp-uniform

  const int per_page = P / kTile;
  const int first_page = __ldg(indptr + b), end_page = __ldg(indptr + b + 1);
  const int n = (end_page - first_page - 1) * P + __ldg(last_len + b);
  const int64_t first_tile = int64_t(first_page) * per_page;
  const int c0 = int(first_tile / chunk), c1 = int((first_tile + (n - 1) / kTile) / chunk);
  if (c0 == c1) return;

  const int parts = c1 - c0 + 1;
  const int64_t slot0 = int64_t(c0) + b;
  float top = -INFINITY;
  for (int i = lane; i < parts; i += 32) top = fmaxf(top, part_lse[(slot0 + i) * H + h]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, off));

  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float total = 0.0f;
  for (int i = 0; i < parts; ++i) {
    const int64_t at = (slot0 + i) * H + h;
    const float w = ptx::ex2_approx(part_lse[at] - top);
    const float4 x = *reinterpret_cast<const float4*>(part_o + at * kDim + lane * 4);
    total += w;
    acc.x = fmaf(w, x.x, acc.x);
    acc.y = fmaf(w, x.y, acc.y);
    acc.z = fmaf(w, x.z, acc.z);
    acc.w = fmaf(w, x.w, acc.w);
  }
  const float inv = 1.0f / total;
  uint2 packed;
  packed.x = ptx::pack_bf16x2(acc.x * inv, acc.y * inv);
  packed.y = ptx::pack_bf16x2(acc.z * inv, acc.w * inv);
  *reinterpret_cast<uint2*>(O + (int64_t(b) * H + h) * kDim + lane * 4) = packed;
  if (lane == 0) LSE[int64_t(b) * H + h] = (top + log2f(total)) * kLn2;
}

// ---- host ---------------------------------------------------------------------------------------------

// A cache [NP][P][KH][128] as [NP·P tokens][KH][128], read in boxes of 16 tokens x 1 head x 64 dims.
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t KH, int64_t tokens) {
  const uint64_t dims[3] = {uint64_t(kDim), uint64_t(KH), uint64_t(tokens)};
  const uint64_t strides[2] = {uint64_t(kDim) * 2, uint64_t(KH) * kDim * 2};
  const uint32_t box[3] = {64, 1, uint32_t(kTile)};
  return ptx::make_tma_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_128B);
}

// Per-device facts, asked once (host time between the caller's events is not free either).
struct DeviceFacts {
  bool ready = false;
  int resident = 0;  // decode CTAs the GPU holds at once
};

DeviceFacts* device_facts() {
  static DeviceFacts facts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  DeviceFacts& f = facts[dev];
  if (!f.ready) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(decode_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_split_kernel, kThreads, kSmemBytes) !=
            cudaSuccess)
      return nullptr;
    f.resident = sms * (per_sm > 0 ? per_sm : 1);
    f.ready = true;
  }
  return &f;
}

// The split: chunks of equal tile counts, as many CTAs as the GPU holds at once (at least kMinChunkTiles tiles
// each); `splits` chunks cover the kv head's tiles, the last one possibly shorter.
struct Split {
  int64_t chunk, splits;
};

Split choose_split(int64_t tiles, int64_t columns, int64_t resident) {
  const int64_t want = resident / columns > 0 ? resident / columns : 1;
  int64_t chunk = (tiles + want - 1) / want;
  if (chunk < kMinChunkTiles) chunk = kMinChunkTiles;
  return {chunk, (tiles + chunk - 1) / chunk};
}

}  // namespace

extern "C" int decode_gqa_paged(
    const __nv_bfloat16* __restrict__ Q,
    const __nv_bfloat16* __restrict__ K_cache,
    const __nv_bfloat16* __restrict__ V_cache,
    const int32_t* __restrict__ kv_indptr,
    const int32_t* __restrict__ kv_indices,
    const int32_t* __restrict__ kv_last_page_len,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t H,
    int64_t KH,
    int64_t P,
    int64_t NP,
    int64_t L,
    cudaStream_t stream) {
  (void)L;  // the lengths come from the page tables on the device
  if (B <= 0 || H <= 0) return int(cudaGetLastError());
  if (KH <= 0 || H % KH != 0 || P <= 0 || P % kTile != 0 || NP < B) return int(cudaErrorInvalidValue);
  // int indices in the kernels: tokens of the cache, heads of the batch, workspace slots.
  if (NP * P > INT32_MAX || B * H > INT32_MAX / kDim || KH > 65535) return int(cudaErrorInvalidValue);
  DeviceFacts* dev = device_facts();
  if (dev == nullptr) return int(cudaErrorInitializationError);

  const int64_t group = H / KH;
  const int64_t head_blocks = (group + kRows - 1) / kRows;
  const int64_t tiles = NP * (P / kTile);
  const Split split = choose_split(tiles, KH * head_blocks, dev->resident);

  CUtensorMap map_k, map_v;
  cudaError_t err;
  if ((err = make_map(&map_k, K_cache, KH, NP * P)) != cudaSuccess ||
      (err = make_map(&map_v, V_cache, KH, NP * P)) != cudaSuccess)
    return int(err);

  // Workspace slot c + b for chunk c's piece of sequence b: c < splits, b < B.
  const size_t slots = size_t(split.splits + B - 1);
  const size_t partial_floats = slots * size_t(H) * kDim;
  float* workspace = nullptr;
  if ((err = cudaMallocAsync(reinterpret_cast<void**>(&workspace), (partial_floats + slots * size_t(H)) * sizeof(float),
                             stream)) != cudaSuccess)
    return int(err);
  float* const part_o = workspace;
  float* const part_lse = workspace + partial_floats;

  decode_split_kernel<<<dim3(unsigned(split.splits), unsigned(KH), unsigned(head_blocks)), kThreads, kSmemBytes,
                        stream>>>(map_k, map_v, Q, kv_indptr, kv_indices, kv_last_page_len, O, LSE, part_o, part_lse,
                                  int(B), int(H), int(KH), int(P), int(NP), int(split.chunk), int(tiles));
  err = cudaGetLastError();
  if (err == cudaSuccess) {
    // The merge, launched to overlap the decode kernel's end (programmatic dependent launch).
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(B * ((H + 3) / 4)), 1, 1);
    config.blockDim = dim3(128, 1, 1);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    err = cudaLaunchKernelEx(&config, decode_merge_kernel, static_cast<const float*>(part_o),
                             static_cast<const float*>(part_lse), kv_indptr, kv_last_page_len, O, LSE, int(H), int(P),
                             int(split.chunk));
    if (err == cudaSuccess) err = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(workspace, stream);
  return int(err != cudaSuccess ? err : freed);
}
