// Variant of src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu (bulk kernel): Y leaves through the copy
// engine too. Each thread writes its normalised chunks back into the row's own stage (the chunk it just
// read: no other thread touches it), and thread 0 stores the whole row with ONE bulk copy shared -> global
// (cp.async.bulk.global.shared::cta.bulk_group: the header has no wrapper for it, so the asm is inline
// here). Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04): t16384-h4096
// 91.2 -> 93.3 % of torch.compile, t4096-h8192 96.6 -> 93.2 %, decode 87.4 -> 85.5 % of Liger.
//
// Why it could be faster: the store path is the one part of the reference that is not the copy engine's.
// A row leaves as 16 warp stores of 512 bytes each (256 STG.128 per row), issued from the same threads that
// must then reach barrier (B); a store that stalls on a full memory queue stalls its warp and, through (B),
// the refill of the stage. A bulk store hands 8 KB to the copy engine in one instruction, writes whole
// 128-byte lines in address order, and costs the threads only shared stores (STS.128, no global queue).
// Transpose writes this way (TMA stores) and softmax/rmsnorm do not, and all three reach ~3.7 TB/s, so
// this is a test of the store path rather than a sure win; the same-size copy reaches 4.28 TB/s.
// Shared traffic per row: 48 KB instead of 32 KB (the load's 8 KB, x read twice, W once, plus now 8 KB of
// thread writes and 8 KB read by the store). A row's time on one SM at copy speed is ~880 cycles (16 KB of
// HBM traffic at 4.28 TB/s over 132 SMs), in which shared memory moves ~112 KB (128 B per cycle).
//
// Ring: stage s is refilled only after the store that reads it has finished reading shared memory. Thread
// 0 stores row k and then refills the stage of row k - 1 (after cp.async.bulk.wait_group.read 1: all but
// the newest store have read their rows), so loads run S - 1 rows ahead instead of S. Before exit, thread
// 0 waits for all its stores (wait_group 0) so no store still reads shared memory of a finished CTA.
// Ordering: thread writes (generic proxy) -> fence.proxy.async by each writer -> barrier (B) -> bulk store
// (async proxy), as for a TMA store.
//
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu \
//       --variant "bulkstore:@rmsnorm.bulk_store.cu"
//
// The definition below replaces the reference's definition that starts with the same line.

rmsnorm_bulk_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                    __nv_bfloat16* __restrict__ Y, int64_t T, int Hd, int stages) {
  extern __shared__ __align__(128) uint8_t smem[];
  ptx::RingState at;  // the consumers' place: local row k is in stage k % stages, of parity (k / stages) & 1
  const uint32_t row_bytes = uint32_t(Hd) * 2u;
  const uint32_t pitch = row_pitch(row_bytes);
  uint8_t* const ring = smem;
  uint8_t* const wbuf = smem + uint32_t(stages) * pitch;
  uint64_t* const full = reinterpret_cast<uint64_t*>(wbuf + pitch);  // 128-byte aligned: 8-byte alignment holds
  uint64_t* const wbar = full + kMaxStages;
  float* const red = reinterpret_cast<float*>(wbar + 1);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t grid = gridDim.x;
  const int64_t first_row = blockIdx.x;
  const int64_t my_rows = first_row < T ? (T - first_row + grid - 1) / grid : 0;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbar_init(&full[s], 1);
    ptx::mbar_init(wbar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  auto issue_row = [&](int64_t k, int s) {
    const int64_t row = first_row + k * grid;
    ptx::mbar_arrive_expect_tx(&full[s], row_bytes);
    ptx::bulk_load(ring + uint32_t(s) * pitch, X + row * Hd, row_bytes, &full[s]);
  };

  if (tid == 0) {
    ptx::mbar_arrive_expect_tx(wbar, row_bytes);
    ptx::bulk_load(wbuf, W, row_bytes, wbar);
    const int prologue = my_rows < stages ? int(my_rows) : stages;
    for (int s = 0; s < prologue; ++s) issue_row(s, s);
  }
  ptx::mbar_wait(wbar, 0);

  const int nvec = Hd / 8;
  const uint4* const w4 = reinterpret_cast<const uint4*>(wbuf);
  for (int64_t k = 0; k < my_rows; ++k) {
    const int64_t row = first_row + k * grid;
    uint8_t* const stage = ring + uint32_t(at.stage) * pitch;
    uint4* const x4 = reinterpret_cast<uint4*>(stage);
    ptx::mbar_wait(&full[at.stage], at.phase);

    float ss = 0.f;
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) ss = sum_squares(x4[v], ss);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) red[warp] = ss;
    __syncthreads();  // (A)
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += red[w];
    const float inv_rms = rsqrtf(total / float(Hd) + kEps);

    // Y in place: each thread overwrites exactly the chunks it reads.
#pragma unroll 4
    for (int v = tid; v < nvec; v += kThreads) x4[v] = scale_row_chunk(x4[v], w4[v], inv_rms);
    ptx::fence_proxy_async_smem();  // this thread's shared writes -> visible to the bulk store
    __syncthreads();  // (B) the row is complete in the stage; `red` is no longer read
    if (tid == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   ::"l"(reinterpret_cast<uint64_t>(Y + row * Hd)), "r"(ptx::smem_u32(stage)), "r"(row_bytes)
                   : "memory");
      ptx::tma_store_commit();
      // Refill the stage of row k - 1 with row k - 1 + S once its store has read it (at most the store of
      // row k, just issued, may still be reading).
      if (k >= 1 && k - 1 + stages < my_rows) {
        ptx::tma_store_wait_read<1>();
        issue_row(k - 1 + stages, at.stage == 0 ? stages - 1 : at.stage - 1);
      }
    }
    at.advance(stages);
  }
  if (tid == 0) ptx::tma_store_wait_all<0>();  // every store done before the CTA's shared memory goes
}
