// Proves the non-tensor bulk copies lower to UBLKCP: global->shared completing on an mbarrier
// (UBLKCP.S.G) and shared->global in a bulk group (UBLKCP.G.S); no tensor map involved.
#include <cstdint>

__device__ __forceinline__ bool try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

__global__ void k(const float* in, float* out) {
  constexpr uint32_t kBytes = 4096;
  __shared__ alignas(128) float buf[kBytes / 4];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_buf = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const float* src = in + blockIdx.x * (kBytes / 4);
  float* dst = out + blockIdx.x * (kBytes / 4);
  if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(kBytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(s_buf), "l"(src), "r"(kBytes), "r"(s_bar) : "memory");
  }
  while (!try_wait(s_bar, 0)) {}
  for (int i = threadIdx.x; i < kBytes / 4; i += blockDim.x) buf[i] += 1.0f;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(s_buf), "r"(kBytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}
