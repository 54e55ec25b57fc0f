// attention_bwd variant "dq_scores_ahead": the dQ kernel issues step j+1's score GEMMs (S = Q Kᵀ and
// dP = dO Vᵀ) before step j's accumulation dQ += dS K, so the tensor core has S(j+1), dP(j+1), dQ(j) queued
// back to back and step j+1's exponentials run while dP(j+1) and dQ(j) are still in the tensor core.
//
// Why it should be faster: in the reference a step is S, dP | exponentials (beside dP only) | dS | dQ | wait
// for dQ, then the next step's issue: per warpgroup the tensor core idles through the wait for dQ(j), the
// issue of S(j+1), and all of step j+1's exponentials past the end of dP(j+1) (only the other warpgroup fills
// those gaps). Per CTA step at D = 128: 2 warpgroups x (64 x 64 x 128 x 2 x 2 = 2.1 MFLOP of scores + 1.05
// of dQ) = 6.3 MFLOP, ~1.3 us at 650 TFLOP/s / 132 SMs = 4.9 TFLOP/s an SM, against 2 x 64 x 64 = 8192
// exponentials = 512 clocks of the SM's 16 MUFU results a clock (~0.28 us at ~1.8 GHz) before their FMAs,
// masks and packs: ~22 % of the GEMM time (~44 % at D = 64, where the GEMMs are half as long). With the
// scores one step ahead those exponentials overlap dP and dQ (2.1 MFLOP a warpgroup) instead of dP alone
// (1.05), and no step waits for its own dQ before issuing the next. No register is added: S and dP of step
// j are dead once dS(j) is packed to bf16 (dsa), so step j+1's accumulators reuse them; dsa is the live A
// operand of dQ(j) until the next step's wait, as before (ptxas: no spills, no warnings, at every D). The
// ring is unchanged; a step's K/V stage is released one step later (after dQ(j) is known done), so the
// producer runs one stage less ahead: 3 of 4 stages at D = 64, 2 of 3 at D = 128, 1 of 2 at D = 256.
//
// Correctness by construction: the same arithmetic in the same order per step (each output element sees the
// same sequence of wgmma accumulations); only the issue order across steps and the release point change.
// Wait counts: after step j's issue the pending groups are S(j), dP(j), dQ(j-1) in commit order, so
// wgmma_wait<2> leaves S(j) done and wgmma_wait<0> the rest. Step 0 (no dQ before it) and the last dQ are
// peeled out of the loop, so every path issues the same wgmmas: ptxas serialises the pipeline otherwise.
// The tiling is unchanged, so the NumPy model (tests/test_reference_attention_bwd_model.py) still covers the
// arithmetic; tests/test_attention_bwd_variant_schedules.py runs this loop's issues, waits and releases against
// a model of wgmma commit groups and of the ring.
//
// Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04): hd128-s4096 81.6 ->
// 83.9 % of cuDNN but hd256-s2048-causal 100.9 -> 87.3 %; no workload reaches its target.
__device__ __forceinline__ void query_consumer(QueryShared<D>& s, const CUtensorMap* map_dq,
                                               const __nv_bfloat16* __restrict__ O,
                                               const __nv_bfloat16* __restrict__ dO, const float* __restrict__ LSE,
                                               const QueryWork& w, int half, int S, int causal, float scale_log2,
                                               float scale) {
  using C = QueryConfig<D>;
  constexpr int STEPS = C::BN / 16;
  const int q0w = w.q0 + half * ROWS;
  const bool signals = threadIdx.x % 128 == 0;
  ptx::RingState at;
  if (q0w >= S) {  // every row of this warpgroup is past S
    query_skip<D>(s, at, w.kv_tiles, signals);
    return;
  }
  float lse2[2], delta[2];
  query_rows<D>(O, dO, LSE, w.head, q0w, S, lse2, delta);
  const int tiles = causal ? min(w.kv_tiles, (min(S, q0w + ROWS) + C::BN - 1) / C::BN) : w.kv_tiles;
  float dq[D / 2], sacc[C::BN / 2], dpacc[C::BN / 2];
  uint32_t dsa[STEPS][4];
  zero(dq);
  const __nv_bfloat16* q = s.q + half * C::SLABS * 64 * 64;
  const __nv_bfloat16* dout = s.dout + half * C::SLABS * 64 * 64;
  ptx::mbar_wait(&s.q_full, 0);

  // Every path issues the same wgmmas (q0w < S leaves at least one tile): the last step is peeled rather than
  // guarded, since a conditionally issued wgmma makes ptxas serialise the pipeline (C7515).
  const auto probabilities = [&](int k0) {  // sacc: S -> P of key tile k0
    const bool masked = k0 + C::BN > S || (causal && k0 + C::BN - 1 > q0w);
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) {
      const int h = (i >> 1) & 1;
      float x = fmaf(sacc[i], scale_log2, -lse2[h]);
      const int key = k0 + ptx::wgmma_acc_col(i);
      if (masked && (key >= S || (causal && key > q0w + ptx::wgmma_acc_row(i)))) x = -INFINITY;
      sacc[i] = ptx::ex2_approx(x);
    }
  };
  const auto gradients = [&] {  // dS = P (dP - delta), packed to bf16: sacc and dpacc are free after this
#pragma unroll
    for (int i = 0; i < C::BN / 2; ++i) dpacc[i] = sacc[i] * (dpacc[i] - delta[(i >> 1) & 1]);
    pack_a(dpacc, dsa);
  };
  s.kv_ring.consumer_wait(at);
  issue_scores<C::BN, D>(sacc, q, 64 * 64, s.k[at.stage], C::BN * 64);      // S(0) = Q Kᵀ
  issue_scores<C::BN, D>(dpacc, dout, 64 * 64, s.v[at.stage], C::BN * 64);  // dP(0) = dO Vᵀ
  ptx::wgmma_wait<1>();
  ptx::wgmma_fence_acc(sacc);
  probabilities(0);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(dpacc);
  gradients();
  ptx::RingState prev = at;  // the stage of the step whose dQ is issued next
  at.advance(C::STAGES);
  for (int j = 1; j < tiles; ++j) {
    s.kv_ring.consumer_wait(at);
    issue_scores<C::BN, D>(sacc, q, 64 * 64, s.k[at.stage], C::BN * 64);      // S(j)
    issue_scores<C::BN, D>(dpacc, dout, 64 * 64, s.v[at.stage], C::BN * 64);  // dP(j)
    issue_accumulate<D, STEPS>(dq, dsa, s.k[prev.stage], C::BN * 128);          // dQ(j - 1) += dS K
    ptx::wgmma_wait<2>();  // pending were S(j), dP(j), dQ(j - 1): S(j) is done
    ptx::wgmma_fence_acc(sacc);
    probabilities(j * C::BN);
    ptx::wgmma_wait<0>();  // dP(j) and dQ(j - 1)
    ptx::wgmma_fence_acc(dpacc);
    ptx::wgmma_fence_acc(dq);
    if (signals) s.kv_ring.consumer_release(prev.stage);
    gradients();
    prev = at;
    at.advance(C::STAGES);
  }
  issue_accumulate<D, STEPS>(dq, dsa, s.k[prev.stage], C::BN * 128);  // the last step's dQ
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(dq);
  if (signals) s.kv_ring.consumer_release(prev.stage);
  query_skip<D>(s, at, w.kv_tiles - tiles, signals);

  // Epilogue as in the reference.
  __nv_bfloat16* staging = s.q + half * C::SLABS * 64 * 64;
  ptx::fence_proxy_async_smem();
  stage_rows(dq, scale, staging, 64 * 64);
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(1 + half, 128);
  if (signals) {
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_store_3d(map_dq, staging + slab * 64 * 64, slab * 64, q0w, w.head);
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();
  }
}
