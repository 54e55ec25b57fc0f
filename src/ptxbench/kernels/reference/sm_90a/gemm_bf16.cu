// gemm_bf16, expert reference for sm_90a (H100/H200): C[M, N] = A[M, K] · B[N, K]ᵀ, bf16 in, fp32
// accumulation, bf16 out.
//
// Measured on the H200 (benchmarks/results/reference_kernels_h200.md, 2026-12-04, cuBLAS timed in the same run,
// L2 flushed): 8192^3 in 1.362 ms = 807 TFLOP/s against cuBLAS's 1.393 ms (102.2 %; the target is 103 %),
// 100.5-101.8 % on the prefill and 4096^3 shapes, 100.0 % on llama3-8b-down-batch, and 94.0 % on the M = 16
// QKV decode (18.2 against 17.2 us, 65 % of the copy-bandwidth floor; see the decode path below). ncu (the
// evaluator's profile of the timed workload): HGMMA.64x256x16 does every FLOP, UTMALDG.2D loads, SYNCS mbarrier
// waits.
//
// Design (one persistent CTA per SM, 384 threads = three warpgroups):
//   * warpgroup 0 is the producer: one thread streams K-slices of A (128 x 64) and B (BN x 64) into
//     a ring of shared memory (192 KiB: 4 stages for BN = 256, 6 for 128, 8 for 64) with TMA (128-byte
//     swizzle, the layout wgmma reads without bank conflicts). Each stage has a "full" mbarrier (TMA
//     completes its bytes there) and an "empty" mbarrier (the consumers release it once their wgmmas
//     have read it).
//   * warpgroups 1 and 2 are consumers: each owns 64 rows of the 128 x BN output tile and issues
//     wgmma.m64nBNk16 straight from the swizzled shared tiles (BN / 2 fp32 accumulators per thread).
//     One K-slice's wgmmas stay in flight while the next slice is issued (wait_group 1). A consumer
//     whose 64 rows lie wholly past M (decode batches) only releases the stages it is given.
//   * The tile width BN is chosen per shape on the host: 256 (the widest wgmma, least shared-memory
//     traffic per FLOP) unless too few tiles would leave SMs idle or the last wave mostly empty; then
//     128 or 64 (M <= 64 takes the decode path below).
//   * setmaxnreg moves registers from the producer (40) to the consumers (232): the accumulators
//     and their addressing fit without spills.
//   * The epilogue goes through shared memory and TMA stores: each consumer writes 64 x 128 of its
//     tile into a swizzled staging buffer (conflict-free), fences, and one thread issues the stores,
//     so the global writes proceed while the consumer starts the next tile's wgmmas.
//   * Output tiles are walked in a grouped order (8 tile-rows at a time) so the A and B panels the
//     132 CTAs use at one moment stay in L2. The producer runs ahead into the next tile while the
//     consumers write the current one, so the epilogue overlaps the next tile's loads.
//   * Remainders: K is a multiple of 64 and N of 64 (task rules). Rows of A past M and rows of B
//     past N are zero-filled by TMA loads, and the TMA stores of the epilogue clip rows >= M and
//     columns >= N.
//
// Decode path (M <= 64, its own kernel): the work is streaming B once (N x K x 2 bytes, ~50 MB for
// the 6144 x 4096 QKV), so what matters is how many bytes are in flight at once, from every SM.
//   * Swapped operands: wgmma computes Cᵀ tiles, D[64 x MT] = B[64 rows of N] · A[MT rows]ᵀ, with
//     MT = M rounded up to 8, 16, 32 or 64 (TMA zero-fills the rows of A past M). The tensor cores
//     then do 64 x MT, not 64 x 64, per B row block, and A costs MT x 128 bytes per stage.
//   * Each CTA owns BN = 64 columns of C (one m64 wgmma) and 1/S of K: S CTAs along K form a
//     thread-block cluster. S is the smallest of 1, 2, 4, 8 that gives >= 1 CTA per SM without a
//     second wave (N = 6144: S = 2, 192 CTAs; N = 11008: S = 1, 172 CTAs; N = 4096: S = 4, 256 CTAs).
//     On the 6144 x 4096 QKV that took 18.1 us, against 19.2 with >= 2 CTAs per SM (S = 4) and 20.0
//     with S = 1 (kernel_variants_h200.md); the other widths were not timed both ways.
//   * A CTA is one producer warp (TMA into an mbarrier ring) and one consumer warpgroup, 160
//     threads. The consumer waits for each slice's few wgmmas and frees the stage at once, so
//     STAGES - 1 loads stay in flight. The ring is sized so that 4 CTAs fit on an SM (<= 56 KiB:
//     6 stages for MT = 8, 5 for 16, 4 for 32, 3 for 64): up to 528 CTAs are resident at once, the
//     grids above run as one wave with no tail, and each SM keeps ~30-130 KiB of B in flight
//     (HBM needs ~30 KiB per SM at 4 TB/s and ~1 us latency). Also asking for B blocks beyond the
//     ring to be read into L2 was ~30 % slower on the QKV decode
//     (benchmarks/variants/gemm_bf16.decode_l2_prefetch.cu).
//   * Reduction through distributed shared memory: each CTA parks its fp32 partial (one padded row
//     of 64 columns per token) in its now idle ring, a cluster barrier (release/acquire) publishes
//     it, and CTA r of the cluster sums columns [64r/S, 64(r+1)/S) of all S partials with
//     ld.shared::cluster in rank order (deterministic) and writes them to C as bf16 pairs, rows < M
//     only. A second cluster barrier keeps every CTA alive until its peers are done reading it.
//   * ncu beside cuBLAS on the QKV decode (ncu_gemm_bf16_llama3-8b-qkv-decode_h200.md, one call each):
//     17.5 against 17.1 us; both keep L2 about as busy (66.6 against 63.7 % of peak) and neither
//     reaches the copy floor. Ours moves 1.36 x cuBLAS's L2 bytes and stalls at barriers and fences
//     (1.69 and 0.62 cycles per issue, cuBLAS none), which fits the split's exchange; not splitting
//     costs more (20.0 us, above).
#include "ptx_wrappers.cuh"

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BK = 64;                     // K per stage: 64 bf16 = one 128-byte swizzle row
constexpr int THREADS = 384;
constexpr int GROUP_M = 8;                 // tile-rows walked together for L2 reuse
constexpr uint32_t A_BYTES = BM * BK * 2;  // 16 KiB
constexpr uint32_t RING_BYTES = 192 * 1024;
constexpr int C_COLS = 128;                // columns staged per TMA-store round (two 64-column boxes)

template <int BN>
struct Config {
  static constexpr uint32_t B_BYTES = BN * BK * 2;
  static constexpr int STAGES = RING_BYTES / (A_BYTES + B_BYTES);
  static constexpr int ACC = BN / 2;  // fp32 accumulators per consumer thread (64 x BN over 128 threads)
};

template <int BN>
struct Shared {
  static constexpr int STAGES = Config<BN>::STAGES;
  __nv_bfloat16 a[STAGES][BM * BK];  // each tile 1024-byte aligned (sizes are multiples of 1024)
  __nv_bfloat16 b[STAGES][BN * BK];
  __nv_bfloat16 c[2][64 * C_COLS];   // per consumer: two 64 x 64 boxes, 128-byte swizzled
  ptx::RingBarriers<STAGES> ring;    // full: the producer's arrive plus the TMA bytes; empty: both consumers
};
template <int BN>
constexpr size_t smem_bytes() { return sizeof(Shared<BN>) + 1024; }  // slack to align the base to 1024 B

// Byte offset of element (row, col) in a staging buffer of 64 x 64 boxes with 128-byte swizzle, as
// TMA expects them.
__device__ __forceinline__ uint32_t staged_offset(int row, int col) {
  return (col / 64) * 8192 + ptx::sw128_offset(row, (col % 64) * 2);
}

// Producer (one thread): every tile's K-slices of A and B into the ring, running ahead of the
// consumers by as many stages as the ring holds (into the next tile while they store this one).
template <int BN>
__device__ __forceinline__ void producer_loop(Shared<BN>& s, const CUtensorMap* map_a, const CUtensorMap* map_b,
                                              ptx::TileScheduler t, int k_steps) {
  ptx::tma_prefetch_map(map_a);
  ptx::tma_prefetch_map(map_b);
  ptx::RingState at;
  for (; t.valid(); t.next()) {
    int tm, tn;
    t.coords(tm, tn);
    for (int k = 0; k < k_steps; ++k) {
      uint64_t* full = s.ring.producer_acquire(at, A_BYTES + Config<BN>::B_BYTES);
      ptx::tma_load_2d(s.a[at.stage], map_a, full, k * BK, tm * BM);
      ptx::tma_load_2d(s.b[at.stage], map_b, full, k * BK, tn * BN);
      at.advance(Config<BN>::STAGES);
    }
  }
}

// Consumer main loop: one tile's K-slices for this warpgroup's 64 rows (`half`), D = A · Bᵀ into acc.
// One slice's wgmmas stay in flight while the next is issued; a slice's stage is released once its
// wgmmas are done (by the one `signals` thread of the warpgroup).
template <int BN>
__device__ __forceinline__ void consumer_mainloop(Shared<BN>& s, ptx::RingState& at, float (&acc)[Config<BN>::ACC],
                                                  int half, bool signals, int k_steps) {
  int previous = -1;
  for (int k = 0; k < k_steps; ++k) {
    s.ring.consumer_wait(at);
    const uint64_t a_desc = ptx::wgmma_desc_k_sw128(s.a[at.stage] + half * 64 * BK);
    const uint64_t b_desc = ptx::wgmma_desc_k_sw128(s.b[at.stage]);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)  // +32 bytes along K = +2 in the descriptor's address
      ptx::wgmma_bf16<BN>(acc, a_desc + 2 * kk, b_desc + 2 * kk, (k > 0 || kk > 0) ? 1 : 0);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // the previous slice's wgmmas are done: its stage may be refilled
    if (previous >= 0 && signals) s.ring.consumer_release(previous);
    previous = at.stage;
    at.advance(Config<BN>::STAGES);
  }
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  if (previous >= 0 && signals) s.ring.consumer_release(previous);
}

// A tile whose 64 rows of this warpgroup lie wholly past M: nothing to compute, each stage handed back.
template <int BN>
__device__ __forceinline__ void consumer_skip_tile(Shared<BN>& s, ptx::RingState& at, bool signals, int k_steps) {
  for (int k = 0; k < k_steps; ++k) {
    s.ring.consumer_wait(at);
    if (signals) s.ring.consumer_release(at.stage);
    at.advance(Config<BN>::STAGES);
  }
}

// Epilogue, C_COLS columns per round: wait until the previous store has read the buffer, write
// bf16x2 pairs (registers i, i+1 are adjacent columns) into it swizzled, fence for the async
// proxy, then one thread stores the boxes; TMA clips rows >= M and columns >= N.
template <int BN>
__device__ __forceinline__ void epilogue(Shared<BN>& s, const CUtensorMap* map_c, const float (&acc)[Config<BN>::ACC],
                                         int half, bool signals, int tn, int row0) {
  uint8_t* staging = reinterpret_cast<uint8_t*>(s.c[half]);
  constexpr int ROUND_COLS = BN < C_COLS ? BN : C_COLS;
  constexpr int ROUND_REGS = ROUND_COLS / 2;  // accumulators per thread in one round
#pragma unroll
  for (int i = 0; i < Config<BN>::ACC; i += 2) {  // fully unrolled: every condition is compile-time
    const int round = i / ROUND_REGS;
    if (i % ROUND_REGS == 0) {
      if (signals) ptx::tma_store_wait_read<0>();
      ptx::named_barrier_sync(1 + half, 128);  // this consumer warpgroup
    }
    const int row = ptx::wgmma_acc_row(i);
    const int col = ptx::wgmma_acc_col(i) - round * ROUND_COLS;
    *reinterpret_cast<__nv_bfloat162*>(staging + staged_offset(row, col)) =
        __floats2bfloat162_rn(acc[i], acc[i + 1]);
    if ((i + 2) % ROUND_REGS == 0) {
      ptx::fence_proxy_async_smem();
      ptx::named_barrier_sync(1 + half, 128);  // this consumer warpgroup
      if (signals) {
#pragma unroll
        for (int box = 0; box < ROUND_COLS / 64; ++box)
          ptx::tma_store_2d(map_c, staging + box * 8192, tn * BN + round * ROUND_COLS + box * 64, row0);
        ptx::tma_store_commit();
      }
    }
  }
}

template <int BN>
__global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  Shared<BN>& s = *ptx::align_smem<Shared<BN>>(smem_raw);

  const ptx::TileScheduler schedule((M + BM - 1) / BM, (N + BN - 1) / BN, GROUP_M, blockIdx.x, gridDim.x);
  const int k_steps = K / BK;
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) s.ring.init(Config<BN>::STAGES, 2);  // empty: one arrive per consumer warpgroup
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) producer_loop<BN>(s, &map_a, &map_b, schedule, k_steps);
    return;
  }

  ptx::setmaxnreg_inc<232>();
  const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const bool signals = threadIdx.x % 128 == 0;       // one thread per warpgroup releases stages
  float acc[Config<BN>::ACC];
  ptx::RingState at;
  for (ptx::TileScheduler t = schedule; t.valid(); t.next()) {
    int tm, tn;
    t.coords(tm, tn);
    const int row0 = tm * BM + half * 64;
    if (row0 >= M) {
      consumer_skip_tile<BN>(s, at, signals, k_steps);
      continue;
    }
    consumer_mainloop<BN>(s, at, acc, half, signals, k_steps);
    epilogue<BN>(s, &map_c, acc, half, signals, tn, row0);
  }
  if (signals) ptx::tma_store_wait_read<0>();  // the buffer must outlive the stores reading it
}

// TMA maps of the K-major operands, read BK = 64 columns (one 128-byte swizzle row) at a time:
// A in boxes of a_rows x 64, B in boxes of b_rows x 64. Both paths load this way.
cudaError_t make_operand_maps(CUtensorMap* map_a, CUtensorMap* map_b, const __nv_bfloat16* A, const __nv_bfloat16* B,
                              int64_t M, int64_t N, int64_t K, int a_rows, int b_rows) {
  cudaError_t err = ptx::make_tma_map_2d(map_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, A, M, K, K, a_rows, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return err;
  return ptx::make_tma_map_2d(map_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, N, K, K, b_rows, BK,
                              CU_TENSOR_MAP_SWIZZLE_128B);
}

// Time ~ (waves of tiles) x (work per tile), with a narrower tile a little less efficient per FLOP.
int choose_bn(int64_t M, int64_t N, int sms) {
  const int widths[3] = {256, 128, 64};
  const double efficiency[3] = {1.0, 1.1, 1.3};
  int best = 256;
  double best_cost = 0.0;
  for (int i = 0; i < 3; ++i) {
    const int64_t tiles = ((M + BM - 1) / BM) * ((N + widths[i] - 1) / widths[i]);
    const double cost = static_cast<double>((tiles + sms - 1) / sms) * widths[i] * efficiency[i];
    if (i == 0 || cost < best_cost) { best = widths[i]; best_cost = cost; }
  }
  return best;
}

template <int BN>
int launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
           int sms, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  cudaError_t err = make_operand_maps(&map_a, &map_b, A, B, M, N, K, BM, BN);
  if (err != cudaSuccess) return static_cast<int>(err);
  CUtensorMap map_c;
  err = ptx::make_tma_map_2d(&map_c, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, C, M, N, N, 64, 64,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  constexpr size_t smem = smem_bytes<BN>();
  if ((err = cudaFuncSetAttribute(gemm_bf16_sm90a<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem))) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  gemm_bf16_sm90a<BN><<<grid, THREADS, smem, stream>>>(map_a, map_b, map_c, static_cast<int>(M),
                                                       static_cast<int>(N), static_cast<int>(K));
  return static_cast<int>(cudaGetLastError());
}

// ---- decode path (M <= 64) ------------------------------------------------------------------------
namespace decode {

constexpr int BN = 64;                        // columns of C per CTA = the wgmma M
constexpr int THREADS = 160;                  // consumer warpgroup (warps 0-3) + producer warp (4)
constexpr int CTAS_PER_SM = 4;
constexpr int MIN_CTAS_PER_SM = 1;            // K is split until the grid gives every SM this many CTAs
constexpr int MAX_SPLIT = 8;                  // the portable cluster size limit
constexpr uint32_t W_BYTES = BN * BK * 2;     // one stage of B: 8 KiB
constexpr uint32_t SM_SHARE = 228 * 1024 / CTAS_PER_SM;  // of an SM's 228 KiB shared memory
// The ring: the share less the 1 KiB the system reserves per CTA, the alignment slack and the barriers.
constexpr uint32_t RING_BUDGET = SM_SHARE - 1024 - 1024 - 128;

template <int MT>
struct Config {
  static constexpr uint32_t X_BYTES = MT * BK * 2;  // one stage of A: MT rows (1-8 KiB)
  static constexpr int STAGES = RING_BUDGET / (W_BYTES + X_BYTES);
  static constexpr int LD = BN + 4;                 // partial tile pitch in floats: stores conflict-free
  static constexpr int ACC = MT / 2;
  static_assert(STAGES >= 2, "the ring needs two stages");
};

template <int MT>
struct Shared {
  static constexpr int STAGES = Config<MT>::STAGES;
  __nv_bfloat16 w[STAGES][BN * BK];  // B tiles, 1024-byte aligned (sizes are multiples of 1024)
  __nv_bfloat16 x[STAGES][MT * BK];  // A tiles
  ptx::RingBarriers<STAGES> ring;    // full: the producer's arrive plus the TMA bytes; empty: the consumers
};

template <int MT>
constexpr size_t smem_bytes() { return sizeof(Shared<MT>) + 1024; }  // slack to align the base to 1024 B

template <int MT>
constexpr bool fits() {  // 4 CTAs per SM, and the fp32 partial (MT x LD) fits the idle B ring
  return smem_bytes<MT>() + 1024 <= SM_SHARE &&
         MT * Config<MT>::LD * sizeof(float) <= Config<MT>::STAGES * size_t{W_BYTES};
}
static_assert(fits<8>() && fits<16>() && fits<32>() && fits<64>(), "decode shared-memory plan");

// Producer (one thread): this CTA's K range of B (64 rows) and A (MT rows; rows >= M arrive as zeros).
template <int MT>
__device__ __forceinline__ void decode_producer_loop(Shared<MT>& s, const CUtensorMap* map_a,
                                                     const CUtensorMap* map_b, int n0, int k_begin, int k_iters) {
  ptx::tma_prefetch_map(map_a);
  ptx::tma_prefetch_map(map_b);
  ptx::RingState at;
  for (int it = 0; it < k_iters; ++it) {
    uint64_t* full = s.ring.producer_acquire(at, W_BYTES + Config<MT>::X_BYTES);
    const int kc = (k_begin + it) * BK;
    ptx::tma_load_2d(s.w[at.stage], map_b, full, kc, n0);
    ptx::tma_load_2d(s.x[at.stage], map_a, full, kc, 0);
    at.advance(Config<MT>::STAGES);
  }
}

// Consumer main loop: D[64 x MT] += B tile · A tileᵀ over this CTA's K range. Memory-bound: the few
// wgmmas finish long before the next stage lands, so each slice is waited for at once and its stage
// handed straight back; STAGES - 1 loads stay in flight instead of STAGES - 2.
template <int MT>
__device__ __forceinline__ void decode_consumer_mainloop(Shared<MT>& s, float (&acc)[Config<MT>::ACC], int k_iters) {
#pragma unroll
  for (int i = 0; i < Config<MT>::ACC; ++i) acc[i] = 0.0f;
  ptx::RingState at;
  for (int it = 0; it < k_iters; ++it) {
    s.ring.consumer_wait(at);
    const uint64_t w_desc = ptx::wgmma_desc_k_sw128(s.w[at.stage]);
    const uint64_t x_desc = ptx::wgmma_desc_k_sw128(s.x[at.stage]);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)  // +32 bytes along K
      ptx::wgmma_bf16<MT>(acc, w_desc + 2 * kk, x_desc + 2 * kk, 1);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    if (threadIdx.x == 0) s.ring.consumer_release(at.stage);
    at.advance(Config<MT>::STAGES);
  }
  ptx::wgmma_fence_acc(acc);
}

// Epilogue, first half: the fp32 partial into the idle ring, accumulator (row n, column m) ->
// partial[m][n] (lanes of a warp hit 32 distinct banks). All wgmmas (the last readers of the ring)
// are done and every TMA load has landed.
template <int MT>
__device__ __forceinline__ void decode_park_partial(float* partial, const float (&acc)[Config<MT>::ACC]) {
  ptx::fence_proxy_async_smem();  // order the async-proxy use of the ring before the generic stores
#pragma unroll
  for (int i = 0; i < Config<MT>::ACC; ++i)
    partial[ptx::wgmma_acc_col(i) * Config<MT>::LD + ptx::wgmma_acc_row(i)] = acc[i];
}

// Epilogue, second half (after a cluster barrier): CTA `rank` sums columns [rank * cols, (rank + 1) *
// cols) of the tile over every CTA's partial, in rank order, and writes them to C as bf16 pairs.
template <int MT>
__device__ __forceinline__ void decode_reduce_store(const float* partial, __nv_bfloat16* __restrict__ C, int M,
                                                    int N, int n0, int rank, int split) {
  const int cols = BN / split, pairs = cols / 2;
  for (int item = threadIdx.x; item < pairs * M; item += 128) {
    const int m = item / pairs;
    const int n = rank * cols + 2 * (item - m * pairs);
    const float* own = partial + m * Config<MT>::LD + n;
    float2 sum = make_float2(0.0f, 0.0f);
    for (int peer = 0; peer < split; ++peer) {  // fixed order: the result does not depend on timing
      const float2 v = ptx::ld_shared_cluster_f32x2(ptx::map_to_rank(own, static_cast<uint32_t>(peer)));
      sum.x += v.x;
      sum.y += v.y;
    }
    *reinterpret_cast<__nv_bfloat162*>(C + static_cast<int64_t>(m) * N + n0 + n) = __floats2bfloat162_rn(sum.x, sum.y);
  }
}

// Grid: S x (N / 64) CTAs in clusters of S along x; CTA rank r takes K blocks [r kb / S, (r+1) kb / S).
template <int MT>
__global__ void __launch_bounds__(THREADS, CTAS_PER_SM)
gemm_bf16_decode_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                       __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  Shared<MT>& s = *ptx::align_smem<Shared<MT>>(smem_raw);

  const int split = static_cast<int>(ptx::cluster_nctarank());
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int n0 = static_cast<int>(blockIdx.x / split) * BN;
  const int kb = K / BK;
  const int k_begin = static_cast<int>(static_cast<int64_t>(rank) * kb / split);
  const int k_iters = static_cast<int>(static_cast<int64_t>(rank + 1) * kb / split) - k_begin;  // >= 1 (split <= kb)
  const uint32_t warp = ptx::warp_idx();

  if (threadIdx.x == 0) s.ring.init(Config<MT>::STAGES, 1);  // empty: the consumer warpgroup's release
  __syncthreads();

  float* partial = reinterpret_cast<float*>(s.w);  // [MT][LD], valid after the main loop only
  if (warp == 4) {  // producer: one thread streams this CTA's K range
    if (threadIdx.x == 128) decode_producer_loop<MT>(s, &map_a, &map_b, n0, k_begin, k_iters);
    __syncwarp();  // the cluster barriers below are .aligned: the warp must be converged
  } else {  // consumer warpgroup
    float acc[Config<MT>::ACC];
    decode_consumer_mainloop<MT>(s, acc, k_iters);
    decode_park_partial<MT>(partial, acc);
  }
  ptx::cluster_sync();  // release/acquire: every partial of the cluster is visible to every CTA

  if (warp < 4) decode_reduce_store<MT>(partial, C, M, N, n0, rank, split);
  ptx::cluster_sync();  // no CTA exits (freeing its shared memory) while a peer may still read it
}

// Smallest cluster size that puts >= MIN_CTAS_PER_SM CTAs on every SM, within one wave of resident
// CTAs (never more K splits than K blocks).
int choose_split(int64_t panels, int64_t k_blocks, int sms) {
  int split = 1;
  while (split < MAX_SPLIT && split * 2 <= k_blocks && panels * split < MIN_CTAS_PER_SM * static_cast<int64_t>(sms) &&
         panels * split * 2 <= CTAS_PER_SM * static_cast<int64_t>(sms))
    split *= 2;
  return split;
}

template <int MT>
int launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int64_t M, int64_t N, int64_t K,
           int sms, cudaStream_t stream) {
  CUtensorMap map_a, map_b;
  cudaError_t err = make_operand_maps(&map_a, &map_b, A, B, M, N, K, MT, BN);
  if (err != cudaSuccess) return static_cast<int>(err);
  constexpr size_t smem = smem_bytes<MT>();
  auto kernel = gemm_bf16_decode_sm90a<MT>;
  if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) !=
          cudaSuccess ||
      (err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared)) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t panels = N / BN;
  const int split = choose_split(panels, K / BK, sms);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(panels * split), 1, 1);
  config.blockDim = dim3(THREADS, 1, 1);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(split);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  err = cudaLaunchKernelEx(&config, kernel, map_a, map_b, C, static_cast<int>(M), static_cast<int>(N),
                           static_cast<int>(K));
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

}  // namespace decode

}  // namespace

extern "C" int gemm_bf16(
    const __nv_bfloat16* __restrict__ A,
    const __nv_bfloat16* __restrict__ B,
    __nv_bfloat16* __restrict__ C,
    int64_t M,
    int64_t N,
    int64_t K,
    cudaStream_t stream) {
  if (M <= 0 || N <= 0) return static_cast<int>(cudaGetLastError());
  if (K <= 0) return static_cast<int>(cudaMemsetAsync(C, 0, static_cast<size_t>(M) * N * sizeof(__nv_bfloat16), stream));
  if (K % BK != 0 || N % 64 != 0 || M > INT32_MAX / 2 || N > INT32_MAX / 2) return static_cast<int>(cudaErrorInvalidValue);

  int device = 0, sms = 0;
  cudaError_t err;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return static_cast<int>(err);
  if (M <= 64) {  // decode: split-K clusters streaming B (see the design note)
    if (M <= 8) return decode::launch<8>(A, B, C, M, N, K, sms, stream);
    if (M <= 16) return decode::launch<16>(A, B, C, M, N, K, sms, stream);
    if (M <= 32) return decode::launch<32>(A, B, C, M, N, K, sms, stream);
    return decode::launch<64>(A, B, C, M, N, K, sms, stream);
  }
  switch (choose_bn(M, N, sms)) {
    case 256: return launch<256>(A, B, C, M, N, K, sms, stream);
    case 128: return launch<128>(A, B, C, M, N, K, sms, stream);
    default: return launch<64>(A, B, C, M, N, K, sms, stream);
  }
}
