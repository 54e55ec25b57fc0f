// Variant of src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu, head dim 64 only: wider key tiles,
// BKV = D64_BKV (192 by default; 160 and 176 also built) instead of 128, with D64_STAGES (4) stages of K and V.
// D = 128 and 256 keep their tiles (the Config below gives them the reference's values).
//
// Why it should be faster: one softmax step of a consumer warpgroup has a fixed part (2 x 2 quad shuffles for
// the row maxima, 2 ex2 for alpha, 32 FMULs rescaling O, 2 wgmma waits and fences, 2 mbarrier waits and
// releases, the latency from S's last wgmma to the first max) and a part that grows with the tile (per score:
// FFMA, EX2, FMNMX, FADD, half a pack). At D = 64 a 64 x 128 tile is 2.1 MFLOP of tensor work per step
// (QK 1.05 + PV 1.05), about 512 tensor-core clocks of an SM; at BKV = 192 it is 3.1 MFLOP (768 clocks), so the
// fixed part is spread over 1.5x the work and there are 1/3 fewer steps (hd64-s2048: 11 tiles instead of 16).
// What it does not change: the ratio of exponentials to tensor work (one EX2 per 256 FLOPs at D = 64, close to
// the H100/H200's 253 FLOPs per MUFU op), so it cannot close the gap alone.
// Tile quantisation: keys computed per row at S = 2048: 2112 (192, 176), 2080 (160), 2048 (128); at S = 577:
// 768 (192), 704 (176), 640 (160 and 128): 192 does 20 % more work than 128 at S = 577, 160 none, hence the knob.
// Registers per consumer thread (setmaxnreg 240): S 96 + P 48 + O 32 = 176 at 192 (128 at the reference's
// 128; D = 128 uses 64 + 32 + 64 = 160). Shared memory: Q 16 KB + 2 x 4 x 24 KB = 208 KB at 192 (<= 227 KB);
// the rings hold 4 x 48 KB = 192 KB of K and V (768 keys ahead) against the reference's 128 KB (512 keys).
// TMA boxes of 192 rows (<= 256) and the MN-major V descriptor (one 64-column slab at D = 64) are unchanged in
// form; P · V takes BKV / 16 = 12 k16 steps.
// Own asm: the wrapper header has no m64n160/176/192k16 bf16 wgmma (its widths are 8 ... 256 in powers of two),
// so issue_scores carries those three forms itself (the same operands as the header's m64n128k16 form).
//
// Not yet measured. Run it with
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/attention_fwd.cu \
//       --variant "kv192:@attention_fwd.d64_wide_kv.cu" --variant "kv160:@attention_fwd.d64_wide_kv.cu;D64_BKV=160"
// D64_BKV=128 builds exactly the reference's SASS (a control for the timing noise). Combines with
// attention_fwd.d64_pingpong.cu (in either order). The NumPy model (tests/test_reference_attention_model.py)
// runs these tiles too.
//
// The definitions below replace the reference's definitions that start with the same line.

struct Config {
  static constexpr int D64_BKV = 192;    // keys per tile at D = 64: 128, 160, 176 or 192
  static constexpr int D64_STAGES = 4;   // K and V stages at D = 64
  static constexpr int BKV = D == 64 ? D64_BKV : D == 256 ? 64 : 128;  // keys per tile
  static constexpr int STAGES = D == 64 ? D64_STAGES : 2;
  static constexpr int SLABS = D / 64;                     // 64-column (128-byte) slabs of a row
  static constexpr uint32_t Q_BYTES = BM * D * 2;
  static constexpr uint32_t KV_BYTES = BKV * D * 2;        // one K or one V tile
  static constexpr int S_ACC = BKV / 2;                    // fp32 score registers per consumer thread
  static constexpr int O_ACC = D / 2;                      // fp32 output registers per consumer thread
  static constexpr int P_STEPS = BKV / 16;                 // k16 steps of P · V
  static_assert(D != 64 || D64_BKV == 128 || D64_BKV == 160 || D64_BKV == 176 || D64_BKV == 192,
                "a key tile width issue_scores has a wgmma for");
};

// S = Q · K_tileᵀ for this warpgroup's 64 rows (issued and committed, not waited for), one wgmma of width BKV
// per 16 columns of D.
__device__ __forceinline__ void issue_scores(Shared<D>& s, int stage, int half, float (&acc)[Config<D>::S_ACC]) {
  using C = Config<D>;
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // slab kk / 4, +32 bytes (+2) per 16 columns inside it
    const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q + (half * C::SLABS + kk / 4) * 64 * 64) + 2 * (kk % 4);
    const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.k[stage] + (kk / 4) * C::BKV * 64) + 2 * (kk % 4);
    const int scale_d = kk > 0 ? 1 : 0;
    if constexpr (C::BKV == 64 || C::BKV == 128) {
      ptx::wgmma_bf16<C::BKV>(acc, q_desc, k_desc, scale_d);
    } else if constexpr (C::BKV == 160) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
          "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
          "}, %80, %81, p, 1, 1, 0, 0;\n}\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
            "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
            "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]),
            "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]),
            "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]),
            "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]),
            "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]),
            "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]),
            "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]),
            "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]),
            "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63]), "+f"(acc[64]), "+f"(acc[65]),
            "+f"(acc[66]), "+f"(acc[67]), "+f"(acc[68]), "+f"(acc[69]), "+f"(acc[70]), "+f"(acc[71]),
            "+f"(acc[72]), "+f"(acc[73]), "+f"(acc[74]), "+f"(acc[75]), "+f"(acc[76]), "+f"(acc[77]),
            "+f"(acc[78]), "+f"(acc[79])
          : "l"(q_desc), "l"(k_desc), "r"(scale_d));
    } else if constexpr (C::BKV == 176) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
          "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
          "%80, %81, %82, %83, %84, %85, %86, %87"
          "}, %88, %89, p, 1, 1, 0, 0;\n}\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
            "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
            "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]),
            "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]),
            "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]),
            "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]),
            "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]),
            "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]),
            "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]),
            "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]),
            "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63]), "+f"(acc[64]), "+f"(acc[65]),
            "+f"(acc[66]), "+f"(acc[67]), "+f"(acc[68]), "+f"(acc[69]), "+f"(acc[70]), "+f"(acc[71]),
            "+f"(acc[72]), "+f"(acc[73]), "+f"(acc[74]), "+f"(acc[75]), "+f"(acc[76]), "+f"(acc[77]),
            "+f"(acc[78]), "+f"(acc[79]), "+f"(acc[80]), "+f"(acc[81]), "+f"(acc[82]), "+f"(acc[83]),
            "+f"(acc[84]), "+f"(acc[85]), "+f"(acc[86]), "+f"(acc[87])
          : "l"(q_desc), "l"(k_desc), "r"(scale_d));
    } else if constexpr (C::BKV == 192) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
          "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
          "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
          "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
          "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
          "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
          "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]),
            "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]),
            "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]),
            "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]),
            "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]),
            "+f"(acc[30]), "+f"(acc[31]), "+f"(acc[32]), "+f"(acc[33]), "+f"(acc[34]), "+f"(acc[35]),
            "+f"(acc[36]), "+f"(acc[37]), "+f"(acc[38]), "+f"(acc[39]), "+f"(acc[40]), "+f"(acc[41]),
            "+f"(acc[42]), "+f"(acc[43]), "+f"(acc[44]), "+f"(acc[45]), "+f"(acc[46]), "+f"(acc[47]),
            "+f"(acc[48]), "+f"(acc[49]), "+f"(acc[50]), "+f"(acc[51]), "+f"(acc[52]), "+f"(acc[53]),
            "+f"(acc[54]), "+f"(acc[55]), "+f"(acc[56]), "+f"(acc[57]), "+f"(acc[58]), "+f"(acc[59]),
            "+f"(acc[60]), "+f"(acc[61]), "+f"(acc[62]), "+f"(acc[63]), "+f"(acc[64]), "+f"(acc[65]),
            "+f"(acc[66]), "+f"(acc[67]), "+f"(acc[68]), "+f"(acc[69]), "+f"(acc[70]), "+f"(acc[71]),
            "+f"(acc[72]), "+f"(acc[73]), "+f"(acc[74]), "+f"(acc[75]), "+f"(acc[76]), "+f"(acc[77]),
            "+f"(acc[78]), "+f"(acc[79]), "+f"(acc[80]), "+f"(acc[81]), "+f"(acc[82]), "+f"(acc[83]),
            "+f"(acc[84]), "+f"(acc[85]), "+f"(acc[86]), "+f"(acc[87]), "+f"(acc[88]), "+f"(acc[89]),
            "+f"(acc[90]), "+f"(acc[91]), "+f"(acc[92]), "+f"(acc[93]), "+f"(acc[94]), "+f"(acc[95])
          : "l"(q_desc), "l"(k_desc), "r"(scale_d));
    }
  }
  ptx::wgmma_commit();
}
