// gemm_fp8, expert reference for sm_90a (H100/H200): C[M, N] = scale_a · scale_b · A[M, K] · B[N, K]ᵀ,
// float8 e4m3 in, fp32 accumulation (QGMMA), bf16 out. The same pipeline as gemm_bf16; a stage holds
// 128 fp8 of K (one 128-byte swizzle row), and the per-tensor scales are applied once, in the epilogue.
//
// Accumulation precision: Hopper's fp8 wgmma adds into its fp32 accumulator with fewer mantissa bits
// than a true fp32 add, and over K = 8192 that alone put elements outside the task's tolerance (which
// cuBLASLt meets). So each stage's 128-deep partial product goes into a fresh accumulator, and the
// consumer adds it into the running sum with ordinary fp32 FADDs ("promotion"). That needs two
// accumulator sets, so the tile is 128 x 128 (64 + 64 registers per thread for each consumer).
//
// Design (one persistent CTA per SM, 384 threads = three warpgroups):
//   * warpgroup 0 is the producer: one thread streams K-slices of A (128 x 128) and B (128 x 128) into
//     a 6-stage ring of shared memory with TMA (128-byte swizzle, the layout wgmma reads without bank
//     conflicts). Each stage has a "full" mbarrier (TMA completes its bytes there) and an "empty"
//     mbarrier (the consumers release it once their wgmmas have read it).
//   * warpgroups 1 and 2 are consumers: each owns 64 rows of the 128 x 128 output tile and issues
//     wgmma.m64n128k32 (e4m3) straight from the swizzled shared tiles, waits for them, releases the
//     stage and promotes the partial sum; the two consumers interleave, so the tensor cores stay fed
//     while one of them adds. A consumer whose 64 rows lie wholly past M only releases stages.
//   * setmaxnreg moves registers from the producer (40) to the consumers (232): the accumulators
//     and their addressing fit without spills.
//   * Output tiles are walked in a grouped order (8 tile-rows at a time) so the A and B panels the
//     132 CTAs use at one moment stay in L2. The producer runs ahead into the next tile while the
//     consumers write the current one, so the epilogue overlaps the next tile's loads.
//   * Remainders: K is a multiple of 128 and N of 64 (task rules). Rows of A past M and rows of B
//     past N are zero-filled by TMA, and the epilogue stores only rows < M and columns < N.
#include "ptx_wrappers.cuh"
#include <cuda_fp8.h>

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BN = 128;                    // tile columns (one wgmma N)
constexpr int BK = 128;                    // K per stage: 128 fp8 = one 128-byte swizzle row
constexpr int STAGES = 6;
constexpr int THREADS = 384;
constexpr int GROUP_M = 8;                 // tile-rows walked together for L2 reuse
constexpr uint32_t A_BYTES = BM * BK;      // 16 KiB
constexpr uint32_t B_BYTES = BN * BK;      // 16 KiB

struct Shared {
  __nv_fp8_e4m3 a[STAGES][BM * BK];  // each tile 1024-byte aligned (sizes are multiples of 1024)
  __nv_fp8_e4m3 b[STAGES][BN * BK];
  uint64_t full[STAGES];
  uint64_t empty[STAGES];
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 bytes

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

__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const float* __restrict__ scale_a, const float* __restrict__ scale_b,
               __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

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
  const float scale = __ldg(scale_a) * __ldg(scale_b);
  const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const bool signals = threadIdx.x % 128 == 0;       // one thread per warpgroup releases stages
  float acc[64];      // the running sum, in true fp32
  float partial[64];  // one stage's product, from the tensor cores
  int stage = 0;
  uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    const int row0 = tm * BM + half * 64;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    for (int k = 0; k < k_steps; ++k) {
      ptx::mbar_wait(&s.full[stage], phase);
      if (row0 < M) {  // else nothing to compute: hand the stage straight back
        const uint64_t a_desc = ptx::wgmma_desc_k_sw128(s.a[stage] + half * 64 * BK);
        const uint64_t b_desc = ptx::wgmma_desc_k_sw128(s.b[stage]);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk)  // +32 bytes along K = +2 in the descriptor's address
          ptx::wgmma_m64n128k32_e4m3(partial, a_desc + 2 * kk, b_desc + 2 * kk, kk > 0 ? 1 : 0);
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_acc(partial);
      }
      if (signals) ptx::mbar_arrive(&s.empty[stage]);
      if (row0 < M) {
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] += partial[i];
      }
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    }
    if (row0 >= M) continue;

    // Epilogue: scale, then registers (i, i+1), adjacent columns of one row, go out as one bf16x2.
    const int col0 = tn * BN;
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
      const int row = row0 + ptx::wgmma_acc_row(i);
      const int col = col0 + ptx::wgmma_acc_col(i);
      if (row < M && col < N)
        *reinterpret_cast<__nv_bfloat162*>(C + static_cast<size_t>(row) * N + col) =
            __floats2bfloat162_rn(acc[i] * scale, acc[i + 1] * scale);
    }
  }
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

  CUtensorMap map_a, map_b;
  cudaError_t err = ptx::make_tma_map_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, A, M, K, K, BM, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = ptx::make_tma_map_2d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, B, N, K, K, BN, BK,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);

  int device = 0, sms = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(gemm_fp8_sm90a, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);

  const int64_t tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  const int grid = static_cast<int>(tiles < sms ? tiles : sms);
  gemm_fp8_sm90a<<<grid, THREADS, SMEM_BYTES, stream>>>(map_a, map_b, scale_a, scale_b, C, static_cast<int>(M),
                                                        static_cast<int>(N), static_cast<int>(K));
  return static_cast<int>(cudaGetLastError());
}
