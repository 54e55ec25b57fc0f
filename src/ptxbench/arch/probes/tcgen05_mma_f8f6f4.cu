// Proves tcgen05.mma kind::f8f6f4 (fp8/fp6/fp4 operands chosen by the instruction descriptor, no block
// scaling, f32 accumulator in tensor memory) compiles on sm_100a only; see features.toml for the SASS.
#include <cstdint>

__global__ void __launch_bounds__(128, 1) k(float* out, uint64_t da, uint64_t db, uint32_t idesc, uint32_t accumulate) {
  constexpr uint32_t kCols = 128;
  __shared__ uint32_t tmem_slot;
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_slot));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t warp = threadIdx.x / 32;
  if (warp == 0) {  // one warp owns the tensor-memory allocation
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(s_slot), "r"(kCols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
  }
  if (threadIdx.x == 32) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  const uint32_t tmem = tmem_slot;
  if (threadIdx.x == 0) {  // one thread issues the MMA and commits it to the mbarrier
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
                 "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n"
                 ::"r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(accumulate) : "memory");
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(s_bar) : "memory");
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(s_bar) : "memory");
  }
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  uint32_t v;  // warp w reads lanes 32w..32w+31, column 0 of the accumulator
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];\n" : "=r"(v) : "r"(tmem + ((warp * 32) << 16)) : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
  out[blockIdx.x * 128 + threadIdx.x] = __uint_as_float(v);
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(tmem), "r"(kCols) : "memory");
}
