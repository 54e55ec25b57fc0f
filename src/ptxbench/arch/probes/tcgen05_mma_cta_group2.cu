// Proves the 2-CTA tcgen05.mma (cta_group::2: a CTA pair of a cluster shares one MMA whose accumulator
// spans both CTAs' tensor memory; the even CTA issues it and commits to both barriers) on sm_100a only.
#include <cstdint>

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128, 1)
    k(float* out, uint64_t da, uint64_t db, uint32_t idesc, uint32_t accumulate) {
  constexpr uint32_t kCols = 128;
  __shared__ uint32_t tmem_slot;
  __shared__ alignas(8) uint64_t bar;
  const uint32_t s_slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_slot));
  const uint32_t s_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  const uint32_t warp = threadIdx.x / 32;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  if (warp == 0) {  // one warp in each CTA of the pair takes part in the paired allocation
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(s_slot), "r"(kCols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;\n" ::: "memory");
  }
  if (threadIdx.x == 32) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(s_bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  const uint32_t tmem = tmem_slot;
  if (rank % 2 == 0 && threadIdx.x == 0) {  // the even CTA of the pair issues for both
    const uint16_t both = 0x3;
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
                 "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, p;\n}\n"
                 ::"r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(accumulate) : "memory");
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;\n"
                 ::"r"(s_bar), "h"(both) : "memory");
  }
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(s_bar) : "memory");
  }
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  uint32_t v;  // each CTA reads its half of the accumulator from its own tensor memory
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];\n" : "=r"(v) : "r"(tmem + ((warp * 32) << 16)) : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
  out[(blockIdx.x * 128 + threadIdx.x)] = __uint_as_float(v);
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (warp == 0) asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;\n" ::"r"(tmem), "r"(kCols) : "memory");
}
