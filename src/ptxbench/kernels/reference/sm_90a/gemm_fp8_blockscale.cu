// gemm_fp8_blockscale, expert reference for sm_90a (H100/H200): D[M, N] = sum over 128-wide k-blocks j of
// scale_a[m, j] · scale_b[n / 128, j] · (A · Bᵀ over block j), float8 e4m3 A [M, K] and B [N, K], fp32 scales
// (1x128 for A, 128x128 for B, both row-major with the k-block innermost, as the task's reference reads them),
// fp32 accumulation, bf16 out. DeepSeek-V3's fp8 linear layers, computed the way DeepGEMM does.
//
// On an H100 80GB (2026-12-07): PASSED on every workload and edge shape with every feature executed, 86 % of
// cuBLASLt's block-scaled GEMM on three workloads and 113 % on gate-up-decode
// (benchmarks/results/reference_kernels_h100.md). Its tiles, boxes, scale choice and epilogue mask also pass a
// NumPy model of its steps (tests/test_reference_blockscale_model.py: every element of D stored once, equal to
// the task's reference).
//
// Design: the pipeline of the gemm_fp8 reference (TMA + mbarrier ring, one producer and two consumer
// warpgroups, persistent CTAs, B shared by TMA multicast in 2 x 1 clusters), with the scales applied by the
// consumers to every k-block's partial sum:
//   * warpgroup 0 is the producer: one thread streams K-slices of A (a_rows x 128) and B (TN x 128, half
//     from each CTA of a cluster along M, multicast to both) into a ring of stages in shared memory with TMA
//     (128-byte swizzle). Each stage has a "full" mbarrier (the producer's arrival plus the TMA bytes) and an
//     "empty" mbarrier (one arrival per consumer warpgroup of every CTA the stage's data comes from). A stage
//     is exactly one scale block along K (BK = 128), so no stage straddles two scales.
//   * warpgroups 1 and 2 are consumers, 64 rows of the tile each, issuing wgmma.m64nTNk32 (e4m3) from the
//     swizzled tiles. Promotion, as DeepGEMM does it: every stage's wgmmas write a fresh partial accumulator
//     set (scale-d = 0 on the first k32 step), and the consumer adds partial · scale_a[row, j] ·
//     scale_b[n / 128, j] into a separate fp32 running sum with FFMAs. Hopper's fp8 wgmma keeps fewer
//     mantissa bits than fp32 while it accumulates, so the 128-deep partial is the longest sum left to it.
//     The promotion is deferred by one stage: a consumer issues stage j's wgmmas into one partial set,
//     waits only for stage j-1's (wait_group 1), releases that ring slot and promotes its set while stage j
//     runs on the tensor cores. Three sets of TN / 2 fp32 registers per thread (sum and two partials);
//     setmaxnreg gives the consumers 232 registers and the producer 40.
//   * The scales are read by the consumers straight from global memory (ld.global.nc): each thread holds two
//     rows of the accumulator layout (r and r + 8 of its warp's 16), so per stage it loads scale_a of those
//     two rows and scale_b of the tile's weight block (of its two blocks, for a tile that straddles one:
//     see below). The loads for stage j are issued before the wait for stage j's data and used one stage
//     later, when stage j is promoted, so their latency hides behind a stage of wgmmas; a row's next
//     eight k-blocks share its 32-byte sector, which stays in L1. Rows past M read row M - 1's scales (their
//     A rows are TMA's zero fill, so the partial there is zero).
//   * Tiles: 128 x 128 for batches of more than 128 rows, a tile's columns then lying in one weight-scale
//     block (tn). For at most 128 rows, 128 x 80 tiles (64 x 80, A loaded 64 rows deep, for at most 64): more
//     CTAs stream B at once, as the gemm_fp8 reference's decode tiles do. An 80-wide tile may straddle two
//     128-row weight blocks; the boundary is a multiple of 16 columns, so each group of four accumulator
//     registers (8 columns) lies wholly in one block and picks its scale by a warp-uniform compare, as
//     DeepGEMM does for block widths that do not divide 128. A second block past N is clamped to the last.
//   * Remainders: K is a multiple of 128 and N of 64 (task rules). Rows of A past M and of B past N are
//     TMA's zero fill; the epilogue stores only rows < M and columns < N (TMA stores clip, direct stores test).
//     A consumer whose 64 rows lie wholly past M (batches of at most 64, a cluster's tile past the edge) only
//     releases stages. The last weight-scale block may be partial (N = 2112: 64 rows): its scale row is
//     scale_b[NB - 1] like any other.
//   * Output tiles are walked in a grouped order (16 tile-rows at a time) for L2 reuse; the producer runs ahead
//     into the next tile, and each consumer issues the next tile's first stage before it stores the current
//     one. The epilogue goes through swizzled staging tiles and TMA stores for 128-wide tiles with K <= 4096,
//     else straight from registers (the choice the gemm_fp8 reference measured).
//   * Not done: split-K for decode batches (M = 1 reads B with at most N / 80 CTAs).
#include "ptx_wrappers.cuh"
#include <cuda_fp8.h>

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BN = 128;                    // tile columns for batches of more than DECODE_M rows
constexpr int DECODE_BN = 80;              // tile columns for batches of at most DECODE_M rows
constexpr int DECODE_M = 128;              // the largest batch given DECODE_BN-wide tiles
constexpr int BK = 128;                    // K per stage: 128 fp8 = one 128-byte swizzle row = one scale block
constexpr int SCALE_BLOCK = 128;           // rows of B (and K) per scale (the task's 128 x 128 blocks)
constexpr uint32_t SMEM_AREA = 224 * 1024;  // the ring of stages, then the epilogue's staging tiles (see RingLayout)
constexpr int MAX_STAGES = 12;             // 12 x 18 KiB: 64-row A and 80-wide B tiles
constexpr int PRODUCER_REGS = 40;          // setmaxnreg split of the 64K registers
constexpr int CONSUMER_REGS = 232;
constexpr int THREADS = 384;
constexpr int GROUP_M = 16;                // tile-rows walked together for L2 reuse (even: pairs)
constexpr int CLUSTER_M = 2;               // CTAs along M sharing B tiles through multicast (1 or 2)
constexpr bool TMA_STORE = true;           // epilogue: tiles staged in shared memory, stored by TMA (see below)
constexpr int TMA_STORE_MAX_K = 4096;      // ... for K up to this; deeper problems store directly
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "1 or 2 CTAs along M");
static_assert(BK == SCALE_BLOCK, "a stage is one scale block along K");
static_assert(BN <= SCALE_BLOCK && SCALE_BLOCK % BN == 0, "a wide tile lies in one weight-scale block");
static_assert(DECODE_BN % 16 == 0 && DECODE_BN < SCALE_BLOCK,
              "a decode tile straddles at most two weight blocks, at a multiple of 8 columns");
constexpr bool made_width(int n) { return n == 80 || n == 96 || n == 112 || n == 128 || n == 144 || n == 192; }
static_assert(made_width(BN) && made_width(DECODE_BN), "a width ptx::wgmma_e4m3 has");
static_assert(BN / 2 % 8 == 0, "each CTA's share of a shared B tile is whole 1024-byte swizzle atoms");
static_assert(128 * (PRODUCER_REGS + 2 * CONSUMER_REGS) <= 65536, "the register file");
static_assert(GROUP_M % 2 == 0, "a group holds whole pairs of tile-rows");

// A cluster of cm x 1 CTAs computes cm adjacent tiles of one tile-column: they share its B tile, and
// each loads one half of it, multicast to its partner.
struct Cluster {
  int cm;
  uint32_t rank;
  int rm;
  __device__ __forceinline__ uint32_t b_partner() const { return rank ^ 1u; }
};

struct Shared {
  uint8_t area[SMEM_AREA];  // the ring's stages (an A tile then a B tile, each 1024-byte aligned), then
                            // the epilogue's staging tiles
  ptx::RingBarriers<MAX_STAGES> ring;
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 bytes
static_assert(SMEM_BYTES <= 227 * 1024, "an H100/H200 CTA's shared memory");

// Epilogue: tiles whose width is a whole number of 64-column boxes may leave it to TMA (STAGED): each
// consumer writes its 64 x TN bf16 rows into a staging tile (64 x 64 boxes, 128-byte swizzled) at the
// end of the area, and one thread stores the boxes; TMA clips rows past M and columns past N.
template <int TN>
__host__ __device__ constexpr bool stores_by_tma() { return TMA_STORE && TN % 64 == 0; }
template <int TN, bool STAGED>
__host__ __device__ constexpr uint32_t staging_bytes() { return STAGED ? 2u * 64 * TN * 2 : 0u; }  // both consumers

// The ring's stages: an A tile of a_rows x BK, then a B tile of tile_n x BK, in the area less the staging
// tiles. Batches of at most 64 rows load only 64 rows of A (18 KiB stages of 80-wide tiles: twelve).
struct RingLayout {
  uint32_t a_bytes, stage_bytes;
  int stages;
  __device__ __forceinline__ RingLayout(int a_rows, int tile_n, uint32_t ring_bytes)
      : a_bytes(static_cast<uint32_t>(a_rows) * BK), stage_bytes(a_bytes + static_cast<uint32_t>(tile_n) * BK),
        stages(min(MAX_STAGES, static_cast<int>(ring_bytes / stage_bytes))) {}
  __device__ __forceinline__ uint8_t* a(Shared& s, int stage) const { return s.area + stage * stage_bytes; }
  __device__ __forceinline__ uint8_t* b(Shared& s, int stage) const { return a(s, stage) + a_bytes; }
};

// One stage's wgmmas for this consumer's 64 rows into `partial`, overwritten (a fresh block partial),
// committed as a group.
template <int TN>
__device__ __forceinline__ void issue_stage(float (&partial)[TN / 2], Shared& s, const RingLayout& ring, int stage,
                                            int half) {
  const uint64_t a_desc = ptx::wgmma_desc_k_sw128(ring.a(s, stage) + half * 64 * BK);
  const uint64_t b_desc = ptx::wgmma_desc_k_sw128(ring.b(s, stage));
  ptx::wgmma_fence();  // the partial's registers were read by the last promotion
#pragma unroll
  for (int kk = 0; kk < BK / 32; ++kk)  // +32 bytes along K = +2 in the descriptor's address
    ptx::wgmma_e4m3<TN>(partial, a_desc + 2 * kk, b_desc + 2 * kk, kk > 0 ? 1 : 0);
  ptx::wgmma_commit();
}

// Frees `stage` here and in the partner whose producer multicasts into this CTA's ring.
__device__ __forceinline__ void release(Shared& s, int stage, const Cluster& c) {
  s.ring.consumer_release(stage);
  if (c.cm == 2) ptx::mbar_arrive_cluster_stage(&s.ring.empty[stage], c.b_partner());
}

// Producer (one thread): every unit's K-slices of A and B into the ring. Of a B tile shared with the
// partner, this CTA loads the half given by its place along M, multicast to both.
template <int TN, bool STAGED>
__device__ __forceinline__ void producer_loop(Shared& s, const RingLayout& ring, const Cluster& c,
                                              const CUtensorMap* map_a, const CUtensorMap* map_b,
                                              const CUtensorMap* map_d, ptx::TileScheduler u, int k_steps) {
  ptx::tma_prefetch_map(map_a);
  ptx::tma_prefetch_map(map_b);
  if constexpr (STAGED) ptx::tma_prefetch_map(map_d);
  const int b_rows = TN / c.cm, b_first = c.rm * b_rows;
  const uint16_t b_mask = static_cast<uint16_t>((1u << c.rank) | (1u << c.b_partner()));
  ptx::RingState at;
  for (; u.valid(); u.next()) {
    int um, tn;
    u.coords(um, tn);
    const int tm = um * c.cm + c.rm;
    for (int k = 0; k < k_steps; ++k) {
      uint64_t* full = s.ring.producer_acquire(at, ring.stage_bytes);
      ptx::tma_load_2d(ring.a(s, at.stage), map_a, full, k * BK, tm * BM);
      uint8_t* b = ring.b(s, at.stage) + b_first * BK;
      if (c.cm == 1) ptx::tma_load_2d(b, map_b, full, k * BK, tn * TN);
      else ptx::tma_load_2d_multicast(b, map_b, full, k * BK, tn * TN + b_first, b_mask);
      at.advance(ring.stages);
    }
  }
}

// One stage's scales as this thread needs them: scale_a of its two accumulator rows (r and r + 8) and
// scale_b of the tile's first and (for tiles that straddle one) second weight block.
struct BlockScales {
  float a_lo, a_hi, b_first, b_second;
};

// A consumer warpgroup: its 64 rows of the tile, its place in the ring, where its scales are, and the
// steps of its main loop. Three register sets take turns: the running sum `acc` (true fp32) and two partial
// sets the tensor cores write; a step issues one stage into one set while the stage before it finishes in
// the other, then retires that one (releases its ring slot, promotes it with its scales).
template <int TN>
struct Consumer {
  static constexpr int ACC = TN / 2;                          // fp32 accumulators per thread in one set
  static constexpr bool ONE_BLOCK = SCALE_BLOCK % TN == 0;    // a tile's columns share one weight block
  Shared& s;
  const RingLayout& ring;
  const Cluster& c;
  const int half;       // which 64 rows of the tile
  const bool signals;   // one thread per warpgroup releases stages
  const int M, N, KB, NB;
  const float* __restrict__ scale_a;
  const float* __restrict__ scale_b;
  ptx::RingState at;
  int previous = 0;     // the stage whose wgmmas write the partial to be promoted next
  BlockScales pending{};  // that stage's scales
  // The unit's scale rows: this thread's two rows of scale_a, the tile's weight block(s) of scale_b, and the
  // first column of the tile in the second block (TN when there is none).
  const float* sa_lo = nullptr;
  const float* sa_hi = nullptr;
  const float* sb_first = nullptr;
  const float* sb_second = nullptr;
  int split = TN;

  // Points the scale rows at the unit whose warpgroup rows start at row0, tile-column tn.
  __device__ __forceinline__ void aim(int row0, int tn) {
    const int r = row0 + ptx::wgmma_acc_row(0);
    sa_lo = scale_a + static_cast<size_t>(min(r, M - 1)) * KB;
    sa_hi = scale_a + static_cast<size_t>(min(r + 8, M - 1)) * KB;
    const int n0 = tn * TN, block = n0 / SCALE_BLOCK;
    sb_first = scale_b + static_cast<size_t>(block) * KB;
    if constexpr (!ONE_BLOCK) {
      split = (block + 1) * SCALE_BLOCK - n0;  // a multiple of 16 in [16, 128]
      sb_second = scale_b + static_cast<size_t>(min(block + 1, NB - 1)) * KB;
    }
  }
  __device__ __forceinline__ BlockScales fetch(int k) const {
    BlockScales f;
    f.a_lo = __ldg(sa_lo + k);
    f.a_hi = __ldg(sa_hi + k);
    f.b_first = __ldg(sb_first + k);
    f.b_second = ONE_BLOCK ? f.b_first : __ldg(sb_second + k);
    return f;
  }
  // `partial` (its wgmmas done) times its block's scales into the running sum, in true fp32. Register i sits
  // in row r + 8 * ((i >> 1) & 1) and columns 8 * (i >> 2) + 0..7 of the warpgroup's 64 x TN tile.
  __device__ __forceinline__ void promote(float (&acc)[ACC], float (&partial)[ACC], const BlockScales& f) const {
    ptx::wgmma_fence_acc(partial);
    const float lo_first = f.a_lo * f.b_first, hi_first = f.a_hi * f.b_first;
    const float lo_second = f.a_lo * f.b_second, hi_second = f.a_hi * f.b_second;
#pragma unroll
    for (int i = 0; i < ACC; ++i) {
      const bool second = !ONE_BLOCK && (i >> 2) * 8 >= split;
      const float scale = ((i >> 1) & 1) ? (second ? hi_second : hi_first) : (second ? lo_second : lo_first);
      acc[i] = fmaf(partial[i], scale, acc[i]);
    }
  }

  // A unit's first stage (k-block 0), into pa.
  __device__ __forceinline__ void begin(float (&pa)[ACC], int row0, int tn) {
    aim(row0, tn);
    pending = fetch(0);
    s.ring.consumer_wait(at);
    issue_stage<TN>(pa, s, ring, at.stage, half);
    previous = at.stage;
    at.advance(ring.stages);
  }
  // Issue k-block k into `into`, then retire the previous one, whose partial is in `from`.
  __device__ __forceinline__ void overlap(float (&acc)[ACC], float (&into)[ACC], float (&from)[ACC], int k) {
    const BlockScales next = fetch(k);
    s.ring.consumer_wait(at);
    issue_stage<TN>(into, s, ring, at.stage, half);
    ptx::wgmma_wait<1>();  // the previous stage's wgmmas are done
    if (signals) release(s, previous, c);
    promote(acc, from, pending);
    pending = next;
    previous = at.stage;
    at.advance(ring.stages);
  }
  // The unit's last stage is done: retire it and promote its set.
  __device__ __forceinline__ void drain(float (&acc)[ACC], float (&from)[ACC]) {
    ptx::wgmma_wait<0>();
    if (signals) release(s, previous, c);
    promote(acc, from, pending);
  }
  // The unit's place, and whether this warpgroup has anything of it to compute.
  __device__ __forceinline__ bool locate(const ptx::TileScheduler& u, int& row0, int& tn) const {
    int um;
    u.coords(um, tn);
    row0 = (um * c.cm + c.rm) * BM + half * 64;
    return row0 < M && tn * TN < N;
  }
  // Moves `u` to the first unit from it on that this warpgroup computes; the stages of those it passes
  // over (decode batches, a cluster's tile past the edge) are handed straight back.
  __device__ __forceinline__ void seek(ptx::TileScheduler& u, int& row0, int& tn, int k_steps) {
    for (; u.valid() && !locate(u, row0, tn); u.next())
      for (int k = 0; k < k_steps; ++k) {
        s.ring.consumer_wait(at);
        if (signals) release(s, at.stage, c);
        at.advance(ring.stages);
      }
  }
};

// Consumer main loop: the rest of a unit whose first stage begin() has issued into pa. Each stage writes
// the partial set the stage before did not; the stage before is retired and promoted after every issue.
template <int TN>
__device__ __forceinline__ void consumer_mainloop(Consumer<TN>& w, float (&acc)[TN / 2], float (&pa)[TN / 2],
                                                  float (&pb)[TN / 2], int k_steps) {
  int k = 1;
  for (;;) {
    if (k == k_steps) { w.drain(acc, pa); break; }
    w.overlap(acc, pb, pa, k);
    ++k;
    if (k == k_steps) { w.drain(acc, pb); break; }
    w.overlap(acc, pa, pb, k);
    ++k;
  }
}

// Epilogue: registers (i, i+1), adjacent columns of one row, go out as one bf16x2: into the staging tile
// for TMA (once the last tile's store has read it), or straight to global memory.
template <int TN, bool STAGED>
__device__ __forceinline__ void epilogue(const Consumer<TN>& w, const CUtensorMap* map_d,
                                         __nv_bfloat16* __restrict__ D, const float (&acc)[TN / 2],
                                         uint8_t* staging, int row0, int tn) {
  constexpr int ACC = TN / 2;
  if constexpr (STAGED) {
    if (w.signals) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(1 + w.half, 128);  // this consumer warpgroup
#pragma unroll
    for (int i = 0; i < ACC; i += 2) {
      const int col = ptx::wgmma_acc_col(i);
      *reinterpret_cast<__nv_bfloat162*>(staging + (col / 64) * 8192 +
                                         ptx::sw128_offset(ptx::wgmma_acc_row(i), (col % 64) * 2)) =
          __floats2bfloat162_rn(acc[i], acc[i + 1]);
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(1 + w.half, 128);
    if (w.signals) {
#pragma unroll
      for (int box = 0; box < TN / 64; ++box)
        ptx::tma_store_2d(map_d, staging + box * 8192, tn * TN + box * 64, row0);
      ptx::tma_store_commit();
    }
  } else {
    const int col0 = tn * TN;
#pragma unroll
    for (int i = 0; i < ACC; i += 2) {
      const int row = row0 + ptx::wgmma_acc_row(i);
      const int col = col0 + ptx::wgmma_acc_col(i);
      if (row < w.M && col < w.N)
        *reinterpret_cast<__nv_bfloat162*>(D + static_cast<size_t>(row) * w.N + col) =
            __floats2bfloat162_rn(acc[i], acc[i + 1]);
    }
  }
}

// Tiles BM x TN, stored by TMA if STAGED.
template <int TN, bool STAGED>
__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_blockscale_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_d, const float* __restrict__ scale_a,
                          const float* __restrict__ scale_b, __nv_bfloat16* __restrict__ D, int M, int N, int K,
                          int KB, int NB, int cm, int a_rows) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *ptx::align_smem<Shared>(smem_raw);

  const uint32_t rank = ptx::cluster_ctarank();  // the launch's cluster has cm CTAs
  const Cluster c{cm, rank, static_cast<int>(rank) % cm};
  // Units of cm x 1 tiles, one per cluster at a time.
  const ptx::TileScheduler units(((M + BM - 1) / BM + cm - 1) / cm, (N + TN - 1) / TN, GROUP_M / cm,
                                 static_cast<int>(blockIdx.x) / cm, static_cast<int>(gridDim.x) / cm);
  const int k_steps = K / BK;
  const uint32_t warpgroup = ptx::warpgroup_idx();
  const RingLayout ring(a_rows, TN, SMEM_AREA - staging_bytes<TN, STAGED>());
  constexpr int ACC = TN / 2;  // fp32 accumulators per consumer thread in one set

  // full: the producer's arrive (plus the TMA bytes, from the partner too); empty: each consumer here and
  // in the partner. The partner's barriers must exist before anything lands on them.
  if (threadIdx.x == 0) s.ring.init(ring.stages, 2 * cm);
  if (cm > 1) ptx::cluster_sync();
  else __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) producer_loop<TN, STAGED>(s, ring, c, &map_a, &map_b, &map_d, units, k_steps);
  } else {
    ptx::setmaxnreg_inc<CONSUMER_REGS>();
    Consumer<TN> w{s, ring, c, static_cast<int>(warpgroup) - 1, threadIdx.x % 128 == 0, M, N, KB, NB,
                   scale_a, scale_b};
    float acc[ACC];  // the running sum, in true fp32
    float pa[ACC];   // block partials from the tensor cores, alternating
    float pb[ACC];
    constexpr uint32_t STAGING = staging_bytes<TN, STAGED>();
    uint8_t* staging = s.area + SMEM_AREA - STAGING + w.half * (STAGING / 2);
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
    int row0, tn;
    ptx::TileScheduler u = units;
    w.seek(u, row0, tn, k_steps);
    // Each unit's first stage is issued before the unit before it stores its tile, so the tensor cores
    // work while the epilogue runs.
    if (u.valid()) {
      w.begin(pa, row0, tn);
      do {
        consumer_mainloop<TN>(w, acc, pa, pb, k_steps);
        // Two exits, each with its own epilogue, so that wherever two paths meet, partial set pa is either
        // in flight on both or on neither (else ptxas waits for the wgmmas at once).
        int next_row0, next_tn;
        ptx::TileScheduler after = u;
        after.next();
        w.seek(after, next_row0, next_tn, k_steps);
        if (!after.valid()) {
          epilogue<TN, STAGED>(w, &map_d, D, acc, staging, row0, tn);
          break;
        }
        w.begin(pa, next_row0, next_tn);
        epilogue<TN, STAGED>(w, &map_d, D, acc, staging, row0, tn);
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
        u = after;
        row0 = next_row0;
        tn = next_tn;
      } while (true);
    }
    if (STAGED && w.signals) ptx::tma_store_wait_read<0>();  // the staging outlives its reads
  }
  // No CTA exits while its partner may still arrive on its barriers.
  if (cm > 1) {
    __syncwarp();  // the cluster barrier is .aligned: the producer's warp must be converged
    ptx::cluster_sync();
  }
}

// Tensor maps, cluster shape and a persistent grid for the kernel of tiles TN wide, and its launch.
template <int TN, bool STAGED>
int launch(const __nv_fp8_e4m3* A, const __nv_fp8_e4m3* B, const float* scale_a, const float* scale_b,
           __nv_bfloat16* D, int64_t M, int64_t N, int64_t K, int64_t KB, int64_t NB, cudaStream_t stream) {
  static_assert(!STAGED || stores_by_tma<TN>(), "staged tiles are whole 64-column boxes");
  const int cm = CLUSTER_M == 2 && M > BM ? 2 : 1;  // pairs along M where there are two tile-rows
  const int a_rows = M <= 64 ? 64 : BM;  // A rows a stage holds (a single tile-row of at most 64: see RingLayout)
  CUtensorMap map_a, map_b;
  cudaError_t err = ptx::make_tma_map_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, A, M, K, K, a_rows, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = ptx::make_tma_map_2d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, B, N, K, K, TN / cm, BK,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  CUtensorMap map_d = {};  // unused by tiles stored directly
  if constexpr (STAGED) {
    err = ptx::make_tma_map_2d(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, D, M, N, N, 64, 64,
                               CU_TENSOR_MAP_SWIZZLE_128B);
    if (err != cudaSuccess) return static_cast<int>(err);
  }

  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(gemm_fp8_blockscale_sm90a<TN, STAGED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);

  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(THREADS, 1, 1);
  config.dynamicSmemBytes = SMEM_BYTES;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cm);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;

  // Persistent: as many clusters as fit at once, asked of the driver once per device and cluster size (and
  // tile width: one table per instantiation).
  static int resident[2][128] = {};
  if (device < 0 || device >= 128) return static_cast<int>(cudaErrorInvalidDevice);
  int& fit = resident[cm - 1][device];
  if (fit == 0) {
    config.gridDim = dim3(static_cast<unsigned>(cm), 1, 1);
    if ((err = cudaOccupancyMaxActiveClusters(&fit, gemm_fp8_blockscale_sm90a<TN, STAGED>, &config)) != cudaSuccess)
      return static_cast<int>(err);
    if (fit <= 0) return static_cast<int>(cudaErrorLaunchOutOfResources);
  }
  const int64_t units = ((M + BM * cm - 1) / (BM * cm)) * ((N + TN - 1) / TN);
  config.gridDim = dim3(static_cast<unsigned>((units < fit ? units : fit) * cm), 1, 1);
  err = cudaLaunchKernelEx(&config, gemm_fp8_blockscale_sm90a<TN, STAGED>, map_a, map_b, map_d, scale_a, scale_b,
                           D, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), static_cast<int>(KB),
                           static_cast<int>(NB), cm, a_rows);
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

// The epilogue for this width and depth (see stores_by_tma).
template <int TN>
int launch_width(const __nv_fp8_e4m3* A, const __nv_fp8_e4m3* B, const float* scale_a, const float* scale_b,
                 __nv_bfloat16* D, int64_t M, int64_t N, int64_t K, int64_t KB, int64_t NB, cudaStream_t stream) {
  if constexpr (stores_by_tma<TN>())
    if (K <= TMA_STORE_MAX_K) return launch<TN, true>(A, B, scale_a, scale_b, D, M, N, K, KB, NB, stream);
  return launch<TN, false>(A, B, scale_a, scale_b, D, M, N, K, KB, NB, stream);
}

}  // namespace

extern "C" int gemm_fp8_blockscale(
    const __nv_fp8_e4m3* __restrict__ A,
    const __nv_fp8_e4m3* __restrict__ B,
    const float* __restrict__ scale_a,
    const float* __restrict__ scale_b,
    __nv_bfloat16* __restrict__ D,
    int64_t M,
    int64_t N,
    int64_t K,
    int64_t KB,
    int64_t NB,
    cudaStream_t stream) {
  if (M <= 0 || N <= 0) return static_cast<int>(cudaGetLastError());
  if (K <= 0 || K % BK != 0 || N % 64 != 0 || KB != K / BK || NB != (N + SCALE_BLOCK - 1) / SCALE_BLOCK ||
      M > INT32_MAX / 2 || N > INT32_MAX / 2 || K > INT32_MAX / 2)
    return static_cast<int>(cudaErrorInvalidValue);
  return M <= DECODE_M ? launch_width<DECODE_BN>(A, B, scale_a, scale_b, D, M, N, K, KB, NB, stream)
                       : launch_width<BN>(A, B, scale_a, scale_b, D, M, N, K, KB, NB, stream);
}
