// Proves stmatrix (a warp stores four 8x8 b16 tiles from registers to shared memory, the usual MMA
// epilogue layout change) lowers to STSM on every Hopper and Blackwell target.
#include <cstdint>

__global__ void k(const uint32_t* in, uint32_t* out) {
  __shared__ alignas(16) uint32_t tile[32 * 4];
  const uint32_t* src = in + (blockIdx.x * 32 + threadIdx.x) * 4;
  const uint32_t s_row = static_cast<uint32_t>(__cvta_generic_to_shared(&tile[threadIdx.x * 4]));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(s_row), "r"(src[0]), "r"(src[1]), "r"(src[2]), "r"(src[3]) : "memory");
  __syncwarp();
  for (int i = threadIdx.x; i < 32 * 4; i += 32) out[blockIdx.x * 32 * 4 + i] = tile[i];
}
