// Proves the Blackwell 2-CTA TMA load (.cta_group::2: the data lands in this CTA while the completion is
// signalled on the pair leader's mbarrier) compiles on sm_100a; rejected on sm_90a and plain sm_100.
#include <cuda.h>
#include <cstdint>

__global__ void __cluster_dims__(2, 1, 1) k(const __grid_constant__ CUtensorMap tmap, float* out, int x, int y) {
  __shared__ alignas(128) float tile[32 * 32];
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const uint32_t s_tile = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  uint32_t leader_bar;  // the even CTA's barrier counts the bytes of both halves
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(leader_bar) : "r"(s_bar), "r"(rank & ~1u));
  if (threadIdx.x == 0) {
    if (rank % 2 == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(2 * 32 * 32 * 4) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(s_tile), "l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y + 32 * (int)rank), "r"(leader_bar) : "memory");
  }
  if (rank % 2 == 0) {
    uint32_t done = 0;
    while (!done) {
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done) : "r"(s_bar) : "memory");
    }
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[rank * 32 * 32 + i] = tile[i];
}
