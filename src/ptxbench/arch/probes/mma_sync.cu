// Proves the warp-level mma.sync.aligned.m16n8k16 with bf16 inputs and f32 accumulators lowers to
// HMMA.16816.F32.BF16 on every target: the pre-Hopper tensor-core path, recognised but not required.
#include <cstdint>

__global__ void k(const uint32_t* a, const uint32_t* b, float* c) {
  const int lane = threadIdx.x % 32;
  const uint32_t* pa = a + (blockIdx.x * 32 + lane) * 4;
  const uint32_t* pb = b + (blockIdx.x * 32 + lane) * 2;
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(pa[0]), "r"(pa[1]), "r"(pa[2]), "r"(pa[3]), "r"(pb[0]), "r"(pb[1]));
  float* pc = c + (blockIdx.x * 32 + lane) * 4;
  pc[0] = d0; pc[1] = d1; pc[2] = d2; pc[3] = d3;
}
