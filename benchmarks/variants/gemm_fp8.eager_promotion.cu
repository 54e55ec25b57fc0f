// Variant of src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu: eager promotion. Each consumer waits
// for every stage's wgmmas (wait_group 0) and adds the stage's partial into the fp32 sum before it issues
// the next stage, and stores a tile before it issues the next tile's first stage, instead of keeping
// one stage's wgmmas in flight while the previous partial is added (the reference's deferred
// promotion, with the next tile's first stage issued before the epilogue).
//
// Measured and rejected (H200, benchmarks/results/kernel_variants_h200.md, variants "nodefer" and "old"
// of the 11:10 UTC sweep): 5-10 % slower than deferred promotion (square-8192: 1.912 against 1.768 ms
// with clusters, 1.031 against 0.978 ms without). Both consumers wait on the same stage and add at once,
// so the tensor cores idle during every add. Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu \
//       --variant "eager:@gemm_fp8.eager_promotion.cu"
//
// The definition below replaces the reference's kernel (the one that starts with the same line).

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
    float pa[ACC];   // each stage's partial from the tensor cores
    constexpr uint32_t STAGING = staging_bytes<TN, STAGED>();
    uint8_t* staging = s.area + SMEM_AREA - STAGING + w.half * (STAGING / 2);
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
    int row0, tn;
    ptx::TileScheduler u = units;
    w.seek(u, row0, tn, k_steps);
    // Eager promotion: each stage's wgmmas are waited for (wait_group 0) and added into the sum before the
    // next stage is issued, and a unit's tile is stored before the next unit's first stage is issued.
    while (u.valid()) {
      for (int k = 0; k < k_steps; ++k) {
        w.s.ring.consumer_wait(w.at);
        issue_stage<TN>(pa, w.s, w.ring, w.at.stage, w.half);
        ptx::wgmma_wait<0>();
        if (w.signals) release(w.s, w.at.stage, w.c);
        promote(acc, pa);
        w.at.advance(w.ring.stages);
      }
      int next_row0, next_tn;
      ptx::TileScheduler after = u;
      after.next();
      w.seek(after, next_row0, next_tn, k_steps);
      epilogue<TN, STAGED>(w, &map_c, C, acc, scale, staging, row0, tn);
#pragma unroll
      for (int i = 0; i < ACC; ++i) acc[i] = 0.0f;
      u = after;
      row0 = next_row0;
      tn = next_tn;
    }
    if (STAGED && w.signals) ptx::tma_store_wait_read<0>();  // the staging outlives its reads
  }
  // No CTA exits while a partner may still arrive on its barriers.
  if (size > 1) {
    __syncwarp();  // the cluster barrier is .aligned: the producer's warp must be converged
    ptx::cluster_sync();
  }
}
