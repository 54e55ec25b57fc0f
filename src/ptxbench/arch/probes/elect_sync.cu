// Proves elect.sync (pick one leader lane of the warp, returned as a predicate and a lane id) lowers to
// ELECT. Note that ptxas also emits ELECT on its own around uniform TMA and bulk-copy issue.
#include <cstdint>

__global__ void k(const int* in, int* out, uint32_t mask) {
  uint32_t leader, is_leader;
  asm volatile("{\n.reg .pred p;\nelect.sync %0|p, %2;\nselp.u32 %1, 1, 0, p;\n}\n"
               : "=r"(leader), "=r"(is_leader) : "r"(mask));
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (is_leader) out[i / 32] = in[i] + static_cast<int>(leader);
}
