// Proves a TMA load multicast to every CTA of a cluster (.multicast::cluster with a CTA mask) lowers to
// UTMALDG...MULTICAST; each CTA loads one half of the tile for both.
#include <cuda.h>
#include <cstdint>

__device__ __forceinline__ bool try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

__global__ void __cluster_dims__(2, 1, 1) k(const __grid_constant__ CUtensorMap tmap, float* out, int x, int y) {
  __shared__ alignas(128) float tile[2][16 * 32];
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const uint32_t s_half = static_cast<uint32_t>(__cvta_generic_to_shared(tile[rank]));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (threadIdx.x == 0) {
    const uint16_t mask = 0x3;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(2 * 16 * 32 * 4) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(s_half), "l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y + 16 * (int)rank), "r"(s_bar), "h"(mask)
        : "memory");
  }
  while (!try_wait(s_bar, 0)) {}
  for (int i = threadIdx.x; i < 2 * 16 * 32; i += blockDim.x) out[rank * 2 * 16 * 32 + i] = (&tile[0][0])[i];
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
