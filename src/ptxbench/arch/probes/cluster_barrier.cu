// Proves the split cluster barrier (barrier.cluster.arrive.release / wait.acquire, all CTAs of a
// 2-CTA cluster) lowers to UCGABAR_ARV and UCGABAR_WAIT on every Hopper and Blackwell target.
#include <cstdint>

__global__ void __cluster_dims__(2, 1, 1) k(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = in[i] * 3.0f;
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  const float w = in[i + gridDim.x * blockDim.x];  // independent work overlaps the barrier
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  out[i] = v + w;
}
