// Runs the wrappers of ptx_wrappers.cuh on a Hopper GPU and checks the numbers, so that the facts the
// context pack states (descriptor encodings, swizzled layouts, accumulator and A-fragment layouts,
// stmatrix addressing, TMA zero-fill and clipping, the full/empty mbarrier protocol with multicast,
// setmaxnreg) are measured, not remembered. Build: nvcc -std=c++17 -gencode
// arch=compute_90a,code=sm_90a -I src/ptxbench/context tests/context/gpu_wrappers_check.cu
// Run: ./a.out [props|gemm|shapes|fp8|mnmn|all]; prints one PASS/FAIL line per check, exits 1 on a failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_fp8.h>
#include "ptx_wrappers.cuh"

#define CHECK(x)                                                                                \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("FAIL cuda %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// 1. A warp-specialised, cluster-multicast GEMM tile: C[M,N] = A[M,K] B[N,K]^T (bf16 in and out).
// ---------------------------------------------------------------------------------------------
namespace gemm {
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, C_BYTES = BM * BN * 2;
constexpr int SMEM = STAGES * (A_BYTES + B_BYTES) + C_BYTES + 2 * STAGES * 8 + 1024;

__global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(384, 1)
    kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
           const __grid_constant__ CUtensorMap map_c, int K) {
  extern __shared__ uint8_t raw[];
  uint8_t* base = raw + ((1024 - (ptx::smem_u32(raw) & 1023)) & 1023);  // 1024-aligned for SW128
  bf16* sa = reinterpret_cast<bf16*>(base);
  bf16* sb = reinterpret_cast<bf16*>(base + STAGES * A_BYTES);
  bf16* sc = reinterpret_cast<bf16*>(base + STAGES * (A_BYTES + B_BYTES));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + STAGES * (A_BYTES + B_BYTES) + C_BYTES);
  uint64_t* empty = full + STAGES;

  const uint32_t rank = ptx::cluster_ctarank();
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const uint32_t wg = ptx::warpgroup_idx();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], 2 * 2);  // 2 consumer warpgroups in each of the 2 CTAs
    }
    ptx::mbar_fence_init();
  }
  ptx::cluster_sync();

  const int kblocks = K / BK;
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (ptx::warp_idx() == 0 && ptx::elect_one()) {
      for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % STAGES;
        const uint32_t phase = (kb / STAGES) & 1;
        ptx::mbar_wait(&empty[s], phase ^ 1);
        ptx::mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);  // all of B arrives: half from the peer
        ptx::tma_load_2d(sa + s * BM * BK, &map_a, &full[s], kb * BK, m0);
        ptx::tma_load_2d_multicast(sb + s * BN * BK + rank * (BN / 2) * BK, &map_b, &full[s], kb * BK,
                                   n0 + rank * (BN / 2), 0x3);
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    const int cw = wg - 1;  // this consumer's 64 rows of the tile
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      ptx::mbar_wait(&full[s], (kb / STAGES) & 1);
      ptx::wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) {
        const uint64_t da = ptx::wgmma_desc_k_sw128(sa + s * BM * BK + cw * 64 * BK) + 2 * k;
        const uint64_t db = ptx::wgmma_desc_k_sw128(sb + s * BN * BK) + 2 * k;
        ptx::wgmma_m64n128k16_bf16(d, da, db, (kb > 0 || k > 0) ? 1 : 0);
      }
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_acc(d);
      if (threadIdx.x % 128 == 0) {  // the stage is read: release it in both CTAs (the peer writes it too)
        ptx::mbar_arrive_cluster_stage(&empty[s], 0);
        ptx::mbar_arrive_cluster_stage(&empty[s], 1);
      }
    }
    // Epilogue: registers -> stmatrix -> shared C tile -> one TMA store (clipped at M).
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
    for (int j = 0; j < BN / 16; ++j) {
      const int mi = lane / 8;
      const int row = cw * 64 + warp * 16 + (lane % 8) + 8 * (mi % 2);
      const int col = 16 * j + 8 * (mi / 2);
      ptx::stmatrix_x4(sc + row * BN + col, ptx::pack_bf16x2(d[8 * j + 0], d[8 * j + 1]),
                       ptx::pack_bf16x2(d[8 * j + 2], d[8 * j + 3]), ptx::pack_bf16x2(d[8 * j + 4], d[8 * j + 5]),
                       ptx::pack_bf16x2(d[8 * j + 6], d[8 * j + 7]));
    }
    ptx::fence_proxy_async_smem();
    asm volatile("bar.sync 1, 256;" ::: "memory");  // the two consumer warpgroups only
    if (threadIdx.x == 128) {
      ptx::tma_store_2d(&map_c, sc, n0, m0);
      ptx::tma_store_commit();
      ptx::tma_store_wait_all<0>();
    }
  }
  ptx::cluster_sync();  // the peer may still arrive on our barriers until here
}

bool run() {
  const int M = 200, N = 256, K = 512;  // M is not a multiple of the tile: zero-fill and clipped store
  std::vector<bf16> a(M * K), b(N * K), c(M * N);
  std::vector<float> fa(M * K), fb(N * K);
  srand(1);
  for (int i = 0; i < M * K; ++i) { a[i] = __float2bfloat16(rand() / (float)RAND_MAX * 2 - 1); fa[i] = __bfloat162float(a[i]); }
  for (int i = 0; i < N * K; ++i) { b[i] = __float2bfloat16(rand() / (float)RAND_MAX * 2 - 1); fb[i] = __bfloat162float(b[i]); }
  bf16 *da, *db, *dc;
  CHECK(cudaMalloc(&da, a.size() * 2)); CHECK(cudaMalloc(&db, b.size() * 2)); CHECK(cudaMalloc(&dc, c.size() * 2));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0xFF, c.size() * 2));  // NaN poison
  CUtensorMap ma, mb, mc;
  CHECK(ptx::make_tma_map_2d(&ma, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, da, M, K, K, BM, BK, CU_TENSOR_MAP_SWIZZLE_128B));
  CHECK(ptx::make_tma_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, db, N, K, K, BN / 2, BK, CU_TENSOR_MAP_SWIZZLE_128B));
  CHECK(ptx::make_tma_map_2d(&mc, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dc, M, N, N, BM, BN, CU_TENSOR_MAP_SWIZZLE_NONE));
  // A box wider than the 128-byte swizzle span must be refused by the encoder.
  CUtensorMap bad;
  const bool refused = ptx::make_tma_map_2d(&bad, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, da, M, K, K, BM, 128,
                                            CU_TENSOR_MAP_SWIZZLE_128B) != cudaSuccess;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  dim3 grid(N / BN, ((M + BM - 1) / BM + 1) / 2 * 2);
  kernel<<<grid, 384, SMEM>>>(ma, mb, mc, K);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), dc, c.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)fa[m * K + k] * fb[n * K + k];
      const double got = __bfloat162float(c[m * N + n]);
      const double err = std::fabs(got - ref) / (1.0 + std::fabs(ref));
      if (!(err <= worst)) worst = err;  // NaN-propagating max
    }
  const bool ok = worst < 2e-2 && refused;
  std::printf("%s gemm (TMA SW128 + multicast, full/empty mbarriers, setmaxnreg, wgmma m64n128k16, stmatrix, "
              "TMA store clipped at M=%d): max rel err %.3g; oversized swizzle box refused: %s\n",
              ok ? "PASS" : "FAIL", M, worst, refused ? "yes" : "no");
  cudaFree(da); cudaFree(db); cudaFree(dc);
  return ok;
}
}  // namespace gemm

// ---------------------------------------------------------------------------------------------
// 2. One warpgroup, one 64 x N x 64 product: every bf16 wrapper, K-major and MN-major B, A from
//    shared memory or from registers. Output written through wgmma_acc_row / wgmma_acc_col.
// ---------------------------------------------------------------------------------------------
namespace shapes {
template <int N, bool kBMnMajor, bool kRegA>
__global__ void __launch_bounds__(128, 1)
    kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const bf16* a_glob,
           float* out) {
  __shared__ alignas(1024) bf16 sa[64 * 64];
  __shared__ alignas(1024) bf16 sb[N * 64];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(sa) + sizeof(sb));
    ptx::tma_load_2d(sa, &map_a, &bar, 0, 0);
    if (kBMnMajor) {  // B stored [K][N]: N/64 boxes of 64 K-rows x 64 N (128 bytes)
      for (int atom = 0; atom < N / 64; ++atom) ptx::tma_load_2d(sb + atom * 64 * 64, &map_b, &bar, atom * 64, 0);
    } else {  // B stored [N][K]: one box of N rows x 64 K
      ptx::tma_load_2d(sb, &map_b, &bar, 0, 0);
    }
  }
  ptx::mbar_wait(&bar, 0);
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    // A with a zero leading offset (unused for swizzled K-major), B per its major-ness:
    // MN-major SW128: LBO = distance between 64-wide N atoms, SBO = 8 K-rows = 1024 bytes,
    // K step of 16 rows = 2048 bytes.
    const uint64_t da = ptx::wgmma_desc(sa, 0, 1024, ptx::WgmmaSwizzle::B128) + 2 * k;
    const uint64_t db = kBMnMajor ? ptx::wgmma_desc_mn_sw128(sb, 64 * 64 * 2) + (2048 >> 4) * k
                                  : ptx::wgmma_desc_k_sw128(sb) + 2 * k;
    if constexpr (kRegA) {
      const int r = 16 * warp + lane / 4, c = 16 * k + 2 * (lane % 4);
      auto at = [&](int rr, int cc) { return __bfloat162float(a_glob[rr * 64 + cc]); };
      const uint32_t fr[4] = {ptx::pack_bf16x2(at(r, c), at(r, c + 1)), ptx::pack_bf16x2(at(r + 8, c), at(r + 8, c + 1)),
                              ptx::pack_bf16x2(at(r, c + 8), at(r, c + 9)),
                              ptx::pack_bf16x2(at(r + 8, c + 8), at(r + 8, c + 9))};
      ptx::wgmma_fence();  // the A registers were just written by ordinary instructions
      ptx::wgmma_bf16_rs<N, kBMnMajor ? 1 : 0>(d, fr, db, k > 0);
    } else if constexpr (N == 64) {
      ptx::wgmma_m64n64k16_bf16<0, kBMnMajor ? 1 : 0>(d, da, db, k > 0);
    } else if constexpr (N == 128) {
      ptx::wgmma_m64n128k16_bf16<0, kBMnMajor ? 1 : 0>(d, da, db, k > 0);
    } else {
      ptx::wgmma_m64n256k16_bf16<0, kBMnMajor ? 1 : 0>(d, da, db, k > 0);
    }
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) out[ptx::wgmma_acc_row(i) * N + ptx::wgmma_acc_col(i)] = d[i];
}

template <int N, bool kBMnMajor, bool kRegA>
bool run_one() {
  const int K = 64;
  std::vector<bf16> a(64 * K), b(N * K);  // b holds B as [N][K] or, MN-major, as [K][N]
  std::vector<float> fa(64 * K), fbt(N * K);  // fbt[n*K+k]
  for (int i = 0; i < 64 * K; ++i) { a[i] = __float2bfloat16((rand() % 17 - 8) / 8.f); fa[i] = __bfloat162float(a[i]); }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const bf16 v = __float2bfloat16((rand() % 17 - 8) / 8.f);
      fbt[n * K + k] = __bfloat162float(v);
      b[kBMnMajor ? k * N + n : n * K + k] = v;
    }
  bf16 *da, *db;
  float* dout;
  CHECK(cudaMalloc(&da, a.size() * 2)); CHECK(cudaMalloc(&db, b.size() * 2)); CHECK(cudaMalloc(&dout, 64 * N * 4));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0xFF, 64 * N * 4));
  CUtensorMap ma, mb;
  CHECK(ptx::make_tma_map_2d(&ma, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, da, 64, K, K, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B));
  if (kBMnMajor)
    CHECK(ptx::make_tma_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, db, K, N, N, 64, 64, CU_TENSOR_MAP_SWIZZLE_128B));
  else
    CHECK(ptx::make_tma_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, db, N, K, K, N, 64, CU_TENSOR_MAP_SWIZZLE_128B));
  kernel<N, kBMnMajor, kRegA><<<1, 128>>>(ma, mb, da, dout);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(64 * N);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)fa[m * K + k] * fbt[n * K + k];
      const double err = std::fabs(out[m * N + n] - ref);
      if (!(err <= worst)) worst = err;
    }
  const bool ok = worst < 1e-3;  // inputs are exact in bf16, sums exact in f32
  std::printf("%s wgmma m64n%dk16 bf16, A from %s, B %s-major: max abs err %.3g\n", ok ? "PASS" : "FAIL", N,
              kRegA ? "registers" : "smem (LBO 0)", kBMnMajor ? "MN" : "K", worst);
  cudaFree(da); cudaFree(db); cudaFree(dout);
  return ok;
}

bool run() {
  bool ok = true;
  ok &= run_one<64, false, false>();
  ok &= run_one<128, false, false>();
  ok &= run_one<256, false, false>();
  ok &= run_one<64, true, false>();
  ok &= run_one<128, true, false>();
  ok &= run_one<256, true, false>();
  ok &= run_one<128, false, true>();
  ok &= run_one<128, true, true>();
  ok &= run_one<64, true, true>();   // attention's P · V at head dims 64 and 256
  ok &= run_one<256, true, true>();
  return ok;
}
}  // namespace shapes

// ---------------------------------------------------------------------------------------------
// 3. fp8: wgmma m64n128k32 e4m3, K-major SW128 (128 fp8 per row), K = 128.
// ---------------------------------------------------------------------------------------------
namespace fp8 {
__global__ void __launch_bounds__(128, 1)
    kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, float* out) {
  __shared__ alignas(1024) uint8_t sa[64 * 128];
  __shared__ alignas(1024) uint8_t sb[128 * 128];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(sa) + sizeof(sb));
    ptx::tma_load_2d(sa, &map_a, &bar, 0, 0);
    ptx::tma_load_2d(sb, &map_b, &bar, 0, 0);
  }
  ptx::mbar_wait(&bar, 0);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)  // 32 fp8 = 32 bytes per step
    ptx::wgmma_m64n128k32_e4m3(d, ptx::wgmma_desc_k_sw128(sa) + 2 * k, ptx::wgmma_desc_k_sw128(sb) + 2 * k, k > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
#pragma unroll
  for (int i = 0; i < 64; ++i) out[ptx::wgmma_acc_row(i) * 128 + ptx::wgmma_acc_col(i)] = d[i];
}

bool run() {
  const int M = 64, N = 128, K = 128;
  std::vector<__nv_fp8_e4m3> a(M * K), b(N * K);
  std::vector<float> fa(M * K), fb(N * K);
  for (int i = 0; i < M * K; ++i) { a[i] = __nv_fp8_e4m3((rand() % 9 - 4) / 4.f); fa[i] = float(a[i]); }
  for (int i = 0; i < N * K; ++i) { b[i] = __nv_fp8_e4m3((rand() % 9 - 4) / 4.f); fb[i] = float(b[i]); }
  void *da, *db;
  float* dout;
  CHECK(cudaMalloc(&da, M * K)); CHECK(cudaMalloc(&db, N * K)); CHECK(cudaMalloc(&dout, M * N * 4));
  CHECK(cudaMemcpy(da, a.data(), M * K, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), N * K, cudaMemcpyHostToDevice));
  CUtensorMap ma, mb;
  CHECK(ptx::make_tma_map_2d(&ma, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, da, M, K, K, M, K, CU_TENSOR_MAP_SWIZZLE_128B));
  CHECK(ptx::make_tma_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, db, N, K, K, N, K, CU_TENSOR_MAP_SWIZZLE_128B));
  kernel<<<1, 128>>>(ma, mb, dout);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(M * N);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)fa[m * K + k] * fb[n * K + k];
      const double err = std::fabs(out[m * N + n] - ref);
      if (!(err <= worst)) worst = err;
    }
  const bool ok = worst < 1e-3;
  std::printf("%s wgmma m64n128k32 e4m3 (K-major SW128): max abs err %.3g\n", ok ? "PASS" : "FAIL", worst);
  cudaFree(da); cudaFree(db); cudaFree(dout);
  return ok;
}
}  // namespace fp8

// ---------------------------------------------------------------------------------------------
// 4. Both operands MN-major (TransA = TransB = 1), K = 128: A written by the threads from accumulator-layout
//    registers with the 128-byte swizzle (attention_bwd's dSᵀ tile), B by TMA; the result added by two CTAs
//    into one fp32 output.
// ---------------------------------------------------------------------------------------------
namespace mnmn {
constexpr int K = 128;

__global__ void __launch_bounds__(128, 1)
    kernel(const __grid_constant__ CUtensorMap map_b, const float* x, float* out) {
  __shared__ alignas(1024) bf16 sa[K * 64];  // A stored [K][M]: row k holds A[0..63][k]
  __shared__ alignas(1024) bf16 sb[K * 64];  // B stored [K][N]
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    ptx::mbar_init(&bar, 1);
    ptx::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::mbar_arrive_expect_tx(&bar, sizeof(sb));
    ptx::tma_load_2d(sb, &map_b, &bar, 0, 0);
  }
  uint8_t* a_bytes = reinterpret_cast<uint8_t*>(sa);
#pragma unroll
  for (int half = 0; half < K / 64; ++half)  // the accumulator layout of a 64 x 64 tile, rows 64·half on
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int k = 64 * half + ptx::wgmma_acc_row(i), m = ptx::wgmma_acc_col(i);
      *reinterpret_cast<uint32_t*>(a_bytes + ptx::sw128_offset(k, m * 2)) =
          ptx::pack_bf16x2(x[k * 64 + m], x[k * 64 + m + 1]);
    }
  ptx::fence_proxy_async_smem();
  __syncthreads();
  ptx::mbar_wait(&bar, 0);
  float d[32];
  const uint64_t da = ptx::wgmma_desc_mn_sw128(sa, K * 128), db = ptx::wgmma_desc_mn_sw128(sb, K * 128);
  ptx::wgmma_fence();
#pragma unroll
  for (int k = 0; k < K / 16; ++k) ptx::wgmma_bf16<64, 1, 1>(d, da + 128 * k, db + 128 * k, k > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::wgmma_fence_acc(d);
#pragma unroll
  for (int i = 0; i < 32; ++i) atomicAdd(out + ptx::wgmma_acc_row(i) * 64 + ptx::wgmma_acc_col(i), d[i]);
}

bool run() {
  std::vector<float> x(K * 64), fb(K * 64);  // x[k][m] = A[m][k]; fb[k][n] = B[k][n]
  std::vector<bf16> b(K * 64);
  for (auto& v : x) v = __bfloat162float(__float2bfloat16((rand() % 17 - 8) / 8.f));
  for (int i = 0; i < K * 64; ++i) { b[i] = __float2bfloat16((rand() % 17 - 8) / 8.f); fb[i] = __bfloat162float(b[i]); }
  float *dx, *dout;
  bf16* db;
  CHECK(cudaMalloc(&dx, x.size() * 4)); CHECK(cudaMalloc(&db, b.size() * 2)); CHECK(cudaMalloc(&dout, 64 * 64 * 4));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dout, 0, 64 * 64 * 4));
  CUtensorMap mb;
  CHECK(ptx::make_tma_map_2d(&mb, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, db, K, 64, 64, K, 64, CU_TENSOR_MAP_SWIZZLE_128B));
  kernel<<<2, 128>>>(mb, dx, dout);  // two CTAs add the same product
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(64 * 64);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)x[k * 64 + m] * fb[k * 64 + n];
      const double err = std::fabs(out[m * 64 + n] - 2 * ref);
      if (!(err <= worst)) worst = err;
    }
  const bool ok = worst < 1e-3;  // inputs exact in bf16, sums exact in f32
  std::printf("%s wgmma m64n64k16 bf16, A and B MN-major (A stored by threads), K = %d, added by 2 CTAs: "
              "max abs err %.3g\n", ok ? "PASS" : "FAIL", K, worst);
  cudaFree(dx); cudaFree(db); cudaFree(dout);
  return ok;
}
}  // namespace mnmn

static void props() {
  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  int optin = 0, cluster = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, 0));
  std::printf("PROPS name=%s cc=%d.%d sms=%d smem_per_block_optin=%d smem_per_sm=%zu smem_per_block_default=%zu "
              "regs_per_sm=%d regs_per_block=%d max_threads_per_sm=%d max_blocks_per_sm=%d l2_bytes=%d "
              "persisting_l2_max=%d mem_bytes=%zu bus_bits=%d cluster_launch=%d\n",
              p.name, p.major, p.minor, p.multiProcessorCount, optin, p.sharedMemPerMultiprocessor, p.sharedMemPerBlock,
              p.regsPerMultiprocessor, p.regsPerBlock, p.maxThreadsPerMultiProcessor, p.maxBlocksPerMultiProcessor,
              p.l2CacheSize, p.persistingL2CacheMaxSize, p.totalGlobalMem, p.memoryBusWidth, cluster);
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "all";
  bool ok = true;
  if (!std::strcmp(what, "props") || !std::strcmp(what, "all")) props();
  if (!std::strcmp(what, "shapes") || !std::strcmp(what, "all")) ok &= shapes::run();
  if (!std::strcmp(what, "fp8") || !std::strcmp(what, "all")) ok &= fp8::run();
  if (!std::strcmp(what, "gemm") || !std::strcmp(what, "all")) ok &= gemm::run();
  if (!std::strcmp(what, "mnmn") || !std::strcmp(what, "all")) ok &= mnmn::run();
  std::printf(ok ? "ALL PASS\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}
