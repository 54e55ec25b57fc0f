// Variant of src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu (host entry point only): size the ring
// by Little's law per SM instead of 64 KB per CTA, and give decode steps (one row per CTA) a ring of
// their own rows only. The kernels are unchanged. Measured and not adopted (H200,
// benchmarks/results/kernel_variants_h200.md, 2026-12-04): t16384-h4096 91.2 -> 91.9 % of torch.compile,
// t4096-h8192 96.6 -> 95.7 %, decode 87.4 -> 85.5 % of Liger.
//
// 1. Bytes in flight. The reference asks for 64 KB per CTA and as many CTAs as fit: 3 per SM at Hd = 4096
//    (9 x 8 KB of shared memory each), i.e. 192 KB of X requested ahead per SM, 25 MB over the GPU. Little's
//    law needs far less: the reads are half of ~4.3 TB/s, 16 GB/s per SM, and at a loaded latency of
//    ~1-1.5 us that is 16-24 KB per SM; 192 KB is 8-12x that. Every bulk-copy kernel of this suite
//    (rmsnorm, softmax, transpose) tops out at 3.6-3.9 TB/s while a copy of the same bytes reaches ~4.3
//    TB/s, and the one knob that lowered the bytes in flight without losing consumers was faster: a 32 KB
//    ring (5 CTAs, 160 KB per SM) 0.0703 ms against 0.0712. (A 128 KB ring at one CTA per SM was much
//    slower, 0.0858: one consumer per SM. The reference couples the two; this variant does not.) Here the
//    ring is kRingBytesPerSm / kCtasPerSm per CTA (at least 2 stages), and the grid is capped at
//    kCtasPerSm CTAs per SM, so the two can be swept apart:
//      kRingBytesPerSm = 64 KB, kCtasPerSm = 4 -> 2 stages of 8 KB per CTA, 4 CTAs (64 KB per SM).
//    kRingBytesPerSm = 0 keeps the reference's sizing (only item 2 then changes anything).
// 2. Decode. With T rows over at most T CTAs (t32-h4096-decode: 32 CTAs, one row each), the reference
//    still reserves 8 stages + W = 72 KB of shared memory per CTA for one row. Here the ring has at most
//    ceil(T / grid) stages (every row a CTA will see is loaded in the prologue, none is ever refilled), so
//    the decode call asks for 16 KB: less shared memory to configure at launch (the L2 flush before each
//    timed call runs a kernel with almost none), and fewer barriers to initialise. Liger's decode kernel
//    (0.0042 against our 0.0049 ms) holds the row in registers and needs next to no shared memory.
//    kLeanDecode = false turns this off.
//
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/rmsnorm.cu \
//       --variant "lean:@rmsnorm.ring_sizing.cu" \
//       --variant "lean96:@rmsnorm.ring_sizing.cu;kRingBytesPerSm=96 * 1024;kCtasPerSm=3" \
//       --variant "decode:@rmsnorm.ring_sizing.cu;kRingBytesPerSm=0"
// Composes with the kernel variants (it replaces only the entry point), e.g.
//       --variant "regs-lean:@rmsnorm.regs_one_barrier.cu;@rmsnorm.ring_sizing.cu"
//
// The definition below replaces the reference's definition that starts with the same line.

extern "C" int rmsnorm(
    const __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ W,
    __nv_bfloat16* __restrict__ Y,
    int64_t T,
    int64_t Hd,
    cudaStream_t stream) {
  constexpr uint32_t kRingBytesPerSm = 64 * 1024;  // X requested ahead per SM; 0: the reference's 64 KB per CTA
  constexpr int kCtasPerSm = 4;                     // CTAs per SM at most (with kRingBytesPerSm > 0)
  constexpr bool kLeanDecode = true;                // at most ceil(T / grid) stages
  if (T <= 0 || Hd <= 0) return (int)cudaGetLastError();

  const bool aligned = (reinterpret_cast<uintptr_t>(X) % 16 == 0) && (reinterpret_cast<uintptr_t>(W) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(Y) % 16 == 0) && (Hd % 8 == 0);
  DeviceFacts* dev = device_facts();
  bool fast = aligned && dev != nullptr && Hd <= (int64_t(1) << 20);
  uint32_t stages = 0, smem = 0;
  if (fast) {
    const uint32_t pitch = row_pitch(uint32_t(Hd) * 2u);
    const uint32_t ring = kRingBytesPerSm > 0 ? kRingBytesPerSm / uint32_t(kCtasPerSm) : kBytesInFlightPerCta;
    stages = ring / pitch;
    stages = stages < 2 ? 2 : (stages > kMaxStages ? kMaxStages : stages);
    if (kLeanDecode) {
      // Rows per CTA when every SM holds at least one CTA: T over min(T, SMs); fewer stages than that are
      // never needed. (With one row per CTA the ring is one stage: the kernel loads it in the prologue and
      // never refills.)
      const int64_t units = T < int64_t(dev->sms) ? T : int64_t(dev->sms);
      const int64_t per_cta = (T + units - 1) / units;
      if (per_cta < int64_t(stages)) stages = uint32_t(per_cta);
    }
    while (stages > 2 && smem_bytes(pitch, stages) > uint32_t(dev->smem_optin)) --stages;
    smem = smem_bytes(pitch, stages);
    fast = smem <= uint32_t(dev->smem_optin);
  }
  if (fast && dev->cached_smem != int(smem)) {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, rmsnorm_bulk_kernel, kThreads, smem) != cudaSuccess) {
      cudaGetLastError();
      blocks = 0;
    }
    dev->cached_smem = int(smem);
    dev->cached_blocks = blocks;
  }
  if (fast && dev->cached_blocks > 0) {
    const int blocks = kRingBytesPerSm > 0 && dev->cached_blocks > kCtasPerSm ? kCtasPerSm : dev->cached_blocks;
    const int64_t resident = int64_t(dev->sms) * blocks;
    const unsigned grid = unsigned(T < resident ? T : resident);
    // Every CTA gets at most ceil(T / grid) rows; with the lean decode ring that is >= stages unless the ring
    // was left deeper, so a one-stage ring is only ever used by CTAs that never refill it.
    rmsnorm_bulk_kernel<<<grid, kThreads, smem, stream>>>(X, W, Y, T, int(Hd), int(stages));
  } else {
    const unsigned grid = unsigned(T < 65535 * 16 ? T : 65535 * 16);
    rmsnorm_plain_kernel<<<grid, kThreads, 0, stream>>>(X, W, Y, T, Hd);
  }
  return (int)cudaGetLastError();
}
