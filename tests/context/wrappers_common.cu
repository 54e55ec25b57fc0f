// Uses every wrapper of the common part of ptx_wrappers.cuh (no arch-only section), so the header
// must build for both sm_90a and sm_100a when a file uses only these (the test inlines the header).
#include "ptx_wrappers.cuh"

// A 2-CTA cluster moves 64 x 64 bf16 tiles: TMA in (plain, multicast, 2-D and 3-D), a register
// round trip through ldmatrix/stmatrix, TMA out; plus a bulk copy and a DSMEM exchange.
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
    common_tile(const __grid_constant__ CUtensorMap map_in, const __grid_constant__ CUtensorMap map_in3,
                const __grid_constant__ CUtensorMap map_out, const __grid_constant__ CUtensorMap map_out3,
                const float* vec, float* out, int batch) {
  __shared__ alignas(1024) __nv_bfloat16 in[64 * 64], in3[64 * 64], shared_tile[64 * 64], shared3[64 * 64],
      res[64 * 64];
  __shared__ alignas(128) float v[128];
  __shared__ alignas(8) uint64_t bar[2];
  const uint32_t rank = ptx::cluster_ctarank();
  ptx::griddep_wait();
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_map(&map_in);
    ptx::mbar_init(&bar[0], 1);
    ptx::mbar_init(&bar[1], ptx::cluster_nctarank() + 1);
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();
  if (ptx::warp_idx() == 0 && ptx::elect_one()) {
    ptx::mbar_arrive_expect_tx(&bar[0], sizeof(in) + sizeof(in3) + sizeof(shared_tile) + sizeof(shared3));
    ptx::mbar_expect_tx(&bar[0], sizeof(v));
    ptx::tma_prefetch_2d(&map_in, 0, blockIdx.x * 64);  // L2 only: the load below then hits it
    ptx::tma_load_2d(in, &map_in, &bar[0], 0, blockIdx.x * 64);
    ptx::tma_load_3d(in3, &map_in3, &bar[0], 0, 0, batch);
    // each CTA fetches half of the tiles both need (the maps' boxes are 32 rows here)
    ptx::tma_load_2d_multicast(shared_tile + rank * 32 * 64, &map_in, &bar[0], 64, rank * 32, 0x3);
    ptx::tma_load_3d_multicast(shared3 + rank * 32 * 64, &map_in3, &bar[0], 0, rank * 32, batch + 1, 0x3);
    ptx::bulk_load(v, vec, sizeof(v), &bar[0]);
  }
  if (!ptx::mbar_try_wait(&bar[0], 0)) ptx::mbar_wait(&bar[0], 0);

  // 16 x 16 sub-tiles through ldmatrix / stmatrix (one warp per 16-row band).
  const int lane = threadIdx.x % 32, band = ptx::warp_idx() % 4 + 4 * ptx::warpgroup_idx();  // one warpgroup
  for (int j = 0; j < 4; ++j) {
    const int row = 16 * band + (lane % 16), col = 16 * j + 8 * (lane / 16);
    uint32_t r0, r1, r2, r3;
    ptx::ldmatrix_x4(in + row * 64 + col, r0, r1, r2, r3);
    const uint32_t scaled = ptx::pack_bf16x2(v[lane] * 2.f, v[lane + 32]);
    ptx::stmatrix_x4(res + row * 64 + col, r0 ^ scaled, r1, r2, r3);
  }
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::tma_store_2d(&map_out, res, 0, blockIdx.x * 64);
    ptx::tma_store_3d(&map_out3, in3, 0, 0, batch);
    ptx::tma_store_commit();
    ptx::tma_store_wait_read<0>();
    ptx::tma_store_wait_all<0>();
  }
  // Distributed shared memory: read the peer's vector, write ours into its copy, then tell its barrier.
  const uint32_t peer = rank ^ 1;
  const uint32_t remote = ptx::map_to_rank(&v[threadIdx.x], peer);
  const float theirs = ptx::ld_shared_cluster_f32(remote) +
                       ptx::ld_shared_cluster_f32x2(ptx::map_to_rank(&v[threadIdx.x & ~1u], peer)).y;
  ptx::cluster_sync();
  ptx::st_shared_cluster_f32(remote, theirs + v[threadIdx.x]);
  if (threadIdx.x == 0) ptx::mbar_arrive_cluster(&bar[1], peer);
  if (threadIdx.x == 1) ptx::mbar_arrive(&bar[1]);
  if (threadIdx.x == 2) ptx::mbar_arrive_cluster_stage(&bar[1], rank);  // its own, through the cluster window
  ptx::mbar_wait(&bar[1], 0);
  out[blockIdx.x * 128 + threadIdx.x] = v[threadIdx.x] + __bfloat162float(shared_tile[threadIdx.x]) +
                                        __bfloat162float(shared3[threadIdx.x]) + ptx::smem_u32(v);
  ptx::griddep_launch_dependents();
  ptx::cluster_sync();
}

// Where each tile number lands in grouped order (a rows x cols grid, `group` tile-rows at a time).
__global__ void grouped_order(int rows, int cols, int group, int2* where) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t < rows * cols) ptx::grouped_tile(t, rows, cols, group, where[t].x, where[t].y);
}

// Each warpgroup writes a 128-byte-swizzled 8-row tile, synchronises only itself, and reads it back
// row by row in logical order.
__global__ void __launch_bounds__(256) swizzled_rows(const uint32_t* in, uint32_t* out) {
  __shared__ alignas(1024) uint8_t tile[2][8 * 128];
  const uint32_t wg = ptx::warpgroup_idx(), t = threadIdx.x % 128;
  for (uint32_t word = 0; word < 2; ++word) {  // thread t owns bytes [8t, 8t + 8) of the tile
    const uint32_t row = t / 16, byte = (t % 16) * 8 + word * 4;
    *reinterpret_cast<uint32_t*>(&tile[wg][ptx::sw128_offset(row, byte)]) = in[threadIdx.x * 2 + word];
  }
  ptx::named_barrier_sync(1 + wg, 128);
  const uint32_t row = t / 16, byte = (15 - t % 16) * 8;  // a neighbour's bytes
  out[threadIdx.x] = *reinterpret_cast<const uint32_t*>(&tile[wg][ptx::sw128_offset(row, byte)]);
}

// A persistent producer/consumer ring: warp 1 streams rows of `in` (bulk copies) into a 4-stage ring for
// the tiles this CTA walks; warp 0 waits for each stage, transposes 8x8 blocks of it through ldmatrix
// .trans / stmatrix, reduces exp(x) over it and releases it.
__global__ void __launch_bounds__(64) ring_pipeline(const float* in, float* out, int tiles_m, int tiles_n) {
  constexpr int kStages = 4;
  struct Shared {
    float rows[kStages][256];
    uint16_t block[8 * 8];
    ptx::RingBarriers<kStages> ring;
  };
  extern __shared__ uint8_t raw[];
  Shared& s = *ptx::align_smem<Shared>(raw);
  if (threadIdx.x == 0) s.ring.init(kStages, 1);
  __syncthreads();
  ptx::RingState at;
  const ptx::TileScheduler schedule(tiles_m, tiles_n, 2, blockIdx.x, gridDim.x);
  if (threadIdx.x == 32) {
    for (ptx::TileScheduler t = schedule; t.valid(); t.next()) {
      int tm, tn;
      t.coords(tm, tn);
      uint64_t* full = s.ring.producer_acquire(at, sizeof(s.rows[0]));
      ptx::bulk_load(s.rows[at.stage], in + (tm * tiles_n + tn) * 256, sizeof(s.rows[0]), full);
      at.advance(kStages);
    }
  } else if (threadIdx.x < 32) {
    float total = 0.f;
    for (ptx::TileScheduler t = schedule; t.valid(); t.next()) {
      s.ring.consumer_wait(at);
      for (int i = threadIdx.x; i < 256; i += 32) total += ptx::ex2_approx(s.rows[at.stage][i] * 1.4426950f);
      if (threadIdx.x < 16) s.block[threadIdx.x] = static_cast<uint16_t>(s.rows[at.stage][threadIdx.x]);
      __syncwarp();
      uint32_t r0, r1, r2, r3;
      ptx::ldmatrix_x4_trans(s.block + (threadIdx.x % 8) * 8, r0, r1, r2, r3);
      __syncwarp();
      ptx::stmatrix_x4(s.block + (threadIdx.x % 8) * 8, r0, r1, r2, r3);
      total += ptx::bf16_lo(r0 ^ r3) + ptx::bf16_hi(r1 ^ r2);
      __syncwarp();
      if (threadIdx.x == 0) s.ring.consumer_release(at.stage);
      at.advance(kStages);
    }
    out[blockIdx.x * 32 + threadIdx.x] = ptx::lg2_approx(total);
  }
}

// Each CTA of a 4-CTA cluster sends its (max, sum) pair into slot [rank] of every peer with st.async,
// which completes the bytes on the peer's barrier; each then waits (acquire at cluster scope) and merges.
__global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(32) exchange_pairs(const float2* in, float2* out) {
  __shared__ alignas(8) uint64_t bar;
  __shared__ float2 slots[4];
  const uint32_t rank = ptx::cluster_ctarank(), csize = ptx::cluster_nctarank();
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();
  if (threadIdx.x == 0) ptx::mbar_arrive_expect_tx(&bar, 8u * csize);
  const float2 mine = in[blockIdx.x];
  if (threadIdx.x < csize)
    ptx::st_async_v2_f32(ptx::map_to_rank(&slots[rank], threadIdx.x), mine.x, mine.y,
                         ptx::map_to_rank(&bar, threadIdx.x));
  ptx::mbar_wait_cluster(&bar, 0);
  if (threadIdx.x < csize) out[blockIdx.x * 4 + threadIdx.x] = slots[threadIdx.x];
  ptx::cluster_sync();  // no CTA exits while a peer may still write its slots
}

extern "C" int encode(CUtensorMap* map, void* base, int rows, int cols) {
  if (ptx::encode_tiled_fn() == nullptr) return cudaErrorNotSupported;
  const uint64_t dims[3] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), 4};
  const uint64_t strides[2] = {static_cast<uint64_t>(cols) * 2, static_cast<uint64_t>(rows) * cols * 2};
  const uint32_t box[3] = {64, 64, 1};
  cudaError_t err = ptx::make_tma_map(&map[0], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box,
                                      CU_TENSOR_MAP_SWIZZLE_128B);
  if (err == cudaSuccess)
    err = ptx::make_tma_map_2d(&map[1], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, cols, cols, 64, 64,
                               CU_TENSOR_MAP_SWIZZLE_128B);
  return err;
}
