// Proves distributed shared memory access: mapa.shared::cluster maps a local shared address to the peer
// CTA's window, then ld/st.shared::cluster read and write the peer's shared memory.
#include <cstdint>

__global__ void __cluster_dims__(2, 1, 1) k(const int* in, int* out) {
  __shared__ int buf[128];
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  buf[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(&buf[threadIdx.x]));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank ^ 1));
  int peer;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(peer) : "r"(remote) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(remote), "r"(peer + 1) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  out[blockIdx.x * 128 + threadIdx.x] = buf[threadIdx.x] + peer;
}
