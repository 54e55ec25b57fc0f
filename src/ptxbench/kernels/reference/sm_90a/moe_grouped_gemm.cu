// moe_grouped_gemm, expert reference for sm_90a (H100/H200): for every expert e, Y[start_e:end_e] =
// X[start_e:end_e] · W[e]ᵀ, with end_e = expert_offsets[e] and start_e = expert_offsets[e - 1] (0 for e = 0);
// bf16 in, fp32 accumulation, bf16 out. The offsets live on the device and change from call to call.
//
// NOT YET MEASURED ON A GPU: it builds for sm_90a with wgmma, TMA and mbarrier in its SASS, and its tile
// scheduler is checked against a Python model of the same arithmetic (tests/test_reference_moe_model.py). Its
// correctness on an H100 and its speed against torch._grouped_mm and the per-expert cuBLAS loop are unknown.
//
// Design: the persistent warp-specialised GEMM of gemm_bf16.cu (its pipeline unchanged), fed by a tile
// scheduler over the experts' row ranges instead of one M x N grid.
//   * One persistent CTA per SM, 384 threads = three warpgroups. Warpgroup 0 is the producer: its first warp
//     walks the tiles and one lane streams K-slices of X (128 rows x 64, or 64 or 16 when the tile holds no
//     more rows of its expert) and W[e] (BN rows x 64) into a ring of shared memory (192 KiB: 4 stages for
//     BN = 256, 6 for 128, 8 for 64) with TMA (128-byte swizzle).
//     Each stage has a "full" mbarrier (the producer's arrival plus the TMA bytes) and an "empty" one (one
//     arrival per consumer warpgroup once its wgmmas have read the stage).
//   * Warpgroups 1 and 2 are consumers: each owns 64 rows of the 128 x BN tile and issues
//     wgmma.m64nBNk16 from the swizzled tiles, one K-slice's wgmmas in flight while the next is issued.
//     setmaxnreg gives the producer 40 registers and the consumers 232.
//   * Tiles: expert e with c_e rows has ceil(c_e / 128) tile-rows, each of ceil(N / BN) tiles; the tiles
//     are numbered expert after expert (inside an expert in gemm_bf16's grouped order, 8 tile-rows at a
//     time, so W[e]'s panels and X's rows stay in L2), and CTA b takes tiles b, b + grid, ... An expert
//     without rows owns no tile: it costs a lane of one scheduler step, nothing else.
//   * The scheduler (ExpertWalker) is run by whole warps (the producer's warp and every consumer warp,
//     each its own copy, so all agree without talking): it reads 32 experts' offsets at a time (one per
//     lane), forms their tile counts and a prefix sum by shuffles, and finds a tile's expert by a ballot.
//     A CTA's tiles only increase, so each walker reads every offset at most once per call: E / 32 steps
//     in all, no shared or global scratch, any E.
//   * Rows of a tile past its expert's end: the X box (from the tile's first row) may read the next
//     expert's rows (or zeros past T), and a 64- or 16-row box leaves the stage's later rows as an earlier
//     stage wrote them; the wgmmas compute all 128 (row r of a product depends on row r of X only), and
//     nothing of the rows past the end is stored. A consumer whose 64 rows all lie past the end (small
//     groups: decode) computes nothing and only hands its stages back. The W box of the last tile-column
//     may run past N into the next expert's weights (W is one [E * N, K] map) or past E * N (zeros): those
//     columns are never stored either.
//   * Epilogue: a consumer whose 64 rows all belong to the expert writes them as gemm_bf16 does (bf16 into
//     a swizzled staging buffer, TMA stores that clip columns >= N, overlapping the next tile); a consumer
//     holding the expert's last, partial rows stores bf16 pairs straight from its accumulators, masked to
//     rows < end_e and columns < N (at most one such tile-row per expert and tile-column).
//   * The tile width BN (256, 128 or 64) is chosen on the host from T, E and N alone (the counts are on the
//     device and are not read back): the cost model of gemm_bf16 on an estimate of the tile-rows,
//     ceil(T / 128) plus half a tile-row for each expert that can have rows, and at least one per such expert.
//   * Remainders: N and K are multiples of 64 (task rules), so every K-slice is whole and a tile-column is
//     stored in whole 64-wide boxes; T and the group sizes are arbitrary.
#include "ptx_wrappers.cuh"

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BK = 64;                     // K per stage: 64 bf16 = one 128-byte swizzle row
constexpr int THREADS = 384;
constexpr int GROUP_M = 8;                 // tile-rows of one expert walked together for L2 reuse
constexpr uint32_t A_BYTES = BM * BK * 2;  // 16 KiB
constexpr int X_BOX_MID = 64;              // the X boxes: BM, X_BOX_MID or X_BOX_SMALL rows, the smallest
constexpr int X_BOX_SMALL = 16;            // that holds a tile's rows of its expert
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

// One output tile: its expert, the expert's end row, the tile's first row and its tile-column.
struct Tile {
  int expert, end, row0, tn;
};

// The tiles of all experts in order (see the design note), found by a whole warp (every lane calls every
// method with the same arguments). Tile indices asked for must not decrease.
struct ExpertWalker {
  const int32_t* offsets;
  int experts, rows, tiles_n;
  int e0;          // first expert of the loaded chunk of 32
  int base;        // tiles of the experts before the chunk
  int chunk_tiles; // tiles of the chunk's experts
  int first;       // this lane's expert: its first tile, counted from the chunk's start
  int count;       // ... its number of tiles
  int start, end;  // ... its rows

  __device__ __forceinline__ ExpertWalker(const int32_t* offsets_, int experts_, int rows_, int tiles_n_)
      : offsets(offsets_), experts(experts_), rows(rows_), tiles_n(tiles_n_), base(0) {
    load(0);
  }

  // Offsets of experts first .. first + 31 (one per lane), their tile counts and prefix sums.
  __device__ __forceinline__ void load(int first_expert) {
    e0 = first_expert;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int e = e0 + lane;
    start = 0;
    end = 0;
    if (e < experts) {
      end = min(__ldg(offsets + e), rows);
      start = e > 0 ? min(__ldg(offsets + e - 1), rows) : 0;
    }
    const int tile_rows = end > start ? (end - start + BM - 1) / BM : 0;
    count = tile_rows * tiles_n;
    int inclusive = count;
#pragma unroll
    for (int step = 1; step < 32; step *= 2) {
      const int below = __shfl_up_sync(0xffffffffu, inclusive, step);
      if (lane >= step) inclusive += below;
    }
    first = inclusive - count;
    chunk_tiles = __shfl_sync(0xffffffffu, inclusive, 31);
  }

  // Tile `t` of the walk, or false when every expert's tiles come before it.
  __device__ __forceinline__ bool find(int t, Tile& tile) {
    while (t >= base + chunk_tiles) {
      if (e0 + 32 >= experts) return false;
      base += chunk_tiles;
      load(e0 + 32);
    }
    const int local = t - base;
    const unsigned owner = __ballot_sync(0xffffffffu, local >= first && local < first + count);
    const int src = __ffs(owner) - 1;  // exactly one lane: the lanes' ranges partition [0, chunk_tiles)
    const int its_first = __shfl_sync(0xffffffffu, first, src);
    const int its_count = __shfl_sync(0xffffffffu, count, src);
    const int its_start = __shfl_sync(0xffffffffu, start, src);
    tile.end = __shfl_sync(0xffffffffu, end, src);
    tile.expert = e0 + src;
    int tm, tn;
    ptx::grouped_tile(local - its_first, its_count / tiles_n, tiles_n, GROUP_M, tm, tn);
    tile.row0 = its_start + tm * BM;
    tile.tn = tn;
    return true;
  }
};

// Byte offset of element (row, col) in a staging buffer of 64 x 64 boxes with 128-byte swizzle, as
// TMA expects them.
__device__ __forceinline__ uint32_t staged_offset(int row, int col) {
  return (col / 64) * 8192 + ptx::sw128_offset(row, (col % 64) * 2);
}

struct XMaps {
  CUtensorMap box[3];  // X [T, K] in boxes of BM, X_BOX_MID and X_BOX_SMALL rows x 64
};

struct Problem {
  const int32_t* offsets;
  __nv_bfloat16* y;
  int T, E, N, tiles_n, k_steps;
};

// Producer (the first warp of warpgroup 0; lane 0 issues): every tile's K-slices of X and W[e] into the
// ring, running ahead of the consumers by as many stages as the ring holds. X comes in the smallest box
// (128, 64 or 16 rows) that holds the tile's rows of its expert: a small group's tile then reads 2 or 8 KiB
// of X per stage beside W's 8-32 KiB, not 16. The rows of the stage past the box keep an earlier stage's
// bytes; their products land in rows that are never stored (each output row depends on its own X row only).
template <int BN>
__device__ __forceinline__ void producer_loop(Shared<BN>& s, const CUtensorMap* maps_x, const CUtensorMap* map_w,
                                              const Problem& p) {
  const bool issues = threadIdx.x == 0;
  if (issues) {
    for (int i = 0; i < 3; ++i) ptx::tma_prefetch_map(maps_x + i);
    ptx::tma_prefetch_map(map_w);
  }
  ptx::RingState at;
  ExpertWalker walk(p.offsets, p.E, p.T, p.tiles_n);
  Tile tile;
  for (int t = static_cast<int>(blockIdx.x); walk.find(t, tile); t += static_cast<int>(gridDim.x)) {
    if (issues) {
      const int w_row = tile.expert * p.N + tile.tn * BN;
      const int rows = tile.end - tile.row0;  // >= 1
      const int box = rows > X_BOX_MID ? 0 : rows > X_BOX_SMALL ? 1 : 2;
      const uint32_t x_bytes = static_cast<uint32_t>(box == 0 ? BM : box == 1 ? X_BOX_MID : X_BOX_SMALL) * BK * 2;
      for (int k = 0; k < p.k_steps; ++k) {
        uint64_t* full = s.ring.producer_acquire(at, x_bytes + Config<BN>::B_BYTES);
        ptx::tma_load_2d(s.a[at.stage], maps_x + box, full, k * BK, tile.row0);
        ptx::tma_load_2d(s.b[at.stage], map_w, full, k * BK, w_row);
        at.advance(Config<BN>::STAGES);
      }
    }
    __syncwarp();
  }
}

// Consumer main loop (as gemm_bf16's): one tile's K-slices for this warpgroup's 64 rows (`half`), D = X · Wᵀ
// into acc; a slice's stage is released once its wgmmas are done (by the one `signals` thread).
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

// A tile whose 64 rows of this warpgroup lie wholly past the expert's end: each stage handed back.
template <int BN>
__device__ __forceinline__ void consumer_skip_tile(Shared<BN>& s, ptx::RingState& at, bool signals, int k_steps) {
  for (int k = 0; k < k_steps; ++k) {
    s.ring.consumer_wait(at);
    if (signals) s.ring.consumer_release(at.stage);
    at.advance(Config<BN>::STAGES);
  }
}

// Epilogue of 64 rows that all belong to the expert (gemm_bf16's): C_COLS columns per round through the
// swizzled staging buffer and TMA stores, which clip columns >= N.
template <int BN>
__device__ __forceinline__ void epilogue_tma(Shared<BN>& s, const CUtensorMap* map_y, const float (&acc)[Config<BN>::ACC],
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
          ptx::tma_store_2d(map_y, staging + box * 8192, tn * BN + round * ROUND_COLS + box * 64, row0);
        ptx::tma_store_commit();
      }
    }
  }
}

// Epilogue of the expert's last rows (fewer than 64 from row0): bf16 pairs (registers i, i + 1 are adjacent
// columns) straight to Y, rows < end and columns < N only; the rows past end belong to other experts.
template <int BN>
__device__ __forceinline__ void epilogue_masked(__nv_bfloat16* __restrict__ y, const float (&acc)[Config<BN>::ACC],
                                                int N, int tn, int row0, int end) {
#pragma unroll
  for (int i = 0; i < Config<BN>::ACC; i += 2) {
    const int row = row0 + ptx::wgmma_acc_row(i);
    const int col = tn * BN + ptx::wgmma_acc_col(i);
    if (row < end && col < N)
      *reinterpret_cast<__nv_bfloat162*>(y + static_cast<int64_t>(row) * N + col) =
          __floats2bfloat162_rn(acc[i], acc[i + 1]);
  }
}

template <int BN>
__global__ void __launch_bounds__(THREADS, 1)
moe_grouped_gemm_sm90a(const __grid_constant__ XMaps maps_x, const __grid_constant__ CUtensorMap map_w,
                       const __grid_constant__ CUtensorMap map_y, const Problem p) {
  extern __shared__ uint8_t smem_raw[];
  Shared<BN>& s = *ptx::align_smem<Shared<BN>>(smem_raw);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) s.ring.init(Config<BN>::STAGES, 2);  // empty: one arrive per consumer warpgroup
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<40>();
    if (ptx::warp_idx() == 0) producer_loop<BN>(s, maps_x.box, &map_w, p);
    return;
  }

  ptx::setmaxnreg_inc<232>();
  const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const bool signals = threadIdx.x % 128 == 0;       // one thread per warpgroup releases stages
  float acc[Config<BN>::ACC];
  ptx::RingState at;
  ExpertWalker walk(p.offsets, p.E, p.T, p.tiles_n);
  Tile tile;
  for (int t = static_cast<int>(blockIdx.x); walk.find(t, tile); t += static_cast<int>(gridDim.x)) {
    const int row0 = tile.row0 + half * 64;
    if (row0 >= tile.end) {
      consumer_skip_tile<BN>(s, at, signals, p.k_steps);
      continue;
    }
    consumer_mainloop<BN>(s, at, acc, half, signals, p.k_steps);
    if (row0 + 64 <= tile.end)
      epilogue_tma<BN>(s, &map_y, acc, half, signals, tile.tn, row0);
    else
      epilogue_masked<BN>(p.y, acc, p.N, tile.tn, row0, tile.end);
  }
  if (signals) ptx::tma_store_wait_read<0>();  // the buffer must outlive the stores reading it
}

// Time ~ (waves of tiles) x (work per tile: W's bytes in decode, FLOPs in prefill), with a narrower tile a
// little less efficient per FLOP, on an estimate of the tile-rows (the group sizes are on the device): the
// full ones plus half a partial one per group that can have rows, and at least one per such group.
int choose_bn(int64_t T, int64_t E, int64_t N, int sms) {
  const int64_t groups = E < T ? E : T;
  const int64_t dense = (T + BM - 1) / BM + groups / 2;
  const int64_t tile_rows = dense > groups ? dense : groups;
  const int widths[3] = {256, 128, 64};
  const double efficiency[3] = {1.0, 1.1, 1.3};
  int best = 256;
  double best_cost = 0.0;
  for (int i = 0; i < 3; ++i) {
    const int64_t tiles = tile_rows * ((N + widths[i] - 1) / widths[i]);
    const double cost = static_cast<double>((tiles + sms - 1) / sms) * widths[i] * efficiency[i];
    if (i == 0 || cost < best_cost) { best = widths[i]; best_cost = cost; }
  }
  return best;
}

template <int BN>
int launch(const __nv_bfloat16* X, const __nv_bfloat16* W, const int32_t* offsets, __nv_bfloat16* Y, int64_t T,
           int64_t E, int64_t N, int64_t K, int sms, cudaStream_t stream) {
  XMaps maps_x;
  CUtensorMap map_w, map_y;
  cudaError_t err;
  const uint32_t x_box_rows[3] = {BM, X_BOX_MID, X_BOX_SMALL};
  for (int i = 0; i < 3; ++i)
    if ((err = ptx::make_tma_map_2d(&maps_x.box[i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, X, T, K, K, x_box_rows[i],
                                    BK, CU_TENSOR_MAP_SWIZZLE_128B)) != cudaSuccess)
      return static_cast<int>(err);
  if ((err = ptx::make_tma_map_2d(&map_w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, W, E * N, K, K, BN, BK,
                                  CU_TENSOR_MAP_SWIZZLE_128B)) != cudaSuccess)
    return static_cast<int>(err);
  if ((err = ptx::make_tma_map_2d(&map_y, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, Y, T, N, N, 64, 64,
                                  CU_TENSOR_MAP_SWIZZLE_128B)) != cudaSuccess)
    return static_cast<int>(err);
  constexpr size_t smem = smem_bytes<BN>();
  if ((err = cudaFuncSetAttribute(moe_grouped_gemm_sm90a<BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem))) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t tiles_n = (N + BN - 1) / BN;
  // At most floor(T / BM) + min(E, T) tile-rows (each expert with rows adds at most one partial one).
  const int64_t most_tiles = (T / BM + (E < T ? E : T)) * tiles_n;
  const int grid = static_cast<int>(most_tiles < sms ? most_tiles : sms);
  const Problem p{offsets, Y, static_cast<int>(T), static_cast<int>(E), static_cast<int>(N),
                  static_cast<int>(tiles_n), static_cast<int>(K / BK)};
  moe_grouped_gemm_sm90a<BN><<<grid, THREADS, smem, stream>>>(maps_x, map_w, map_y, p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" int moe_grouped_gemm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    const int32_t* __restrict__ expert_offsets,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t E,
    int64_t N,
    int64_t K,
    cudaStream_t stream) {
  if (T <= 0 || N <= 0 || E <= 0) return static_cast<int>(cudaGetLastError());
  if (K <= 0) return static_cast<int>(cudaMemsetAsync(Y, 0, static_cast<size_t>(T) * N * sizeof(__nv_bfloat16), stream));
  // Tile and row indices are int: every tile of the worst case, and W's rows E * N, must fit.
  const int64_t most_tiles = (T / BM + (E < T ? E : T)) * ((N + 63) / 64);
  if (K % BK != 0 || N % 64 != 0 || T > INT32_MAX / 2 || E * N > INT32_MAX / 2 || most_tiles > INT32_MAX / 2)
    return static_cast<int>(cudaErrorInvalidValue);

  int device = 0, sms = 0;
  cudaError_t err;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return static_cast<int>(err);
  switch (choose_bn(T, E, N, sms)) {
    case 256: return launch<256>(X, W, expert_offsets, Y, T, E, N, K, sms, stream);
    case 128: return launch<128>(X, W, expert_offsets, Y, T, E, N, K, sms, stream);
    default: return launch<64>(X, W, expert_offsets, Y, T, E, N, K, sms, stream);
  }
}
