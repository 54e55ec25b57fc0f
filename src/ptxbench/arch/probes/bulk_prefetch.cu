// Proves a non-tensor bulk prefetch into L2 (cp.async.bulk.prefetch.L2.global) lowers to UBLKPF; the
// kernel then reads the prefetched bytes with ordinary loads.
#include <cstdint>

__global__ void k(const float* in, float* out, uint32_t bytes) {
  const float* src = in + blockIdx.x * 1024;
  if (threadIdx.x == 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes & ~15u) : "memory");
  out[blockIdx.x * blockDim.x + threadIdx.x] = src[threadIdx.x];
}
