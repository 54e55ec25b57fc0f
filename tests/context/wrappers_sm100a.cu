// Compile-only use of every sm_100a (tcgen05) wrapper of ptx_wrappers.cuh in a kernel shaped like a
// Blackwell GEMM tile: TMA producer warp, single-thread MMA issue into tensor memory, epilogue
// warpgroup reading TMEM (the test inlines the header and builds for sm_100a).
#include "ptx_wrappers.cuh"

namespace {
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
}  // namespace

__global__ void __launch_bounds__(384, 1)
    umma_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* c,
              float bias, int K) {
  extern __shared__ uint8_t raw[];
  uint8_t* base = raw + ((1024 - (ptx::smem_u32(raw) & 1023)) & 1023);
  uint8_t* sa = base;
  uint8_t* sb = base + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(base + STAGES * (A_BYTES + B_BYTES));
  uint64_t* empty = full + STAGES;
  uint64_t* tmem_full = empty + STAGES;
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(tmem_full + 1);
  const uint32_t warp = ptx::warp_idx(), wg = ptx::warpgroup_idx();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], 1);  // released by tcgen05.commit from the MMA thread
    }
    ptx::mbar_init(tmem_full, 1);
    ptx::mbar_fence_init();
  }
  if (warp == 1) {  // the allocating warp also frees
    ptx::tmem_alloc(tmem_slot, 2 * BN);  // accumulator + a scratch area for the st/cp round trip
    ptx::tmem_relinquish_alloc_permit();
  }
  ptx::tcgen05_fence_before_sync();
  __syncthreads();
  ptx::tcgen05_fence_after_sync();
  const uint32_t tmem = *tmem_slot;
  const int kblocks = K / BK;

  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (warp == 0 && ptx::elect_one()) {  // TMA producer
      for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % STAGES;
        ptx::mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
        ptx::mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
        ptx::tma_load_2d(sa + s * A_BYTES, &map_a, &full[s], kb * BK, blockIdx.y * BM);
        ptx::tma_load_2d(sb + s * B_BYTES, &map_b, &full[s], kb * BK, blockIdx.x * BN);
      }
    } else if (warp == 1 && ptx::elect_one()) {  // MMA issuer
      constexpr uint32_t idesc = ptx::umma_idesc_f16(BM, BN, /*bf16=*/true);
      for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % STAGES;
        ptx::mbar_wait(&full[s], (kb / STAGES) & 1);
        ptx::tcgen05_fence_after_sync();
        const uint64_t da = ptx::umma_desc_k_sw128(sa + s * A_BYTES);
        const uint64_t db = ptx::umma_desc(sb + s * B_BYTES, 16, 1024, ptx::UmmaSwizzle::B128);
#pragma unroll
        for (int k = 0; k < BK / 16; ++k) ptx::tcgen05_mma_f16(tmem, da + 2 * k, db + 2 * k, idesc, (kb | k) != 0);
        ptx::tcgen05_commit(&empty[s]);
      }
      ptx::tcgen05_cp_128x256b(ptx::tmem_addr(tmem, 0, 2 * BN - 8),
                               ptx::umma_desc(sa, 0, 128, ptx::UmmaSwizzle::None));  // e.g. scale factors
      ptx::tcgen05_commit(tmem_full);
    }
  } else if (wg == 1) {  // epilogue: warp w reads lanes 32*(w%4)..+31 = rows of the tile
    ptx::setmaxnreg_inc<232>();
    ptx::mbar_wait(tmem_full, 0);
    ptx::tcgen05_fence_after_sync();
    const uint32_t quarter = 32 * (warp % 4), row = quarter + threadIdx.x % 32;
    uint32_t r[16];
    for (int col = 0; col < BN; col += 16) {
      ptx::tmem_ld_32x32b_x16(ptx::tmem_addr(tmem, quarter, col), r);
      ptx::tcgen05_wait_ld(r);
      float4* dst = reinterpret_cast<float4*>(c + (size_t)(blockIdx.y * BM + row) * (gridDim.x * BN) + blockIdx.x * BN + col);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        dst[q] = make_float4(__uint_as_float(r[4 * q]) + bias, __uint_as_float(r[4 * q + 1]) + bias,
                             __uint_as_float(r[4 * q + 2]) + bias, __uint_as_float(r[4 * q + 3]) + bias);
    }
    ptx::tmem_st_32x32b_x16(ptx::tmem_addr(tmem, quarter, BN), r);  // round trip through the scratch area
    ptx::tcgen05_wait_st();
    ptx::tmem_ld_32x32b_x16(ptx::tmem_addr(tmem, quarter, BN), r);
    ptx::tcgen05_wait_ld();
    c[(size_t)gridDim.y * BM * gridDim.x * BN + row] = __uint_as_float(r[0] ^ r[15]);
  } else {
    ptx::setmaxnreg_inc<232>();
  }
  ptx::tcgen05_fence_before_sync();
  __syncthreads();
  if (warp == 1) ptx::tmem_dealloc(tmem, 2 * BN);
}
