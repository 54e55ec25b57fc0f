// Variant of src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu (bulk kernel): each thread keeps its
// chunks of the row, and of W, in registers, so a row is read from shared memory ONCE, the stage is
// handed back to the copy engine right after the reduction barrier, and a row costs ONE __syncthreads
// instead of two. Measured and not adopted (H200, benchmarks/results/kernel_variants_h200.md, 2026-12-04):
// t16384-h4096 91.2 -> 89.8 % of torch.compile, t4096-h8192 96.6 -> 97.5 %, decode 87.4 -> 86.8 % of Liger (with
// 128 threads: 94.4, 95.9 and 82.6 %).
//
// What changes, per row (256 threads, Hd = 4096: 512 16-byte chunks, 2 per thread):
// - pass 1 loads the thread's chunks (v = tid + j * kThreads, j < kMaxVec) into registers while summing
//   squares; pass 2 scales those registers with W's chunks, which were loaded into registers once per
//   CTA (the same v every row). Shared reads per row: 8 KB (x once) instead of 24 KB (x twice, W once).
// - barrier (A) (partial sums visible) also proves that no thread reads the stage any more (its chunks
//   are in registers), so thread 0 refills it with the row S ahead right after (A): the copy is issued
//   one normalise-and-store phase earlier than after the reference's barrier (B).
// - the partial sums alternate between two slots by row parity, so no barrier (B) is needed to protect
//   them: a warp writes slot (k & 1) of row k + 2 only after passing (A) of row k + 1, which every thread
//   reaches only after reading slot (k & 1) for row k. The slots live in the W buffer, free once every
//   thread holds its W chunks in registers (one __syncthreads after that copy, once per CTA).
// Why it should be faster: the measured knobs say the consumer's per-row latency is on the critical
// path (1 CTA per SM: 0.0858 ms, i.e. ~1.2 us per row and CTA; 128 threads instead of 256: 0.0690 against
// 0.0712 ms; 512 threads: 0.0745; kernel_variants_h200.md). The reference's chain per row is wait -> x
// from shared -> 5 shuffles -> (A) -> 8 partial sums from shared -> rsqrt -> x and W from shared ->
// stores -> (B) -> refill; here it is wait -> x from shared -> 5 shuffles -> (A) + refill -> 8 partial
// sums -> rsqrt -> stores from registers. Registers: kMaxVec x 8 for the x and W chunks (32 of the 64
// ptxas allows at 256 threads, no spills; 128 registers at 128 threads).
// Rows longer than kRegRowElems (16 KB; no task workload) take the reference's path inside the same
// kernel: the chunks beyond the registers are re-read from shared memory and barrier (B) releases the
// stage, as before.
//
// Run it (and with 128 threads, where each thread holds 4 chunks of x and of W):
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu \
//       --variant "regs:@rmsnorm.regs_one_barrier.cu" --variant "regs128:@rmsnorm.regs_one_barrier.cu;kThreads=128"
//
// The definition below replaces the reference's definition that starts with the same line.

rmsnorm_bulk_kernel(const __nv_bfloat16* __restrict__ X, const __nv_bfloat16* __restrict__ W,
                    __nv_bfloat16* __restrict__ Y, int64_t T, int Hd, int stages) {
  constexpr int kRegRowElems = 8192;                   // rows up to this many elements live in registers
  constexpr int kMaxVec = kRegRowElems / 8 / kThreads;  // 16-byte chunks per thread held in registers
  static_assert(kMaxVec >= 1 && kMaxVec * 8 * kThreads == kRegRowElems, "kRegRowElems: whole chunks per thread");
  static_assert(2 * kWarps * 4 <= 128, "two slots of partial sums fit in the smallest W buffer (128 bytes)");
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
  // Rows per CTA fit an int: T * Hd * 2 bytes of X fit the GPU's memory and Hd >= 8.
  const int my_rows = first_row < T ? int((T - first_row + grid - 1) / grid) : 0;
  const int nvec = Hd / 8;                            // 16-byte chunks per row
  const bool in_regs = nvec <= kMaxVec * kThreads;    // uniform: every chunk of every thread is in registers

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbar_init(&full[s], 1);
    ptx::mbar_init(wbar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  auto issue_row = [&](int k, int s) {
    const int64_t row = first_row + int64_t(k) * grid;
    ptx::mbar_arrive_expect_tx(&full[s], row_bytes);
    ptx::bulk_load(ring + uint32_t(s) * pitch, X + row * Hd, row_bytes, &full[s]);
  };

  if (tid == 0) {
    ptx::mbar_arrive_expect_tx(wbar, row_bytes);
    ptx::bulk_load(wbuf, W, row_bytes, wbar);
    const int prologue = my_rows < stages ? my_rows : stages;
    for (int s = 0; s < prologue; ++s) issue_row(s, s);
  }
  ptx::mbar_wait(wbar, 0);

  const uint4* const w4 = reinterpret_cast<const uint4*>(wbuf);
  uint4 wr[kMaxVec];
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    const int v = tid + j * kThreads;
    wr[j] = v < nvec ? w4[v] : make_uint4(0u, 0u, 0u, 0u);
  }
  // With the row in registers the two partial-sum slots go where W was (every thread has its W chunks
  // once all have passed this barrier); otherwise W stays in shared memory and `red` is used as before.
  if (in_regs) __syncthreads();
  float* const slots = in_regs ? reinterpret_cast<float*>(wbuf) : red;

  for (int k = 0; k < my_rows; ++k) {
    const int64_t row = first_row + int64_t(k) * grid;
    const uint4* const x4 = reinterpret_cast<const uint4*>(ring + uint32_t(at.stage) * pitch);
    float* const part = in_regs ? slots + (k & 1) * kWarps : slots;
    ptx::mbar_wait(&full[at.stage], at.phase);

    uint4 xr[kMaxVec];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxVec; ++j) {
      const int v = tid + j * kThreads;
      xr[j] = v < nvec ? x4[v] : make_uint4(0u, 0u, 0u, 0u);  // zero chunks add nothing to the sum
      ss = sum_squares(xr[j], ss);
    }
    for (int v = tid + kMaxVec * kThreads; v < nvec; v += kThreads) ss = sum_squares(x4[v], ss);  // long rows only
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) part[warp] = ss;
    __syncthreads();  // (A) partial sums visible; with in_regs, also: no thread reads this stage any more
    if (in_regs && tid == 0 && k + stages < my_rows) issue_row(k + stages, at.stage);  // refill S rows ahead now
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += part[w];
    const float inv_rms = rsqrtf(total / float(Hd) + kEps);

    uint4* const y4 = reinterpret_cast<uint4*>(Y + row * Hd);
#pragma unroll
    for (int j = 0; j < kMaxVec; ++j) {
      const int v = tid + j * kThreads;
      if (v < nvec) y4[v] = scale_row_chunk(xr[j], wr[j], inv_rms);
    }
    for (int v = tid + kMaxVec * kThreads; v < nvec; v += kThreads) y4[v] = scale_row_chunk(x4[v], w4[v], inv_rms);

    if (!in_regs) {
      __syncthreads();  // (B) as in the reference: the stage and `red` are no longer read
      if (tid == 0 && k + stages < my_rows) issue_row(k + stages, at.stage);
    }
    at.advance(stages);
  }
}
