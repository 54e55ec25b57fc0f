// attention_bwd variant "dkdv_scores_ahead": the dK/dV kernel issues query step t's score GEMMs (Sᵀ = K Qᵀ,
// dPᵀ = V dOᵀ) before step t-1's last accumulation dK += dSᵀ Q, so the tensor core has S(t), dP(t), dK(t-1)
// queued behind dV(t-1), and step t's exponentials run while dP(t) and dK(t-1) are still in the tensor core.
//
// Only at D = 64 (the reference's weakest case, 77.6 % of cuDNN at hd64-s2048): at D = 128 and 256 the
// reordered loop spills (8 and 148 bytes, ptxas), so those instantiations keep the reference's loop verbatim
// and compile to its SASS (tests/test_kernel_variants.py compares the instruction counts).
//
// Why it should be faster: the dK/dV kernel does 4 of the 7 GEMMs (57 % of the tensor work). In the reference
// a warpgroup's step is S, dP | exponentials beside dP | dV | dS beside dV | dK | wait for dV and dK, then the
// next step's issue: for this warpgroup the tensor core idles through the wait for dK(t-1), the issue of S(t)
// and whatever of step t's exponentials outlasts dP(t). At D = 64 a step's four GEMMs are 4 x 64 x 64 x 64 x 2
// = 2.1 MFLOP per warpgroup, 4.2 MFLOP a CTA step: ~0.86 us at 650 TFLOP/s / 132 SMs = 4.9 TFLOP/s an SM.
// Its 2 x 64 x 64 = 8192 exponentials take 8192 / 16 MUFU results a clock = 512 clocks, ~0.28 us at ~1.8 GHz,
// before their FMAs, masks and bf16 packs: about a third of the GEMM time (a sixth at D = 128, where the GEMMs
// are twice as long), which is why D = 64 trails most. Ahead, those exponentials overlap dP(t) and dK(t-1) (two
// GEMMs instead of one) and no step waits for its own last GEMM before issuing the next. No register array is
// added: Sᵀ and dPᵀ of step t-1 are dead once dSᵀ(t-1) is packed to bf16, so step t's accumulators reuse them.
// Live at the new issue point: dV, dK (2 x 32), Sᵀ, dPᵀ (2 x 32), Pᵀ and dSᵀ as bf16 (2 x 16) = 160 registers
// at D = 64, far under the consumers' 240 (at D = 128 and 256 the same is 224 plus addresses: spills). A Q/dO
// stage and its row stage are released one step later, once dK(t-1) is known done: the producer runs 3 stages
// ahead instead of 4 (3 x 16 KB of Q + dO).
//
// Correctness by construction: the same arithmetic per step, each dK and dV element accumulating the same
// products in the same order; only the issue order across steps and the release point change. Wait counts
// (groups complete in commit order): after step t's issue the pending groups are dV(t-1), S(t), dP(t),
// dK(t-1), so wgmma_wait<2> leaves dV(t-1) and S(t) done (P may be repacked: dV(t-1) read it); after dV(t)
// the pending ones are dP(t), dK(t-1), dV(t), so wgmma_wait<1> leaves dP(t) and dK(t-1) done (dS may be
// repacked, the stage of t-1 released). Step 0 and the last dK are peeled: every path issues the same wgmmas
// (a conditionally issued wgmma makes ptxas serialise the pipeline, C7515). The tiling is unchanged, so the
// NumPy model (tests/test_reference_attention_bwd_model.py) still covers the arithmetic;
// tests/test_attention_bwd_variant_schedules.py runs this loop's issues, waits and releases against a model
// of wgmma commit groups and of the rings.
//
// Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04): hd64-s2048 78.0 ->
// 79.7 % of cuDNN, hd64-s577 86.3 -> 87.1 %, the others within 0.1 point; no workload reaches its target.
__device__ __forceinline__ void key_consumer(KeyShared<D>& s, const CUtensorMap* map_dk, const CUtensorMap* map_dv,
                                             const KeyWork& w, int half, int S, int causal, float scale_log2,
                                             float scale) {
  using C = KeyConfig<D>;
  constexpr int STEPS = C::BQ / 16;
  const int kw = C::SPLIT ? 0 : half * ROWS;      // this warpgroup's keys within the tile
  const int col0 = C::SPLIT ? half * C::COLS : 0;  // and its columns of dK and dV
  const int kw0 = w.k0 + kw;
  const bool signals = threadIdx.x % 128 == 0;
  float dv[C::COLS / 2], dk[C::COLS / 2];
  float sacc[C::BQ / 2], dpacc[C::BQ / 2];
  uint32_t pa[STEPS][4], dsa[STEPS][4];
  zero(dv);
  zero(dk);
  ptx::mbar_wait(&s.kv_full, 0);

  if constexpr (D != 64) {  // the reference's loop, verbatim
    ptx::RingState at;
    for (int t = 0; t < w.q_tiles; ++t) {
      const int q0 = (w.q_first + t) * C::BQ;
      s.qdo_ring.consumer_wait(at);
      issue_scores<C::BQ, D>(sacc, s.k + kw * 64, C::BN * 64, s.q[at.stage], C::BQ * 64);     // Sᵀ = K Qᵀ
      issue_scores<C::BQ, D>(dpacc, s.v + kw * 64, C::BN * 64, s.dout[at.stage], C::BQ * 64);  // dPᵀ = V dOᵀ
      s.row_ring.consumer_wait(at);
      const float* lse2 = s.lse2[at.stage];
      const float* delta = s.delta[at.stage];
      ptx::wgmma_wait<1>();  // Sᵀ is done
      ptx::wgmma_fence_acc(sacc);
      const bool diagonal = causal && q0 < kw0 + ROWS - 1;
#pragma unroll
      for (int i = 0; i < C::BQ / 2; ++i) {
        const int col = ptx::wgmma_acc_col(i);
        float x = fmaf(sacc[i], scale_log2, -lse2[col]);
        if (diagonal && kw0 + ptx::wgmma_acc_row(i) > q0 + col) x = -INFINITY;
        sacc[i] = ptx::ex2_approx(x);
      }
      pack_a(sacc, pa);
      // dV += Pᵀ dO
      issue_accumulate<C::COLS, STEPS>(dv, pa, s.dout[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
      ptx::wgmma_wait<1>();  // dPᵀ is done (dV may still run)
      ptx::wgmma_fence_acc(dpacc);
#pragma unroll
      for (int i = 0; i < C::BQ / 2; ++i) dpacc[i] = sacc[i] * (dpacc[i] - delta[ptx::wgmma_acc_col(i)]);
      pack_a(dpacc, dsa);
      // dK += dSᵀ Q
      issue_accumulate<C::COLS, STEPS>(dk, dsa, s.q[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_acc(dv);
      ptx::wgmma_fence_acc(dk);
      if (signals) {
        s.qdo_ring.consumer_release(at.stage);
        s.row_ring.consumer_release(at.stage);
      }
      at.advance(C::STAGES);
    }
  } else {
    const auto scores = [&](const ptx::RingState& at) {
      s.qdo_ring.consumer_wait(at);
      issue_scores<C::BQ, D>(sacc, s.k + kw * 64, C::BN * 64, s.q[at.stage], C::BQ * 64);     // Sᵀ = K Qᵀ
      issue_scores<C::BQ, D>(dpacc, s.v + kw * 64, C::BN * 64, s.dout[at.stage], C::BQ * 64);  // dPᵀ = V dOᵀ
    };
    const auto probabilities = [&](const ptx::RingState& at, int t) {  // Sᵀ -> Pᵀ, packed; then dV += Pᵀ dO
      const int q0 = (w.q_first + t) * C::BQ;
      const float* lse2 = s.lse2[at.stage];
      const bool diagonal = causal && q0 < kw0 + ROWS - 1;
#pragma unroll
      for (int i = 0; i < C::BQ / 2; ++i) {
        const int col = ptx::wgmma_acc_col(i);
        float x = fmaf(sacc[i], scale_log2, -lse2[col]);
        if (diagonal && kw0 + ptx::wgmma_acc_row(i) > q0 + col) x = -INFINITY;
        sacc[i] = ptx::ex2_approx(x);
      }
      pack_a(sacc, pa);
      issue_accumulate<C::COLS, STEPS>(dv, pa, s.dout[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
    };
    const auto gradients = [&](const ptx::RingState& at) {  // dSᵀ = Pᵀ (dPᵀ - delta), packed
      const float* delta = s.delta[at.stage];
#pragma unroll
      for (int i = 0; i < C::BQ / 2; ++i) dpacc[i] = sacc[i] * (dpacc[i] - delta[ptx::wgmma_acc_col(i)]);
      pack_a(dpacc, dsa);
    };
    const auto release = [&](const ptx::RingState& at) {
      if (signals) {
        s.qdo_ring.consumer_release(at.stage);
        s.row_ring.consumer_release(at.stage);
      }
    };

    ptx::RingState at;  // step 0 (every CTA walks at least one query tile)
    scores(at);
    s.row_ring.consumer_wait(at);
    ptx::wgmma_wait<1>();  // Sᵀ(0)
    ptx::wgmma_fence_acc(sacc);
    probabilities(at, 0);
    ptx::wgmma_wait<1>();  // dPᵀ(0); dV(0) may run
    ptx::wgmma_fence_acc(dpacc);
    gradients(at);
    ptx::RingState prev = at;  // the step whose dK is issued next
    at.advance(C::STAGES);
    for (int t = 1; t < w.q_tiles; ++t) {
      scores(at);
      // dK(t - 1) += dSᵀ Q
      issue_accumulate<C::COLS, STEPS>(dk, dsa, s.q[prev.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
      s.row_ring.consumer_wait(at);
      ptx::wgmma_wait<2>();  // pending were dV(t - 1), Sᵀ(t), dPᵀ(t), dK(t - 1): dV(t - 1) and Sᵀ(t) are done
      ptx::wgmma_fence_acc(sacc);
      ptx::wgmma_fence_acc(dv);
      probabilities(at, t);
      ptx::wgmma_wait<1>();  // pending were dPᵀ(t), dK(t - 1), dV(t): dPᵀ(t) and dK(t - 1) are done
      ptx::wgmma_fence_acc(dpacc);
      ptx::wgmma_fence_acc(dk);
      release(prev);
      gradients(at);
      prev = at;
      at.advance(C::STAGES);
    }
    issue_accumulate<C::COLS, STEPS>(dk, dsa, s.q[prev.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(dv);
    ptx::wgmma_fence_acc(dk);
    release(prev);
  }

  // Epilogue as in the reference: both warpgroups are done reading K and V, so each stages its dK and dV in
  // its own part of those tiles, then one thread stores 64 x 64 boxes.
  ptx::named_barrier_sync(1, 256);
  ptx::fence_proxy_async_smem();
  __nv_bfloat16* k_staging = s.k + (col0 / 64) * C::BN * 64 + kw * 64;
  __nv_bfloat16* v_staging = s.v + (col0 / 64) * C::BN * 64 + kw * 64;
  stage_rows(dk, scale, k_staging, C::BN * 64);
  stage_rows(dv, 1.0f, v_staging, C::BN * 64);
  ptx::fence_proxy_async_smem();
  ptx::named_barrier_sync(2 + half, 128);
  if (signals && kw0 < S) {  // a warpgroup whose keys all lie past S stores nothing
#pragma unroll
    for (int box = 0; box < C::COLS / 64; ++box) {
      ptx::tma_store_3d(map_dk, k_staging + box * C::BN * 64, col0 + box * 64, kw0, w.head);
      ptx::tma_store_3d(map_dv, v_staging + box * C::BN * 64, col0 + box * 64, kw0, w.head);
    }
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();
  }
}
