// Compile-only use of every common, sm_90a and setmaxnreg wrapper of ptx_wrappers.cuh, in kernels
// shaped like the real thing (the test inlines the header in place of the #include and builds for
// sm_90a; test_compile.py checks that each wrapper name appears here and that the SASS shows it).
#include "ptx_wrappers.cuh"

namespace {
constexpr int BM = 128, BN = 256, BK = 64, STAGES = 3;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
}  // namespace

// A 2-CTA-cluster bf16 GEMM main loop: warpgroup 0 produces (B shared by multicast), warpgroups 1-2
// each own 64 rows x 256 columns; stmatrix + TMA store epilogue.
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_mainloop(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  const __grid_constant__ CUtensorMap map_c, int K) {
  extern __shared__ uint8_t raw[];
  uint8_t* base = raw + ((1024 - (ptx::smem_u32(raw) & 1023)) & 1023);
  __nv_bfloat16* sa = reinterpret_cast<__nv_bfloat16*>(base);
  __nv_bfloat16* sb = reinterpret_cast<__nv_bfloat16*>(base + STAGES * A_BYTES);
  __nv_bfloat16* sc = sa;  // the epilogue reuses stage memory once the main loop is done
  uint64_t* full = reinterpret_cast<uint64_t*>(base + STAGES * (A_BYTES + B_BYTES));
  uint64_t* empty = full + STAGES;
  const uint32_t rank = ptx::cluster_ctarank();
  const uint32_t wg = ptx::warpgroup_idx();
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_map(&map_a);
    ptx::tma_prefetch_map(&map_b);
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], 2 * ptx::cluster_nctarank());
    }
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();
  ptx::griddep_wait();
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, kblocks = K / BK;
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (ptx::warp_idx() == 0 && ptx::elect_one()) {
      for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % STAGES;
        ptx::mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
        ptx::mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
        ptx::tma_load_2d(sa + s * BM * BK, &map_a, &full[s], kb * BK, m0);
        ptx::tma_load_2d_multicast(sb + s * BN * BK + rank * (BN / 2) * BK, &map_b, &full[s], kb * BK,
                                   n0 + rank * (BN / 2), 0x3);
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int cw = wg - 1;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      ptx::mbar_wait(&full[s], (kb / STAGES) & 1);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 16; ++k)
        ptx::wgmma_m64n256k16_bf16(d, ptx::wgmma_desc_k_sw128(sa + s * BM * BK + cw * 64 * BK) + 2 * k,
                                   ptx::wgmma_desc_k_sw128(sb + s * BN * BK) + 2 * k, (kb | k) != 0);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_acc(d);
      if (threadIdx.x % 128 == 0)
        for (uint32_t r = 0; r < 2; ++r) ptx::mbar_arrive_cluster_stage(&empty[s], r);
    }
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      const int row = cw * 64 + warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), col = 16 * j + 8 * (lane / 16);
      ptx::stmatrix_x4(sc + row * BN + col, ptx::pack_bf16x2(d[8 * j], d[8 * j + 1]),
                       ptx::pack_bf16x2(d[8 * j + 2], d[8 * j + 3]), ptx::pack_bf16x2(d[8 * j + 4], d[8 * j + 5]),
                       ptx::pack_bf16x2(d[8 * j + 6], d[8 * j + 7]));
    }
    ptx::fence_proxy_async_smem();
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (threadIdx.x == 128) {
      ptx::tma_store_2d(&map_c, sc, n0, m0);
      ptx::tma_store_commit();
      ptx::tma_store_wait_read<0>();
    }
  }
  ptx::griddep_launch_dependents();
  ptx::cluster_sync();
}

// Attention-shaped: S = Q K^T (64 x 64), P = bf16(S) fed from registers into O += P V with V
// MN-major ([keys][head_dim], head_dim contiguous); batches/heads through 3-D maps.
__global__ void __launch_bounds__(128, 1)
    attention_tile(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o, int head) {
  __shared__ alignas(1024) __nv_bfloat16 q[64 * 64], k[64 * 64], v[2 * 64 * 64];
  __nv_bfloat16* o = v;  // the output tile reuses V once the last wgmma reading it has completed
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(q) + sizeof(k));
    ptx::mbar_expect_tx(&bar, sizeof(v));  // a second announcement in the same phase
    ptx::tma_load_3d(q, &map_q, &bar, 0, 0, head);
    ptx::tma_load_3d(k, &map_k, &bar, 0, 0, head);
    ptx::tma_load_3d(v, &map_v, &bar, 0, 0, head);
    ptx::tma_load_3d(v + 64 * 64, &map_v, &bar, 64, 0, head);
  }
  while (!ptx::mbar_try_wait(&bar, 0)) {
  }
  float s[32], acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    ptx::wgmma_m64n64k16_bf16(s, ptx::wgmma_desc(q, 0, 1024, ptx::WgmmaSwizzle::B128) + 2 * kk,
                              ptx::wgmma_desc_k_sw128(k) + 2 * kk, kk > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(s);
  for (int i = 0; i < 32; ++i) s[i] = (ptx::wgmma_acc_row(i) >= ptx::wgmma_acc_col(i)) ? s[i] * 0.125f : 0.f;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t p[4] = {ptx::pack_bf16x2(s[8 * kk], s[8 * kk + 1]), ptx::pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]),
                           ptx::pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]), ptx::pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7])};
    const uint64_t dv = ptx::wgmma_desc(v, 64 * 64 * 2, 1024, ptx::WgmmaSwizzle::B128) + (2048 >> 4) * kk;
    ptx::wgmma_fence();  // p was just written by ordinary instructions
    ptx::wgmma_m64n128k16_bf16_rs<1>(acc, p, dv, 1);
  }
  ptx::wgmma_m64n128k16_bf16<0, 1>(acc, ptx::wgmma_desc_k_sw128(q), ptx::wgmma_desc(v, 8192, 1024, ptx::WgmmaSwizzle::B128), 1);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(acc);
  for (int i = 0; i < 64; ++i) o[ptx::wgmma_acc_row(i) * 128 + ptx::wgmma_acc_col(i)] = __float2bfloat16(acc[i]);
  ptx::fence_proxy_async_smem();
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::tma_store_3d(&map_o, o, 0, 0, head);  // a 64 x 128 box
    ptx::tma_store_commit();
    ptx::tma_store_wait_all<0>();
  }
}

// fp8 tile: e4m3 operands, K-major, loaded with a 3-D multicast into both CTAs of a pair.
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128, 1)
    fp8_tile(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* out) {
  __shared__ alignas(1024) uint8_t a[64 * 128], b[128 * 128];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t rank = ptx::cluster_ctarank();
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(a) + sizeof(b));
    ptx::tma_load_2d(a, &map_a, &bar, 0, blockIdx.x * 64);
    ptx::tma_load_3d_multicast(b + rank * 64 * 128, &map_b, &bar, 0, rank * 64, 0, 0x3);
  }
  ptx::mbar_wait(&bar, 0);
  float d[64];
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    ptx::wgmma_m64n128k32_e4m3(d, ptx::wgmma_desc_k_sw128(a) + 2 * kk, ptx::wgmma_desc_k_sw128(b) + 2 * kk, kk > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
  for (int i = 0; i < 64; ++i) out[(blockIdx.x * 64 + ptx::wgmma_acc_row(i)) * 128 + ptx::wgmma_acc_col(i)] = d[i];
  ptx::cluster_sync();
}

// The wide fp8 form (as the gemm_fp8 reference uses it): one warpgroup, 64 x 256, K = 128.
__global__ void __launch_bounds__(128, 1) fp8_wide_tile(const uint8_t* a_in, const uint8_t* b_in, float* out) {
  __shared__ alignas(1024) uint8_t a[64 * 128], b[256 * 128];
  for (int i = threadIdx.x; i < 64 * 128; i += 128) a[i] = a_in[i];
  for (int i = threadIdx.x; i < 256 * 128; i += 128) b[i] = b_in[i];
  ptx::fence_proxy_async_smem();
  __syncthreads();
  float d[128];
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    ptx::wgmma_m64n256k32_e4m3(d, ptx::wgmma_desc_k_sw128(a) + 2 * kk, ptx::wgmma_desc_k_sw128(b) + 2 * kk, kk > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
  for (int i = 0; i < 128; ++i) out[ptx::wgmma_acc_row(i) * 256 + ptx::wgmma_acc_col(i)] = d[i];
}

// Every other wgmma width: bf16 64 x N for N = 8, 16, 32 and e4m3 64 x N for N = 80 ... 192, each by
// its own name (Mma) and through the width-templated forms, on one A and one B tile.
template <int N, void (*Mma)(float (&)[N / 2], uint64_t, uint64_t, int)>
__device__ void bf16_width(const uint8_t* a, const uint8_t* b, float* out) {
  float d[N / 2];
  ptx::wgmma_fence();
  Mma(d, ptx::wgmma_desc_k_sw128(a), ptx::wgmma_desc_k_sw128(b), 0);
  ptx::wgmma_bf16<N>(d, ptx::wgmma_desc_k_sw128(a) + 2, ptx::wgmma_desc_k_sw128(b) + 2, 1);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
  for (int i = 0; i < N / 2; ++i) out[ptx::wgmma_acc_row(i) * N + ptx::wgmma_acc_col(i)] += d[i];
}

template <int N, void (*Mma)(float (&)[N / 2], uint64_t, uint64_t, int)>
__device__ void e4m3_width(const uint8_t* a, const uint8_t* b, float* out) {
  float d[N / 2];
  ptx::wgmma_fence();
  Mma(d, ptx::wgmma_desc_k_sw128(a), ptx::wgmma_desc_k_sw128(b), 0);
#pragma unroll
  for (int kk = 1; kk < 4; ++kk)
    ptx::wgmma_e4m3<N>(d, ptx::wgmma_desc_k_sw128(a) + 2 * kk, ptx::wgmma_desc_k_sw128(b) + 2 * kk, 1);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
  for (int i = 0; i < N / 2; ++i) out[ptx::wgmma_acc_row(i) * N + ptx::wgmma_acc_col(i)] += d[i];
}

__global__ void __launch_bounds__(128, 1) other_widths(const uint8_t* a_in, const uint8_t* b_in, float* out) {
  __shared__ alignas(1024) uint8_t a[64 * 128], b[192 * 128];
  for (int i = threadIdx.x; i < 64 * 128; i += 128) a[i] = a_in[i];
  for (int i = threadIdx.x; i < 192 * 128; i += 128) b[i] = b_in[i];
  ptx::fence_proxy_async_smem();
  __syncthreads();
  bf16_width<8, ptx::wgmma_m64n8k16_bf16<0, 0>>(a, b, out);
  bf16_width<16, ptx::wgmma_m64n16k16_bf16<0, 0>>(a, b, out);
  bf16_width<32, ptx::wgmma_m64n32k16_bf16<0, 0>>(a, b, out);
  e4m3_width<80, ptx::wgmma_m64n80k32_e4m3>(a, b, out);
  e4m3_width<96, ptx::wgmma_m64n96k32_e4m3>(a, b, out);
  e4m3_width<112, ptx::wgmma_m64n112k32_e4m3>(a, b, out);
  e4m3_width<144, ptx::wgmma_m64n144k32_e4m3>(a, b, out);
  e4m3_width<192, ptx::wgmma_m64n192k32_e4m3>(a, b, out);
}

// Small helpers: bulk copy of a vector, ldmatrix, and a distributed-shared-memory exchange.
__global__ void __cluster_dims__(2, 1, 1) misc(const float* in, float* out) {
  __shared__ alignas(128) float buf[256];
  __shared__ alignas(16) uint16_t tile[32 * 8];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(buf));
    ptx::bulk_load(buf, in + blockIdx.x * 256, sizeof(buf), &bar);
  }
  ptx::mbar_wait(&bar, 0);
  if (threadIdx.x < 32) {
    for (int i = threadIdx.x; i < 32 * 8; i += 32) tile[i] = static_cast<uint16_t>(buf[i]);
    __syncwarp();
    uint32_t r0, r1, r2, r3;
    ptx::ldmatrix_x4(tile + (threadIdx.x % 32) * 8, r0, r1, r2, r3);
    out[threadIdx.x] = static_cast<float>(r0 ^ r1 ^ r2 ^ r3);
  }
  const uint32_t peer = ptx::cluster_ctarank() ^ 1;
  const uint32_t remote = ptx::map_to_rank(&buf[threadIdx.x % 256], peer);
  const float theirs = ptx::ld_shared_cluster_f32(remote);
  ptx::cluster_sync();
  ptx::st_shared_cluster_f32(remote, theirs + 1.f);
  ptx::mbar_arrive(&bar);
  ptx::cluster_sync();
  out[blockDim.x + blockIdx.x * blockDim.x + threadIdx.x] = buf[threadIdx.x % 256];
}

// Host: the tensor maps of gemm_mainloop (compile check of the encoder helpers).
extern "C" int make_maps(CUtensorMap* maps, const void* a, const void* b, void* c, int M, int N, int K) {
  if (ptx::encode_tiled_fn() == nullptr) return cudaErrorNotSupported;
  cudaError_t err = ptx::make_tma_map_2d(&maps[0], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a, M, K, K, BM, BK,
                                         CU_TENSOR_MAP_SWIZZLE_128B);
  if (err == cudaSuccess)
    err = ptx::make_tma_map_2d(&maps[1], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, b, N, K, K, BN / 2, BK,
                               CU_TENSOR_MAP_SWIZZLE_128B);
  const uint64_t dims[3] = {static_cast<uint64_t>(N), static_cast<uint64_t>(M), 1};
  const uint64_t strides[2] = {static_cast<uint64_t>(N) * 2, static_cast<uint64_t>(M) * N * 2};
  const uint32_t box[3] = {64, 64, 1};
  if (err == cudaSuccess)
    err = ptx::make_tma_map(&maps[2], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, c, dims, strides, box,
                            CU_TENSOR_MAP_SWIZZLE_NONE);
  return err;
}
