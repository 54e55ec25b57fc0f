// attention_bwd variant "dq_workspace": dQ is accumulated by the dK/dV kernel in an fp32 workspace at D = 64 and
// 128, as cuDNN's and FlashAttention's backward do, and the dQ kernel (which recomputes S and dP) runs only at
// D = 256. The reference takes no workspace and recomputes S and dP for dQ (1.40 x the task's tensor work); a
// candidate may allocate on its stream, and this is that path.
//
// What changes. The host takes rows x D floats with cudaMallocAsync on the given stream (the device's current
// pool is told to keep its memory, so a call after the first maps nothing inside the timed region) and frees
// them stream-ordered after the last kernel. The delta kernel also zeroes each row's accumulator. In the dK/dV
// kernel, once a step's dSᵀ (keys x queries) is packed to bf16 for dK += dSᵀ Q, each consumer warpgroup writes
// it into a shared 128-byte-swizzled tile (two tiles in turn, 16 KB each) and issues dQ part = dS · K with both
// operands MN-major from shared memory (dSᵀ as A with TransA, K as B with TransB, like V in the forward). D = 128:
// the two warpgroups meet at a named barrier once both halves of dSᵀ are written, and each sums all 128 keys
// for its 64 of the 128 columns; D = 64: each sums its own 64 keys for all 64 columns (no barrier, two adds
// per element). The 64 x 64 fp32 part goes out by red.global.add.v2.f32 (16 a thread a step; rows >= S
// skipped). A last kernel writes dQ = accumulator x scale as bf16.
//
// Why it should be faster. The reference does 1.40 x the task's tensor work (7 GEMMs of 5); this does 1.0 x at
// D = 64 and 128. At hd128-s4096 the reference's rate (650 TFLOP/s of work done) on the task's 1.37e12 FLOPs
// would be about 2.1 ms against cuDNN's 2.44. What it adds: 4.3 GB of fp32 reductions into L2 at hd128-s4096
// (32 key tiles x 4096 x 128 x 4 bytes x 64 heads), spread over the kernel; zeroing and converting (134 MB
// written, 134 read, 67 written: about 80 us, 3 %); one barrier a step at D = 128, so the two warpgroups
// overlap each other's exponentials less than in the reference. Whether the reductions hide behind the GEMMs is
// what a measurement has to say.
//
// Correctness by construction: dK and dV see the same arithmetic in the same order. dQ sums the same bf16 dS
// times K in fp32 as the dQ kernel, in another order (atomics). Masked keys and rows >= S (LSE = +inf) have
// P = 0, so dS = 0; keys >= S read zero K rows from TMA, so they add nothing to dQ. The shared dSᵀ tile is
// written with the 128-byte swizzle a TMA box of 64 columns has, which the MN-major descriptors read (as they
// read dO and K); a tile is rewritten two steps later, after both warpgroups have passed the next step's
// barrier (each waits for its own dQ GEMM before it), and at D = 64 each warpgroup reads only its own rows.
//
// Prepared, not yet measured: it builds as the evaluator builds it (no spills, no ptxas warnings; each dK/dV
// kernel at D = 64 and 128 carries 16 REDG.E.ADD.F32x2 and the dQ kernel is built only at D = 256), but the
// session that wrote it had no device time left. `scripts/gpu_checks.sh variants_attention` times it beside the
// reference and checks it on every workload (held-out ones included).
__global__ void __launch_bounds__(256) attention_bwd_delta(const __nv_bfloat16* __restrict__ O,
                                                           const __nv_bfloat16* __restrict__ dO,
                                                           float* __restrict__ delta, float* __restrict__ dq_accum,
                                                           int64_t rows) {
  constexpr int LANES = D / 8;  // 8, 16 or 32: a power of two dividing the warp
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (256 / LANES) + threadIdx.x / LANES;
  const int part = threadIdx.x % LANES;
  float sum = 0.0f;
  if (row < rows) {
    const uint4 o = *reinterpret_cast<const uint4*>(O + row * D + part * 8);
    const uint4 g = *reinterpret_cast<const uint4*>(dO + row * D + part * 8);
    sum = dot8_bf16(o, g);
    if (dq_accum != nullptr) {  // the row's dQ accumulator starts at zero: the dK/dV kernel adds into it
      float4* zero_row = reinterpret_cast<float4*>(dq_accum + row * D + part * 8);
      zero_row[0] = zero_row[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
#pragma unroll
  for (int offset = LANES / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (row < rows && part == 0) delta[row] = sum;
}

// adds before: __device__ __forceinline__ void issue_scores(float (&acc)[N / 2], const __nv_bfloat16* a, int a_slab,
// The dQ accumulator (fp32, summed over the key tiles by the dK/dV kernel) times the softmax scale, as bf16:
// 8 elements a thread.
__global__ void __launch_bounds__(256) attention_bwd_dq_convert(const float* __restrict__ dq_accum,
                                                                __nv_bfloat16* __restrict__ dQ, int64_t elements,
                                                                float scale) {
  const int64_t at = (static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x) * 8;
  if (at >= elements) return;
  const float4 a = *reinterpret_cast<const float4*>(dq_accum + at);
  const float4 b = *reinterpret_cast<const float4*>(dq_accum + at + 4);
  uint4 out;
  out.x = ptx::pack_bf16x2(a.x * scale, a.y * scale);
  out.y = ptx::pack_bf16x2(a.z * scale, a.w * scale);
  out.z = ptx::pack_bf16x2(b.x * scale, b.y * scale);
  out.w = ptx::pack_bf16x2(b.z * scale, b.w * scale);
  *reinterpret_cast<uint4*>(dQ + at) = out;
}

// adds before: __device__ __forceinline__ void pack_a(const float (&acc)[N], uint32_t (&a)[N / 8][4]) {
// Two adjacent floats (8-byte aligned) added to global memory as one reduction with no result (sm_90's vector red).
// Here, not in ptx_wrappers.cuh, while the variant is not adopted: the header is part of the prompts.
__device__ __forceinline__ void red_add_v2_f32(float* address, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(address), "f"(a), "f"(b) : "memory");
}

// adds before: __device__ __forceinline__ void pack_a(const float (&acc)[N], uint32_t (&a)[N / 8][4]) {
// C = A · B with both operands MN-major in shared memory: A (64 x 16·STEPS) stored K-rows of 64 M-columns
// (one 128-byte swizzled row each), B as in issue_accumulate. Issued and committed; C is overwritten.
template <int N, int STEPS>
__device__ __forceinline__ void issue_mn_mn(float (&acc)[N / 2], const __nv_bfloat16* a, const __nv_bfloat16* b,
                                            uint32_t b_slab_bytes) {
  const uint64_t a_desc = ptx::wgmma_desc_mn_sw128(a, 64 * 128), b_desc = ptx::wgmma_desc_mn_sw128(b, b_slab_bytes);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < STEPS; ++k)  // 16 K-rows = 2048 bytes = +128 in each descriptor
    ptx::wgmma_bf16<N, 1, 1>(acc, a_desc + 128 * k, b_desc + 128 * k, k > 0 ? 1 : 0);
  ptx::wgmma_commit();
}

struct KeyConfig {
  static constexpr bool SPLIT = D == 256;             // the two warpgroups share the keys, split the columns
  static constexpr int BN = SPLIT ? 64 : 128;          // keys per CTA
  static constexpr int BQ = 64;                        // queries per step
  static constexpr int COLS = SPLIT ? D / 2 : D;       // dK / dV columns per warpgroup
  static constexpr int STAGES = D == 64 ? 4 : (D == 128 ? 3 : 2);
  static constexpr int SLABS = D / 64;
  static constexpr uint32_t KV_BYTES = BN * D * 2;     // the K tile, or the V tile
  static constexpr uint32_t STEP_BYTES = BQ * D * 2;   // one Q tile, or one dO tile
  // dQ accumulated here (fp32 workspace, atomics) at D = 64 and 128; at D = 256 the dQ kernel recomputes it.
  static constexpr bool DQ = !SPLIT;
  // D = 128: each warpgroup's dQ GEMM sums all 128 keys of the tile for its 64 columns (the warpgroups meet
  // at a barrier once both have written dS); D = 64: its own 64 keys for all 64 columns (no barrier, twice
  // the atomics).
  static constexpr bool DQ_SHARED = D == 128;
};

struct KeyShared {
  using C = KeyConfig<D>;
  __nv_bfloat16 k[C::BN * D];
  __nv_bfloat16 v[C::BN * D];
  __nv_bfloat16 q[C::STAGES][C::BQ * D];
  __nv_bfloat16 dout[C::STAGES][C::BQ * D];
  __nv_bfloat16 ds[2][C::BN * C::BQ];  // dSᵀ of the step, keys x queries, 128-byte swizzled; two in turn
  float lse2[C::STAGES][C::BQ];    // LSE · log2 e of the step's queries (+inf past S)
  float delta[C::STAGES][C::BQ];   // delta of the step's queries (0 past S)
  ptx::RingBarriers<C::STAGES> qdo_ring;  // full: producer arrive + TMA bytes of Q and dO
  ptx::RingBarriers<C::STAGES> row_ring;  // full: the 32 lanes of the row warp (initialised by hand)
  uint64_t kv_full;
};

__device__ __forceinline__ void key_consumer(KeyShared<D>& s, const CUtensorMap* map_dk, const CUtensorMap* map_dv,
                                             float* __restrict__ dq_accum, const KeyWork& w, int half, int S,
                                             int causal, float scale_log2, float scale) {
  using C = KeyConfig<D>;
  constexpr int STEPS = C::BQ / 16;
  const int kw = C::SPLIT ? 0 : half * ROWS;      // this warpgroup's keys within the tile
  const int col0 = C::SPLIT ? half * C::COLS : 0;  // and its columns of dK and dV
  const int kw0 = w.k0 + kw;
  const bool signals = threadIdx.x % 128 == 0;
  float dv[C::COLS / 2], dk[C::COLS / 2];
  float sacc[C::BQ / 2], dpacc[C::BQ / 2];
  uint32_t pa[STEPS][4], dsa[STEPS][4];
  float dq[C::DQ ? 32 : 1];  // this step's dQ part: 64 queries x 64 columns
  const int dq_col0 = C::DQ_SHARED ? half * 64 : 0;
  zero(dv);
  zero(dk);
  ptx::mbar_wait(&s.kv_full, 0);

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
    // Pᵀ: key row, query column; keys after the query are masked only where the tile crosses the diagonal.
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
    issue_accumulate<C::COLS, STEPS>(dk, dsa, s.q[at.stage] + (col0 / 64) * C::BQ * 64, C::BQ * 128);  // dK += dSᵀ Q
    if constexpr (C::DQ) {  // dQ part = dS K: dSᵀ through shared memory as the MN-major A operand
      __nv_bfloat16* ds = s.ds[t & 1];
      uint8_t* ds_bytes = reinterpret_cast<uint8_t*>(ds);
#pragma unroll
      for (int k = 0; k < STEPS; ++k)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int i = 8 * k + 2 * r;
          *reinterpret_cast<uint32_t*>(ds_bytes + ptx::sw128_offset(kw + ptx::wgmma_acc_row(i),
                                                                    ptx::wgmma_acc_col(i) * 2)) = dsa[k][r];
        }
      ptx::fence_proxy_async_smem();
      if constexpr (C::DQ_SHARED) ptx::named_barrier_sync(4, 256);  // both halves of dSᵀ are written
      else ptx::named_barrier_sync(5 + half, 128);
      const int a_row = C::DQ_SHARED ? 0 : kw;
      const __nv_bfloat16* k_rows = C::DQ_SHARED ? s.k + half * C::BN * 64 : s.k + kw * 64;
      constexpr int dq_keys = C::DQ_SHARED ? C::BN : ROWS;
      issue_mn_mn<64, dq_keys / 16>(dq, ds + a_row * 64, k_rows, C::BN * 128);
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(dv);
    ptx::wgmma_fence_acc(dk);
    if (signals) {
      s.qdo_ring.consumer_release(at.stage);
      s.row_ring.consumer_release(at.stage);
    }
    if constexpr (C::DQ) {
      ptx::wgmma_fence_acc(dq);
      const int64_t head_row = static_cast<int64_t>(w.head) * S;
#pragma unroll
      for (int i = 0; i < 32; i += 2) {
        const int row = q0 + ptx::wgmma_acc_row(i);
        if (row < S)
          red_add_v2_f32(dq_accum + (head_row + row) * D + dq_col0 + ptx::wgmma_acc_col(i), dq[i], dq[i + 1]);
      }
    }
    at.advance(C::STAGES);
  }

  // Epilogue: both warpgroups are done reading K and V (at D = 256 each reads the other's columns), so each
  // stages its dK and dV in its own part of those tiles, then one thread stores 64 x 64 boxes.
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

__global__ void __launch_bounds__(THREADS, 1) attention_bwd_dkdv_sm90a(
    const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
    const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
    const __grid_constant__ CUtensorMap map_dk, const __grid_constant__ CUtensorMap map_dv,
    const float* __restrict__ LSE, const float* __restrict__ delta, float* __restrict__ dq_accum, int S, int heads,
    int causal, float scale_log2, float scale) {
  using C = KeyConfig<D>;
  extern __shared__ uint8_t smem_raw[];
  KeyShared<D>& s = *ptx::align_smem<KeyShared<D>>(smem_raw);
  const KeyWork w = key_work(S, causal, heads, C::BN, C::BQ);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.qdo_ring.init(C::STAGES, 2);  // empty: one arrive per consumer warpgroup
    for (int i = 0; i < C::STAGES; ++i) {  // the row ring: full after the row warp's 32 lanes arrive
      ptx::mbar_init(&s.row_ring.full[i], 32);
      ptx::mbar_init(&s.row_ring.empty[i], 2);
    }
    ptx::mbar_init(&s.kv_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<24>();
    const uint32_t warp = ptx::warp_idx();
    if (warp == 0 && threadIdx.x == 0) key_producer<D>(s, &map_k, &map_v, &map_q, &map_do, w);
    if (warp == 1) key_rows<D>(s, LSE, delta, w, S);
    return;
  }
  ptx::setmaxnreg_inc<240>();
  key_consumer<D>(s, &map_dk, &map_dv, dq_accum, w, static_cast<int>(warpgroup) - 1, S, causal, scale_log2, scale);
}

// adds before: cudaError_t make_map(CUtensorMap* map, const void* base, int64_t heads, int64_t S, int D, int rows) {
// The device's current memory pool (the one cudaMallocAsync draws from) keeps what it holds between calls (by
// default it gives memory back at every synchronisation, and the next call's workspace would be mapped afresh
// inside the timed region).
cudaError_t keep_pool_memory() {
  int device = 0;
  cudaMemPool_t pool;
  uint64_t keep = UINT64_MAX;
  cudaError_t err;
  if ((err = cudaGetDevice(&device)) != cudaSuccess || (err = cudaDeviceGetMemPool(&pool, device)) != cudaSuccess)
    return err;
  return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
}

int launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, const __nv_bfloat16* O,
           const __nv_bfloat16* dO, const float* LSE, __nv_bfloat16* dQ, __nv_bfloat16* dK, __nv_bfloat16* dV,
           int64_t heads, int64_t S, int causal, cudaStream_t stream) {
  using KC = KeyConfig<D>;
  using QC = QueryConfig<D>;
  CUtensorMap map_q, map_do, map_k_tile, map_v_tile, map_dk, map_dv, map_k_step, map_v_step, map_dq;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_do, dO, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k_tile, K, heads, S, D, KC::BN)) != cudaSuccess ||
      (err = make_map(&map_v_tile, V, heads, S, D, KC::BN)) != cudaSuccess ||
      (err = make_map(&map_dk, dK, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_dv, dV, heads, S, D, 64)) != cudaSuccess ||
      (err = make_map(&map_k_step, K, heads, S, D, QC::BN)) != cudaSuccess ||
      (err = make_map(&map_v_step, V, heads, S, D, QC::BN)) != cudaSuccess ||
      (err = make_map(&map_dq, dQ, heads, S, D, 64)) != cudaSuccess)
    return static_cast<int>(err);
  constexpr size_t key_smem = key_smem_bytes<D>(), query_smem = query_smem_bytes<D>();
  if ((err = cudaFuncSetAttribute(attention_bwd_dkdv_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(key_smem))) != cudaSuccess)
    return static_cast<int>(err);
  if constexpr (!KC::DQ) {  // the dQ kernel is built only where it runs (D = 256)
    if ((err = cudaFuncSetAttribute(attention_bwd_dq_sm90a<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(query_smem))) != cudaSuccess)
      return static_cast<int>(err);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
  float* delta = reinterpret_cast<float*>(dQ);  // 4 bytes a row in the 2·D bytes of dQ's row, until dQ is written
  const int64_t rows = heads * S;
  float* dq_accum = nullptr;
  if constexpr (KC::DQ) {  // the fp32 workspace, stream-ordered, from a pool that keeps its memory between calls
    if ((err = keep_pool_memory()) != cudaSuccess ||
        (err = cudaMallocAsync(reinterpret_cast<void**>(&dq_accum), rows * D * sizeof(float), stream)) != cudaSuccess)
      return static_cast<int>(err);
  }
  constexpr int rows_per_block = 256 / (D / 8);
  attention_bwd_delta<D><<<static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block), 256, 0, stream>>>(
      O, dO, delta, dq_accum, rows);
  const int64_t key_ctas = heads * ((S + KC::BN - 1) / KC::BN);
  attention_bwd_dkdv_sm90a<D><<<static_cast<unsigned>(key_ctas), THREADS, key_smem, stream>>>(
      map_q, map_k_tile, map_v_tile, map_do, map_dk, map_dv, LSE, delta, dq_accum, static_cast<int>(S),
      static_cast<int>(heads), causal, scale_log2, scale);
  if constexpr (KC::DQ) {
    const int64_t elements = rows * D;
    attention_bwd_dq_convert<<<static_cast<unsigned>((elements / 8 + 255) / 256), 256, 0, stream>>>(
        dq_accum, dQ, elements, scale);
    const cudaError_t launched = cudaGetLastError();
    err = cudaFreeAsync(dq_accum, stream);
    return static_cast<int>(launched != cudaSuccess ? launched : err);
  } else {
    const int64_t query_ctas = heads * ((S + BM - 1) / BM);
    attention_bwd_dq_sm90a<D><<<static_cast<unsigned>(query_ctas), THREADS, query_smem, stream>>>(
        map_q, map_k_step, map_v_step, map_do, map_dq, O, dO, LSE, static_cast<int>(S), static_cast<int>(heads),
        causal, scale_log2, scale);
    return static_cast<int>(cudaGetLastError());
  }
}
