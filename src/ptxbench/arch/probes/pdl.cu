// Proves programmatic dependent launch: griddepcontrol.wait (block until the producer grid's memory is
// visible) and griddepcontrol.launch_dependents (let the next grid start) lower to ACQBULK and PREEXIT.
#include <cstdint>

__global__ void k(const float* in, float* out, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float s = scale * 2.0f;  // prologue that does not read the producer's output
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const float v = in[i] * s;
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  out[i] = v;
}
