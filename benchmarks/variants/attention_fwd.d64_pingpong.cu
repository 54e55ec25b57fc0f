// Variant of src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu, head dim 64 only: the two consumer
// warpgroups take turns to issue their GEMMs (a ping-pong on two named barriers, as FlashAttention-3 schedules
// its warpgroups), so one warpgroup's softmax runs while the tensor cores work on the other's S and P · V.
// D = 128 and 256 run the reference's loop unchanged.
//
// Why it should be faster: at D = 64 the exponentials cost as much as the tensor work. One score needs one
// MUFU.EX2 and 4 D = 256 FLOPs of QK and PV; an H100/H200 SM does 16 EX2 per clock against about 4096 dense
// bf16 FLOPs (989 TFLOP/s over 132 SMs at 1.83 GHz), i.e. 253 FLOPs per EX2. Per 64 x 128 step of a warpgroup
// that is 8192 EX2 = 512 MUFU clocks against 2.1 MFLOP = 512 tensor clocks: the kernel can only approach the
// tensor-core bound if every exponential of one warpgroup runs under the other's GEMMs. In the reference
// nothing keeps the two warpgroups out of phase: when both issue their GEMMs together, both then wait on MUFU
// together while the tensor cores idle (its design note suspects this for the 17 % gap to cuDNN at D = 64:
// hd64-s2048 is 0.376 ms, the tensor bound and the MUFU bound are each about 0.14 ms, their sum 0.28 ms).
// Here the issue order is forced: warpgroup 0 issues S_j and P_{j-1} · V_{j-1}, then warpgroup 1 may issue
// its pair, then warpgroup 0 its next one, so the tensor queue holds one warpgroup's work while the other
// computes its softmax. At D = 128 the EX2 are half the tensor time and hide without help (the reference is
// at 101.6 % of cuDNN there), so only D = 64 takes turns.
//
// The turns: issue slot 0 is S_0, slot j (1 <= j < tiles) is S_j with P_{j-1} · V_{j-1}, slot `tiles` is the
// last P · V. Barrier 3 + h is "warpgroup h may issue" (256 threads: the waiting warpgroup's bar.sync and the
// other's bar.arrive). Warpgroup 0 waits before every slot but its first, warpgroup 1 before every slot;
// warpgroup 0 passes the turn after every slot, warpgroup 1 after every slot but its last. So both barriers
// see as many syncs as arrivals and no phase is left open at exit. The two warpgroups take turns only when
// both compute the same number of tiles (both have rows < S; at BKV = 128 the causal tile counts of the two
// halves are always equal); otherwise each runs the reference's loop. Barriers 1 and 2 stay the epilogue's.
// Registers and shared memory as in the reference (no new state but the flag). Own asm: the wrapper header
// has named_barrier_sync but no bar.arrive, so this file issues that itself. Not combinable with
// attention_fwd.d64_three_consumers.cu (a static_assert refuses to build that pair).
//
// Not yet measured. Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu \
//       --variant "pingpong:@attention_fwd.d64_pingpong.cu"
// and with the wide tiles: --variant "kv192-pp:@attention_fwd.d64_wide_kv.cu;@attention_fwd.d64_pingpong.cu".
// tests/test_reference_attention_model.py runs the turns against the rings (no deadlock, balanced barriers).
//
// The definition below replaces the reference's definition that starts with the same line.

__device__ __forceinline__ void consumer_mainloop(Shared<D>& s, const Work& w, int half, int q0w, int S, int causal,
                                                  float scale_log2, bool signals, float (&o)[Config<D>::O_ACC],
                                                  float (&m)[2], float (&l)[2]) {
  using C = Config<D>;
  static_assert(sizeof(s.q) == BM * D * 2, "the turns are written for two consumer warpgroups of 64 rows");
  const int tiles = warpgroup_tiles(w, q0w, S, causal, C::BKV);
  // The other warpgroup's rows: both sides compute the same flag, so both take turns or neither does.
  const int other_q0w = w.q0 + (1 - half) * 64;
  const bool turns = D == 64 && other_q0w < S && warpgroup_tiles(w, other_q0w, S, causal, C::BKV) == tiles;
  auto take_turn = [&](int slot) {  // wait until the other warpgroup has issued its previous slot
    if (turns && (half == 1 || slot > 0)) ptx::named_barrier_sync(3 + half, 256);
  };
  auto pass_turn = [&](int slot) {  // let the other warpgroup issue
    if (turns && (half == 0 || slot < tiles))
      asm volatile("bar.arrive %0, %1;" ::"r"(4 - half), "r"(256) : "memory");
  };
  // A tile needs the mask when it runs past S or, causal, has a key after the warpgroup's first row.
  auto needs_mask = [&](int j) { return j * C::BKV + C::BKV > S || (causal && j * C::BKV + C::BKV - 1 > q0w); };
  float acc[C::S_ACC];
  uint32_t p[C::P_STEPS][4];
  float alpha[2];
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  ptx::RingState at;
  s.k_ring.consumer_wait(at);
  take_turn(0);
  issue_scores<D>(s, at.stage, half, acc);
  pass_turn(0);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  if (signals) s.k_ring.consumer_release(at.stage);
  if (needs_mask(0)) mask_scores(acc, 0, q0w, S, causal != 0);
  online_softmax(acc, m, l, alpha, scale_log2);  // alpha = 0: O has no old value to shrink
  pack_p<D>(acc, p);

  for (int j = 1; j < tiles; ++j) {
    const ptx::RingState prev = at;
    at.advance(C::STAGES);
    s.k_ring.consumer_wait(at);
    take_turn(j);
    issue_scores<D>(s, at.stage, half, acc);  // S_j ...
    s.v_ring.consumer_wait(prev);
    issue_pv<D>(s, prev.stage, p, o, j > 1);  // ... while P_{j-1} · V_{j-1} follows it
    pass_turn(j);
    ptx::wgmma_wait<1>();                      // S_j is done (groups complete in order)
    ptx::wgmma_fence_acc(acc);
    if (signals) s.k_ring.consumer_release(at.stage);
    if (needs_mask(j)) mask_scores(acc, j * C::BKV, q0w, S, causal != 0);
    online_softmax(acc, m, l, alpha, scale_log2);
    ptx::wgmma_wait<0>();                      // P_{j-1} · V_{j-1} is done: O may be rescaled, V released
    ptx::wgmma_fence_acc(o);
    if (signals) s.v_ring.consumer_release(prev.stage);
    rescale_o<D>(o, alpha);
    pack_p<D>(acc, p);
  }
  s.v_ring.consumer_wait(at);
  take_turn(tiles);
  issue_pv<D>(s, at.stage, p, o, tiles > 1);
  pass_turn(tiles);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(o);
  if (signals) s.v_ring.consumer_release(at.stage);
  at.advance(C::STAGES);

  skip_tiles<D>(s, at, w.kv_tiles - tiles, signals);
}
