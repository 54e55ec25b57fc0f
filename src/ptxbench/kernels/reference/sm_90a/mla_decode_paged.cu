// mla_decode_paged, expert reference for sm_90a (H100/H200): one decoding step of DeepSeek-V3's multi-head latent
// attention with absorbed weights over a paged latent cache. q_nope [B, H, 512], q_pe [B, H, 64] bf16; ckv_cache
// [NP, P, 512], kpe_cache [NP, P, 64] bf16 (one latent KV head shared by every query head); sequence b owns the
// pages kv_indices[kv_indptr[b] .. kv_indptr[b + 1]), all full but the last (kv_last_page_len[b] tokens). Per head:
// scores_j = (q_nope · c_j + q_pe · r_j) · sm_scale, output = softmax(scores) · C (bf16, 512 dims), lse (natural
// log, fp32).
//
// NOT YET MEASURED ON A GPU. Checked here only by `ptxbench check` (builds for sm_90a, wgmma, TMA and mbarrier in
// the SASS), the static reference tests, and a NumPy model of its split, its walk and its merge
// (tests/test_reference_mla_model.py), and a model of its buffers' schedule (tests/test_mla_decode_schedules.py).
// Its correctness and speed on an H100 are to be measured; figures go here.
//
// First H100 run (2026-12-07): the decode kernel did not launch, cudaError 701 (too many resources requested) on
// the first workload. It was built with __maxnreg__(224) for 288 threads: 220 registers (224 allocated) x 288 =
// 64512 looked within the 65536 of a CTA, but the hardware's check counts warps in whole sets of four (one per SM
// sub-partition, 16384 registers each): 9 warps count as 12, 12 x 32 x 224 = 86016. A CTA of 9 to 12 warps may
// launch with at most 168 registers a thread. Fixed as the other warp-specialised references do: a whole producer
// warpgroup (384 threads, its first warp works, the other three only give their registers up and exit),
// __launch_bounds__(384, 1) (168 at launch) and setmaxnreg, producer 40 and consumers 232 (consumer code up to R215,
// producer's below R40; no spills). Since the fix, on an H100 80GB (2026-12-07): PASSED on every workload
// with every feature executed, 57-82 % of FlashInfer's MLA decode (benchmarks/results/reference_kernels_h100.md).
//
// Why it is shaped so. With 128 heads sharing each 1152-byte token row, the task does 2 · 128 · 1088 FLOPs per row:
// about 240 FLOPs per cache byte, near the ridge of an H100 (~990 TFLOP/s over ~3.3 TB/s), so both products must run
// on wgmma and every SM must stream its share of the cache from start to end:
//
//   * Tiles and the split. A tile is 64 consecutive keys of one sequence (one page of 64, four of 16, or 64 rows of
//     pages of 1); sequence b has ceil(n_b / 64) tiles, and the batch's tiles are numbered sequence after sequence.
//     That numbering is cut into `splits` equal chunks, one CTA per (chunk, block of 64 query heads), with
//     splits x head blocks <= the SM count: one wave, every CTA the same number of tiles whatever the lengths (the
//     lengths are lognormal: a few sequences hold most keys). The host does not know the lengths (they are on the
//     device), so it sizes the chunks on an upper bound of the tile count (NP with pages of 64, which is exact;
//     (L + 63 B) / 64 otherwise); CTAs past the real end find no tile and exit. Each CTA finds its first sequence by
//     a warp-wide prefix sum over the sequences' tile counts (32 sequences a step), then walks on.
//   * The two head blocks of a chunk (H = 128) read the same pages at about the same time, so the second read is
//     mostly an L2 hit: DRAM sees the cache about once.
//   * Warp roles (384 threads): warpgroups 0 and 1 are consumers, warp 8 (of warpgroup 2) is the producer. It walks the
//     chunk's tiles and, per tile, waits for a free stage of a 2-stage ring (RingBarriers: full = the producer's
//     arrive + the tile's bytes, empty = one arrive per consumer warp) and loads it with 2-D TMA boxes, 128-byte
//     swizzle: per page (or group of P rows) 8 boxes of 64 latent dims and one of the 64 rope dims, R = min(P, 64)
//     rows each, placed at row g · R of nine 64-row slabs of 128-byte rows. With P = 1 the 32 lanes issue the 64
//     token rows of a tile in parallel. Only pages that hold keys are loaded; the barrier expects exactly their bytes.
//     With P = 1 a box is one 128-byte row placed at a 128-byte (not 1024-byte) offset: this relies on TMA applying the
//     128-byte swizzle as a function of the shared-memory address (as wgmma reads it), which the P = 1 workloads and
//     edge shapes test; it is the first suspect should only they fail.
//   * Registers: the consumers hold O (64 x 256 fp32: 128 registers) and S (16), more than the 168 a thread of a
//     384-thread CTA launches with; setmaxnreg gives the consumers 232 and the producer warpgroup 40
//     (128 x (40 + 2 x 232) = 64512 <= 65536). Not __maxnreg__ on fewer threads: see the 701 above.
//   * Consumers, per tile (64 heads x 64 keys; warpgroup w owns keys 32 w .. 32 w + 31 of S and output dims
//     256 w .. 256 w + 255):
//       S_w = Q · K_wᵀ     36 wgmma m64n32k16 (K = 576: 9 slabs x 4), A = Q (9 slabs in shared memory, loaded by TMA
//                          when a sequence starts), B = the tile's keys, both K-major;
//       softmax            base 2, sm_scale · log2(e) folded into one FMA before ex2; the row max of the 64 keys is
//                          exchanged between the warpgroups through shared memory (named barrier 1), so both keep the
//                          same running max m and rescale factor alpha; each keeps its own partial row sum;
//       P to shared        each warpgroup writes its 32 columns of P (bf16, the 128-byte-swizzled K-major layout)
//                          into one 64 x 64 tile; fence.proxy.async; named barrier 2;
//       O_w += P · V_w     4 wgmma m64n256k16, A = P (64 keys) and B = the tile's latent slabs 4 w .. 4 w + 3,
//                          MN-major (the values are the keys' latent vectors: the same shared memory, read again);
//       release            after the PV wait, each warp's lane 0 arrives on the stage's empty barrier (8 arrivals).
//     One buffer each for P and the max exchange suffices: a warpgroup writes tile i + 1's P only after named barrier
//     1 of tile i + 1, which the other warpgroup reaches only after its PV wait of tile i, and it writes tile i + 1's
//     maxima only after barrier 2 of tile i, which the other reaches only after reading tile i's.
//   * Segments. A chunk may start or end inside a sequence and may hold several; the consumers keep one online softmax
//     per piece (a segment). At a segment's start both warpgroups meet (named barrier 4: their last S is done) and
//     thread 0 loads the sequence's Q (64 rows: heads 64 y .. of this head block, rows past H never stored) into the
//     Q slabs with TMA, and starts the next sequence's Q towards L2 (a TMA prefetch) when the chunk goes on past this
//     one. At its end the partial row sums are added across the warpgroups (named barrier 3) and each
//     warpgroup writes its 256 dims: straight to output and lse when the CTA held the whole sequence, else to the
//     piece's workspace slot (chunk c + b: unique, as pieces are ordered by key position), as bf16 O / l and the
//     base-2 log-sum-exp.
//   * Partial last tiles. Keys past the sequence's end get score -inf (selected after the product, so whatever is
//     in their shared rows, even NaN, cannot reach a score), and their value rows (the latent slabs) are zeroed in
//     shared memory before P · V, so stale rows of an earlier tile (or a page's unused slots) never meet a zero P as
//     0 · NaN.
//   * The merge kernel (one warp per sequence and head, 16 dims a lane) combines the pieces of split sequences:
//     M = max lse2_s, w_s = 2^(lse2_s - M), O = Σ w_s O_s / Σ w_s, lse = (M + log2 Σ w_s) · ln 2. The CTA holding a
//     sequence's first tile records its first tile number, from which the merge finds its chunks. It is launched
//     with programmatic dependent launch: its CTAs wait (griddepcontrol.wait) for the decode grid.
//   * Workspace (cudaMallocAsync on the caller's stream, freed after the merge; nothing outlives the call): partial O
//     bf16 (splits + B - 1) x H x 512, partial lse fp32, and one int per sequence. bf16 partials halve the traffic of
//     the pieces (on the timed workload about 2 x 132 pieces x 64 heads x 1 KB) for one more rounding of 2^-9, well
//     inside the output tolerance of 4 bf16 ulp.
//
// Expected limits (to be measured): S uses m64n32 instructions (each warpgroup's half of the keys), which read the
// 64 x 16 A block from shared memory for only 32 columns; the two warpgroups run in step (the max exchange), so the
// tensor cores idle during the softmax; and a 2-stage ring of 72 KB tiles (Q takes 72 KB of the 227) leaves one tile
// in flight while the other is consumed. Targets (issue 38): PASSED on every workload; >= 70 % of the copy bandwidth
// on the timed workload dsv3-b64-p64 (230 MB of cache).
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int kLatent = 512;
constexpr int kRope = 64;
constexpr int kSlabs = (kLatent + kRope) / 64;  // 9 slabs of 64 dims (128-byte rows): 8 latent, 1 rope
constexpr int kRows = 64;                       // query heads per CTA: wgmma's M
constexpr int kKeys = 64;                       // keys per tile
constexpr int kHalfKeys = kKeys / 2;            // keys of S per consumer warpgroup
constexpr int kStages = 2;
constexpr int kConsumerThreads = 256;           // two warpgroups
constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup (its first warp works)
constexpr int kProducerWarp = kConsumerThreads / 32;
// setmaxnreg's split of the 168 registers per thread a 384-thread CTA launches with: per SM sub-partition (one
// warp of each warpgroup) 2 x 232 + 40 = 504 <= 512, i.e. 128 x (40 + 2 x 232) = 64512 <= 65536.
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= 65536, "the register pool of one CTA");
constexpr int kSlabElems = 64 * 64;             // one 64-row slab: 8 KB
constexpr uint32_t kSlabBytes = kSlabElems * 2;
constexpr uint32_t kQBytes = kSlabs * kSlabBytes;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Named barriers among the 256 consumer threads (0 is __syncthreads).
constexpr uint32_t kBarMax = 1, kBarP = 2, kBarSum = 3, kBarQ = 4;

struct Shared {
  __nv_bfloat16 q[kSlabs][kSlabElems];           // the segment's 64 query rows x 576 dims
  __nv_bfloat16 kv[kStages][kSlabs][kSlabElems];  // tiles: 64 keys x 576 dims each
  __nv_bfloat16 p[kRows * kKeys];                 // P of the current tile, K-major, 128-byte swizzle
  float row_max[2][kRows];                        // each warpgroup's row maxima of the tile (raw scores)
  float row_sum[2][kRows];                        // each warpgroup's row sums at a segment's end
  ptx::RingBarriers<kStages> ring;
  uint64_t q_full;
};
constexpr size_t kSmemBytes = sizeof(Shared) + 1024;  // slack to align the base to 1024 (128-byte swizzle)
static_assert(kSmemBytes <= 232448, "fits the 227 KB of shared memory an H100 CTA may opt into");
static_assert(offsetof(Shared, kv) % 1024 == 0 && offsetof(Shared, p) % 1024 == 0, "swizzled tiles 1024-aligned");

// ---- the walk over a CTA's tiles ----------------------------------------------------------------------

// A CTA's tiles [t0, t1) in order. Run by whole warps, every lane with the same copy: the producer and each
// consumer warp walk alike, so they agree on every tile and segment without talking.
struct TileWalk {
  const int32_t* indptr;
  const int32_t* last_len;
  int B, P, t0, t1, next_tile;
  bool done;
  // The current sequence: its number, its first tile's number, tiles, keys, first page-list position.
  int b, tstart, ntiles, n, first_page;
  // The current tile: its number, its index in the sequence, its keys (1..64).
  int tile, j, valid;
  bool seg_start;     // the CTA's first tile of this sequence
  bool ends_segment;  // the CTA's last tile of this sequence (the sequence's last, or the chunk's)
  bool whole;         // ... and the CTA holds the whole sequence

  __device__ __forceinline__ int keys_of(int s) const {
    return (__ldg(indptr + s + 1) - __ldg(indptr + s) - 1) * P + __ldg(last_len + s);
  }

  __device__ __forceinline__ void set_sequence(int s, int start) {
    b = s;
    tstart = start;
    first_page = __ldg(indptr + s);
    n = (__ldg(indptr + s + 1) - first_page - 1) * P + __ldg(last_len + s);
    ntiles = (n + kKeys - 1) / kKeys;
  }

  // Finds the sequence holding tile t0: an inclusive prefix sum of 32 sequences' tile counts a step.
  __device__ __forceinline__ void begin(const int32_t* indptr_, const int32_t* last_len_, int B_, int P_, int t0_,
                                        int t1_, int lane) {
    indptr = indptr_;
    last_len = last_len_;
    B = B_;
    P = P_;
    t0 = t0_;
    t1 = t1_;
    next_tile = t0_;
    done = true;
    int before = 0;  // tiles of the sequences before `base`
    for (int base = 0; base < B; base += 32) {
      const int s = base + lane;
      const int count = s < B ? (keys_of(s) + kKeys - 1) / kKeys : 0;
      int incl = count;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      const int end = before + incl;  // one past the last tile of sequence s
      const unsigned hit = __ballot_sync(0xffffffffu, s < B && end > t0);
      if (hit != 0u) {
        const int h = __ffs(int(hit)) - 1;
        set_sequence(base + h, __shfl_sync(0xffffffffu, end - count, h));
        done = false;
        break;
      }
      before += __shfl_sync(0xffffffffu, incl, 31);
    }
  }

  // Moves to the next tile; false past the chunk's (or the batch's) end.
  __device__ __forceinline__ bool next() {
    if (done || next_tile >= t1) return false;
    tile = next_tile++;
    j = tile - tstart;
    if (j >= ntiles) {  // tiles are consecutive: j == ntiles, the next sequence starts at this tile
      if (b + 1 >= B) {
        done = true;
        return false;
      }
      set_sequence(b + 1, tstart + ntiles);
      j = 0;
    }
    valid = min(kKeys, n - j * kKeys);
    seg_start = j == 0 || tile == t0;
    const bool last = j + 1 == ntiles;
    ends_segment = last || tile + 1 == t1;
    whole = last && tstart >= t0;
    return true;
  }
};

// ---- the producer -------------------------------------------------------------------------------------

// Every tile of the chunk into the ring: per group of R = min(P, 64) rows (a page, or with P = 1 a token), nine
// TMA boxes of R x 64 dims into the nine slabs at row g · R. Lane 0 waits and arms; the lanes issue the groups.
__device__ __forceinline__ void producer_loop(Shared& s, const CUtensorMap* map_ckv, const CUtensorMap* map_kpe,
                                              const int32_t* indptr, const int32_t* indices, const int32_t* last_len,
                                              int B, int P, int t0, int t1, int lane) {
  if (lane == 0) {
    ptx::tma_prefetch_map(map_ckv);
    ptx::tma_prefetch_map(map_kpe);
  }
  const int rows = P < kKeys ? P : kKeys;  // rows of one box: 64, 16 or 1
  const int groups = kKeys / rows;         // page-list positions per tile: 1, 4 or 64
  TileWalk walk;
  walk.begin(indptr, last_len, B, P, t0, t1, lane);
  ptx::RingState at;
  while (walk.next()) {
    const int used = (walk.valid + rows - 1) / rows;  // groups holding keys
    const int list0 = walk.first_page + walk.j * groups;
    // This lane's page numbers, loaded before the wait so their latency hides behind it.
    const int page_a = lane < used ? __ldg(indices + list0 + lane) : 0;
    const int page_b = lane + 32 < used ? __ldg(indices + list0 + lane + 32) : 0;
    if (lane == 0) s.ring.producer_acquire(at, uint32_t(used * rows) * 128u * kSlabs);
    __syncwarp();  // the stage is free and armed before any lane's copy lands in it
    uint64_t* full = &s.ring.full[at.stage];
    uint8_t* stage = reinterpret_cast<uint8_t*>(s.kv[at.stage]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int g = lane + 32 * half;
      if (g < used) {
        const int row = (half == 0 ? page_a : page_b) * P;  // first cache row of the group
        uint8_t* dst = stage + g * rows * 128;
#pragma unroll
        for (int slab = 0; slab < kSlabs - 1; ++slab)
          ptx::tma_load_2d(dst + slab * kSlabBytes, map_ckv, full, 64 * slab, row);
        ptx::tma_load_2d(dst + (kSlabs - 1) * kSlabBytes, map_kpe, full, 0, row);
      }
    }
    __syncwarp();
    at.advance(kStages);
  }
}

// ---- the consumers ------------------------------------------------------------------------------------

// Where a segment's result goes: output and lse when the CTA held the whole sequence, else the piece's slot.
struct Outputs {
  __nv_bfloat16* output;
  float* lse;
  __nv_bfloat16* part_o;
  float* part_lse;
  int H, head0, chunk_index;
};

// The four lanes of a quad hold one row's columns: reduce across them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Rows r (h = 0) and r + 8 (h = 1) of this thread, r = 16 warp + lane / 4: O / l to bf16 (register 4 nt + 2 h + e
// is dim 256 wg + 8 nt + 2 (lane % 4) + e), and the log-sum-exp.
__device__ __forceinline__ void write_segment(const Outputs& out, int b, bool whole, const float (&o)[128],
                                              const float (&m)[2], const float (&total)[2], int wg, int warp,
                                              int lane) {
  const int t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = 16 * warp + (lane >> 2) + 8 * h;
    const int head = out.head0 + row;
    if (head >= out.H) continue;
    const float inv = 1.0f / total[h];  // >= 1: the max's own term
    const float lse2 = m[h] + log2f(total[h]);
    const int64_t at = int64_t(b) * out.H + head;
    __nv_bfloat16* dst;
    if (whole) {
      dst = out.output + at * kLatent;
      if (wg == 0 && t == 0) out.lse[at] = lse2 * kLn2;
    } else {
      const int64_t slot = int64_t(out.chunk_index) + b;
      dst = out.part_o + (slot * out.H + head) * kLatent;
      if (wg == 0 && t == 0) out.part_lse[slot * out.H + head] = lse2;
    }
    dst += 256 * wg + 2 * t;
#pragma unroll
    for (int nt = 0; nt < 32; ++nt)
      *reinterpret_cast<uint32_t*>(dst + 8 * nt) = ptx::pack_bf16x2(o[4 * nt + 2 * h] * inv, o[4 * nt + 2 * h + 1] * inv);
  }
}

__device__ __forceinline__ void consumer_loop(Shared& s, const CUtensorMap* map_qn, const CUtensorMap* map_qp,
                                              const int32_t* indptr, const int32_t* last_len, const Outputs& out,
                                              int* seq_tile0, float scale_log2, int B, int P, int t0, int t1) {
  const int tid = int(threadIdx.x);  // 0..255
  const int wg = tid >> 7;
  const int warp = (tid >> 5) & 3;   // warp in the warpgroup: rows 16 warp ..
  const int lane = tid & 31;
  const int t = lane & 3;
  const int row0 = 16 * warp + (lane >> 2);  // this thread's rows: row0, row0 + 8

  TileWalk walk;
  walk.begin(indptr, last_len, B, P, t0, t1, lane);

  float o[128];
  float m[2], l[2];
  uint32_t q_phase = 0;
  ptx::RingState at;
  while (walk.next()) {
    if (walk.seg_start) {
      // Both warpgroups are past their last S (each waits for it before its softmax): Q may be replaced.
      ptx::named_barrier_sync(kBarQ, kConsumerThreads);
      if (tid == 0) {
        ptx::mbar_arrive_expect_tx(&s.q_full, kQBytes);
        const int qrow = walk.b * out.H + out.head0;  // rows past the batch load as zeros, still counted
#pragma unroll
        for (int slab = 0; slab < kSlabs - 1; ++slab)
          ptx::tma_load_2d(s.q[slab], map_qn, &s.q_full, 64 * slab, qrow);
        ptx::tma_load_2d(s.q[kSlabs - 1], map_qp, &s.q_full, 0, qrow);
        if (walk.j == 0 && blockIdx.y == 0) seq_tile0[walk.b] = walk.tstart;  // for the merge
        if (walk.b + 1 < B && walk.tstart + walk.ntiles < t1) {  // the chunk goes on: the next Q into L2
          const int next_row = qrow + out.H;
#pragma unroll
          for (int slab = 0; slab < kSlabs - 1; ++slab) ptx::tma_prefetch_2d(map_qn, 64 * slab, next_row);
          ptx::tma_prefetch_2d(map_qp, 0, next_row);
        }
      }
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] = 0.0f;
      m[0] = m[1] = -INFINITY;
      l[0] = l[1] = 0.0f;
      ptx::mbar_wait(&s.q_full, q_phase);
      q_phase ^= 1u;
    }
    const int stage = at.stage;
    s.ring.consumer_wait(at);

    // S = Q · K_wgᵀ: 36 k-steps, slab kk / 4, +32 bytes (+2) per 16 dims inside it.
    float sc[16];
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4 * kSlabs; ++kk) {
      const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q[kk / 4]) + 2 * (kk % 4);
      const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.kv[stage][kk / 4] + kHalfKeys * 64 * wg) + 2 * (kk % 4);
      ptx::wgmma_m64n32k16_bf16(sc, q_desc, k_desc, kk > 0 ? 1 : 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(sc);

    const int valid = walk.valid;
    if (valid < kKeys) {  // keys past the sequence's end: -inf, whatever their rows hold
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (kHalfKeys * wg + ptx::wgmma_acc_col(i) >= valid) sc[i] = -INFINITY;
    }
    // The tile's row maxima: this warpgroup's 32 keys, then the other's through shared memory.
    float mine[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x = -INFINITY;
#pragma unroll
      for (int i = 2 * h; i < 16; i += 4) x = fmaxf(x, fmaxf(sc[i], sc[i + 1]));
      mine[h] = quad_max(x);
      if (t == 0) s.row_max[wg][row0 + 8 * h] = mine[h];
    }
    ptx::named_barrier_sync(kBarMax, kConsumerThreads);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float tile_max = fmaxf(mine[h], s.row_max[wg ^ 1][row0 + 8 * h]);  // finite: key 0 is valid
      const float m_new = fmaxf(m[h], tile_max * scale_log2);
      alpha[h] = ptx::ex2_approx(m[h] - m_new);  // 0 on a segment's first tile (m = -inf)
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int i = 2 * h; i < 16; i += 4) {
        sc[i] = ptx::ex2_approx(fmaf(sc[i], scale_log2, -m_new));
        sc[i + 1] = ptx::ex2_approx(fmaf(sc[i + 1], scale_log2, -m_new));
        sum += sc[i] + sc[i + 1];
      }
      l[h] = l[h] * alpha[h] + sum;
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];

    // P (bf16) into the shared tile: register pair (i, i + 1) is row row0 + 8 ((i >> 1) & 1), keys k, k + 1 with
    // k = 32 wg + 8 (i >> 2) + 2 t; 16-byte chunk k / 8 of the row at (chunk ^ row % 8) (128-byte swizzle).
    uint8_t* p_tile = reinterpret_cast<uint8_t*>(s.p);
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const int row = row0 + 8 * ((i >> 1) & 1);
      const int key = kHalfKeys * wg + 8 * (i >> 2) + 2 * t;
      const uint32_t offset = uint32_t(row) * 128u + ((uint32_t(key >> 3) ^ uint32_t(row & 7)) << 4) + (key & 7) * 2;
      *reinterpret_cast<uint32_t*>(p_tile + offset) = ptx::pack_bf16x2(sc[i], sc[i + 1]);
    }
    // The value rows of keys past the end: zero in this warpgroup's four latent slabs (only it reads them as V).
    if (valid < kKeys) {
      uint8_t* slabs = reinterpret_cast<uint8_t*>(s.kv[stage][4 * wg]);
      const int local = tid & 127;
#pragma unroll 4
      for (int idx = local; idx < 4 * kKeys * 8; idx += 128) {  // (slab, row, 16-byte chunk)
        const int row = (idx >> 3) & (kKeys - 1);
        if (row >= valid)
          *reinterpret_cast<uint4*>(slabs + (idx >> 9) * kSlabBytes + row * 128 + (idx & 7) * 16) =
              make_uint4(0u, 0u, 0u, 0u);
      }
    }
    ptx::fence_proxy_async_smem();  // P and the zeros, visible to wgmma
    ptx::named_barrier_sync(kBarP, kConsumerThreads);

    // O_wg += P · V_wg: V = latent slabs 4 wg .. 4 wg + 3 of the tile, MN-major (8 KB apart), +2048 bytes (+128)
    // per 16 keys; P K-major, +32 bytes (+2) per 16 keys.
    ptx::wgmma_fence();
    {
      const uint64_t p_desc = ptx::wgmma_desc_k_sw128(s.p);
      const uint64_t v_desc = ptx::wgmma_desc_mn_sw128(s.kv[stage][4 * wg], kSlabBytes);
#pragma unroll
      for (int k = 0; k < kKeys / 16; ++k) ptx::wgmma_m64n256k16_bf16<0, 1>(o, p_desc + 2 * k, v_desc + 128 * k, 1);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(o);
    __syncwarp();
    if (lane == 0) s.ring.consumer_release(stage);
    at.advance(kStages);

    if (walk.ends_segment) {
      float mine_sum[2], total[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mine_sum[h] = quad_sum(l[h]);
        if (t == 0) s.row_sum[wg][row0 + 8 * h] = mine_sum[h];
      }
      ptx::named_barrier_sync(kBarSum, kConsumerThreads);
#pragma unroll
      for (int h = 0; h < 2; ++h) total[h] = mine_sum[h] + s.row_sum[wg ^ 1][row0 + 8 * h];
      write_segment(out, walk.b, walk.whole, o, m, total, wg, warp, lane);
    }
  }
}

// ---- the kernels --------------------------------------------------------------------------------------

// One CTA per (chunk, block of 64 query heads): tiles [chunk · c, chunk · (c + 1)).
__global__ void __launch_bounds__(kThreads, 1)
mla_split_kernel(const __grid_constant__ CUtensorMap map_ckv, const __grid_constant__ CUtensorMap map_kpe,
                 const __grid_constant__ CUtensorMap map_qn, const __grid_constant__ CUtensorMap map_qp,
                 const int32_t* __restrict__ indptr, const int32_t* __restrict__ indices,
                 const int32_t* __restrict__ last_len, const float* __restrict__ sm_scale,
                 __nv_bfloat16* __restrict__ output, float* __restrict__ lse, __nv_bfloat16* __restrict__ part_o,
                 float* __restrict__ part_lse, int* __restrict__ seq_tile0, int B, int H, int P, int chunk,
                 int tiles) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *ptx::align_smem<Shared>(smem_raw);
  // The merge kernel may be scheduled from now on; it waits for this whole grid before reading the partials.
  ptx::griddep_launch_dependents();

  const int c = int(blockIdx.x);
  const int t0 = c * chunk, t1 = min(t0 + chunk, tiles);
  if (threadIdx.x == 0) {
    s.ring.init(kStages, kConsumerThreads / 32);
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (ptx::warpgroup_idx() == kConsumerThreads / 128) {  // the producer warpgroup: every warp gives registers up
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (ptx::warp_idx() == kProducerWarp)
      producer_loop(s, &map_ckv, &map_kpe, indptr, indices, last_len, B, P, t0, t1, int(threadIdx.x & 31));
    return;
  }
  ptx::setmaxnreg_inc<kConsumerRegs>();
  Outputs out;
  out.output = output;
  out.lse = lse;
  out.part_o = part_o;
  out.part_lse = part_lse;
  out.H = H;
  out.head0 = int(blockIdx.y) * kRows;
  out.chunk_index = c;
  consumer_loop(s, &map_qn, &map_qp, indptr, last_len, out, seq_tile0, __ldg(sm_scale) * kLog2e, B, P, t0, t1);
}

// One warp per (sequence, query head), lane l owning dims 16 l .. 16 l + 15. Sequences one CTA held whole were
// written by it; the others' pieces are slots c + b for the chunks c of the sequence's first to last tile.
__global__ void __launch_bounds__(128)
mla_merge_kernel(const __nv_bfloat16* __restrict__ part_o, const float* __restrict__ part_lse,
                 const int* __restrict__ seq_tile0, const int32_t* __restrict__ indptr,
                 const int32_t* __restrict__ last_len, __nv_bfloat16* __restrict__ output, float* __restrict__ lse,
                 int H, int P, int chunk) {
  // Every thread waits for the decode grid (its partials visible), even one with nothing to merge: so the merge
  // grid cannot end before the decode grid, and what follows on the stream follows both.
  ptx::griddep_wait();
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int head_groups = (H + 3) / 4;
  const int b = int(blockIdx.x) / head_groups;
  const int h = (int(blockIdx.x) % head_groups) * 4 + warp;
  if (h >= H) return;  // warp-uniform

  const int first_page = __ldg(indptr + b);
  const int n = (__ldg(indptr + b + 1) - first_page - 1) * P + __ldg(last_len + b);
  const int ntiles = (n + kKeys - 1) / kKeys;
  const int tstart = seq_tile0[b];  // written by the decode grid: a plain load after the wait
  const int c0 = tstart / chunk, c1 = (tstart + ntiles - 1) / chunk;
  if (c0 == c1) return;

  const int parts = c1 - c0 + 1;
  const int64_t slot0 = int64_t(c0) + b;
  float top = -INFINITY;
  for (int i = lane; i < parts; i += 32) top = fmaxf(top, part_lse[(slot0 + i) * H + h]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, off));

  float acc[16];
#pragma unroll
  for (int e = 0; e < 16; ++e) acc[e] = 0.0f;
  float total = 0.0f;
  for (int i = 0; i < parts; ++i) {
    const int64_t at = (slot0 + i) * H + h;
    const float w = ptx::ex2_approx(part_lse[at] - top);
    const uint4* src = reinterpret_cast<const uint4*>(part_o + at * kLatent + 16 * lane);
    const uint4 x0 = src[0], x1 = src[1];
    const uint32_t words[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    total += w;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      acc[2 * e] = fmaf(w, ptx::bf16_lo(words[e]), acc[2 * e]);
      acc[2 * e + 1] = fmaf(w, ptx::bf16_hi(words[e]), acc[2 * e + 1]);
    }
  }
  const float inv = 1.0f / total;
  uint32_t packed[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) packed[e] = ptx::pack_bf16x2(acc[2 * e] * inv, acc[2 * e + 1] * inv);
  uint4* dst = reinterpret_cast<uint4*>(output + (int64_t(b) * H + h) * kLatent + 16 * lane);
  dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  if (lane == 0) lse[int64_t(b) * H + h] = (top + log2f(total)) * kLn2;
}

// ---- host ---------------------------------------------------------------------------------------------

// A row-major [rows][cols] bf16 matrix, read in boxes of box_rows x 64 columns (128 bytes, swizzled).
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, uint32_t box_rows) {
  return ptx::make_tma_map_2d(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, uint64_t(rows), uint64_t(cols),
                              uint64_t(cols), box_rows, 64, CU_TENSOR_MAP_SWIZZLE_128B);
}

// Per-device facts, asked once (host time between the caller's events is not free either).
struct DeviceFacts {
  bool ready = false;
  int sms = 0;
};

DeviceFacts* device_facts() {
  static DeviceFacts facts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  DeviceFacts& f = facts[dev];
  if (!f.ready) {
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaFuncSetAttribute(mla_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)) !=
            cudaSuccess)
      return nullptr;
    f.ready = true;
  }
  return &f;
}

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace

extern "C" int mla_decode_paged(
    const __nv_bfloat16* __restrict__ q_nope,
    const __nv_bfloat16* __restrict__ q_pe,
    const __nv_bfloat16* __restrict__ ckv_cache,
    const __nv_bfloat16* __restrict__ kpe_cache,
    const int32_t* __restrict__ kv_indptr,
    const int32_t* __restrict__ kv_indices,
    const int32_t* __restrict__ kv_last_page_len,
    const float* __restrict__ sm_scale,
    __nv_bfloat16* __restrict__ output,
    float* __restrict__ lse,
    int64_t B,
    int64_t H,
    int64_t P,
    int64_t NP,
    int64_t L,
    cudaStream_t stream) {
  if (B <= 0 || H <= 0) return int(cudaGetLastError());
  if ((P != 1 && P != 16 && P != 64) || NP < B || L < B) return int(cudaErrorInvalidValue);
  // int indices in the kernels: cache rows, query rows, tiles, workspace slots.
  if (NP * P > INT32_MAX || B * H > INT32_MAX / kLatent || L + 63 * B > INT32_MAX) return int(cudaErrorInvalidValue);
  DeviceFacts* dev = device_facts();
  if (dev == nullptr) return int(cudaErrorInitializationError);

  // Tiles: exactly NP with pages of 64 (every page holds 1..64 keys); else at most sum ceil(n_b / 64) <= (L + 63 B)/64.
  const int64_t tiles = P == kKeys ? NP : (L + 63 * B) / kKeys;
  const int64_t head_blocks = (H + kRows - 1) / kRows;
  const int64_t want = dev->sms / head_blocks > 0 ? dev->sms / head_blocks : 1;
  const int64_t chunk = (tiles + want - 1) / want;
  const int64_t splits = (tiles + chunk - 1) / chunk;

  CUtensorMap map_ckv, map_kpe, map_qn, map_qp;
  const uint32_t box_rows = uint32_t(P < kKeys ? P : kKeys);
  cudaError_t err;
  if ((err = make_map(&map_ckv, ckv_cache, NP * P, kLatent, box_rows)) != cudaSuccess ||
      (err = make_map(&map_kpe, kpe_cache, NP * P, kRope, box_rows)) != cudaSuccess ||
      (err = make_map(&map_qn, q_nope, B * H, kLatent, kRows)) != cudaSuccess ||
      (err = make_map(&map_qp, q_pe, B * H, kRope, kRows)) != cudaSuccess)
    return int(err);

  // Workspace: slot c + b for chunk c's piece of sequence b (c < splits, b < B), and each sequence's first tile.
  const size_t slots = size_t(splits + B - 1);
  const size_t o_bytes = round_up(slots * size_t(H) * kLatent * sizeof(__nv_bfloat16), 256);
  const size_t lse_bytes = round_up(slots * size_t(H) * sizeof(float), 256);
  const size_t seq_bytes = round_up(size_t(B) * sizeof(int), 256);
  uint8_t* workspace = nullptr;
  if ((err = cudaMallocAsync(reinterpret_cast<void**>(&workspace), o_bytes + lse_bytes + seq_bytes, stream)) !=
      cudaSuccess)
    return int(err);
  __nv_bfloat16* const part_o = reinterpret_cast<__nv_bfloat16*>(workspace);
  float* const part_lse = reinterpret_cast<float*>(workspace + o_bytes);
  int* const seq_tile0 = reinterpret_cast<int*>(workspace + o_bytes + lse_bytes);

  mla_split_kernel<<<dim3(unsigned(splits), unsigned(head_blocks), 1), kThreads, kSmemBytes, stream>>>(
      map_ckv, map_kpe, map_qn, map_qp, kv_indptr, kv_indices, kv_last_page_len, sm_scale, output, lse, part_o,
      part_lse, seq_tile0, int(B), int(H), int(P), int(chunk), int(tiles));
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
    err = cudaLaunchKernelEx(&config, mla_merge_kernel, static_cast<const __nv_bfloat16*>(part_o),
                             static_cast<const float*>(part_lse), static_cast<const int*>(seq_tile0), kv_indptr,
                             kv_last_page_len, output, lse, int(H), int(P), int(chunk));
    if (err == cudaSuccess) err = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(workspace, stream);
  return int(err != cudaSuccess ? err : freed);
}
