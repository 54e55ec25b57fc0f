// fp8_accumulator_probe.cu: what Hopper's wgmma accumulator keeps, for e4m3 and (as the control) bf16.
//
// One CTA of one warpgroup per problem computes D[64 x 128] = A[64 x K] . B[128 x K]^T with the real
// instructions a fp8 attention or GEMM kernel issues: wgmma.mma_async m64n128k32 e4m3 x e4m3 -> f32 (or
// m64n128k16 bf16 x bf16 -> f32), both operands K-major in 128-byte-swizzled shared memory, several k-steps
// chained into the same accumulator registers as a main loop does. Every k-step reads 32 bytes of each row
// (32 e4m3 or 16 bf16 values), so one kernel serves both types; a 128-byte chunk of K (4 k-steps) is staged
// at a time. `promote` > 0 restarts the wgmma accumulator every `promote` k-steps and adds it into a
// separate fp32 register accumulator (DeepGEMM's promotion; 4 steps = 128 e4m3 values); 0 chains all K.
// The host (fp8_accumulator_probe.py) compares D with the exact sum.
#include <cstdint>

#include "ptx_wrappers.cuh"

namespace {

constexpr int kRowsA = 64, kRowsB = 128, kChunk = 128, kStep = 32;

// Stage bytes [c0, c0 + 128) of every row of a [rows x row_bytes] matrix in the 128-byte swizzle the
// descriptors below expect; bytes past the row's end (K below 128 bytes) are zero and never read.
template <int Rows>
__device__ void stage(uint8_t* tile, const uint8_t* src, int row_bytes, int c0) {
  for (int idx = threadIdx.x; idx < Rows * (kChunk / 16); idx += blockDim.x) {
    const int row = idx / (kChunk / 16), b = (idx % (kChunk / 16)) * 16;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (c0 + b < row_bytes) v = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(row) * row_bytes + c0 + b);
    *reinterpret_cast<uint4*>(tile + ptx::sw128_offset(row, b)) = v;
  }
}

template <bool kFp8>
__device__ void probe(const uint8_t* a, const uint8_t* b, float* d_out, int row_bytes, int promote) {
  extern __shared__ uint8_t raw[];
  uint8_t* tile_a = ptx::align_smem<uint8_t>(raw);
  uint8_t* tile_b = tile_a + kRowsA * kChunk;
  const int problem = blockIdx.x;
  a += static_cast<size_t>(problem) * kRowsA * row_bytes;
  b += static_cast<size_t>(problem) * kRowsB * row_bytes;

  float d[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = total[i] = 0.0f;
  const int steps = row_bytes / kStep;
  for (int c0 = 0, g = 0; c0 < row_bytes; c0 += kChunk) {
    stage<kRowsA>(tile_a, a, row_bytes, c0);
    stage<kRowsB>(tile_b, b, row_bytes, c0);
    ptx::fence_proxy_async_smem();
    __syncthreads();
    const uint64_t desc_a = ptx::wgmma_desc_k_sw128(tile_a), desc_b = ptx::wgmma_desc_k_sw128(tile_b);
    const int chunk_steps = min(kChunk / kStep, steps - g);
    ptx::wgmma_fence();
    for (int s = 0; s < chunk_steps; ++s, ++g) {
      // +2 in the descriptor's address field = +32 bytes = the next k-step of every row.
      const int keep = promote > 0 ? (g % promote != 0) : (g != 0);
      if constexpr (kFp8) {
        ptx::wgmma_m64n128k32_e4m3(d, desc_a + 2 * s, desc_b + 2 * s, keep);
      } else {
        ptx::wgmma_m64n128k16_bf16(d, desc_a + 2 * s, desc_b + 2 * s, keep);
      }
      if (promote > 0 && ((g + 1) % promote == 0 || g + 1 == steps)) {
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_acc(d);
#pragma unroll
        for (int i = 0; i < 64; ++i) total[i] += d[i];
        ptx::wgmma_fence();
      }
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_acc(d);
    __syncthreads();  // every warp's wgmma has read the tiles before the next chunk overwrites them
  }
  float* out = d_out + static_cast<size_t>(problem) * kRowsA * kRowsB;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    out[ptx::wgmma_acc_row(i) * kRowsB + ptx::wgmma_acc_col(i)] = promote > 0 ? total[i] : d[i];
  }
}

}  // namespace

// a: [problems][64][K] e4m3, b: [problems][128][K] e4m3, d: [problems][64][128] f32; K a multiple of 32.
extern "C" __global__ void __launch_bounds__(128) probe_e4m3(const uint8_t* a, const uint8_t* b, float* d, int k,
                                                              int promote) {
  probe<true>(a, b, d, k, promote);
}

// As probe_e4m3 with bf16 (raw 16-bit patterns) operands; K a multiple of 16.
extern "C" __global__ void __launch_bounds__(128) probe_bf16(const uint8_t* a, const uint8_t* b, float* d, int k,
                                                              int promote) {
  probe<false>(a, b, d, 2 * k, promote);
}
