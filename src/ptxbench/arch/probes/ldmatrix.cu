// Proves ldmatrix (a warp loads four 8x8 b16 tiles from shared memory into the mma.sync fragment
// layout; .trans variant too) lowers to LDSM on every Hopper and Blackwell target.
#include <cstdint>

__global__ void k(const uint32_t* in, uint32_t* out) {
  __shared__ alignas(16) uint32_t tile[32 * 4];
  for (int i = threadIdx.x; i < 32 * 4; i += 32) tile[i] = in[blockIdx.x * 32 * 4 + i];
  __syncwarp();
  const uint32_t s_row = static_cast<uint32_t>(__cvta_generic_to_shared(&tile[threadIdx.x * 4]));
  uint32_t a0, a1, a2, a3, b0, b1;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(s_row) : "memory");
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b0), "=r"(b1) : "r"(s_row) : "memory");
  uint32_t* dst = out + (blockIdx.x * 32 + threadIdx.x) * 6;
  dst[0] = a0; dst[1] = a1; dst[2] = a2; dst[3] = a3; dst[4] = b0; dst[5] = b1;
}
