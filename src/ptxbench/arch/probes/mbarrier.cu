// Proves the mbarrier protocol (init, arrive, arrive.expect_tx, complete_tx, try_wait.parity) lowers to
// SYNCS.* instructions; here every thread arrives and thread 0 also books and completes a transaction.
#include <cstdint>

__global__ void k(const int* in, int* out, uint32_t tx_bytes) {
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s_bar), "r"(blockDim.x) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(tx_bytes) : "memory");
    asm volatile("mbarrier.complete_tx.shared::cta.b64 [%0], %1;\n" ::"r"(s_bar), "r"(tx_bytes) : "memory");
  } else {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s_bar) : "memory");
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(s_bar), "r"(0u) : "memory");
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = v + 1;
}
