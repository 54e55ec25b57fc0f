// attention_fp8_fwd, expert reference for sm_90a (H100/H200): O = descale_v · softmax(descale_q · descale_k ·
// Q·Kᵀ / sqrt(128), causal mask optional) · V in bf16 and LSE (natural log) per query, for e4m3 Q, K, V
// [B, H, S, 128] with per-tensor fp32 descales in device memory. Written for any S >= 1; the task promises a
// multiple of 64, and only such lengths are tested.
//
// NOT YET MEASURED ON A GPU: written and checked on the CPU only. ptxbench check: wgmma.fp8 (QGMMA), TMA and
// mbarrier in the SASS, 168 registers, no spills. tests/test_reference_fp8_attention_model.py: the P fragment
// and the V transpose against the PTX ISA's layouts, the transposer's bank pattern, the pipeline's rings under
// random schedules (no deadlock), and the kernel's numeric steps on the task's inputs through the task's
// comparison (O at 0.32-0.39 of its bound there, LSE at 4e-5; scores exact in that model). What only a GPU run
// can confirm: descriptors and TMA boxes, that wgmma's k32 e4m3 A fragment is mma.m16n8k32's per warp (as the
// ISA draws it), the 14-bit accumulator's effect on LSE and O, and the speed.
//
// Design (FlashAttention-3 style, fp8; one CTA per (128-query tile, batch x head), 384 threads):
//   * warpgroup 0 is the producer. Its thread 0 loads the CTA's Q tile once (TMA, 128-byte swizzle) and
//     streams K tiles (128 keys x 128 bytes) into a 3-stage ring and raw V tiles into a 2-stage ring. All
//     128 of its threads then transpose each raw V tile into a 2-stage ring of Vᵀ tiles (below), because
//     e4m3 wgmma takes both operands K-major only: for O += P · V the key axis must be contiguous, and V
//     arrives with the head dimension contiguous.
//   * warpgroups 1 and 2 are consumers, 64 query rows each. Per KV tile j:
//       S_j = Q · K_jᵀ      4 x wgmma m64n128k32 e4m3 (A = Q, B = K, both K-major from shared memory);
//       online softmax      fp32 in registers, max subtracted, base 2 with the scale in one FMA;
//       O += P_j · Vᵀ_j     4 x wgmma m64n128k32 e4m3 with P from registers (rounded to e4m3) as A.
//     S_{j+1} is issued before P_j · V_j, so one GEMM overlaps the other's softmax, as in attention_fwd.cu.
//   * setmaxnreg: producer 56 registers (the transposer's words and addresses), consumers 224
//     (128 x (56 + 2 x 224) = 64512 <= 65536); ptxas compiles every path within the launch's 168, which holds
//     a consumer's O 64 + S 64 + P 16 registers.
//   * Epilogue: O · descale_v / l as bf16 pairs straight to global, LSE = (m + log2 l - 8) · ln 2; rows < S only.
//
// The P fragment, without shuffles. The fp32 accumulator of S (m64nNk32, per warp as m16n8) gives lane
// (group g = lane/4, t = lane%4) columns 8c + 2t, 8c + 2t + 1 of rows g and g + 8 (registers 4c..4c+3). The
// A operand of an e4m3 wgmma (m64k32, per warp the mma.m16n8k32 A layout) wants, in register r (4 bytes),
// row g + 8(r & 1) and K columns 16(r >> 1) + 4t .. + 3. The two do not match, but the K axis of P · V is a
// sum, so any permutation of the keys applied to both P and V leaves O unchanged. Logical K index
// kappa = 16h + 4t + e (e = byte 0..3) is therefore taken to mean key pi(kappa) = 16h + 8(e >> 1) + 2t + (e & 1)
// of each 32-key block: then register r of k-block kb is simply the four accumulator values
// 16kb + 8(r >> 1) + (r & 1) * 2 + {0, 1, 4, 5}, converted to e4m3 and packed, with no data movement
// between lanes. The V transpose writes key pi(kappa) at K position kappa, so the same permutation lands in V.
//
// The V transpose: each producer thread handles 8 units of 4 logical keys x 4 head-dimension bytes: it loads
// four 4-byte words (the four keys' rows at d = 4dg..4dg+3) from the swizzled raw tile, and writes four
// 4-byte words (rows d of Vᵀ, each with the four keys' bytes) built by three byte permutes (PRMT) each; the
// swizzled addresses cost one XOR per store and none per load (see transpose_v). Lane bits 0-2 give
// dg's low bits, warp dg's high bits, lane bits 3-4 and the unit index the key group; each thread writes its
// four rows in an order rotated by (lane >> 1) & 3. With that assignment every load and every store of a
// warp touches 32 distinct banks (checked exhaustively by the model test). Vᵀ is written in the 128-byte
// swizzle that the wgmma descriptor reads; each thread fences its generic writes to the async proxy before
// arriving on the Vᵀ stage's full barrier, so the consumers' wgmma sees them.
//
// Accuracy: products of e4m3 values are exact; the fp8 wgmma accumulator keeps about 14 bits relative to the
// largest term of each k-step (benchmarks/results/fp8_accumulator_h100_80gb_hbm3.md), an error no fp8-wgmma
// kernel avoids; everything after it is fp32: the running max is subtracted before ex2, the row sum l is
// kept in fp32 from the unrounded probabilities, and LSE = m + log2 l in fp32 (lg2.approx, ~2^-22 relative).
// P is rounded to e4m3 only as the A operand of P · V, after scaling by 2^8 (folded into the exponent, so
// free): probabilities in [2^-14, 1] then round as e4m3 normals (relative 2^-4) instead of subnormals, a
// finer absolute error than the task's model assumes (2^-18 instead of 2^-10 below 2^-6); O and l carry
// the same 2^8, which cancels in O / l and is subtracted from LSE. O accumulates in the wgmma's fp32
// registers across tiles, through the same 14-bit accumulator: each k-step aligns its 32 products p·v to the
// largest of them and the running O, so on long rows the small products lose low bits; their signs are mixed
// (V is centred), so the loss averages out rather than drifting: under the measured 14-bit model it costs 0.021
// of the O tolerance on 64 rows at S = 4096 of the task's inputs, against 0.31 for the e4m3 rounding of P
// (a NumPy model, tests/test_reference_fp8_attention_model.py, not a GPU measurement). Keeping a promoted fp32
// copy of O would need 64 more registers per thread than the 168 that three warpgroups leave.
//
// Masking and partial tiles: Q, K, V are 3-D tensor maps [B*H][S][128] of bytes, so a tile that runs past S
// reads zeros from the same head; keys >= S are masked to -inf in the last tile, and the causal mask is
// applied on tiles that cross a warpgroup's diagonal. A consumer whose 64 rows all lie past S gets no Q and
// hands every tile back. Keys are visited from 0 upwards, so every row's max is finite after the first tile.
// Causal grids start with the heaviest query tiles.
#include <cmath>

#include "ptx_wrappers.cuh"

namespace {

constexpr int D = 128;                        // head dimension (bytes per row of Q, K, V)
constexpr int ROWS = 128;                     // query rows per CTA
constexpr int CONSUMERS = 2;                  // consumer warpgroups, 64 rows each
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int BKV = 128;                      // keys per tile
constexpr int K_STAGES = 3;
constexpr int V_STAGES = 2;                   // raw V tiles (TMA)
constexpr int VT_STAGES = 2;                  // transposed V tiles
constexpr uint32_t PRODUCER_REGS = 56;
constexpr uint32_t CONSUMER_REGS = 224;
constexpr uint32_t TILE_BYTES = BKV * D;      // one K, V or Vᵀ tile: 16 KB
constexpr uint32_t Q_PART_BYTES = 64 * D;     // one consumer's Q rows: 8 KB
constexpr int S_ACC = BKV / 2;                // fp32 score registers per consumer thread
constexpr int O_ACC = D / 2;                  // fp32 output registers per consumer thread
constexpr int K_STEPS = BKV / 32;             // k32 steps of P · V (and of Q · Kᵀ: D / 32)
constexpr float LN2 = 0.6931471805599453f;
constexpr float P_SHIFT = 8.0f;               // P is scaled by 2^8 before its e4m3 rounding
static_assert(128 * (PRODUCER_REGS + CONSUMERS * CONSUMER_REGS) <= 65536, "register file");
static_assert(TILE_BYTES % 1024 == 0 && Q_PART_BYTES % 1024 == 0, "tiles 1024-byte aligned: the swizzle, and the "
              "transposer's XOR addressing, need it");

// Every tile is 128-byte swizzled and 1024-byte aligned (all sizes are multiples of 1024).
struct Shared {
  uint8_t q[CONSUMERS][Q_PART_BYTES];
  uint8_t k[K_STAGES][TILE_BYTES];
  uint8_t v[V_STAGES][TILE_BYTES];            // V as loaded: row = key, 128 bytes of d
  uint8_t vt[VT_STAGES][TILE_BYTES];          // Vᵀ: row = d, 128 bytes of permuted keys
  ptx::RingBarriers<K_STAGES> k_ring;         // full: TMA; empty: each consumer warpgroup
  ptx::RingBarriers<V_STAGES> v_ring;         // full: TMA; empty: each of the 128 transposer threads
  ptx::RingBarriers<VT_STAGES> vt_ring;       // full: each transposer thread; empty: each consumer warpgroup
  uint64_t q_full;
};
constexpr size_t SMEM_BYTES = sizeof(Shared) + 1024;  // slack to align the base to 1024 B
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan");

// e4m3 x e4m3 -> f32 wgmma with A from registers (the wrapper header has only the shared-memory form):
// a[r] holds four e4m3 of A, low byte first, in the mma.m16n8k32 A layout per warp (see the design note).
#define ACC8(i)                                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc,
                                                         int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : ACC8(0), ACC8(8), ACC8(16), ACC8(24), ACC8(32), ACC8(40), ACC8(48), ACC8(56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));
}
#undef ACC8

// Byte select: bytes of {hi:lo} picked by the four nibbles of sel (PRMT).
__device__ __forceinline__ uint32_t byte_perm(uint32_t lo, uint32_t hi, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(sel));
  return r;
}

// Four floats as four e4m3 bytes (a first, in the low byte), rounded to nearest, saturating.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

struct Work {
  int head, q0, kv_tiles;
};

__device__ __forceinline__ Work cta_work(int S, int causal, int heads) {
  const int q_tiles = (S + ROWS - 1) / ROWS;
  const int t = static_cast<int>(blockIdx.x);
  Work w;
  if (causal) {  // heaviest (last) query tiles first, across all heads
    w.head = t % heads;
    w.q0 = (q_tiles - 1 - t / heads) * ROWS;
    w.kv_tiles = (min(S, w.q0 + ROWS) + BKV - 1) / BKV;
  } else {  // a head's query tiles side by side: they share its K and V in L2
    w.head = t / q_tiles;
    w.q0 = (t % q_tiles) * ROWS;
    w.kv_tiles = (S + BKV - 1) / BKV;
  }
  return w;
}

// KV tiles a consumer warpgroup with rows [q0w, q0w + 64) computes: the first ones up to its last visible key.
__device__ __forceinline__ int warpgroup_tiles(const Work& w, int q0w, int S, int causal) {
  if (!causal) return w.kv_tiles;
  return min(w.kv_tiles, (min(S, q0w + 64) + BKV - 1) / BKV);
}

// Thread 0 of the producer: K tile j and raw V tile j into their rings.
__device__ __forceinline__ void load_k(Shared& s, const CUtensorMap* map_k, ptx::RingState& at, int j, int head) {
  uint64_t* full = s.k_ring.producer_acquire(at, TILE_BYTES);
  ptx::tma_load_3d(s.k[at.stage], map_k, full, 0, j * BKV, head);
  at.advance(K_STAGES);
}
__device__ __forceinline__ void load_v(Shared& s, const CUtensorMap* map_v, ptx::RingState& at, int j, int head) {
  uint64_t* full = s.v_ring.producer_acquire(at, TILE_BYTES);
  ptx::tma_load_3d(s.v[at.stage], map_v, full, 0, j * BKV, head);
  at.advance(V_STAGES);
}

// 32-bit shared-memory accesses by address (the transposer's 56 registers hold no 64-bit generic pointers).
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t r;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(r) : "r"(addr) : "memory");
  return r;
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}

// One raw V tile (row = key, swizzled) to Vᵀ (row = d, swizzled, keys permuted: logical 4-byte group g of a row
// holds keys 32(g >> 3) + 16((g >> 2) & 1) + 2(g & 3) + {0, 1, 8, 9}). Thread: lane, warp of the producer.
// Unit u of a thread has g = t | u << 2 (t = (lane >> 3) & 3), so its keys are 16u + 2t + (e & 1) + 8(e >> 1):
// a load's row % 8 is 2t + (e & 1) whatever the unit, and its swizzled address is a per-thread base plus
// 1024 (e >> 1) + 2048u, immediates. A store goes to row 4dg + i, bytes 4t + 16u: chunk u ^ (row % 8), and the
// rest of the address has bits 4-6 clear, so it is a per-thread constant XOR (u << 4), one instruction.
__device__ __forceinline__ void transpose_v(const uint8_t* v_tile, uint8_t* vt_tile, int lane, int warp) {
  const uint32_t v = ptx::smem_u32(v_tile), vt = ptx::smem_u32(vt_tile);
  const uint32_t t = static_cast<uint32_t>((lane >> 3) & 3);
  const uint32_t dg = static_cast<uint32_t>((lane & 7) | (warp << 3));  // head-dimension bytes 4dg..4dg+3
  const uint32_t rot = static_cast<uint32_t>((lane >> 1) & 3);          // this thread's row order
  uint32_t load_base[2], store_base[4], sel[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t key = 2 * t + static_cast<uint32_t>(h);  // the key of unit 0, e = h; also its row % 8
    load_base[h] = v + key * 128 + (((dg >> 2) ^ key) << 4) + (dg & 3) * 4;
  }
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t i = static_cast<uint32_t>(s) ^ rot;
    const uint32_t row = 4 * dg + i;
    store_base[s] = (vt + row * 128 + 4 * t) | ((row & 7) << 4);
    sel[s] = i | ((i + 4) << 4);  // byte i of the first word, then byte i of the second
  }
#pragma unroll
  for (int pair = 0; pair < 4; ++pair) {  // two units' loads, then their stores
    uint32_t word[2][4];
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int e = 0; e < 4; ++e) word[k][e] = lds32(load_base[e & 1] + 1024 * (e >> 1) + 2048 * (2 * pair + k));
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t low = byte_perm(word[k][0], word[k][1], sel[s]);
        const uint32_t high = byte_perm(word[k][2], word[k][3], sel[s]);
        sts32(store_base[s] ^ ((2 * pair + k) << 4), byte_perm(low, high, 0x5410));
      }
  }
}

// The producer warpgroup: thread 0 issues every copy; all 128 threads transpose V.
__device__ __forceinline__ void producer(Shared& s, const CUtensorMap* map_q, const CUtensorMap* map_k,
                                         const CUtensorMap* map_v, const Work& w, int S) {
  const int tid = static_cast<int>(threadIdx.x);  // 0..127
  ptx::RingState k_at, v_at;
  if (tid == 0) {
    ptx::tma_prefetch_map(map_q);
    ptx::tma_prefetch_map(map_k);
    ptx::tma_prefetch_map(map_v);
    const int parts = min(CONSUMERS, (S - w.q0 + 63) / 64);  // a consumer's rows wholly past S: not loaded
    ptx::mbar_arrive_expect_tx(&s.q_full, parts * Q_PART_BYTES);
    for (int part = 0; part < parts; ++part) ptx::tma_load_3d(s.q[part], map_q, &s.q_full, 0, w.q0 + part * 64, w.head);
    for (int j = 0; j < min(K_STAGES, w.kv_tiles); ++j) load_k(s, map_k, k_at, j, w.head);
    for (int j = 0; j < min(V_STAGES, w.kv_tiles); ++j) load_v(s, map_v, v_at, j, w.head);
  }
  ptx::RingState raw, out;
  for (int j = 0; j < w.kv_tiles; ++j) {
    s.v_ring.consumer_wait(raw);
    ptx::mbar_wait(&s.vt_ring.empty[out.stage], out.phase ^ 1);  // the consumers are done with Vᵀ_{j-2}
    ptx::fence_proxy_async_smem();  // their wgmma reads (async proxy) before these generic writes
    transpose_v(s.v[raw.stage], s.vt[out.stage], tid % 32, tid / 32);
    ptx::fence_proxy_async_smem();         // these generic writes before the consumers' wgmma reads
    ptx::mbar_arrive(&s.vt_ring.full[out.stage]);
    s.v_ring.consumer_release(raw.stage);  // this thread has read the raw tile
    raw.advance(V_STAGES);
    out.advance(VT_STAGES);
    if (tid == 0) {  // refill: K three tiles ahead, raw V two (its stage frees once all 128 threads read it)
      if (j + K_STAGES < w.kv_tiles) load_k(s, map_k, k_at, j + K_STAGES, w.head);
      if (j + V_STAGES < w.kv_tiles) load_v(s, map_v, v_at, j + V_STAGES, w.head);
    }
  }
}

// S = Q · K_tileᵀ for this warpgroup's 64 rows (issued and committed, not waited for).
__device__ __forceinline__ void issue_scores(Shared& s, int stage, int consumer, float (&acc)[S_ACC]) {
  const uint64_t q_desc = ptx::wgmma_desc_k_sw128(s.q[consumer]);
  const uint64_t k_desc = ptx::wgmma_desc_k_sw128(s.k[stage]);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk)  // 32 bytes (+2 in the descriptor) per k32 step
    ptx::wgmma_e4m3<BKV>(acc, q_desc + 2 * kk, k_desc + 2 * kk, kk > 0 ? 1 : 0);
  ptx::wgmma_commit();
}

// O (+)= P · V_tile with P from registers (k32 block kb is p[kb]) and Vᵀ K-major. accumulate = false
// overwrites O on the first step (O is never zeroed).
__device__ __forceinline__ void issue_pv(Shared& s, int stage, const uint32_t (&p)[K_STEPS][4], float (&o)[O_ACC],
                                         bool accumulate) {
  const uint64_t vt_desc = ptx::wgmma_desc_k_sw128(s.vt[stage]);
  ptx::wgmma_fence();
#pragma unroll
  for (int kb = 0; kb < K_STEPS; ++kb)
    wgmma_m64n128k32_e4m3_rs(o, p[kb], vt_desc + 2 * kb, (accumulate || kb > 0) ? 1 : 0);
  ptx::wgmma_commit();
}

// Keys >= S, and with the causal mask keys after the query, get -inf. Only called on tiles that need it.
__device__ __forceinline__ void mask_scores(float (&acc)[S_ACC], int k0, int q0w, int S, bool causal) {
#pragma unroll
  for (int i = 0; i < S_ACC; ++i) {
    const int key = k0 + ptx::wgmma_acc_col(i);
    const int query = q0w + ptx::wgmma_acc_row(i);
    if (key >= S || (causal && key > query)) acc[i] = -INFINITY;
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Online softmax of one score tile, in place (scores -> 2^8 x unnormalised probabilities). Register i is in
// row half (i >> 1) & 1. m: running max of the scaled scores in base-2 units; l: this thread's share of the
// running sum (x 2^8); alpha: how much the old O and l shrink (2^(m_old - m_new)).
__device__ __forceinline__ void online_softmax(float (&acc)[S_ACC], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float row_max = -INFINITY;
#pragma unroll
    for (int i = 2 * h; i < S_ACC; i += 4) row_max = fmaxf(row_max, fmaxf(acc[i], acc[i + 1]));
    const float m_new = fmaxf(m[h], quad_max(row_max) * scale_log2);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: 2^-inf = 0, never NaN
    alpha[h] = ptx::ex2_approx(m[h] - m_use);
    m[h] = m_new;
    const float bias = P_SHIFT - m_use;
    float sum = 0.0f;
#pragma unroll
    for (int i = 2 * h; i < S_ACC; i += 4) {
      acc[i] = ptx::ex2_approx(fmaf(acc[i], scale_log2, bias));
      acc[i + 1] = ptx::ex2_approx(fmaf(acc[i + 1], scale_log2, bias));
      sum += acc[i] + acc[i + 1];
    }
    l[h] = l[h] * alpha[h] + sum;
  }
}

// Probabilities to e4m3 A fragments (see the design note): register r of k-block kb packs accumulator
// registers 16kb + 8(r >> 1) + 2(r & 1) + {0, 1, 4, 5}.
__device__ __forceinline__ void pack_p(const float (&acc)[S_ACC], uint32_t (&p)[K_STEPS][4]) {
#pragma unroll
  for (int kb = 0; kb < K_STEPS; ++kb)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int b = 16 * kb + 8 * (r >> 1) + 2 * (r & 1);
      p[kb][r] = pack_e4m3x4(acc[b], acc[b + 1], acc[b + 4], acc[b + 5]);
    }
}

__device__ __forceinline__ void rescale_o(float (&o)[O_ACC], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < O_ACC; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// Tiles loaded for the other warpgroup's rows only: each waited for and handed back unread.
__device__ __forceinline__ void skip_tiles(Shared& s, ptx::RingState& k_at, ptx::RingState& v_at, int count,
                                           bool signals) {
  for (int j = 0; j < count; ++j) {
    s.k_ring.consumer_wait(k_at);
    if (signals) s.k_ring.consumer_release(k_at.stage);
    s.vt_ring.consumer_wait(v_at);
    if (signals) s.vt_ring.consumer_release(v_at.stage);
    k_at.advance(K_STAGES);
    v_at.advance(VT_STAGES);
  }
}

__device__ __forceinline__ void consumer_mainloop(Shared& s, const Work& w, int consumer, int q0w, int S, int causal,
                                                  float scale_log2, bool signals, float (&o)[O_ACC], float (&m)[2],
                                                  float (&l)[2]) {
  const int tiles = warpgroup_tiles(w, q0w, S, causal);
  auto needs_mask = [&](int j) { return j * BKV + BKV > S || (causal && j * BKV + BKV - 1 > q0w); };
  float acc[S_ACC];
  uint32_t p[K_STEPS][4];
  float alpha[2];
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  ptx::RingState k_at, v_at;
  s.k_ring.consumer_wait(k_at);
  issue_scores(s, k_at.stage, consumer, acc);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  if (signals) s.k_ring.consumer_release(k_at.stage);
  k_at.advance(K_STAGES);
  if (needs_mask(0)) mask_scores(acc, 0, q0w, S, causal != 0);
  online_softmax(acc, m, l, alpha, scale_log2);  // alpha = 0: O has no old value to shrink
  pack_p(acc, p);

  for (int j = 1; j < tiles; ++j) {
    s.k_ring.consumer_wait(k_at);
    issue_scores(s, k_at.stage, consumer, acc);  // S_j ...
    s.vt_ring.consumer_wait(v_at);
    issue_pv(s, v_at.stage, p, o, j > 1);        // ... while P_{j-1} · V_{j-1} follows it
    ptx::wgmma_wait<1>();                        // S_j is done (groups complete in order)
    ptx::wgmma_fence_acc(acc);
    if (signals) s.k_ring.consumer_release(k_at.stage);
    k_at.advance(K_STAGES);
    if (needs_mask(j)) mask_scores(acc, j * BKV, q0w, S, causal != 0);
    online_softmax(acc, m, l, alpha, scale_log2);
    ptx::wgmma_wait<0>();                        // P_{j-1} · V_{j-1} is done: O may be rescaled, Vᵀ released
    ptx::wgmma_fence_acc(o);
    if (signals) s.vt_ring.consumer_release(v_at.stage);
    v_at.advance(VT_STAGES);
    // Once a row's max has settled alpha is 1: a warp none of whose rows moved skips the 64 multiplies.
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) rescale_o(o, alpha);
    pack_p(acc, p);
  }
  s.vt_ring.consumer_wait(v_at);
  issue_pv(s, v_at.stage, p, o, tiles > 1);
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(o);
  if (signals) s.vt_ring.consumer_release(v_at.stage);
  v_at.advance(VT_STAGES);

  skip_tiles(s, k_at, v_at, w.kv_tiles - tiles, signals);
}

// LSE and O · descale_v / l straight to global, rows < S only.
__device__ __forceinline__ void epilogue(__nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                                         const float (&o)[O_ACC], const float (&m)[2], const float (&l)[2],
                                         float descale_v, int head, int q0w, int S) {
  float scale[2];
  int row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float total = quad_sum(l[h]);  // >= 2^8: the row's max contributes 2^8 itself
    scale[h] = descale_v / total;
    row[h] = q0w + ptx::wgmma_acc_row(2 * h);
    if (threadIdx.x % 4 == 0 && row[h] < S)
      LSE[static_cast<int64_t>(head) * S + row[h]] = (m[h] + ptx::lg2_approx(total) - P_SHIFT) * LN2;
  }
#pragma unroll
  for (int i = 0; i < O_ACC; i += 2) {
    const int h = (i >> 1) & 1;
    if (row[h] < S)
      *reinterpret_cast<__nv_bfloat162*>(O + (static_cast<int64_t>(head) * S + row[h]) * D + ptx::wgmma_acc_col(i)) =
          __floats2bfloat162_rn(o[i] * scale[h], o[i + 1] * scale[h]);
  }
}

__global__ void __launch_bounds__(THREADS, 1)
attention_fp8_fwd_sm90a(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v, const float* __restrict__ descale_q,
                        const float* __restrict__ descale_k, const float* __restrict__ descale_v,
                        __nv_bfloat16* __restrict__ O, float* __restrict__ LSE, int S, int heads, int causal) {
  extern __shared__ uint8_t smem_raw[];
  Shared& s = *ptx::align_smem<Shared>(smem_raw);
  const Work w = cta_work(S, causal, heads);
  const uint32_t warpgroup = ptx::warpgroup_idx();

  if (threadIdx.x == 0) {
    s.k_ring.init(K_STAGES, CONSUMERS);  // empty: one arrive per consumer warpgroup
    s.v_ring.init(V_STAGES, 128);        // empty: every transposer thread
    for (int i = 0; i < VT_STAGES; ++i) {
      ptx::mbar_init(&s.vt_ring.full[i], 128);
      ptx::mbar_init(&s.vt_ring.empty[i], CONSUMERS);
    }
    ptx::mbar_init(&s.q_full, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<PRODUCER_REGS>();
    producer(s, &map_q, &map_k, &map_v, w, S);
    return;
  }

  ptx::setmaxnreg_inc<CONSUMER_REGS>();
  const int consumer = static_cast<int>(warpgroup) - 1;
  const int q0w = w.q0 + consumer * 64;
  const bool signals = threadIdx.x % 128 == 0;
  if (q0w >= S) {  // every row of this warpgroup is past S
    ptx::RingState k_at, v_at;
    skip_tiles(s, k_at, v_at, w.kv_tiles, signals);
    return;
  }
  // The softmax scale in base-2 units: descale_q · descale_k / sqrt(128) · log2(e).
  const float scale_log2 = __ldg(descale_q) * __ldg(descale_k) * (1.4426950408889634f * 0.08838834764831845f);
  float o[O_ACC], m[2], l[2];
  ptx::mbar_wait(&s.q_full, 0);
  consumer_mainloop(s, w, consumer, q0w, S, causal, scale_log2, signals, o, m, l);
  epilogue(O, LSE, o, m, l, __ldg(descale_v), w.head, q0w, S);
}

// A [B*H][S][128] e4m3 tensor read in boxes of `rows` x 128 bytes (one 128-byte swizzle row).
cudaError_t make_map(CUtensorMap* map, const void* base, int64_t heads, int64_t S, int rows) {
  const uint64_t dims[3] = {static_cast<uint64_t>(D), static_cast<uint64_t>(S), static_cast<uint64_t>(heads)};
  const uint64_t strides[2] = {static_cast<uint64_t>(D), static_cast<uint64_t>(S) * D};
  const uint32_t box[3] = {static_cast<uint32_t>(D), static_cast<uint32_t>(rows), 1};
  return ptx::make_tma_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_128B);
}

}  // namespace

extern "C" int attention_fp8_fwd(
    const __nv_fp8_e4m3* __restrict__ Q,
    const __nv_fp8_e4m3* __restrict__ K,
    const __nv_fp8_e4m3* __restrict__ V,
    const float* __restrict__ descale_q,
    const float* __restrict__ descale_k,
    const float* __restrict__ descale_v,
    __nv_bfloat16* __restrict__ O,
    float* __restrict__ LSE,
    int64_t B,
    int64_t H,
    int64_t S,
    int64_t causal,
    cudaStream_t stream) {
  if (B <= 0 || H <= 0 || S <= 0) return static_cast<int>(cudaGetLastError());
  const int64_t heads = B * H;
  // int indices inside the kernel: rows (up to S + ROWS) and the CTA index must fit.
  if (S > INT32_MAX - 2 * ROWS || heads > INT32_MAX || heads * ((S + ROWS - 1) / ROWS) > INT32_MAX)
    return static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map_q, map_k, map_v;
  cudaError_t err;
  if ((err = make_map(&map_q, Q, heads, S, 64)) != cudaSuccess ||
      (err = make_map(&map_k, K, heads, S, BKV)) != cudaSuccess ||
      (err = make_map(&map_v, V, heads, S, BKV)) != cudaSuccess)
    return static_cast<int>(err);
  if ((err = cudaFuncSetAttribute(attention_fp8_fwd_sm90a, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(SMEM_BYTES))) != cudaSuccess)
    return static_cast<int>(err);
  const int64_t ctas = heads * ((S + ROWS - 1) / ROWS);
  attention_fp8_fwd_sm90a<<<static_cast<unsigned>(ctas), THREADS, SMEM_BYTES, stream>>>(
      map_q, map_k, map_v, descale_q, descale_k, descale_v, O, LSE, static_cast<int>(S), static_cast<int>(heads),
      causal != 0 ? 1 : 0);
  return static_cast<int>(cudaGetLastError());
}
