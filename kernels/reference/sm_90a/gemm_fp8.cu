// gemm_fp8, expert reference for sm_90a (H100/H200): C[M, N] = scale_a · scale_b · A[M, K] · B[N, K]ᵀ,
// float8 e4m3 in, fp32 accumulation (QGMMA), bf16 out. The same pipeline as gemm_bf16; a stage holds
// 128 fp8 of K (one 128-byte swizzle row), and the per-tensor scales are applied once, in the epilogue.
//
// Accumulation precision: Hopper's fp8 wgmma adds into its fp32 accumulator with fewer mantissa bits
// than a true fp32 add, and over K = 8192 that alone put elements outside the task's tolerance (which
// cuBLASLt meets). So each stage's 128-deep partial product goes into a fresh accumulator, and the
// consumer adds it into the running sum with ordinary fp32 FADDs ("promotion").
//
// Design (one persistent CTA per SM, 384 threads = three warpgroups, 128 x 128 output tiles):
//   * warpgroup 0 is the producer: one thread streams K-slices of A (128 x 128) and B (128 x 128) into
//     a 6-stage ring of shared memory with TMA (128-byte swizzle, the layout wgmma reads without bank
//     conflicts). Each stage has a "full" mbarrier (TMA completes its bytes there) and an "empty"
//     mbarrier (the consumers release it once their wgmmas have read it).
//   * warpgroups 1 and 2 are consumers: each owns 64 rows of the tile and issues wgmma.m64n128k32
//     (e4m3) straight from the swizzled shared tiles. Promotion is deferred by one stage: a consumer
//     issues stage k's wgmmas into one partial accumulator set, then waits only for stage k-1's
//     (wait_group 1), releases that stage and adds its partial into the running sum while stage k
//     runs on the tensor cores. Waiting for each stage before adding (wait_group 0) left the tensor
//     cores idle during every add, since both consumers wait on the same stage and add at once.
//     Three sets of 64 fp32 registers per thread (sum and two partials) are why the tile is 128 wide.
//   * setmaxnreg moves registers from the producer (40) to the consumers (232) for those sets.
//   * Pairs of CTAs (a cluster of 2 along M) compute vertically adjacent tiles, which share B: each
//     CTA loads its own A and one half of B, multicast into both CTAs' rings. That cuts what the
//     SMs read from L2 per stage from 32 to 24 KiB; at fp8 rates L2 bandwidth, not the tensor cores,
//     is what 128 x 128 tiles run out of first. A stage is free again only when the consumers of
//     both CTAs have released it, so each consumer arrives on both CTAs' "empty" barriers.
//   * Output tiles (or pairs of them) are walked in a grouped order (8 tile-rows at a time) so the A
//     and B panels the 132 CTAs use at one moment stay in L2. The producer runs ahead into the next
//     tile while the consumers write the current one, so the epilogue overlaps the next tile's loads.
//   * Remainders: K is a multiple of 128 and N of 64 (task rules). Rows of A past M and rows of B
//     past N are zero-filled by TMA, and the epilogue stores only rows < M and columns < N. A
//     consumer whose 64 rows lie wholly past M (decode batches, the odd tile-row of a pair) only
//     releases stages; when there is only one tile-row, CTAs are not paired.
#include "ptx_wrappers.cuh"
#include <cuda_fp8.h>

namespace {

constexpr int BM = 128;                    // tile rows (two consumer warpgroups x 64)
constexpr int BN = 128;                    // tile columns (one wgmma N)
constexpr int BK = 128;                    // K per stage: 128 fp8 = one 128-byte swizzle row
constexpr int STAGES = 6;
constexpr int THREADS = 384;
constexpr int GROUP_M = 8;                 // tile-rows walked together for L2 reuse (even: pairs)
constexpr int CLUSTER_M = 2;               // CTAs sharing B through multicast (1: no clusters)
constexpr bool DEFER_PROMOTION = true;     // add stage k-1's partial while stage k's wgmmas run
constexpr uint32_t A_BYTES = BM * BK;      // 16 KiB
constexpr uint32_t B_BYTES = BN * BK;      // 16 KiB
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "CTAs are paired or not");
static_assert(GROUP_M % CLUSTER_M == 0, "a group holds whole pairs of tile-rows");

struct Shared {
  __nv_fp8_e4m3 a[STAGES][BM * BK];  // each tile 1024-byte aligned (sizes are multiples of 1024)
  __nv_fp8_e4m3 b[STAGES][BN * BK];  // with pairs, rows [64r, 64r + 64) come from CTA r's multicast
  uint64_t full[STAGES];
  uint64_t empty[STAGES];
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 bytes

// Work unit `u` in grouped order: GROUP_M tile-rows (GROUP_M / pair units) advance together across
// all tile-columns. A unit is `pair` vertically adjacent tiles of one tile-column.
__device__ __forceinline__ void unit_coords(int u, int units_m, int tiles_n, int pair, int& um, int& tn) {
  const int group_units = GROUP_M / pair;
  const int per_group = group_units * tiles_n;
  const int group = u / per_group;
  const int first = group * group_units;
  const int rows = min(units_m - first, group_units);
  const int r = u - group * per_group;
  um = first + r % rows;
  tn = r / rows;
}

// One stage's wgmmas for this consumer's 64 rows, into `partial` (overwritten), committed as a group.
__device__ __forceinline__ void issue_stage(float (&partial)[64], const Shared& s, int stage, int half) {
  const uint64_t a_desc = ptx::wgmma_desc_k_sw128(s.a[stage] + half * 64 * BK);
  const uint64_t b_desc = ptx::wgmma_desc_k_sw128(s.b[stage]);
  ptx::wgmma_fence();  // the partial's registers were read by the last add
#pragma unroll
  for (int kk = 0; kk < BK / 32; ++kk)  // +32 bytes along K = +2 in the descriptor's address
    ptx::wgmma_m64n128k32_e4m3(partial, a_desc + 2 * kk, b_desc + 2 * kk, kk > 0 ? 1 : 0);
  ptx::wgmma_commit();
}

// Frees `stage` in every CTA of the pair (their producers multicast into each other's rings).
__device__ __forceinline__ void release(Shared& s, int stage, int pair, uint32_t rank) {
  ptx::mbar_arrive(&s.empty[stage]);
  if (pair == 2) ptx::mbar_arrive_cluster_stage(&s.empty[stage], rank ^ 1);
}

// `partial` (its wgmmas done) into the running sum, in true fp32.
__device__ __forceinline__ void promote(float (&acc)[64], float (&partial)[64]) {
  ptx::wgmma_fence_acc(partial);
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] += partial[i];
}

__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_sm90a(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const float* __restrict__ scale_a, const float* __restrict__ scale_b,
               __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int pair = static_cast<int>(ptx::cluster_nctarank());  // 1 or 2, chosen by the launch
  const uint32_t rank = ptx::cluster_ctarank();
  const int tiles_m = (M + BM - 1) / BM;
  const int units_m = (tiles_m + pair - 1) / pair;
  const int tiles_n = (N + BN - 1) / BN;
  const int units = units_m * tiles_n;
  const int first_unit = static_cast<int>(blockIdx.x) / pair;
  const int unit_stride = static_cast<int>(gridDim.x) / pair;
  const int k_steps = K / BK;
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      ptx::mbar_init(&s.full[i], 1);          // the producer's arrive (plus the TMA bytes of both CTAs)
      ptx::mbar_init(&s.empty[i], 2 * pair);  // one arrive per consumer warpgroup of the pair
    }
    ptx::mbar_fence_init();
  }
  if (pair == 2) ptx::cluster_sync();  // the peer's barriers exist before anything lands on them
  else __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      ptx::tma_prefetch_map(&map_a);
      ptx::tma_prefetch_map(&map_b);
      const int b_rows = BN / pair;  // the rows of B this CTA loads for both
      int stage = 0;
      uint32_t phase = 0;
      for (int u = first_unit; u < units; u += unit_stride) {
        int um, tn;
        unit_coords(u, units_m, tiles_n, pair, um, tn);
        const int tm = um * pair + static_cast<int>(rank);
        for (int k = 0; k < k_steps; ++k) {
          ptx::mbar_wait(&s.empty[stage], phase ^ 1);  // a fresh barrier counts as released
          ptx::mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
          ptx::tma_load_2d(s.a[stage], &map_a, &s.full[stage], k * BK, tm * BM);
          if (pair == 1)
            ptx::tma_load_2d(s.b[stage], &map_b, &s.full[stage], k * BK, tn * BN);
          else
            ptx::tma_load_2d_multicast(s.b[stage] + rank * b_rows * BK, &map_b, &s.full[stage], k * BK,
                                       tn * BN + static_cast<int>(rank) * b_rows, 0b11);
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const float scale = __ldg(scale_a) * __ldg(scale_b);
    const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
    const bool signals = threadIdx.x % 128 == 0;       // one thread per warpgroup releases stages
    float acc[64];  // the running sum, in true fp32
    float pa[64];   // stage partials from the tensor cores, alternating
    float pb[64];
    int stage = 0;
    uint32_t phase = 0;
    auto next = [&]() {
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    };
    for (int u = first_unit; u < units; u += unit_stride) {
      int um, tn;
      unit_coords(u, units_m, tiles_n, pair, um, tn);
      const int row0 = (um * pair + static_cast<int>(rank)) * BM + half * 64;
      if (row0 >= M) {  // nothing to compute: hand each stage straight back
        for (int k = 0; k < k_steps; ++k) {
          ptx::mbar_wait(&s.full[stage], phase);
          if (signals) release(s, stage, pair, rank);
          next();
        }
        continue;
      }
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      if constexpr (DEFER_PROMOTION) {
        // pa and pb alternate; the last issued is pa at the top of each loop pass.
        ptx::mbar_wait(&s.full[stage], phase);
        issue_stage(pa, s, stage, half);
        int previous = stage;
        next();
        int k = 1;
        for (; k + 1 < k_steps; k += 2) {
          ptx::mbar_wait(&s.full[stage], phase);
          issue_stage(pb, s, stage, half);
          ptx::wgmma_wait<1>();  // pa's stage is done
          if (signals) release(s, previous, pair, rank);
          promote(acc, pa);
          previous = stage;
          next();
          ptx::mbar_wait(&s.full[stage], phase);
          issue_stage(pa, s, stage, half);
          ptx::wgmma_wait<1>();  // pb's stage is done
          if (signals) release(s, previous, pair, rank);
          promote(acc, pb);
          previous = stage;
          next();
        }
        if (k < k_steps) {  // one stage left: into pb, then both drain
          ptx::mbar_wait(&s.full[stage], phase);
          issue_stage(pb, s, stage, half);
          ptx::wgmma_wait<1>();
          if (signals) release(s, previous, pair, rank);
          promote(acc, pa);
          previous = stage;
          next();
          ptx::wgmma_wait<0>();
          if (signals) release(s, previous, pair, rank);
          promote(acc, pb);
        } else {
          ptx::wgmma_wait<0>();
          if (signals) release(s, previous, pair, rank);
          promote(acc, pa);
        }
      } else {
        for (int k = 0; k < k_steps; ++k) {
          ptx::mbar_wait(&s.full[stage], phase);
          issue_stage(pa, s, stage, half);
          ptx::wgmma_wait<0>();
          if (signals) release(s, stage, pair, rank);
          promote(acc, pa);
          next();
        }
      }

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
  // No CTA of a pair exits while its peer may still arrive on its barriers.
  if (pair == 2) {
    __syncwarp();  // the cluster barrier is .aligned: the producer's warp must be converged
    ptx::cluster_sync();
  }
}

// The cluster shape: pairs of tile-rows when there are at least two of them and pairing is on.
int choose_pair(int64_t M) { return CLUSTER_M == 2 && M > BM ? 2 : 1; }

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

  const int pair = choose_pair(M);
  CUtensorMap map_a, map_b;
  cudaError_t err = ptx::make_tma_map_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, A, M, K, K, BM, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);
  err = ptx::make_tma_map_2d(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, B, N, K, K, BN / pair, BK,
                             CU_TENSOR_MAP_SWIZZLE_128B);
  if (err != cudaSuccess) return static_cast<int>(err);

  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(gemm_fp8_sm90a, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);

  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(THREADS, 1, 1);
  config.dynamicSmemBytes = SMEM_BYTES;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(pair);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;

  // Persistent: one CTA per SM (pairs sit on pairs of SMs of one GPC, which H100/H200 GPCs have).
  int sms = 0;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t units = ((M + BM * pair - 1) / (BM * pair)) * ((N + BN - 1) / BN);
  const int64_t slots = sms / pair;
  config.gridDim = dim3(static_cast<unsigned>((units < slots ? units : slots) * pair), 1, 1);
  err = cudaLaunchKernelEx(&config, gemm_fp8_sm90a, map_a, map_b, scale_a, scale_b, C, static_cast<int>(M),
                           static_cast<int>(N), static_cast<int>(K));
  return static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}
