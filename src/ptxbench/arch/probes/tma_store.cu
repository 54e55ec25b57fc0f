// Proves a TMA store from shared memory to global through a tensor map (bulk_group completion) lowers
// to UTMASTG, with the proxy fence that orders the ordinary shared stores before it.
#include <cuda.h>
#include <cstdint>

__global__ void k(const __grid_constant__ CUtensorMap tmap, const float* in, int x, int y) {
  __shared__ alignas(128) float tile[32 * 32];
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) tile[i] = in[i] * 2.0f;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t s_tile = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y), "r"(s_tile) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}
