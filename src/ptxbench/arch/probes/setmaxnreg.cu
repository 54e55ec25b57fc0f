// Proves setmaxnreg (warp-specialised register reallocation) lowers to USETMAXREG on sm_90a/sm_100a when
// the kernel has a register cap at entry (__launch_bounds__(384, 1)); ptxas rejects it on plain targets.
#include <cstdint>

__global__ void __launch_bounds__(384, 1) k(const float* in, float* out, int n) {
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");   // producer: give registers back
    if (threadIdx.x == 0) out[blockIdx.x] = static_cast<float>(n);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");  // consumers: 128*(40+2*232) <= 65536
    float acc = 0.f;
    for (int i = threadIdx.x; i < n; i += 256) acc += in[i] * in[i];
    out[gridDim.x + blockIdx.x * 256 + threadIdx.x - 128] = acc;
  }
}
