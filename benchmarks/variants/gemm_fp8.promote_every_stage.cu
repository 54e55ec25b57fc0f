// Variant of src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu: every stage's partial (128 of K) is
// promoted into the fp32 sum, the two partial sets strictly alternating (the loop unrolled by two), where
// the reference adds PROMOTE_EVERY = 2 stages into one set before the sets switch. (The reference's loop
// with PROMOTE_EVERY = 1 issues the same sequence, not unrolled.)
//
// Measured and rejected (H200, benchmarks/results/kernel_variants_h200.md, variant "p1" of the 13:13 UTC
// sweep): its worst errors were 0.19-0.21 of the tolerance (cuBLASLt's level) against up to 0.25 every
// two stages, but its adds cost 1-3 % (square-8192: 0.8346 against 0.8206 ms). Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu \
//       --variant "p1:@gemm_fp8.promote_every_stage.cu"
//
// The definition below replaces the reference's definition that starts with the same line.

__device__ __forceinline__ void consumer_mainloop(Consumer<TN>& w, float (&acc)[TN / 2], float (&pa)[TN / 2],
                                                  float (&pb)[TN / 2], int k_steps) {
  int k = 1;
  for (; k + 1 < k_steps; k += 2) {  // pa and pb alternate: pa is the last issued here
    w.overlap(acc, pb, pa);
    w.overlap(acc, pa, pb);
  }
  if (k < k_steps) {  // one stage left
    w.overlap(acc, pb, pa);
    w.drain(acc, pb);
  } else {
    w.drain(acc, pa);
  }
}
