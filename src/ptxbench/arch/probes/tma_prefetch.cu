// Proves a TMA prefetch of a tensor-map tile into L2 (cp.async.bulk.prefetch.tensor) lowers to UTMAPF;
// the kernel then reads the prefetched region with ordinary loads.
#include <cuda.h>
#include <cstdint>

__global__ void k(const __grid_constant__ CUtensorMap tmap, const float* in, float* out, int x, int y) {
  if (threadIdx.x == 0)
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n"
                 ::"l"(reinterpret_cast<uint64_t>(&tmap)), "r"(x), "r"(y) : "memory");
  out[threadIdx.x] = in[y * 1024 + x + threadIdx.x];
}
