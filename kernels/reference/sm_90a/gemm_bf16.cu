// gemm_bf16, expert reference for sm_90a (H100/H200): C[M, N] = A[M, K] · B[N, K]ᵀ, bf16 in, fp32
// accumulation, bf16 out.
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
//     128, and 64 for M <= 64 where the B stream (memory-bound) should come from as many SMs as possible.
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
  uint64_t full[STAGES];
  uint64_t empty[STAGES];
};
template <int BN>
constexpr size_t smem_bytes() { return sizeof(Shared<BN>) + 1024; }  // slack to align the base to 1024 B

// Barrier for the 128 threads of one consumer warpgroup (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// Byte offset of element (row, col) in a staging buffer of 64 x 64 boxes with 128-byte swizzle:
// the 16-byte chunk index within a 128-byte row is XORed with row % 8, as TMA expects.
__device__ __forceinline__ uint32_t staged_offset(int row, int col) {
  const int box = col / 64, cc = col % 64;
  return box * 8192 + row * 128 + (((cc / 8) ^ (row % 8)) * 16) + (cc % 8) * 2;
}

// D (+)= A · Bᵀ for one 64 x BN x 16 step.
template <int BN>
__device__ __forceinline__ void wgmma_step(float (&acc)[BN / 2], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  if constexpr (BN == 256) ptx::wgmma_m64n256k16_bf16(acc, a_desc, b_desc, scale_d);
  else if constexpr (BN == 128) ptx::wgmma_m64n128k16_bf16(acc, a_desc, b_desc, scale_d);
  else ptx::wgmma_m64n64k16_bf16(acc, a_desc, b_desc, scale_d);
}

// Output tile `t` in grouped order: GROUP_M tile-rows advance together across all tile-columns.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = GROUP_M * tiles_n;
  const int group = t / per_group;
  const int first_m = group * GROUP_M;
  const int rows = min(tiles_m - first_m, GROUP_M);
  const int r = t - group * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

template <int BN>
__global__ void __launch_bounds__(THREADS, 1)
gemm_bf16_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, int M, int N, int K) {
  constexpr int STAGES = Config<BN>::STAGES;
  constexpr uint32_t B_BYTES = Config<BN>::B_BYTES;
  extern __shared__ uint8_t smem_raw[];
  Shared<BN>& s = *reinterpret_cast<Shared<BN>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int k_steps = K / BK;
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      ptx::mbar_init(&s.full[i], 1);   // the producer's arrive (plus the TMA bytes)
      ptx::mbar_init(&s.empty[i], 2);  // one arrive per consumer warpgroup
    }
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      ptx::tma_prefetch_map(&map_a);
      ptx::tma_prefetch_map(&map_b);
      int stage = 0;
      uint32_t phase = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        for (int k = 0; k < k_steps; ++k) {
          ptx::mbar_wait(&s.empty[stage], phase ^ 1);  // a fresh barrier counts as released
          ptx::mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
          ptx::tma_load_2d(s.a[stage], &map_a, &s.full[stage], k * BK, tm * BM);
          ptx::tma_load_2d(s.b[stage], &map_b, &s.full[stage], k * BK, tn * BN);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
    return;
  }

  ptx::setmaxnreg_inc<232>();
  const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const bool signals = threadIdx.x % 128 == 0;       // one thread per warpgroup releases stages
  float acc[Config<BN>::ACC];
  int stage = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    const int row0 = tm * BM + half * 64;
    if (row0 >= M) {  // nothing to compute: hand each stage straight back
      for (int k = 0; k < k_steps; ++k) {
        ptx::mbar_wait(&s.full[stage], phase);
        if (signals) ptx::mbar_arrive(&s.empty[stage]);
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      continue;
    }
    int previous = -1;
    for (int k = 0; k < k_steps; ++k) {
      ptx::mbar_wait(&s.full[stage], phase);
      const uint64_t a_desc = ptx::wgmma_desc_k_sw128(s.a[stage] + half * 64 * BK);
      const uint64_t b_desc = ptx::wgmma_desc_k_sw128(s.b[stage]);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)  // +32 bytes along K = +2 in the descriptor's address
        wgmma_step<BN>(acc, a_desc + 2 * kk, b_desc + 2 * kk, (k > 0 || kk > 0) ? 1 : 0);
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();  // the previous slice's wgmmas are done: its stage may be refilled
      if (previous >= 0 && signals) ptx::mbar_arrive(&s.empty[previous]);
      previous = stage;
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(acc);
    if (previous >= 0 && signals) ptx::mbar_arrive(&s.empty[previous]);

    // Epilogue, C_COLS columns per round: wait until the previous store has read the buffer, write
    // bf16x2 pairs (registers i, i+1 are adjacent columns) into it swizzled, fence for the async
    // proxy, then one thread stores the boxes; TMA clips rows >= M and columns >= N.
    uint8_t* staging = reinterpret_cast<uint8_t*>(s.c[half]);
    constexpr int ROUND_COLS = BN < C_COLS ? BN : C_COLS;
    constexpr int ROUND_REGS = ROUND_COLS / 2;  // accumulators per thread in one round
#pragma unroll
    for (int i = 0; i < Config<BN>::ACC; i += 2) {  // fully unrolled: every condition is compile-time
      const int round = i / ROUND_REGS;
      if (i % ROUND_REGS == 0) {
        if (signals) ptx::tma_store_wait_read<0>();
        warpgroup_barrier(1 + half);
      }
      const int row = ptx::wgmma_acc_row(i);
      const int col = ptx::wgmma_acc_col(i) - round * ROUND_COLS;
      *reinterpret_cast<__nv_bfloat162*>(staging + staged_offset(row, col)) =
          __floats2bfloat162_rn(acc[i], acc[i + 1]);
      if ((i + 2) % ROUND_REGS == 0) {
        ptx::fence_proxy_async_smem();
        warpgroup_barrier(1 + half);
        if (signals) {
#pragma unroll
          for (int box = 0; box < ROUND_COLS / 64; ++box)
            ptx::tma_store_2d(&map_c, staging + box * 8192, tn * BN + round * ROUND_COLS + box * 64, row0);
          ptx::tma_store_commit();
        }
      }
    }
  }
  if (signals) ptx::tma_store_wait_read<0>();  // the buffer must outlive the stores reading it
}

// Time ~ (waves of tiles) x (work per tile), with a narrower tile a little less efficient per FLOP.
int choose_bn(int64_t M, int64_t N, int sms) {
  if (M <= 64) return 64;  // decode: memory-bound on B, so spread it over the most SMs
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
  cudaError_t err = ptx::make_tma_map_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, A, M, K, K, BM, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = ptx::make_tma_map_2d(&map_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, B, N, K, K, BN, BK,
                             CU_TENSOR_MAP_SWIZZLE_128B);
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
  switch (choose_bn(M, N, sms)) {
    case 256: return launch<256>(A, B, C, M, N, K, sms, stream);
    case 128: return launch<128>(A, B, C, M, N, K, sms, stream);
    default: return launch<64>(A, B, C, M, N, K, sms, stream);
  }
}
