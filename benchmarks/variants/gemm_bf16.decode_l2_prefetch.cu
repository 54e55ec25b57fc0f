// Variant of src/ptxbench/kernels/reference/sm_90a/gemm_bf16.cu, decode path (M <= 64): the producer
// also asks for the next PREFETCH_BLOCKS K blocks of B beyond the ring to be read into L2 only
// (cp.async.bulk.prefetch), so more of B is on its way from memory than the ring holds.
//
// Measured and rejected (H200, tree e0760e3, benchmarks/results/kernel_variants_h200.md): on the
// 6144 x 4096 QKV decode 8 or 32 blocks took 0.0250 and 0.0255 ms against 0.0191 without (about 30 %
// slower); the other shapes did not move. Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_bf16.cu \
//       --variant "pf8:@gemm_bf16.decode_l2_prefetch.cu;PREFETCH_BLOCKS=8"
//
// The definition below replaces the reference's definition that starts with the same line.

__device__ __forceinline__ void decode_producer_loop(Shared<MT>& s, const CUtensorMap* map_a,
                                                     const CUtensorMap* map_b, int n0, int k_begin, int k_iters) {
  constexpr int PREFETCH_BLOCKS = 8;  // K blocks of B requested into L2 beyond the ring
  ptx::tma_prefetch_map(map_a);
  ptx::tma_prefetch_map(map_b);
  ptx::RingState at;
  int prefetched = Config<MT>::STAGES;  // the first STAGES blocks are loaded at once, with no wait
  for (int it = 0; it < k_iters; ++it) {
    const int until = min(it + Config<MT>::STAGES + PREFETCH_BLOCKS, k_iters);
    for (; prefetched < until; ++prefetched) ptx::tma_prefetch_2d(map_b, (k_begin + prefetched) * BK, n0);
    uint64_t* full = s.ring.producer_acquire(at, W_BYTES + Config<MT>::X_BYTES);
    const int kc = (k_begin + it) * BK;
    ptx::tma_load_2d(s.w[at.stage], map_b, full, kc, n0);
    ptx::tma_load_2d(s.x[at.stage], map_a, full, kc, 0);
    at.advance(Config<MT>::STAGES);
  }
}
