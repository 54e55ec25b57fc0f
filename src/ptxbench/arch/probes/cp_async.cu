// Proves the Ampere-style asynchronous copy (cp.async.cg 16 B and cp.async.ca 4 B global->shared, with
// commit_group/wait_group) lowers to LDGSTS; it is not Hopper-specific but marks the pre-TMA path.
#include <cstdint>

__global__ void k(const float4* in4, const float* in1, float* out) {
  __shared__ alignas(16) float4 a[128];
  __shared__ float b[128];
  const uint32_t s_a = static_cast<uint32_t>(__cvta_generic_to_shared(&a[threadIdx.x]));
  const uint32_t s_b = static_cast<uint32_t>(__cvta_generic_to_shared(&b[threadIdx.x]));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s_a), "l"(in4 + blockIdx.x * 128 + threadIdx.x) : "memory");
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s_b), "l"(in1 + blockIdx.x * 128 + threadIdx.x) : "memory");
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  const float4 v = a[127 - threadIdx.x];
  out[blockIdx.x * 128 + threadIdx.x] = v.x + v.y + v.z + v.w + b[127 - threadIdx.x];
}
