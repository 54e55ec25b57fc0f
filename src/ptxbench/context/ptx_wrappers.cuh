// ptx_wrappers.cuh: small inline-PTX wrappers for Hopper (sm_90a) and Blackwell (sm_100a) kernels.
//
// Your answer is one .cu file, so copy in the parts you use. Every function is a thin shell around one
// PTX instruction (or a short fixed sequence); the comments say what the caller must guarantee.
// Shared-memory operands are taken as generic pointers and converted with __cvta_generic_to_shared:
// PTX wants 32-bit shared-window addresses, never generic ones.
//
// Sections: common (sm_90 and later), host tensor maps, then sections for one target only. Those
// are visible to the host pass too (it parses kernel bodies), but a device pass for another target
// does not see them, so a call there fails to compile instead of silently compiling to nothing.
#pragma once
#include <cstdint>
#include <cuda.h>           // CUtensorMap and its enums: types only, libcuda is not linked
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace ptx {

// ================================================================================================
// Common: sm_90 and later
// ================================================================================================

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The dynamic shared memory as a `T` placed at the first kAlign-byte boundary: the buffer is only
// guaranteed 16-byte aligned, and 128-byte-swizzled tiles (TMA, tensor cores) need 1024. Request kAlign
// bytes of slack (e.g. sizeof(Shared) + 1024) in the launch.
template <typename T, uintptr_t kAlign = 1024>
__device__ __forceinline__ T* align_smem(void* raw) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(raw) + (kAlign - 1)) & ~(kAlign - 1));
}

// Warp-uniform indices: broadcasting from lane 0 tells the compiler the value is uniform.
__device__ __forceinline__ uint32_t warp_idx() { return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0); }
__device__ __forceinline__ uint32_t warpgroup_idx() { return __shfl_sync(0xffffffffu, threadIdx.x / 128, 0); }

// True in exactly one lane of the (fully active) warp.
__device__ __forceinline__ bool elect_one() {
  uint32_t is_leader;
  asm volatile(
      "{\n.reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(is_leader));
  return is_leader != 0;
}

// Tile `t` of a grid of `rows` x `cols` tiles in grouped order: `group` tile-rows advance together,
// column by column (the last group may have fewer rows). Persistent CTAs that take consecutive
// tiles then read the same few row and column panels, which stay in L2.
__device__ __forceinline__ void grouped_tile(int t, int rows, int cols, int group, int& row, int& col) {
  const int per_group = group * cols;
  const int g = t / per_group;
  const int first = g * group;
  const int rows_here = min(rows - first, group);
  const int r = t - g * per_group;
  row = first + r % rows_here;
  col = r / rows_here;
}

// A persistent CTA's walk over a tiles_m x tiles_n grid of output tiles: tiles first, first + stride,
// ... (e.g. blockIdx.x, then + gridDim.x), each placed by grouped_tile. Producer and consumers each
// walk their own copy in step, so they agree on every tile without talking.
//   for (ptx::TileScheduler t(tiles_m, tiles_n, 8, blockIdx.x, gridDim.x); t.valid(); t.next()) {
//     int tm, tn;
//     t.coords(tm, tn);
//     ...
//   }
struct TileScheduler {
  int tile;    // the current tile, in walk order
  int stride;  // tiles between two of this CTA's
  int tiles, tiles_m, tiles_n, group;
  __device__ __forceinline__ TileScheduler(int tiles_m_, int tiles_n_, int group_, int first, int stride_)
      : tile(first), stride(stride_), tiles(tiles_m_ * tiles_n_), tiles_m(tiles_m_), tiles_n(tiles_n_),
        group(group_) {}
  __device__ __forceinline__ bool valid() const { return tile < tiles; }
  __device__ __forceinline__ void next() { tile += stride; }
  // The current tile's place: tile-row and tile-column.
  __device__ __forceinline__ void coords(int& row, int& col) const {
    grouped_tile(tile, tiles_m, tiles_n, group, row, col);
  }
};

// Barrier among `threads` threads (a multiple of 32: whole warps) on barrier `id` (1-15; 0 is
// __syncthreads): lets one warpgroup synchronise without stopping the others.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Byte offset of byte `b` (0-127) of row `row` in a tile of 128-byte rows with the 128-byte swizzle
// (TMA's CU_TENSOR_MAP_SWIZZLE_128B, the tensor cores' 128B mode): the 16-byte chunk index in each row is
// XORed with row % 8, so eight rows' same column lie in eight different banks. The tile must be
// 1024-byte aligned.
__device__ __forceinline__ uint32_t sw128_offset(uint32_t row, uint32_t b) {
  return row * 128 + ((((b >> 4) ^ (row & 7)) << 4) | (b & 15));
}

// ---- mbarrier (a 64-bit object in shared memory, 8-byte aligned) -------------------------------

// One thread initialises; `count` is the number of arrivals that complete a phase.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// After the inits, before the barrier (__syncthreads or cluster_sync) that publishes them: orders the
// inits before any use by other threads, including other CTAs of a cluster.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Arrive once and add `bytes` to the transaction count of the current phase: the phase completes
// when all arrivals are in AND that many bytes have landed. Re-arm it for every phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

// Add expected bytes without arriving (e.g. a second producer of the same stage).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

// True once the phase with parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once ("the previous phase is complete").
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Spin until the phase with `parity` completes. The label lives inside braces, so the asm can be
// inlined many times in one kernel without duplicate-label errors.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n"
      ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}

// ---- rings of stages: one side fills buffers in turn, the other drains them ---------------------

// Where a producer or a consumer is in a ring of `stages` buffers used in turn: the stage, and the
// parity of that stage's current mbarrier phase, which flips each time the ring wraps around. Each
// side keeps its own copy and advances it once per stage it is done with.
struct RingState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// The mbarrier pairs of a ring of up to kMaxStages stages (a member of the kernel's shared struct).
// full[s] completes when stage s holds data (the producer's arrival plus the bytes its copies
// announced); empty[s] when all `consumers` arrivals say it has been read and may be refilled.
//   producer: bar = ring.producer_acquire(at, bytes); tma_load_2d(..., bar, ...); at.advance(stages);
//   consumer: ring.consumer_wait(at); ...read the stage...; ring.consumer_release(at.stage); at.advance(stages);
template <int kMaxStages>
struct RingBarriers {
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];

  // One thread, then the barrier that publishes them (__syncthreads, or cluster_sync when peers arrive).
  __device__ __forceinline__ void init(int stages, uint32_t consumers) {
    for (int i = 0; i < stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], consumers);
    }
    mbar_fence_init();
  }
  // Producer: wait until the stage is released (a fresh ring counts as released: its first pass waits
  // on parity 1), then arm its full barrier with the `bytes` the copies will bring. Returns that
  // barrier, for the copies to complete on.
  __device__ __forceinline__ uint64_t* producer_acquire(const RingState& at, uint32_t bytes) {
    mbar_wait(&empty[at.stage], at.phase ^ 1);
    mbar_arrive_expect_tx(&full[at.stage], bytes);
    return &full[at.stage];
  }
  // Consumer: wait until the stage's data has landed.
  __device__ __forceinline__ void consumer_wait(const RingState& at) { mbar_wait(&full[at.stage], at.phase); }
  // Consumer: one of the `consumers` arrivals that hand `stage` back to the producer.
  __device__ __forceinline__ void consumer_release(int stage) { mbar_arrive(&empty[stage]); }
};

// ---- proxy fence ---------------------------------------------------------------------------------

// Ordinary st.shared writes are invisible to the async proxy (TMA store, tensor-core MMA reading
// shared memory) until the writing threads execute this; then a barrier before the async reader.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- TMA: tensor-map bulk copies -----------------------------------------------------------------
// Coordinates are element indices, innermost dimension first (c0 = column of a row-major matrix).
// Loads complete on an mbarrier that must expect the full box bytes (out-of-bounds elements are
// zero-filled and still counted). Issue from one thread.

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

// Starts reading a box into L2 only (no shared memory, no barrier): a later tma_load of it then hits
// L2. Lets a producer keep more bytes in flight than its ring holds.
__device__ __forceinline__ void tma_prefetch_2d(const CUtensorMap* map, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1) : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                            int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2),
        "r"(smem_u32(bar))
      : "memory");
}

// Multicast: the box lands at the same shared offset in every CTA whose bit is set in `cta_mask`,
// and each of them gets the bytes counted on its own barrier at the same offset as `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)),
        "h"(cta_mask)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar,
                                                      int32_t c0, int32_t c1, int32_t c2, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2),
        "r"(smem_u32(bar)), "h"(cta_mask)
      : "memory");
}

// Stores: write the tile to shared memory, fence_proxy_async_smem() in every writing thread,
// barrier, then one thread stores, commits and (before the buffer is reused) waits.
// Out-of-bounds parts of the box are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(src)), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1,
                                             int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N committed store groups still READ shared memory (the buffer may be reused).
template <int N = 0>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Wait until at most N committed store groups are incomplete (writes done, e.g. before exit
// of a kernel whose dependent reads the data through PDL).
template <int N = 0>
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// Plain bulk copy (no tensor map): `bytes` a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// ---- clusters ------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}

// All threads of all CTAs of the cluster. Needed after barrier init (before any remote arrive or
// multicast), before reading a peer's shared memory, and before exit while peers may still touch
// this CTA's shared memory.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The same shared variable in CTA `cta_rank` (a shared::cluster address for ld/st.shared::cluster).
__device__ __forceinline__ uint32_t map_to_rank(const void* p, uint32_t cta_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(p)), "r"(cta_rank));
  return remote;
}

// Arrive on the barrier at the same offset in CTA `cta_rank` of this cluster, with release at CLUSTER
// scope: what this thread wrote (e.g. st.shared::cluster into the peer) is visible to whoever waits
// there with acquire.cluster. Costs a GPU-wide memory barrier (MEMBAR.ALL.GPU) per call.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(map_to_rank(bar, cta_rank))
               : "memory");
}

// The same arrive with release at CTA scope, for handing a ring stage back to a producer that
// multicasts into this CTA (or a peer's): this thread only read the stage, and the producer writes
// it only after the phase completes. Use it per stage; mbar_arrive_cluster there adds a GPU-wide
// memory barrier to every stage (it halved an fp8 GEMM's speed on an H200).
__device__ __forceinline__ void mbar_arrive_cluster_stage(uint64_t* bar, uint32_t cta_rank) {
  asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];" ::"r"(map_to_rank(bar, cta_rank))
               : "memory");
}

// mbar_wait with acquire at CLUSTER scope, for a phase completed by other CTAs (mbar_arrive_cluster, or
// st_async bytes): what they wrote into this CTA's shared memory before completing it is visible after.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n"
      ::"r"(smem_u32(bar)), "r"(parity) : "memory");
}

// Store two floats into a peer CTA's shared memory (`remote` from map_to_rank) and complete 8 bytes of
// transactions on the peer's mbarrier (`remote_bar`, also from map_to_rank) once they have landed. No
// fence and no arrive on the sending side: the receiver arms its own barrier (mbar_arrive_expect_tx with
// the bytes of every sender; bytes landing first are fine) and waits with mbar_wait_cluster.
__device__ __forceinline__ void st_async_v2_f32(uint32_t remote, float a, float b, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               ::"r"(remote), "f"(a), "f"(b), "r"(remote_bar) : "memory");
}

__device__ __forceinline__ float ld_shared_cluster_f32(uint32_t remote) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Two adjacent floats (8-byte aligned) in one access.
__device__ __forceinline__ float2 ld_shared_cluster_f32x2(uint32_t remote) {
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
  return v;
}

__device__ __forceinline__ void st_shared_cluster_f32(uint32_t remote, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

// ---- programmatic dependent launch (the launch needs the programmatic-serialization attribute) ---

// Blocks until the preceding grid has completed or triggered, and its memory is visible.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next grid start its prologue early (its griddep_wait still waits for our memory).
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// ---- ldmatrix / stmatrix (8x8 tiles of 16-bit elements) ------------------------------------------
// x4: four 8x8 matrices. Thread t gives the address of row t%8 of matrix t/8 (16-byte aligned);
// register i holds matrix i, row (lane/4), elements 2*(lane%4) and 2*(lane%4)+1 (low half first).

__device__ __forceinline__ void stmatrix_x4(void* row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               ::"r"(smem_u32(row_addr)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(const void* row_addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(row_addr)) : "memory");
}

// The same, transposing: register i receives row lane/4 of the TRANSPOSE of matrix i, which is the
// layout stmatrix_x4 stores, so the pair moves an 8x8 block and transposes it (e.g. a tile transpose).
__device__ __forceinline__ void ldmatrix_x4_trans(const void* row_addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(row_addr)) : "memory");
}

// Two floats as one register of two bf16 (`lo` in the low half, i.e. the lower column).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The reverse, exactly: bf16 -> f32 is a 16-bit shift. The low (lower column) and high element of a pair.
__device__ __forceinline__ float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

// ---- approximate math on the special-function unit (MUFU), denormals flushed ---------------------

// 2^x, a fast approximation (not correctly rounded); 2^-large is +0. exp(x - m) is
// ex2_approx(x * log2(e) - m * log2(e)): one FMA and one MUFU.EX2.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x), a fast approximation (not correctly rounded).
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// ================================================================================================
// Host: tensor maps. Only cudart is linked, so fetch the driver's encoder through the runtime.
// (cudaGetDriverEntryPoint works too but is deprecated in CUDA 13; the ByVersion form is not.)
// ================================================================================================

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess || found != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// A tiled map of a `rank`-dimensional tensor. dims[] and box[] are innermost first (in elements);
// strides_bytes[] has rank-1 entries: the byte strides of dims 1..rank-1 (multiples of 16; dim 0 is
// contiguous). With a swizzle, box[0] * element size must not exceed the swizzle span (32/64/128 B).
// Out-of-bounds elements load as zero. Never ignore the result: a rejected map hangs the kernel.
inline cudaError_t make_tma_map(CUtensorMap* map, CUtensorMapDataType dtype, uint32_t rank, const void* base,
                                const uint64_t* dims, const uint64_t* strides_bytes, const uint32_t* box,
                                CUtensorMapSwizzle swizzle) {
  EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return cudaErrorNotSupported;
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], elem_strides[5];
  for (uint32_t i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    elem_strides[i] = 1;
    if (i + 1 < rank) s[i] = strides_bytes[i];
  }
  CUresult r = encode(map, dtype, rank, const_cast<void*>(base), d, s, b, elem_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// Row-major matrix [rows][cols] with a row pitch of ld elements; box of box_rows x box_cols.
inline cudaError_t make_tma_map_2d(CUtensorMap* map, CUtensorMapDataType dtype, uint32_t elem_bytes,
                                   const void* base, uint64_t rows, uint64_t cols, uint64_t ld,
                                   uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  const uint64_t dims[2] = {cols, rows};
  const uint64_t strides[1] = {ld * elem_bytes};
  const uint32_t box[2] = {box_cols, box_rows};
  return make_tma_map(map, dtype, 2, base, dims, strides, box, swizzle);
}

}  // namespace ptx

// ================================================================================================
// sm_90a only: wgmma (warpgroup MMA); ptxas rejects it on every other target.
// ================================================================================================
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
namespace ptx {

// Shared-memory matrix descriptor. Bits: 0-13 address>>4, 16-29 leading byte offset>>4,
// 32-45 stride byte offset>>4, 49-51 base offset (0 when atoms are aligned), 62-63 swizzle.
enum class WgmmaSwizzle : uint64_t { None = 0, B128 = 1, B64 = 2, B32 = 3 };

__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                               WgmmaSwizzle swizzle) {
  return static_cast<uint64_t>((smem_u32(smem) & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
}

// The common case: K-major operand tile whose rows are 128 bytes (64 bf16) written by a TMA box
// with CU_TENSOR_MAP_SWIZZLE_128B, the tile 1024-byte aligned. 8-row groups are 1024 bytes apart;
// the leading offset is unused for swizzled K-major layouts. Step K by adding bytes>>4 to the
// descriptor: +2 per 16 bf16 (32 bytes).
__device__ __forceinline__ uint64_t wgmma_desc_k_sw128(const void* tile) {
  return wgmma_desc(tile, 16, 1024, WgmmaSwizzle::B128);
}

// MN-major operand (B [K][N] with N contiguous, e.g. attention's V; wgmma TransB = 1) from SWIZZLE_128B
// TMA boxes of 64 (N) x rows (K) laid side by side `slab_bytes` apart (rows x 128): SBO = 8 K-rows
// (1024 bytes), LBO = the distance between 64-wide N slabs. Step K by 16 rows: +128 (2048 bytes).
__device__ __forceinline__ uint64_t wgmma_desc_mn_sw128(const void* tile, uint32_t slab_bytes) {
  return wgmma_desc(tile, slab_bytes, 1024, WgmmaSwizzle::B128);
}

// Make prior register/shared writes visible to wgmma; required before the first wgmma of a batch
// and whenever the accumulator (or A-fragment) registers were touched by other instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N committed groups are pending. Accumulators are undefined until then.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// The compiler does not know that wgmma writes the accumulators asynchronously; after wgmma_wait,
// pass them through this so no read of them is scheduled before the wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Where accumulator register i of this thread sits in the 64 x N tile of an m64nN wgmma:
// warp w of the warpgroup owns rows 16w..16w+15; registers come in groups of 4 per 8 columns.
__device__ __forceinline__ int wgmma_acc_row(int i) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  return warp * 16 + lane / 4 + 8 * ((i >> 1) & 1);
}
__device__ __forceinline__ int wgmma_acc_col(int i) { return (i >> 2) * 8 + (threadIdx.x % 4) * 2 + (i & 1); }

#define PTXW_ACC8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define PTXW_ACC32(d, i) PTXW_ACC8(d, i), PTXW_ACC8(d, i + 8), PTXW_ACC8(d, i + 16), PTXW_ACC8(d, i + 24)

// D[64 x N] (+)= A[64 x 16] * B[16 x N], bf16 in, f32 accumulate, A and B from shared memory.
// All 128 threads of the warpgroup call it with the same descriptors. scale_d = 0 ignores the old D.
// TransA/TransB = 1 selects an MN-major A/B tile (16-bit types only).
// Widths 8, 16, 32 (e.g. a decode GEMM's tiles of a few tokens), then 64, 128, 256: all alike but for the
// N / 2 accumulators and the operand numbers.
template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n8k16_bf16(float (&d)[4], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3}, "
      "%4, %5, p, 1, 1, %7, %8;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n16k16_bf16(float (&d)[8], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, "
      "%8, %9, p, 1, 1, %11, %12;\n}\n"
      : PTXW_ACC8(d, 0)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "%16, %17, p, 1, 1, %19, %20;\n}\n"
      : PTXW_ACC8(d, 0), PTXW_ACC8(d, 8)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, %35, %36;\n}\n"
      : PTXW_ACC32(d, 0)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, %131, %132;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32), PTXW_ACC32(d, 64), PTXW_ACC32(d, 96)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TransA), "n"(TransB));
}

// A from registers (e.g. attention's P): a[0..3] hold this thread's bf16 pairs of the 64 x 16 A tile,
// a[0]: (row r, cols c, c+1), a[1]: (row r+8, cols c, c+1), a[2]: (row r, cols c+8, c+9),
// a[3]: (row r+8, cols c+8, c+9), with r = 16*warp + lane/4 and c = 2*(lane%4). That is the
// accumulator layout: columns 16k..16k+15 of an f32 accumulator packed pairwise are a K-block of A.
// Widths 64, 128, 256: attention's O += P · V has N = the head dimension.
template <int TransB = 0>
__device__ __forceinline__ void wgmma_m64n64k16_bf16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc,
                                                        int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : PTXW_ACC32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(TransB));
}

template <int TransB = 0>
__device__ __forceinline__ void wgmma_m64n128k16_bf16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc,
                                                         int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(TransB));
}

template <int TransB = 0>
__device__ __forceinline__ void wgmma_m64n256k16_bf16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b_desc,
                                                         int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32), PTXW_ACC32(d, 64), PTXW_ACC32(d, 96)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d), "n"(TransB));
}

// fp8 (e4m3 x e4m3 -> f32), K = 32 per instruction; fp8 operands must be K-major (no transpose).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// More fp8 widths (a tile need not be a power of two wide: e.g. 80 columns give a decode GEMM more CTAs),
// alike but for N / 2 accumulators and the operand numbers.
__device__ __forceinline__ void wgmma_m64n80k32_e4m3(float (&d)[40], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n80k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39}, "
      "%40, %41, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC8(d, 32)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n96k32_e4m3(float (&d)[48], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
      "%48, %49, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC8(d, 32), PTXW_ACC8(d, 40)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n112k32_e4m3(float (&d)[56], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %58, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n112k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55}, "
      "%56, %57, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC8(d, 32), PTXW_ACC8(d, 40), PTXW_ACC8(d, 48)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n144k32_e4m3(float (&d)[72], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n144k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71}, "
      "%72, %73, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32), PTXW_ACC8(d, 64)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n192k32_e4m3(float (&d)[96], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
      "%96, %97, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32), PTXW_ACC32(d, 64)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// The wide form: 128 accumulators per thread (one consumer warpgroup covers 64 x 256).
__device__ __forceinline__ void wgmma_m64n256k32_e4m3(float (&d)[128], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1;\n}\n"
      : PTXW_ACC32(d, 0), PTXW_ACC32(d, 32), PTXW_ACC32(d, 64), PTXW_ACC32(d, 96)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// The width as a template argument, for kernels templated on their tile: wgmma_bf16<N> (N = 8, 16, 32,
// 64, 128, 256) and wgmma_e4m3<N> (N = 80, 96, 112, 128, 144, 192, 256) call the form above; d holds N / 2.
template <int N, int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "a bf16 width written above");
  if constexpr (N == 8) wgmma_m64n8k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 16) wgmma_m64n16k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 32) wgmma_m64n32k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 64) wgmma_m64n64k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 128) wgmma_m64n128k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
  else wgmma_m64n256k16_bf16<TransA, TransB>(d, a_desc, b_desc, scale_d);
}

// A from registers by width: wgmma_bf16_rs<N> (N = 64, 128, 256) calls the _rs form above.
template <int N, int TransB = 0>
__device__ __forceinline__ void wgmma_bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "an A-from-registers bf16 width written above");
  if constexpr (N == 64) wgmma_m64n64k16_bf16_rs<TransB>(d, a, b_desc, scale_d);
  else if constexpr (N == 128) wgmma_m64n128k16_bf16_rs<TransB>(d, a, b_desc, scale_d);
  else wgmma_m64n256k16_bf16_rs<TransB>(d, a, b_desc, scale_d);
}

template <int N>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  static_assert(N == 80 || N == 96 || N == 112 || N == 128 || N == 144 || N == 192 || N == 256,
                "an e4m3 width written above");
  if constexpr (N == 80) wgmma_m64n80k32_e4m3(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 96) wgmma_m64n96k32_e4m3(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 112) wgmma_m64n112k32_e4m3(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 128) wgmma_m64n128k32_e4m3(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 144) wgmma_m64n144k32_e4m3(d, a_desc, b_desc, scale_d);
  else if constexpr (N == 192) wgmma_m64n192k32_e4m3(d, a_desc, b_desc, scale_d);
  else wgmma_m64n256k32_e4m3(d, a_desc, b_desc, scale_d);
}

#undef PTXW_ACC32
#undef PTXW_ACC8

}  // namespace ptx
#endif  // sm_90a only

// ================================================================================================
// sm_90a and sm_100a: setmaxnreg (warp-specialised register reallocation)
// ================================================================================================
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(__CUDA_ARCH_FEAT_SM100_ALL) || !defined(__CUDA_ARCH__)
namespace ptx {

// Every warp of a warpgroup executes the same call. The kernel needs a register cap at entry
// (__launch_bounds__(threads, 1)) or ptxas drops these (warning C7508). inc blocks until the pool
// has the registers, so the dec side must run: e.g. 384 threads, producer 40, two consumers 232:
// 128 * (40 + 2 * 232) = 64512 <= 65536.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace ptx
#endif  // sm_90a and sm_100a

// ================================================================================================
// sm_100a only: tcgen05 (tensor memory and the 5th-generation tensor-core MMA).
// ================================================================================================
#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || !defined(__CUDA_ARCH__)
namespace ptx {

// Tensor memory (TMEM): 128 lanes x 512 columns of 32 bits per SM. An address is
// (lane << 16) | column. Warp w (w % 4 within its warpgroup) may access lanes 32*(w%4) .. +31 only.
__device__ __forceinline__ uint32_t tmem_addr(uint32_t base, uint32_t lane, uint32_t col) {
  return base + (lane << 16) + col;
}

// One whole warp allocates `ncols` columns (a power of two, 32..512); the base address is written to
// *slot in shared memory. Publish it with tcgen05_fence_before_sync / barrier /
// tcgen05_fence_after_sync, then read *slot. The same warp frees the columns before exit.
__device__ __forceinline__ void tmem_alloc(uint32_t* slot, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_u32(slot)), "r"(ncols)
               : "memory");
}
// Promise not to allocate again, so other CTAs on the SM are not kept waiting.
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_dealloc(uint32_t base, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(base), "r"(ncols) : "memory");
}

// Order tcgen05 operations across a thread synchronisation (barrier, mbarrier wait):
// before_sync on the signalling side, after_sync on the waiting side.
__device__ __forceinline__ void tcgen05_fence_before_sync() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after_sync() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// Shared-memory matrix descriptor for tcgen05.mma (differs from Hopper's): bits 0-13 address>>4,
// 16-29 leading byte offset>>4, 32-45 stride byte offset>>4, 46-47 version = 1, 49-51 base offset,
// 52 LBO mode, 61-63 swizzle: 0 none, 1 128B with 32B atoms, 2 128B, 4 64B, 6 32B.
enum class UmmaSwizzle : uint64_t { None = 0, B128_Base32B = 1, B128 = 2, B64 = 4, B32 = 6 };

__device__ __forceinline__ uint64_t umma_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                              UmmaSwizzle swizzle) {
  return static_cast<uint64_t>((smem_u32(smem) & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 46) |
         (static_cast<uint64_t>(swizzle) << 61);
}

// K-major tile with 128-byte rows from a SWIZZLE_128B TMA box, 1024-byte aligned (as on Hopper:
// 8-row groups 1024 bytes apart; step K by +32 bytes, i.e. +2 in the descriptor, per 16 bf16).
__device__ __forceinline__ uint64_t umma_desc_k_sw128(const void* tile) {
  return umma_desc(tile, 16, 1024, UmmaSwizzle::B128);
}

// Instruction descriptor for kind::f16 with f32 accumulation: bits 4-5 D format (1 = f32),
// 7-9 A format and 10-12 B format (0 = f16, 1 = bf16), 15/16 A/B MN-major, 17-22 N>>3, 24-28 M>>4.
__host__ __device__ constexpr uint32_t umma_idesc_f16(uint32_t m, uint32_t n, bool bf16, bool a_mn_major = false,
                                                      bool b_mn_major = false) {
  return (1u << 4) | ((bf16 ? 1u : 0u) << 7) | ((bf16 ? 1u : 0u) << 10) | ((a_mn_major ? 1u : 0u) << 15) |
         ((b_mn_major ? 1u : 0u) << 16) | ((n >> 3) << 17) | ((m >> 4) << 24);
}

// D[tmem] (+)= A[smem] * B[smem]. Issued by ONE thread; asynchronous; completion via tcgen05_commit.
// accumulate = 0 overwrites D (the first K step).
__device__ __forceinline__ void tcgen05_mma_f16(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                                uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
      ::"r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate) : "memory");
}

// The barrier receives one arrival when all earlier tcgen05 async operations of this thread
// (MMAs, copies) have completed: use it to free a smem stage or to tell the epilogue D is ready.
__device__ __forceinline__ void tcgen05_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(smem_u32(bar))
               : "memory");
}

// Warp-wide: lane l of the warp receives TMEM lane (taddr's lane + l), 16 consecutive 32-bit columns.
// The registers are valid only after tcgen05_wait_ld().
__device__ __forceinline__ void tmem_ld_32x32b_x16(uint32_t taddr, uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, [%16];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
        "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
      : "r"(taddr)
      : "memory");
}

__device__ __forceinline__ void tcgen05_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }

// The same wait, also tying the loaded registers to it so the compiler cannot use them earlier.
__device__ __forceinline__ void tcgen05_wait_ld(uint32_t (&r)[16]) {
  asm volatile("tcgen05.wait::ld.sync.aligned;"
               : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3]), "+r"(r[4]), "+r"(r[5]), "+r"(r[6]), "+r"(r[7]),
                 "+r"(r[8]), "+r"(r[9]), "+r"(r[10]), "+r"(r[11]), "+r"(r[12]), "+r"(r[13]), "+r"(r[14]), "+r"(r[15])
               :
               : "memory");
}

// Warp-wide: the reverse of tmem_ld_32x32b_x16. Wait with tcgen05_wait_st() before the MMA (or a
// load) reads what was stored.
__device__ __forceinline__ void tmem_st_32x32b_x16(uint32_t taddr, const uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
      "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};"
      ::"r"(taddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15])
      : "memory");
}

__device__ __forceinline__ void tcgen05_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

// One thread: asynchronous copy of a 128-lane x 256-bit block from shared memory (described by a
// descriptor) into TMEM, e.g. block-scale factors; completion through tcgen05_commit like an MMA.
__device__ __forceinline__ void tcgen05_cp_128x256b(uint32_t taddr, uint64_t src_desc) {
  asm volatile("tcgen05.cp.cta_group::1.128x256b [%0], %1;" ::"r"(taddr), "l"(src_desc) : "memory");
}

}  // namespace ptx
#endif  // sm_100a only
