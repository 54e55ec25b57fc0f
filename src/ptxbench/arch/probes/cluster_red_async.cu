// Proves red.async (an atomic add into the peer CTA's shared memory that completes bytes on the peer's
// mbarrier) lowers to REDAS; the peer waits on its own barrier.
#include <cstdint>

__global__ void __cluster_dims__(2, 1, 1) k(const uint32_t* in, uint32_t* out) {
  __shared__ uint32_t buf[128];
  __shared__ alignas(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  buf[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(128 * 4) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(&buf[threadIdx.x]));
  uint32_t r_buf, r_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r_buf) : "r"(local), "r"(rank ^ 1));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r_bar) : "r"(s_bar), "r"(rank ^ 1));
  asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], %1, [%2];\n"
               ::"r"(r_buf), "r"(in[gridDim.x * 128 + blockIdx.x * 128 + threadIdx.x]), "r"(r_bar) : "memory");
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(s_bar) : "memory");
  }
  out[blockIdx.x * 128 + threadIdx.x] = buf[threadIdx.x];
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
