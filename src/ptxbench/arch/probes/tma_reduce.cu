// Proves a TMA reduction (cp.reduce.async.bulk.tensor ... .add: shared tile added into global memory
// through a tensor map) lowers to UTMAREDG.
#include <cuda.h>
#include <cstdint>

__global__ void k(const __grid_constant__ CUtensorMap tmap, const float* in, int x, int y) {
  __shared__ alignas(128) float tile[32 * 32];
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) tile[i] = in[blockIdx.x * 32 * 32 + i];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t s_tile = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y), "r"(s_tile) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}
