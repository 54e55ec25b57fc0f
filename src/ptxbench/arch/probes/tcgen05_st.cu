// Proves tcgen05.st (each warp writes registers into its 32 TMEM lanes, 32x32b shape) followed by
// tcgen05.wait::st compiles on sm_100a only; the values are read back with tcgen05.ld.
#include <cstdint>

__global__ void __launch_bounds__(128, 1) k(const uint32_t* in, uint32_t* out) {
  constexpr uint32_t kCols = 128;
  __shared__ uint32_t tmem_slot;
  const uint32_t s_slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_slot));
  const uint32_t warp = threadIdx.x / 32;
  if (warp == 0) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(s_slot), "r"(kCols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  const uint32_t tmem = tmem_slot;
  const uint32_t lane_base = tmem + ((warp * 32) << 16);  // warp w owns TMEM lanes 32w..32w+31
  const uint32_t* src = in + (blockIdx.x * 128 + threadIdx.x) * 4;
  asm volatile("tcgen05.st.sync.aligned.32x32b.x4.b32 [%0], {%1, %2, %3, %4};\n"
               ::"r"(lane_base), "r"(src[0]), "r"(src[1]), "r"(src[2]), "r"(src[3]) : "memory");
  asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory");
  uint32_t r0, r1, r2, r3;
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(lane_base) : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
  uint32_t* dst = out + (blockIdx.x * 128 + threadIdx.x) * 4;
  dst[0] = r0; dst[1] = r1; dst[2] = r2; dst[3] = r3;
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(tmem), "r"(kCols) : "memory");
}
