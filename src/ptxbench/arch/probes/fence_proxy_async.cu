// Proves fence.proxy.async.shared::cta (orders ordinary shared-memory stores before later async-proxy
// reads such as TMA stores, wgmma or tcgen05.mma) lowers to FENCE.VIEW.ASYNC.S.
#include <cstdint>

__global__ void k(const float* in, float* out) {
  __shared__ alignas(128) float tile[256];
  tile[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  out[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
}
