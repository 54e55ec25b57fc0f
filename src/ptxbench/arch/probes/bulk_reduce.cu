// Proves a non-tensor bulk reduction (cp.reduce.async.bulk ... .add.f32: a shared buffer added into
// global memory) lowers to UBLKRED.
#include <cstdint>

__global__ void k(const float* in, float* out) {
  constexpr uint32_t kBytes = 4096;
  __shared__ alignas(128) float buf[kBytes / 4];
  for (int i = threadIdx.x; i < kBytes / 4; i += blockDim.x) buf[i] = in[blockIdx.x * (kBytes / 4) + i];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t s_buf = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(out), "r"(s_buf), "r"(kBytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
  }
}
