// Proves tcgen05.commit (make an mbarrier track completion of this thread's prior async tcgen05 ops,
// here an MMA) compiles on sm_100a only; the epilogue waits on the barrier before tcgen05.ld.
#include <cstdint>

__global__ void __launch_bounds__(128, 1) k(uint32_t* out, uint64_t da, uint64_t db, uint32_t idesc) {
  constexpr uint32_t kCols = 128;
  __shared__ uint32_t tmem_slot;
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t s_slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_slot));
  const uint32_t warp = threadIdx.x / 32;
  if (warp == 0) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(s_slot), "r"(kCols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
  }
  if (threadIdx.x == 32) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  const uint32_t tmem = tmem_slot;
  const uint32_t lane_base = tmem + ((warp * 32) << 16);  // warp w owns TMEM lanes 32w..32w+31
  if (threadIdx.x == 0) {
    asm volatile("tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, 0;\n"
                 ::"r"(tmem), "l"(da), "l"(db), "r"(idesc) : "memory");
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(s_bar) : "memory");
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(s_bar) : "memory");
  }
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
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
