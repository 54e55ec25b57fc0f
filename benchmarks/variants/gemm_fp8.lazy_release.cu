// Variant of src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu: one wgmma wait per partial set, not per
// stage. The reference's keep() (the second stage of each 256 of K, added into the same partial set)
// issues its wgmmas, then waits for the stage before (wgmma.wait_group 1) only to release that stage's
// ring slot. Here keep() does not wait: it holds that stage, and the next overlap() (or drain()), which
// waits anyway before it promotes the set, releases both. PROMOTE_EVERY must be 1 or 2 (asserted).
//
// Why it should be faster: ncu at 8192^3 (ncu_gemm_fp8_square-8192_h200.md) counts 1.35 `wait` and
// 0.81 `gmma` stalls per issue against cuBLASLt's 0.69 and 0.07, with the tensor pipe active 87.2 %
// against 93.8 %. Half of our wgmma waits go (one per 256 of K instead of one per 128), and after a
// keep() the warpgroup goes straight on to the next stage's full barrier and wgmmas, so up to three
// stages' wgmmas can be queued instead of two. The cost: a consumer holds up to three of the six ring
// slots (the held stage, the one in flight and the one it waits for) where the reference held two, so
// the producer runs up to four stages ahead at those points instead of five (4 x 32 KiB in flight per
// CTA; at ~0.28 us of tensor work per stage that is ~1.1 us of cover for a load). Same arithmetic, same
// error as the reference; registers: one int more per consumer thread.
//
// Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04): within 1.1 points of
// the reference on every workload, alone or with the wave width, inside the run's noise (the control of the
// wave-width variant moved as much). Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/gemm_fp8.cu \
//       --variant "lazy:@gemm_fp8.lazy_release.cu"
//
// The definition below replaces the reference's Consumer (the one that starts with the same line).

struct Consumer {
  static_assert(PROMOTE_EVERY <= 2, "keep() holds one stage: two keeps in a row would drop the first");
  static constexpr int ACC = TN / 2;  // fp32 accumulators per thread in one set
  Shared& s;
  const RingLayout& ring;
  const Cluster& c;
  const int half;       // which 64 rows of the tile
  const bool signals;   // one thread per warpgroup releases stages
  const int M, N;
  ptx::RingState at;
  int previous = 0;     // the stage whose wgmmas write the partial to be added next
  int held = -1;        // a stage keep() left unreleased (its wgmmas may still run), or -1

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
    ptx::wgmma_wait<1>();  // the previous stage's wgmmas are done, and so the held one's
    if (signals) {
      if (held >= 0) release(s, held, c);
      release(s, previous, c);
    }
    held = -1;
    promote(acc, from);
    previous = at.stage;
    at.advance(ring.stages);
  }
  // Issue the next stage adding into `into`, the set the previous stage wrote (promoted later). No
  // wait here: the previous stage is held, released by the next overlap() or drain() after its wait.
  __device__ __forceinline__ void keep(float (&into)[ACC]) {
    s.ring.consumer_wait(at);
    issue_stage<TN>(into, s, ring, at.stage, half, true);
    held = previous;
    previous = at.stage;
    at.advance(ring.stages);
  }
  // The unit's last stage is done: retire it and promote its set.
  __device__ __forceinline__ void drain(float (&acc)[ACC], float (&from)[ACC]) {
    ptx::wgmma_wait<0>();
    if (signals) {
      if (held >= 0) release(s, held, c);
      release(s, previous, c);
    }
    held = -1;
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
