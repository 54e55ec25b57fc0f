// Proves the tensor-memory allocator (tcgen05.alloc writes the TMEM address to shared memory,
// relinquish_alloc_permit, dealloc before exit) compiles on sm_100a only; SASS opcodes in features.toml.
#include <cstdint>

__global__ void __launch_bounds__(128, 1) k(uint32_t* out, uint32_t ncols) {
  __shared__ uint32_t tmem_slot;
  const uint32_t s_slot = static_cast<uint32_t>(__cvta_generic_to_shared(&tmem_slot));
  const uint32_t cols = ncols <= 32 ? 32u : (ncols <= 64 ? 64u : (ncols <= 128 ? 128u : 256u));  // power of two
  const bool allocator = threadIdx.x / 32 == 0;  // exactly one warp allocates and frees
  if (allocator) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(s_slot), "r"(cols) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
  }
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
  const uint32_t tmem = tmem_slot;
  out[blockIdx.x * 128 + threadIdx.x] = tmem;
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
  __syncthreads();
  if (allocator) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(tmem), "r"(cols) : "memory");
}
