// Variant of src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu, head dim 64 only: three consumer
// warpgroups per CTA (192 query rows, 512 threads), as FlashAttention-3 tiles head dim 64 (192 x 128 when
// causal, 192 x 192 otherwise, with 160 registers per consumer thread). D = 128 and 256 keep two consumers
// and 128 rows (the definitions below give them the reference's code; their SASS is unchanged, which the CPU
// test checks).
//
// Why it should be faster: each K and V tile brought into shared memory serves 192 query rows instead of 128,
// so the L2-to-SM traffic per FLOP drops by a third (hd64-s2048: 2 x 16 KB per 128-key tile for 3 x 2.1 MFLOP
// instead of 2 x 2.1), and three warpgroups give the SM's tensor cores and MUFU a third independent stream:
// at D = 64 one score costs one MUFU.EX2 per 256 tensor FLOPs, about what the H200 does of each per clock
// (16 EX2 against ~4096 FLOPs per SM), so whenever one warpgroup is in its exponentials two others can have
// GEMMs queued (with two, only one). Fewer CTAs too: hd64-s2048 1408 instead of 2048 (10.7 against 15.5
// waves on 132 SMs), so a third fewer CTA set-ups (barrier init, tensor-map prefetch, Q wait) per row.
// Costs: registers per consumer thread drop from 240 to 160 (128 x (24 + 3 x 160) = 64512 <= 65536): O 32 +
// S 64 + P 32 = 128 live at once, so BKV stays 128 (192 would need 176 for those alone). A last query tile with
// fewer than 192 rows idles one or two warpgroups (hd64-s577: rows 576-767 hold one valid row, so that CTA
// runs one warpgroup; the work per row is the same as the reference's). Shared memory: Q 24 KB + K, V 4 x 16 KB
// each = 152 KB.
// Not combinable with attention_fwd.d64_pingpong.cu (its turns are written for two warpgroups and it uses
// barrier 3, which the third warpgroup's epilogue takes here; a static_assert there refuses the pair) nor
// with d64_wide_kv (both replace Config; the later file's wins).
//
// Not yet measured. Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu \
//       --variant "wg3:@attention_fwd.d64_three_consumers.cu"
// The NumPy model (tests/test_reference_attention_model.py) runs three consumers per CTA too.
//
// The definitions below replace the reference's definitions that start with the same line (the kernel's,
// whose launch bounds change, is named by its "replaces:" line).

struct Config {
  static constexpr int CONSUMERS = D == 64 ? 3 : 2;        // consumer warpgroups, 64 query rows each
  static constexpr int ROWS = 64 * CONSUMERS;              // query rows per CTA (BM at D = 128 and 256)
  static constexpr int THREADS = 128 * (1 + CONSUMERS);    // THREADS at D = 128 and 256
  static constexpr uint32_t PRODUCER_REGS = 24;
  static constexpr uint32_t CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
  static constexpr int BKV = D == 256 ? 64 : 128;         // keys per tile
  static constexpr int STAGES = D == 64 ? 4 : 2;
  static constexpr int SLABS = D / 64;                     // 64-column (128-byte) slabs of a row
  static constexpr uint32_t Q_BYTES = ROWS * D * 2;
  static constexpr uint32_t KV_BYTES = BKV * D * 2;        // one K or one V tile
  static constexpr int S_ACC = BKV / 2;                    // fp32 score registers per consumer thread
  static constexpr int O_ACC = D / 2;                      // fp32 output registers per consumer thread
  static constexpr int P_STEPS = BKV / 16;                 // k16 steps of P · V
  static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 65536, "register file");
  static_assert(CONSUMERS == 3 || (ROWS == BM && THREADS == ::THREADS), "D = 128 and 256 as the reference");
};

struct Shared {
  static constexpr int STAGES = Config<D>::STAGES;
  __nv_bfloat16 q[Config<D>::ROWS * D];
  __nv_bfloat16 k[STAGES][Config<D>::BKV * D];
  __nv_bfloat16 v[STAGES][Config<D>::BKV * D];
  ptx::RingBarriers<STAGES> k_ring;  // full: producer arrive + TMA bytes; empty: every consumer warpgroup
  ptx::RingBarriers<STAGES> v_ring;
  uint64_t q_full;
};

// Producer (one thread): the Q tile (its 64-row parts with a row < S), then every KV tile of the CTA.
__device__ __forceinline__ void producer_loop(Shared<D>& s, const CUtensorMap* map_q, const CUtensorMap* map_k,
                                              const CUtensorMap* map_v, const Work& w, int S) {
  using C = Config<D>;
  ptx::tma_prefetch_map(map_q);
  ptx::tma_prefetch_map(map_k);
  ptx::tma_prefetch_map(map_v);
  int parts;  // a part wholly past S is neither loaded nor computed
  if constexpr (C::CONSUMERS == 2) parts = w.q0 + 64 < S ? 2 : 1;
  else parts = min(C::CONSUMERS, (S - w.q0 + 63) / 64);
  ptx::mbar_arrive_expect_tx(&s.q_full, parts * C::Q_BYTES / C::CONSUMERS);
  for (int part = 0; part < parts; ++part)
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.q + (part * C::SLABS + slab) * 64 * 64, map_q, &s.q_full, slab * 64, w.q0 + part * 64, w.head);
  ptx::RingState at;
  for (int j = 0; j < w.kv_tiles; ++j) {
    uint64_t* full = s.k_ring.producer_acquire(at, C::KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.k[at.stage] + slab * C::BKV * 64, map_k, full, slab * 64, j * C::BKV, w.head);
    full = s.v_ring.producer_acquire(at, C::KV_BYTES);
#pragma unroll
    for (int slab = 0; slab < C::SLABS; ++slab)
      ptx::tma_load_3d(s.v[at.stage] + slab * C::BKV * 64, map_v, full, slab * 64, j * C::BKV, w.head);
    at.advance(C::STAGES);
  }
}

// replaces: __global__ void __launch_bounds__(THREADS, 1)
__global__ void __launch_bounds__(Config<D>::THREADS, 1)
attention_fwd_sm90a(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                    const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o,
                    float* __restrict__ LSE, int S, int heads, int causal, float scale_log2) {
  using C = Config<D>;
  extern __shared__ uint8_t smem_raw[];
  Shared<D>& s = *ptx::align_smem<Shared<D>>(smem_raw);
  Work w;
  if constexpr (C::CONSUMERS == 2) {
    w = cta_work(S, causal, heads, C::BKV);
  } else {  // cta_work with C::ROWS query rows per CTA
    const int q_tiles = (S + C::ROWS - 1) / C::ROWS;
    const int t = static_cast<int>(blockIdx.x);
    if (causal) {  // heaviest (last) query tiles first, across all heads
      w.head = t % heads;
      w.q0 = (q_tiles - 1 - t / heads) * C::ROWS;
      w.kv_tiles = (min(S, w.q0 + C::ROWS) + C::BKV - 1) / C::BKV;
    } else {  // a head's query tiles side by side: they share its K and V in L2
      w.head = t / q_tiles;
      w.q0 = (t % q_tiles) * C::ROWS;
      w.kv_tiles = (S + C::BKV - 1) / C::BKV;
    }
  }
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.k_ring.init(C::STAGES, C::CONSUMERS);  // empty: one arrive per consumer warpgroup
    s.v_ring.init(C::STAGES, C::CONSUMERS);
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x == 0) producer_loop<D>(s, &map_q, &map_k, &map_v, w, S);
    return;
  }

  ptx::setmaxnreg_inc<C::CONSUMER_REGS>();
  const int half = static_cast<int>(warpgroup) - 1;  // which 64 rows of the tile
  const int q0w = w.q0 + half * 64;
  const bool signals = threadIdx.x % 128 == 0;
  if (q0w >= S) {  // every row of this warpgroup is past S (the last query tile of a short sequence)
    ptx::RingState at;
    skip_tiles<D>(s, at, w.kv_tiles, signals);
    return;
  }
  float o[C::O_ACC], m[2], l[2];
  ptx::mbar_wait(&s.q_full, 0);
  consumer_mainloop<D>(s, w, half, q0w, S, causal, scale_log2, signals, o, m, l);
  epilogue<D>(s, &map_o, LSE, o, m, l, w, half, q0w, S, signals);
}

int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O, float* LSE,
           int64_t heads, int64_t S, int causal, cudaStream_t stream) {
  using C = Config<D>;
  CUtensorMap map_q, map_k, map_v, map_o;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k, K, heads, S, D, C::BKV)) != cudaSuccess ||
      (err = make_map(&map_v, V, heads, S, D, C::BKV)) != cudaSuccess ||
      (err = make_map(&map_o, O, heads, S, D, 64)) != cudaSuccess)
    return static_cast<int>(err);
  constexpr size_t smem = smem_bytes<D>();
  if ((err = cudaFuncSetAttribute(attention_fwd_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem))) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t ctas = heads * ((S + C::ROWS - 1) / C::ROWS);
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  attention_fwd_sm90a<D><<<static_cast<unsigned>(ctas), C::THREADS, smem, stream>>>(
      map_q, map_k, map_v, map_o, LSE, static_cast<int>(S), static_cast<int>(heads), causal, scale_log2);
  return static_cast<int>(cudaGetLastError());
}
