// mla_decode_paged variant "scores_ahead": each consumer warpgroup issues the next tile's S = Q · K_wgᵀ (36 wgmma
// m64n32) before this tile's softmax, when the next tile belongs to the same segment, so the tensor cores compute
// S(i + 1) while the warpgroups exchange row maxima, take exponentials and write P(i); P(i) · V then queues behind
// S(i + 1), and one wait covers both.
//
// Why it should be faster (not measured yet): in the reference the two warpgroups run in step (the max exchange), so
// per tile the tensor cores idle through the softmax: by the reference's estimate S ~1730 clocks (72 m64n32 wgmma,
// bound by reading the 2 KB A block from shared memory for 32 columns), the softmax with its two named barriers
// ~400, P · V ~980. With S one tile ahead a tile costs about S + P · V: ~15 % less, where the cache stream keeps up.
//
// What it changes and keeps: the same arithmetic in the same order per tile (the NumPy model,
// tests/test_reference_mla_model.py, covers it unchanged); the scores are read out of the accumulators into a
// separate array before masking and the exponentials (writing into the accumulators of an S in flight made ptxas
// serialise every wgmma, C7515); a second walk one tile ahead decides whether the next S may go early (a new
// segment needs its Q first, loaded after both warpgroups' last S). The next tile's stage is waited for before the
// softmax; it was released by the tile before, so the producer cannot be blocked by it. The P buffer and the max
// exchange keep their single buffers: a warpgroup still waits for all its wgmma (P · V(i) and S(i + 1)) before its
// next max exchange (tests/test_mla_decode_schedules.py runs both loops' issues, waits, releases and named
// barriers against a model of the ring, the Q slabs and the P tile). Its kernel is the reference's (384 threads,
// setmaxnreg: consumers 232, since the 701 fix of 2026-12-07; it was __maxnreg__(224) on 288 threads, which does
// not launch): the consumer code uses up to R229, no spills, no ptxas warnings.
__device__ __forceinline__ void consumer_loop(Shared& s, const CUtensorMap* map_qn, const CUtensorMap* map_qp,
                                              const int32_t* indptr, const int32_t* last_len, const Outputs& out,
                                              int* seq_tile0, float scale_log2, int B, int P, int t0, int t1) {
  const int tid = int(threadIdx.x);  // 0..255
  const int wg = tid >> 7;
  const int warp = (tid >> 5) & 3;   // warp in the warpgroup: rows 16 warp ..
  const int lane = tid & 31;
  const int t = lane & 3;
  const int row0 = 16 * warp + (lane >> 2);  // this thread's rows: row0, row0 + 8

  TileWalk walk;
  walk.begin(indptr, last_len, B, P, t0, t1, lane);
  if (!walk.next()) return;
  TileWalk ahead = walk;  // one tile ahead of `walk` once the loop has stepped it

  // S = Q · K_wgᵀ of the tile in `stage`: 36 k-steps, slab kk / 4, +32 bytes (+2) per 16 dims inside it.
  auto issue_scores = [&](int stage, float (&acc)[16]) {
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4 * kSlabs; ++kk) {
      const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q[kk / 4]) + 2 * (kk % 4);
      const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.kv[stage][kk / 4] + kHalfKeys * 64 * wg) + 2 * (kk % 4);
      ptx::wgmma_m64n32k16_bf16(acc, q_desc, k_desc, kk > 0 ? 1 : 0);
    }
    ptx::wgmma_commit();
  };

  float o[128];
  float m[2], l[2];
  float sc[16];
  uint32_t q_phase = 0;
  ptx::RingState at;
  bool scores_issued = false;  // the current tile's S was issued during the previous tile
  while (true) {
    if (!scores_issued) {
      if (walk.seg_start) {
        // Both warpgroups are past their last S (each waits for it before its softmax): Q may be replaced.
        ptx::named_barrier_sync(kBarQ, kConsumerThreads);
        if (tid == 0) {
          ptx::mbar_arrive_expect_tx(&s.q_full, kQBytes);
          const int qrow = walk.b * out.H + out.head0;  // rows past the batch load as zeros, still counted
#pragma unroll
          for (int slab = 0; slab < kSlabs - 1; ++slab)
            ptx::tma_load_2d(s.q[slab], map_qn, &s.q_full, 64 * slab, qrow);
          ptx::tma_load_2d(s.q[kSlabs - 1], map_qp, &s.q_full, 0, qrow);
          if (walk.j == 0 && blockIdx.y == 0) seq_tile0[walk.b] = walk.tstart;  // for the merge
          if (walk.b + 1 < B && walk.tstart + walk.ntiles < t1) {  // the chunk goes on: the next Q into L2
            const int next_row = qrow + out.H;
#pragma unroll
            for (int slab = 0; slab < kSlabs - 1; ++slab) ptx::tma_prefetch_2d(map_qn, 64 * slab, next_row);
            ptx::tma_prefetch_2d(map_qp, 0, next_row);
          }
        }
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] = 0.0f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.0f;
        ptx::mbar_wait(&s.q_full, q_phase);
        q_phase ^= 1u;
      }
      s.ring.consumer_wait(at);
      issue_scores(at.stage, sc);
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(sc);
    const int stage = at.stage;

    // The next tile's S, issued now to run in the tensor cores beside this tile's softmax, when it belongs to the
    // same segment (a new segment needs its Q first).
    const bool more = ahead.next();
    const bool early = more && !ahead.seg_start;
    ptx::RingState next_at = at;
    next_at.advance(kStages);
    float sn[16];
    if (early) {
      s.ring.consumer_wait(next_at);
      issue_scores(next_at.stage, sn);
    }

    const int valid = walk.valid;
    float ps[16];  // the scores, then the probabilities: never written into the accumulators
#pragma unroll
    for (int i = 0; i < 16; ++i) ps[i] = kHalfKeys * wg + ptx::wgmma_acc_col(i) >= valid ? -INFINITY : sc[i];
    // The tile's row maxima: this warpgroup's 32 keys, then the other's through shared memory.
    float mine[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x = -INFINITY;
#pragma unroll
      for (int i = 2 * h; i < 16; i += 4) x = fmaxf(x, fmaxf(ps[i], ps[i + 1]));
      mine[h] = quad_max(x);
      if (t == 0) s.row_max[wg][row0 + 8 * h] = mine[h];
    }
    ptx::named_barrier_sync(kBarMax, kConsumerThreads);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float tile_max = fmaxf(mine[h], s.row_max[wg ^ 1][row0 + 8 * h]);  // finite: key 0 is valid
      const float m_new = fmaxf(m[h], tile_max * scale_log2);
      alpha[h] = ptx::ex2_approx(m[h] - m_new);  // 0 on a segment's first tile (m = -inf)
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int i = 2 * h; i < 16; i += 4) {
        ps[i] = ptx::ex2_approx(fmaf(ps[i], scale_log2, -m_new));
        ps[i + 1] = ptx::ex2_approx(fmaf(ps[i + 1], scale_log2, -m_new));
        sum += ps[i] + ps[i + 1];
      }
      l[h] = l[h] * alpha[h] + sum;
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];

    uint8_t* p_tile = reinterpret_cast<uint8_t*>(s.p);
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const int row = row0 + 8 * ((i >> 1) & 1);
      const int key = kHalfKeys * wg + 8 * (i >> 2) + 2 * t;
      const uint32_t offset = uint32_t(row) * 128u + ((uint32_t(key >> 3) ^ uint32_t(row & 7)) << 4) + (key & 7) * 2;
      *reinterpret_cast<uint32_t*>(p_tile + offset) = ptx::pack_bf16x2(ps[i], ps[i + 1]);
    }
    if (valid < kKeys) {
      uint8_t* slabs = reinterpret_cast<uint8_t*>(s.kv[stage][4 * wg]);
      const int local = tid & 127;
#pragma unroll 4
      for (int idx = local; idx < 4 * kKeys * 8; idx += 128) {  // (slab, row, 16-byte chunk)
        const int row = (idx >> 3) & (kKeys - 1);
        if (row >= valid)
          *reinterpret_cast<uint4*>(slabs + (idx >> 9) * kSlabBytes + row * 128 + (idx & 7) * 16) =
              make_uint4(0u, 0u, 0u, 0u);
      }
    }
    ptx::fence_proxy_async_smem();  // P and the zeros, visible to wgmma
    ptx::named_barrier_sync(kBarP, kConsumerThreads);

    ptx::wgmma_fence();
    {
      const uint64_t p_desc = ptx::wgmma_desc_k_sw128(s.p);
      const uint64_t v_desc = ptx::wgmma_desc_mn_sw128(s.kv[stage][4 * wg], kSlabBytes);
#pragma unroll
      for (int k = 0; k < kKeys / 16; ++k) ptx::wgmma_m64n256k16_bf16<0, 1>(o, p_desc + 2 * k, v_desc + 128 * k, 1);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();  // P · V and the next tile's S
    ptx::wgmma_fence_acc(o);
    __syncwarp();
    if (lane == 0) s.ring.consumer_release(stage);

    if (walk.ends_segment) {
      float mine_sum[2], total[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mine_sum[h] = quad_sum(l[h]);
        if (t == 0) s.row_sum[wg][row0 + 8 * h] = mine_sum[h];
      }
      ptx::named_barrier_sync(kBarSum, kConsumerThreads);
#pragma unroll
      for (int h = 0; h < 2; ++h) total[h] = mine_sum[h] + s.row_sum[wg ^ 1][row0 + 8 * h];
      write_segment(out, walk.b, walk.whole, o, m, total, wg, warp, lane);
    }
    if (!more) break;
    walk = ahead;
    at = next_at;
    scores_issued = early;
    if (early) {
      ptx::wgmma_fence_acc(sn);
#pragma unroll
      for (int i = 0; i < 16; ++i) sc[i] = sn[i];
    }
  }
}
