// gemm_fp8, expert reference for sm_90a (H100/H200): C[M, N] = scale_a · scale_b · A[M, K] · B[N, K]ᵀ,
// float8 e4m3 in, fp32 accumulation (QGMMA), bf16 out. The same pipeline as gemm_bf16; a stage holds
// 128 fp8 of K (one 128-byte swizzle row), and the per-tensor scales are applied once, in the epilogue.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, cuBLASLt timed in the same
// run): 92.6-95.1 % of cuBLASLt on every workload (8192^3: 0.803 against 0.748 ms), short of the 100 % target.
// ncu at 8192^3 (ncu_gemm_fp8_square-8192_h200.md): the tensor pipe is active 87.2 % of our kernel's cycles
// against 93.8 % in cuBLASLt's (nvjet 144 x 128 tiles, 2-CTA cluster), with more barrier and wait stalls per
// issue (3.04 and 1.35 against 2.30 and 0.69): the wgmmas are fed less steadily, the work is the same.
//
// Accumulation precision: Hopper's fp8 wgmma adds into its fp32 accumulator with fewer mantissa bits
// than a true fp32 add, and over K = 8192 that alone put elements outside the task's tolerance (which
// cuBLASLt meets). So the partial product of every 256 of K (two stages) goes into a fresh accumulator,
// and the consumer adds it into the running sum with ordinary fp32 FADDs ("promotion"). Promoting
// every 128 of K matched cuBLASLt's worst error (0.21 of the tolerance) but its adds cost ~3 %; every
// 256 spends at most 0.25 of it, every 512 0.35 (kernel_variants_h200.md; the every-128 loop as measured
// is benchmarks/variants/gemm_fp8.promote_every_stage.cu).
//
// Design (one persistent CTA per SM, 384 threads = three warpgroups, 128 x 128 output tiles):
//   * warpgroup 0 is the producer: one thread streams K-slices of A (128 x 128) and B (128 x 128) into
//     a ring of six or seven stages in shared memory (twelve for batches of at most 64 rows: see RingLayout)
//     with TMA (128-byte swizzle, the layout wgmma reads without bank conflicts). Each stage has a
//     "full" mbarrier (TMA completes its bytes there) and an "empty" mbarrier (the consumers release
//     it once their wgmmas have read it).
//   * warpgroups 1 and 2 are consumers: each owns 64 rows of the tile and issues wgmma.m64n128k32
//     (e4m3) straight from the swizzled shared tiles. Promotion is deferred by one stage: a consumer
//     issues stage k's wgmmas into one partial accumulator set, then waits only for stage k-1's
//     (wait_group 1), releases that stage and adds its partial into the running sum while stage k
//     runs on the tensor cores. Waiting for each stage before adding (wait_group 0) left the tensor
//     cores idle during every add, since both consumers wait on the same stage and add at once
//     (benchmarks/variants/gemm_fp8.eager_promotion.cu).
//     Three sets of 64 fp32 registers per thread (sum and two partials) are why the tile is 128 wide.
//   * setmaxnreg moves registers from the producer (40) to the consumers (232) for those sets.
//   * Clusters of CTAs compute adjacent tiles and share their operands through TMA multicast: along M
//     (CLUSTER_M = 2) two CTAs share a B tile, along N (CLUSTER_N = 2) an A tile, and each loads one
//     half of every shared tile into both rings. Sharing B cuts the SMs' reads from L2 from 32 to 24
//     KiB per stage and made the kernel ~5 % faster on the H200; sharing A as well (2 x 2) was 3-10 %
//     slower, so the default is 2 x 1 (kernel_variants_h200.md). A stage is free again only when the
//     consumers of every CTA it receives data from have released it, so each consumer arrives on its
//     own and its partners' "empty" barriers (with CTA-scope release: a cluster-scope one costs a
//     GPU-wide memory barrier per stage).
//   * Output tiles (clusters of them) are walked in a grouped order (16 tile-rows at a time) so the A
//     and B panels the 132 CTAs use at one moment stay in L2. The producer runs ahead into the next
//     tile, and each consumer issues the next tile's first wgmmas before it stores the current one,
//     so neither the loads nor the tensor cores wait for an epilogue (that alone was ~10 % at 8192^3).
//     The epilogue hands the tile to TMA stores through shared memory (K <= 4096) or stores it
//     straight from registers (see stores_by_tma).
//   * Remainders: K is a multiple of 128 and N of 64 (task rules). Rows of A past M and rows of B
//     past N are zero-filled by TMA (whole boxes too), and the epilogue stores only rows < M and
//     columns < N. A consumer whose 64 rows lie wholly past M (decode batches, a cluster's tile past
//     the edge) only releases stages; a dimension with a single tile is not shared.
//   * Batches of at most 64 rows use a narrower tile (DECODE_BN = 80 columns instead of 128), a second
//     instantiation of the kernel: more CTAs stream B at once (128 instead of 80 on the 70B qkv decode,
//     N = 10240). On the H200 that decode went from 29.5 to 26.3 us (84 to 94 % of cuBLASLt); widths
//     96 and 112 read 27.7 and 28.4 us (kernel_variants_h200.md). ptx_wrappers.cuh has a wgmma for each of these widths.
#include "ptx_wrappers.cuh"
#include <cuda_fp8.h>

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BN = 128;                    // tile columns (one wgmma N): 80, 96, 112, 128, 144 or 192
constexpr int DECODE_BN = 80;              // tile columns for batches of at most 64 rows (see RingLayout)
constexpr int BK = 128;                    // K per stage: 128 fp8 = one 128-byte swizzle row
constexpr uint32_t SMEM_AREA = 224 * 1024;  // the ring of stages, then the epilogue's staging tiles (see RingLayout)
constexpr int MAX_STAGES = 12;             // 12 x 18 KiB: 64-row A and 80-wide B tiles (DECODE_BN = 80)
constexpr int PRODUCER_REGS = 40;          // setmaxnreg split of the 64K registers
constexpr int CONSUMER_REGS = 232;
constexpr int THREADS = 384;
constexpr int GROUP_M = 16;                // tile-rows walked together for L2 reuse (even: pairs)
constexpr int CLUSTER_M = 2;               // CTAs along M sharing B tiles through multicast (1 or 2)
constexpr int CLUSTER_N = 1;               // CTAs along N sharing A tiles through multicast (1 or 2)
constexpr int PROMOTE_EVERY = 2;           // stages (of 128 K) per partial sum
constexpr bool TMA_STORE = true;           // epilogue: tiles staged in shared memory, stored by TMA (see below)
constexpr int TMA_STORE_MAX_K = 4096;      // ... for K up to this; deeper problems store directly (see below)
static_assert((CLUSTER_M == 1 || CLUSTER_M == 2) && (CLUSTER_N == 1 || CLUSTER_N == 2), "1 or 2 each way");
constexpr bool made_width(int n) { return n == 80 || n == 96 || n == 112 || n == 128 || n == 144 || n == 192; }
static_assert(made_width(BN) && made_width(DECODE_BN), "a width ptx::wgmma_e4m3 has");
static_assert(BN / 2 % 8 == 0, "each CTA's share of a shared B tile is whole 1024-byte swizzle atoms");
static_assert(128 * (PRODUCER_REGS + 2 * CONSUMER_REGS) <= 65536, "the register file");
static_assert(GROUP_M % 2 == 0, "a group holds whole pairs of tile-rows");
static_assert(PROMOTE_EVERY >= 1, "promotion every 1 stage or more");

// A cluster of cm x cn CTAs computes cm x cn adjacent tiles. CTA rank r sits at (r % cm, r / cm);
// the CTAs of one tile-row share its A tile, those of one tile-column its B tile, and each loads
// one half of each shared tile, multicast to its partner.
struct Cluster {
  int cm, cn;
  uint32_t rank;
  int rm, rn;
  __device__ __forceinline__ uint32_t a_partner() const { return rank ^ static_cast<uint32_t>(cm); }  // same rm
  __device__ __forceinline__ uint32_t b_partner() const { return rank ^ 1u; }                          // same rn
};

struct Shared {
  uint8_t area[SMEM_AREA];  // the ring's stages (an A tile then a B tile, each 1024-byte aligned), then
                            // the epilogue's staging tiles
  ptx::RingBarriers<MAX_STAGES> ring;
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 bytes
static_assert(SMEM_BYTES <= 227 * 1024, "an H100/H200 CTA's shared memory");

// Epilogue. Tiles whose width is a whole number of 64-column boxes may leave it to TMA (STAGED): each
// consumer writes its 64 x TN bf16 rows into a staging tile (64 x 64 boxes, 128-byte swizzled) at the
// end of the area, and one thread stores the boxes; TMA clips rows past M and columns past N.
// Otherwise each consumer stores its registers straight to global memory. On the H200 (one call,
// repeated in a second): staging took 4096^3 from 0.1165-0.1177 to 0.1115-0.1123 ms and the 4096-deep
// MLP shape from 0.381 to 0.372 ms, but 8192^3 from 0.814-0.818 to 0.838-0.840 ms. Where the 8192-deep
// loss comes from is not known: the mainloop's instructions are the same but for a WARPSYNC before
// each stage's wgmmas, yet Nsight Compute counted 5 % more cycles at 8192^3 and issue slots 40.5 %
// busy against 32.6 % (ncu_gemm_fp8_*_h200.md). So deeper problems than TMA_STORE_MAX_K keep the
// direct stores.
template <int TN>
__host__ __device__ constexpr bool stores_by_tma() { return TMA_STORE && TN % 64 == 0; }
template <int TN, bool STAGED>
__host__ __device__ constexpr uint32_t staging_bytes() { return STAGED ? 2u * 64 * TN * 2 : 0u; }  // both consumers

// The ring's stages: an A tile of a_rows x BK, then a B tile of tile_n x BK (each half of a shared
// tile from one CTA's multicast), in the area less the staging tiles. Batches of at most 64 rows
// (decode) load only 64 rows of A, so their stages are 18 KiB (80-wide tiles, no staging) and twelve
// fit: decode is bound by how much of B is on its way from memory at once. Other batches get six
// stages of 32 KiB next to 32 KiB of staging tiles (seven stages when they store directly).
struct RingLayout {
  uint32_t a_bytes, stage_bytes;
  int stages;
  __device__ __forceinline__ RingLayout(int a_rows, int tile_n, uint32_t ring_bytes)
      : a_bytes(static_cast<uint32_t>(a_rows) * BK), stage_bytes(a_bytes + static_cast<uint32_t>(tile_n) * BK),
        stages(min(MAX_STAGES, static_cast<int>(ring_bytes / stage_bytes))) {}
  __device__ __forceinline__ uint8_t* a(Shared& s, int stage) const { return s.area + stage * stage_bytes; }
  __device__ __forceinline__ uint8_t* b(Shared& s, int stage) const { return a(s, stage) + a_bytes; }
};

// One stage's wgmmas for this consumer's 64 rows, into `partial` (overwritten, or added to when
// `accumulate`), committed as a group.
template <int TN>
__device__ __forceinline__ void issue_stage(float (&partial)[TN / 2], Shared& s, const RingLayout& ring, int stage,
                                            int half, bool accumulate = false) {
  const uint64_t a_desc = ptx::wgmma_desc_k_sw128(ring.a(s, stage) + half * 64 * BK);
  const uint64_t b_desc = ptx::wgmma_desc_k_sw128(ring.b(s, stage));
  ptx::wgmma_fence();  // the partial's registers were read by the last add
#pragma unroll
  for (int kk = 0; kk < BK / 32; ++kk)  // +32 bytes along K = +2 in the descriptor's address
    ptx::wgmma_e4m3<TN>(partial, a_desc + 2 * kk, b_desc + 2 * kk, (kk > 0 || accumulate) ? 1 : 0);
  ptx::wgmma_commit();
}

// Frees `stage` here and in the partners whose producers multicast into this CTA's ring.
__device__ __forceinline__ void release(Shared& s, int stage, const Cluster& c) {
  s.ring.consumer_release(stage);
  if (c.cn == 2) ptx::mbar_arrive_cluster_stage(&s.ring.empty[stage], c.a_partner());
  if (c.cm == 2) ptx::mbar_arrive_cluster_stage(&s.ring.empty[stage], c.b_partner());
}

// `partial` (its wgmmas done) into the running sum, in true fp32.
template <int ACC>
__device__ __forceinline__ void promote(float (&acc)[ACC], float (&partial)[ACC]) {
  ptx::wgmma_fence_acc(partial);
#pragma unroll
  for (int i = 0; i < ACC; ++i) acc[i] += partial[i];
}

// Producer (one thread): every unit's K-slices of A and B into the ring. Of a tile shared with a
// partner, this CTA loads the half given by its place along the other dimension, multicast to both.
template <int TN, bool STAGED>
__device__ __forceinline__ void producer_loop(Shared& s, const RingLayout& ring, const Cluster& c,
                                              const CUtensorMap* map_a, const CUtensorMap* map_b,
                                              const CUtensorMap* map_c, ptx::TileScheduler u, int k_steps,
                                              int a_rows) {
  ptx::tma_prefetch_map(map_a);
  ptx::tma_prefetch_map(map_b);
  if constexpr (STAGED) ptx::tma_prefetch_map(map_c);
  const int a_first = c.rn * (a_rows / c.cn);
  const int b_rows = TN / c.cm, b_first = c.rm * b_rows;
  const uint16_t a_mask = static_cast<uint16_t>((1u << c.rank) | (1u << c.a_partner()));
  const uint16_t b_mask = static_cast<uint16_t>((1u << c.rank) | (1u << c.b_partner()));
  ptx::RingState at;
  for (; u.valid(); u.next()) {
    int um, un;
    u.coords(um, un);
    const int tm = um * c.cm + c.rm, tn = un * c.cn + c.rn;
    for (int k = 0; k < k_steps; ++k) {
      uint64_t* full = s.ring.producer_acquire(at, ring.stage_bytes);
      uint8_t* a = ring.a(s, at.stage) + a_first * BK;
      uint8_t* b = ring.b(s, at.stage) + b_first * BK;
      if (c.cn == 1) ptx::tma_load_2d(a, map_a, full, k * BK, tm * BM);
      else ptx::tma_load_2d_multicast(a, map_a, full, k * BK, tm * BM + a_first, a_mask);
      if (c.cm == 1) ptx::tma_load_2d(b, map_b, full, k * BK, tn * TN);
      else ptx::tma_load_2d_multicast(b, map_b, full, k * BK, tn * TN + b_first, b_mask);
      at.advance(ring.stages);
    }
  }
}

// A consumer warpgroup: its 64 rows of the tile, its place in the ring, and the steps of its main
// loop. Three register sets take turns: the running sum `acc` (true fp32) and two partial sets the
// tensor cores write, pa and pb; a step issues one stage into one set while the stage before it
// finishes, then retires that one (releases its ring slot, and promotes its set when sets switch).
template <int TN>
struct Consumer {
  static constexpr int ACC = TN / 2;  // fp32 accumulators per thread in one set
  Shared& s;
  const RingLayout& ring;
  const Cluster& c;
  const int half;       // which 64 rows of the tile
  const bool signals;   // one thread per warpgroup releases stages
  const int M, N;
  ptx::RingState at;
  int previous = 0;     // the stage whose wgmmas write the partial to be added next

  // A unit's first stage, into pa.
  __device__ __forceinline__ void begin(float (&pa)[ACC]) {
    s.ring.consumer_wait(at);
    issue_stage<TN>(pa, s, ring, at.stage, half);
    previous = at.stage;
    at.advance(ring.stages);
  }
  // Issue the next stage into `into`, then retire the previous one, whose partial is in `from`.
  __device__ __forceinline__ void overlap(float (&acc)[ACC], float (&into)[ACC], float (&from)[ACC]) {
    s.ring.consumer_wait(at);
    issue_stage<TN>(into, s, ring, at.stage, half);
    ptx::wgmma_wait<1>();  // the previous stage's wgmmas are done
    if (signals) release(s, previous, c);
    promote(acc, from);
    previous = at.stage;
    at.advance(ring.stages);
  }
  // Issue the next stage adding into `into`, the set the previous stage wrote (promoted later).
  __device__ __forceinline__ void keep(float (&into)[ACC]) {
    s.ring.consumer_wait(at);
    issue_stage<TN>(into, s, ring, at.stage, half, true);
    ptx::wgmma_wait<1>();
    if (signals) release(s, previous, c);
    previous = at.stage;
    at.advance(ring.stages);
  }
  // The unit's last stage is done: retire it and promote its set.
  __device__ __forceinline__ void drain(float (&acc)[ACC], float (&from)[ACC]) {
    ptx::wgmma_wait<0>();
    if (signals) release(s, previous, c);
    promote(acc, from);
  }
  // The unit's place, and whether this warpgroup has anything of it to compute.
  __device__ __forceinline__ bool locate(const ptx::TileScheduler& u, int& row0, int& tn) const {
    int um, un;
    u.coords(um, un);
    tn = un * c.cn + c.rn;
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

// Consumer main loop: the rest of a unit whose first stage begin() has issued into pa. PROMOTE_EVERY
// stages add into one partial set before the sets switch; the stage before is retired (its ring slot
// released) after every issue, its set promoted only at a switch.
template <int TN>
__device__ __forceinline__ void consumer_mainloop(Consumer<TN>& w, float (&acc)[TN / 2], float (&pa)[TN / 2],
                                                  float (&pb)[TN / 2], int k_steps) {
  int k = 1;
  for (;;) {
    for (int j = 1; j < PROMOTE_EVERY && k < k_steps; ++j, ++k) w.keep(pa);
    if (k == k_steps) { w.drain(acc, pa); break; }
    w.overlap(acc, pb, pa);
    ++k;
    for (int j = 1; j < PROMOTE_EVERY && k < k_steps; ++j, ++k) w.keep(pb);
    if (k == k_steps) { w.drain(acc, pb); break; }
    w.overlap(acc, pa, pb);
    ++k;
  }
}

// Epilogue: scale, then registers (i, i+1), adjacent columns of one row, go out as one bf16x2: into the
// staging tile for TMA (once the last tile's store has read it), or straight to global memory. Stored
// directly, each warp instruction wrote 16 bytes into each of eight rows, and the stores of both
// consumers at once throttled the load/store unit (ncu: lg_throttle stalls).
template <int TN, bool STAGED>
__device__ __forceinline__ void epilogue(const Consumer<TN>& w, const CUtensorMap* map_c,
                                         __nv_bfloat16* __restrict__ C, const float (&acc)[TN / 2], float scale,
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
          __floats2bfloat162_rn(acc[i] * scale, acc[i + 1] * scale);
    }
    ptx::fence_proxy_async_smem();
    ptx::named_barrier_sync(1 + w.half, 128);
    if (w.signals) {
#pragma unroll
      for (int box = 0; box < TN / 64; ++box)
        ptx::tma_store_2d(map_c, staging + box * 8192, tn * TN + box * 64, row0);
      ptx::tma_store_commit();
    }
  } else {
    const int col0 = tn * TN;
#pragma unroll
    for (int i = 0; i < ACC; i += 2) {
      const int row = row0 + ptx::wgmma_acc_row(i);
      const int col = col0 + ptx::wgmma_acc_col(i);
      if (row < w.M && col < w.N)
        *reinterpret_cast<__nv_bfloat162*>(C + static_cast<size_t>(row) * w.N + col) =
            __floats2bfloat162_rn(acc[i] * scale, acc[i + 1] * scale);
    }
  }
}

// Tiles BM x TN (TN: BN, or DECODE_BN for batches of at most 64 rows), stored by TMA if STAGED.
template <int TN, bool STAGED>
__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const __grid_constant__ CUtensorMap map_c, const float* __restrict__ scale_a,
               const float* __restrict__ scale_b,
               __nv_bfloat16* __restrict__ C, int M, int N, int K, int cm, int cn, int a_rows) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *ptx::align_smem<Shared>(smem_raw);

  const uint32_t rank = ptx::cluster_ctarank();  // the launch's cluster has cm x cn CTAs
  const Cluster c{cm, cn, rank, static_cast<int>(rank) % cm, static_cast<int>(rank) / cm};
  const int size = cm * cn;
  // Units of cm x cn tiles, one per cluster at a time.
  const ptx::TileScheduler units(((M + BM - 1) / BM + cm - 1) / cm, ((N + TN - 1) / TN + cn - 1) / cn, GROUP_M / cm,
                                 static_cast<int>(blockIdx.x) / size, static_cast<int>(gridDim.x) / size);
  const int k_steps = K / BK;
  const uint32_t warpgroup = ptx::warpgroup_idx();
  const RingLayout ring(a_rows, TN, SMEM_AREA - staging_bytes<TN, STAGED>());
  constexpr int ACC = TN / 2;  // fp32 accumulators per consumer thread in one set

  // full: the producer's arrive (plus the TMA bytes, from partners too); empty: each consumer here and in
  // the partners. The partners' barriers must exist before anything lands on them.
  if (threadIdx.x == 0) s.ring.init(ring.stages, 2 * (1 + (cm == 2) + (cn == 2)));
  if (size > 1) ptx::cluster_sync();
  else __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) producer_loop<TN, STAGED>(s, ring, c, &map_a, &map_b, &map_c, units, k_steps, a_rows);
  } else {
    ptx::setmaxnreg_inc<CONSUMER_REGS>();
    const float scale = __ldg(scale_a) * __ldg(scale_b);
    Consumer<TN> w{s, ring, c, static_cast<int>(warpgroup) - 1, threadIdx.x % 128 == 0, M, N};
    float acc[ACC];  // the running sum, in true fp32
    float pa[ACC];   // stage partials from the tensor cores, alternating
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
      w.begin(pa);
      do {
        consumer_mainloop<TN>(w, acc, pa, pb, k_steps);
        // The next unit's first stage goes to the tensor cores before this unit's epilogue. The loop
        // has two exits, each with its own epilogue, so that wherever two paths meet, partial set pa
        // is either in flight on both or on neither (else ptxas waits for the wgmmas at once).
        int next_row0, next_tn;
        ptx::TileScheduler after = u;
        after.next();
        w.seek(after, next_row0, next_tn, k_steps);
        if (!after.valid()) {
          epilogue<TN, STAGED>(w, &map_c, C, acc, scale, staging, row0, tn);
          break;
        }
        w.begin(pa);
        epilogue<TN, STAGED>(w, &map_c, C, acc, scale, staging, row0, tn);
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
        u = after;
        row0 = next_row0;
        tn = next_tn;
      } while (true);
    }
    if (STAGED && w.signals) ptx::tma_store_wait_read<0>();  // the staging outlives its reads
  }
  // No CTA exits while a partner may still arrive on its barriers.
  if (size > 1) {
    __syncwarp();  // the cluster barrier is .aligned: the producer's warp must be converged
    ptx::cluster_sync();
  }
}

// The cluster shape: pairs along a dimension that has at least two tiles.
void choose_cluster(int64_t M, int64_t N, int tile_n, int& cm, int& cn) {
  cm = CLUSTER_M == 2 && M > BM ? 2 : 1;
  cn = CLUSTER_N == 2 && N > tile_n ? 2 : 1;
}

// Tensor maps, cluster shape and a persistent grid for the kernel of tiles TN wide, and its launch.
template <int TN, bool STAGED>
int launch(const __nv_fp8_e4m3* A, const __nv_fp8_e4m3* B, const float* scale_a, const float* scale_b,
           __nv_bfloat16* C, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  static_assert(!STAGED || stores_by_tma<TN>(), "staged tiles are whole 64-column boxes");
  int cm, cn;
  choose_cluster(M, N, TN, cm, cn);
  const int a_rows = M <= 64 ? 64 : BM;  // A rows a stage holds (a single tile-row of at most 64: see RingLayout)
  CUtensorMap map_a, map_b;
  cudaError_t err = ptx::make_tma_map_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, A, M, K, K, a_rows / cn, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = ptx::make_tma_map_2d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, B, N, K, K, TN / cm, BK,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  CUtensorMap map_c = {};  // unused by tiles stored directly
  if constexpr (STAGED) {
    err = ptx::make_tma_map_2d(&map_c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, C, M, N, N, 64, 64,
                               CU_TENSOR_MAP_SWIZZLE_128B);
    if (err != cudaSuccess) return static_cast<int>(err);
  }

  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(gemm_fp8_sm90a<TN, STAGED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);

  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(THREADS, 1, 1);
  config.dynamicSmemBytes = SMEM_BYTES;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cm * cn);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;

  // Persistent: as many clusters as fit at once (a GPC's SMs need not divide into them evenly), asked
  // of the driver once per device and cluster size (and tile width: one table per instantiation).
  static int resident[4][128] = {};
  if (device < 0 || device >= 128) return static_cast<int>(cudaErrorInvalidDevice);
  int& fit = resident[cm * cn - 1][device];
  if (fit == 0) {
    config.gridDim = dim3(static_cast<unsigned>(cm * cn), 1, 1);
    if ((err = cudaOccupancyMaxActiveClusters(&fit, gemm_fp8_sm90a<TN, STAGED>, &config)) != cudaSuccess)
      return static_cast<int>(err);
    if (fit <= 0) return static_cast<int>(cudaErrorLaunchOutOfResources);
  }
  const int64_t units = ((M + BM * cm - 1) / (BM * cm)) * ((N + TN * cn - 1) / (TN * cn));
  config.gridDim = dim3(static_cast<unsigned>((units < fit ? units : fit) * cm * cn), 1, 1);
  err = cudaLaunchKernelEx(&config, gemm_fp8_sm90a<TN, STAGED>, map_a, map_b, map_c, scale_a, scale_b, C,
                           static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), cm, cn, a_rows);
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

// The epilogue for this width and depth (see stores_by_tma).
template <int TN>
int launch_width(const __nv_fp8_e4m3* A, const __nv_fp8_e4m3* B, const float* scale_a, const float* scale_b,
                 __nv_bfloat16* C, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if constexpr (stores_by_tma<TN>())
    if (K <= TMA_STORE_MAX_K) return launch<TN, true>(A, B, scale_a, scale_b, C, M, N, K, stream);
  return launch<TN, false>(A, B, scale_a, scale_b, C, M, N, K, stream);
}

}  // namespace

extern "C" int gemm_fp8(
    const __nv_fp8_e4m3* __restrict__ A,
    const __nv_fp8_e4m3* __restrict__ B,
    const float* __restrict__ scale_a,
    const float* __restrict__ scale_b,
    __nv_bfloat16* __restrict__ C,
    int64_t M,
    int64_t N,
    int64_t K,
    cudaStream_t stream) {
  if (M <= 0 || N <= 0) return static_cast<int>(cudaGetLastError());
  if (K <= 0) return static_cast<int>(cudaMemsetAsync(C, 0, static_cast<size_t>(M) * N * sizeof(__nv_bfloat16), stream));
  if (K % BK != 0 || N % 64 != 0 || M > INT32_MAX / 2 || N > INT32_MAX / 2) return static_cast<int>(cudaErrorInvalidValue);
  return M <= 64 ? launch_width<DECODE_BN>(A, B, scale_a, scale_b, C, M, N, K, stream)
                 : launch_width<BN>(A, B, scale_a, scale_b, C, M, N, K, stream);
}
