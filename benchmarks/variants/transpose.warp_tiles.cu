// Variant of src/ptxbench/kernels/reference/sm_90a/transpose.cu: every WARP owns whole tiles, with its own
// ring of input stages, its own two output buffers and its own TMA loads and stores (lane 0), so the loop
// has no __syncthreads and no CTA-wide hand-off at all. Measured and not adopted (H200,
// benchmarks/results/kernel_variants_h200.md, 2026-12-04): r16384-c8192 88.8 -> 83.7 % of torch.compile,
// r4096-c4096 96.1 -> 90.9 %, r128-c32768 90.5 -> 91.6 %.
//
// What changes: in the reference, the 4 warps of a CTA share each 64 x 64 tile (16 of its 8 x 8 blocks
// each) and meet at one __syncthreads per tile, after which thread 0 alone computes the tile's place,
// stores it, waits for an older store and refills the stage; with one CTA per SM (the deep ring, used on
// r16384-c8192) that chain is serial per SM. The budget per tile and SM is 16 KB / (4.28 TB/s / 132) =
// 505 ns, and the measured time is 575 ns per tile (142.7 us / 248 tiles per CTA). Here a warp moves all 64
// blocks of its tile (16 ldmatrix.x4.trans + 16 stmatrix.x4, the same instructions per tile as before),
// then: fence.proxy.async in each lane -> __syncwarp -> lane 0 stores, commits and refills the stage. Four
// warps per SM run four independent chains, so a tile that lands late stalls one warp, not the SM, and
// no warp waits for thread 0's bookkeeping of another warp's tile.
// - Work split: global warp gw = warp * gridDim.x + blockIdx.x takes tiles gw, gw + GW, ... (GW = all
//   warps; warp-major, so consecutive tiles, which share DRAM pages, are in flight on different SMs at
//   once, as consecutive CTAs are in the reference). Tile order: the reference's grouped raster.
// - Rings: STAGES input tiles per warp (kWarpStages, default 3: 12 tiles = 96 KB in flight per SM, the
//   deep ring's amount, so only the synchronisation differs) and 2 output tiles per warp; a store must
//   have finished reading an output tile before it is rewritten (lane 0: cp.async.bulk.wait_group.read 1
//   before the warp writes, i.e. at most the previous tile's store still reads). Shared memory at 3 stages:
//   4 x (3 + 2) x 8 KB = 160 KB, one CTA of 128 threads per SM; at 5 stages 224 KB.
// - Unchanged: the 128-byte swizzle, the block-transposing ldmatrix/stmatrix pair, zero-filled loads and
//   clipped stores at the edges, the plain fallback kernel.
// The host entry point sizes the shared memory with the same formula as the kernel (kWarpOutBufs, the
// stages); the kernel traps if its dynamic shared memory is smaller than that, rather than overrun it.
//
//   python benchmarks/kernel_variants.py src/ptxbench/kernels/reference/sm_90a/transpose.cu \
//       --variant "warps:@transpose.warp_tiles.cu" --variant "warps5:@transpose.warp_tiles.cu;kWarpStages=5"
//
// The definitions below (the kernel, device_facts, the entry point) replace the reference's definitions
// that start with the same lines.

transpose_tma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y, int n_rt,
                     int n_ct) {
  constexpr int kWarpOutBufs = 2;  // output tiles per warp: one being written, one being stored
  constexpr int kWarps = kThreads / 32;
  constexpr uint32_t kNeeded = uint32_t(kWarps * (STAGES + kWarpOutBufs)) * kTileBytes + 8u * kWarps * STAGES + 1024u;
  extern __shared__ uint8_t smem_raw[];
  uint32_t dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  if (dynamic_smem < kNeeded) __trap();  // the host's size and this layout disagree: fail loudly

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // SWIZZLE_128B needs 1024-byte aligned tiles (the swizzle is a function of address bits 7-9).
  uint8_t* const base = smem_raw + ((1024u - (ptx::smem_u32(smem_raw) & 1023u)) & 1023u);
  uint8_t* const in = base + uint32_t(warp * STAGES) * kTileBytes;                        // this warp's stages
  uint8_t* const out = base + uint32_t(kWarps * STAGES + warp * kWarpOutBufs) * kTileBytes;  // and output tiles
  uint64_t* const bars = reinterpret_cast<uint64_t*>(base + uint32_t(kWarps * (STAGES + kWarpOutBufs)) * kTileBytes);
  uint64_t* const full = bars + warp * STAGES;  // this warp's STAGES barriers

  const int tiles = n_rt * n_ct;
  const int gwarps = int(gridDim.x) * kWarps;
  const int first = warp * int(gridDim.x) + int(blockIdx.x);
  const int my_tiles = first < tiles ? (tiles - first + gwarps - 1) / gwarps : 0;

  if (tid == 0) {
    ptx::tma_prefetch_map(&map_x);
    ptx::tma_prefetch_map(&map_y);
    for (int b = 0; b < kWarps * STAGES; ++b) ptx::mbar_init(&bars[b], 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();  // the only CTA barrier: the mbarriers are initialised

  auto issue_tile = [&](int i, int s) {  // this warp's local tile i into its stage s (lane 0)
    int rt, ct;
    ptx::grouped_tile(first + i * gwarps, n_rt, n_ct, kGroup, rt, ct);
    ptx::mbar_arrive_expect_tx(&full[s], kTileBytes);  // the whole box, even where it hangs over an edge
    ptx::tma_load_2d(in + s * kTileBytes, &map_x, &full[s], ct * kTile, rt * kTile);  // {column, row}
  };
  if (lane == 0) {
    const int prologue = my_tiles < STAGES ? my_tiles : STAGES;
    for (int s = 0; s < prologue; ++s) issue_tile(s, s);
  }

  ptx::RingState at;  // local tile i is in stage i % STAGES, of parity (i / STAGES) & 1
  const int m = lane >> 3, k = lane & 7;  // ldmatrix/stmatrix x4: lanes 8m..8m+7 address rows 0..7 of matrix m
  int ob = 0;
  for (int i = 0; i < my_tiles; ++i) {
    const uint8_t* const src = in + at.stage * kTileBytes;
    uint8_t* const dst = out + ob * kTileBytes;
    // Stores issued so far: this warp's tiles 0..i-1. out[ob] was last read by the store of tile i - 2.
    if (lane == 0) ptx::tma_store_wait_read<kWarpOutBufs - 1>();
    __syncwarp();
    ptx::mbar_wait(&full[at.stage], at.phase);

#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int b = j * 4 + m;           // this lane's 8 x 8 block of the tile, 0..63
      const int bi = b >> 3, bj = b & 7;  // X rows 8bi.., X columns 8bj..
      uint32_t r0, r1, r2, r3;
      ptx::ldmatrix_x4_trans(src + (8 * bi + k) * 128 + ((bj ^ k) << 4), r0, r1, r2, r3);
      ptx::stmatrix_x4(dst + (8 * bj + k) * 128 + ((bi ^ k) << 4), r0, r1, r2, r3);
    }
    ptx::fence_proxy_async_smem();  // this lane's stmatrix -> visible to the TMA store
    __syncwarp();                   // every lane has read the stage and written (and fenced) its blocks
    if (lane == 0) {
      int rt, ct;
      ptx::grouped_tile(first + i * gwarps, n_rt, n_ct, kGroup, rt, ct);
      ptx::tma_store_2d(&map_y, dst, rt * kTile, ct * kTile);  // Y {column = X row, row = X column}
      ptx::tma_store_commit();
      if (i + STAGES < my_tiles) issue_tile(i + STAGES, at.stage);
    }
    at.advance(STAGES);
    if (++ob == kWarpOutBufs) ob = 0;
  }
  if (lane == 0) ptx::tma_store_wait_all<0>();  // this warp's stores are done before the CTA's smem goes
}

// Only the SM count here: the entry point sets up its one kernel (the reference's set up the 8- and 12-stage
// instantiations, which this variant would compile but never launch).
DeviceFacts* device_facts() {
  static DeviceFacts facts[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
  DeviceFacts& f = facts[dev];
  if (!f.ready) {
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    f.ready = true;  // blocks_per_sm: 0 until the entry point has asked, -1 if the kernel cannot run
  }
  return &f;
}

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
  constexpr int kWarpStages = 3;    // input tiles per warp
  constexpr int kWarpOutBufs = 2;   // must equal the kernel's (it traps if its shared memory is short)
  constexpr int kWarps = kThreads / 32;
  constexpr uint32_t kSmem =
      uint32_t(kWarps * (kWarpStages + kWarpOutBufs)) * kTileBytes + 8u * kWarps * kWarpStages + 1024u;
  if (R <= 0 || C <= 0) return (int)cudaGetLastError();
  const int64_t n_rt = (R + kTile - 1) / kTile, n_ct = (C + kTile - 1) / kTile;
  bool fast = (reinterpret_cast<uintptr_t>(X) % 16 == 0) && (reinterpret_cast<uintptr_t>(Y) % 16 == 0) &&
              (R % 8 == 0) && (C % 8 == 0) && R < (int64_t(1) << 31) && C < (int64_t(1) << 31) &&
              n_rt * n_ct < (int64_t(1) << 31) - 2 * 65536;
  DeviceFacts* dev = fast ? device_facts() : nullptr;
  if (dev != nullptr && dev->blocks_per_sm == 0) {
    int blocks = 0;
    const bool ok =
        cudaFuncSetAttribute(transpose_tma_kernel<kWarpStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
            cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, transpose_tma_kernel<kWarpStages>, kThreads, kSmem) ==
            cudaSuccess &&
        blocks > 0;
    if (!ok) cudaGetLastError();
    dev->blocks_per_sm = ok ? blocks : -1;
  }
  fast = dev != nullptr && dev->blocks_per_sm > 0;
  CUtensorMap map_x, map_y;
  if (fast) {
    fast = ptx::make_tma_map_2d(&map_x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, X, uint64_t(R), uint64_t(C),
                                uint64_t(C), kTile, kTile, CU_TENSOR_MAP_SWIZZLE_128B) == cudaSuccess &&
           ptx::make_tma_map_2d(&map_y, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, Y, uint64_t(C), uint64_t(R),
                                uint64_t(R), kTile, kTile, CU_TENSOR_MAP_SWIZZLE_128B) == cudaSuccess;
  }
  if (fast) {
    // As many CTAs as are resident, but no more than the tiles need (4 warps = 4 tiles at a time per CTA).
    const int64_t tiles = n_rt * n_ct;
    const int64_t needed = (tiles + kWarps - 1) / kWarps;
    const int64_t resident = int64_t(dev->sms) * dev->blocks_per_sm;
    const unsigned grid = unsigned(needed < resident ? needed : resident);
    transpose_tma_kernel<kWarpStages><<<grid, kThreads, kSmem, stream>>>(map_x, map_y, int(n_rt), int(n_ct));
  } else {
    const int64_t row_tiles = (R + 31) / 32, col_tiles = (C + 31) / 32;
    if (col_tiles > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const dim3 grid(unsigned(col_tiles), unsigned(row_tiles < 65535 ? row_tiles : 65535));
    transpose_plain_kernel<<<grid, dim3(32, 8), 0, stream>>>(X, Y, R, C, row_tiles);
  }
  return (int)cudaGetLastError();
}
