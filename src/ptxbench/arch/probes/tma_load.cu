// Proves a tensor-map (TMA) load into shared memory, completing on an mbarrier, lowers to UTMALDG on
// every Hopper and Blackwell target (plain sm_90/sm_100 included).
#include <cuda.h>
#include <cstdint>

__device__ __forceinline__ bool try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

__global__ void k(const __grid_constant__ CUtensorMap tmap, float* out, int x, int y) {
  __shared__ alignas(128) float tile[32 * 32];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_tile = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(32 * 32 * 4) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(s_tile), "l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y), "r"(s_bar) : "memory");
  }
  while (!try_wait(s_bar, 0)) {}
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[i] = tile[i];
}
