// Variant of src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu: the tile width is chosen per shape, from
// how the tiles fill the last wave. Batches of more than 64 rows get tiles WIDE_BN = 144 columns wide
// (a third instantiation, gemm_fp8_sm90a<144, false>: direct stores, as 144 is not whole 64-column TMA
// boxes) where that takes fewer tile-columns x rounds than BN = 128, and 128-wide tiles otherwise. A
// round is one tile per resident cluster (the same cudaOccupancyMaxActiveClusters query as launch()), so
// the estimate of the mainloop's time is rounds x width: ceil(units / clusters) x TN.
//
// Why it should be faster: cuBLASLt does the same. Its kernel at 8192^3 and 4096 x 14336 x 4096 has
// 144 x 128 tiles, at 4096^3 128 x 128 (kernel_variants_h200.md, torch profiler). Our BN = 144 override
// ("n144", 13:13 UTC sweep of 2026-12-03) read 0.7956 against 0.8206 ms at 8192^3 (-3.0 %), but 0.1240
// against 0.1172 ms at 4096^3 (+5.8 %), so it was not kept: a width per shape was wanted. On the H200
// (66 resident pairs of CTAs, 2 x 1 clusters):
//   8192^3:        128: 2048 units, 32 rounds x 128 = 4096;  144: 1824 units, 28 rounds x 144 = 4032 -> 144
//   4096^3:        128:  512 units,  8 rounds x 128 = 1024;  144:  464 units,  8 rounds x 144 = 1152 -> 128
//   4096 x 14336:  128: 1792 units, 28 rounds x 128 = 3584;  144: 1600 units, 25 rounds x 144 = 3600 -> 128
//   held out (1008 x 3584, 1536 x 5120): 256 against 288, 512 against 576 -> 128
// so only 8192^3 changes, and it gains by more than its 1.6 % of rounds x width: a 144-wide tile also
// issues 12.5 % more wgmma work per full/empty barrier round-trip, per promotion's wgmma wait and per
// 128 rows of A read from L2 (ours read 7.6 GB at 8192^3 against cuBLASLt's 5.5). Registers: three sets of 72 fp32
// accumulators per consumer thread (216 of 232); the ring holds six stages of 34 KiB.
// The 4096 x 14336 MLP shape is a near tie (3600 against 3584) that stays on 128 and its TMA-store epilogue.
//
// Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04): square-8192 92.3 ->
// 94.4 % of cuBLASLt, the other workloads within 0.7 point, as close as the control WIDE_BN = 128 (the
// reference's choice through this code, up to 1.2 points off: the run's noise); no workload reaches cuBLASLt.
// Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu \
//       --variant "wave:@gemm_fp8.wave_width.cu" --variant "wave128:@gemm_fp8.wave_width.cu;WIDE_BN=128"
// (WIDE_BN = 128 never picks the wide kernel: the control, the reference's choice through this code.)
//
// The definition below replaces the reference's entry point (the one that starts with the same line).

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
  constexpr int WIDE_BN = 144;  // the wider tile for shapes whose last wave it fills better (BN: never)
  static_assert(made_width(WIDE_BN) && WIDE_BN / 2 % 8 == 0 && WIDE_BN >= BN, "a wgmma width, halves whole swizzle atoms");
  if (M <= 0 || N <= 0) return static_cast<int>(cudaGetLastError());
  if (K <= 0) return static_cast<int>(cudaMemsetAsync(C, 0, static_cast<size_t>(M) * N * sizeof(__nv_bfloat16), stream));
  if (K % BK != 0 || N % 64 != 0 || M > INT32_MAX / 2 || N > INT32_MAX / 2) return static_cast<int>(cudaErrorInvalidValue);
  if (M <= 64) return launch_width<DECODE_BN>(A, B, scale_a, scale_b, C, M, N, K, stream);
  if constexpr (WIDE_BN != BN) {
    // Clusters resident at once, asked of the driver once per device and cluster size; the kernels of
    // either width have the same threads, shared memory and launch bounds, so the wide one answers for both.
    static int resident[4][128] = {};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (device < 0 || device >= 128) return static_cast<int>(cudaErrorInvalidDevice);
    // rounds x width: the time of the mainloop in units of one 128-row, one-column, full-K tile
    auto cost = [&](int tile_n, int& out) -> cudaError_t {
      int cm, cn;
      choose_cluster(M, N, tile_n, cm, cn);
      int& fit = resident[cm * cn - 1][device];
      if (fit == 0) {
        cudaError_t e = cudaFuncSetAttribute(gemm_fp8_sm90a<WIDE_BN, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(SMEM_BYTES));
        if (e != cudaSuccess) return e;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(static_cast<unsigned>(cm * cn), 1, 1);
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
        if ((e = cudaOccupancyMaxActiveClusters(&fit, gemm_fp8_sm90a<WIDE_BN, false>, &config)) != cudaSuccess) return e;
        if (fit <= 0) return cudaErrorLaunchOutOfResources;
      }
      const int64_t units = ((M + BM * cm - 1) / (BM * cm)) * ((N + tile_n * cn - 1) / (tile_n * cn));
      out = static_cast<int>((units + fit - 1) / fit) * tile_n;
      return cudaSuccess;
    };
    int narrow = 0, wide = 0;
    if ((err = cost(BN, narrow)) != cudaSuccess || (err = cost(WIDE_BN, wide)) != cudaSuccess)
      return static_cast<int>(err);
    if (wide < narrow) return launch<WIDE_BN, false>(A, B, scale_a, scale_b, C, M, N, K, stream);
  }
  return launch_width<BN>(A, B, scale_a, scale_b, C, M, N, K, stream);
}
