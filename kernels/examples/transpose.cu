// transpose: Y[c, r] = X[r, c] for bf16 X [R, C] (Y is [C, R]); values are moved, never rounded.
// Approach: 32x32 tiles staged through padded shared memory by 32x8 threads, so both the reads of X
// and the writes of Y are row-contiguous; edges of any size are bounds-checked.
// A plain CUDA example for PTXBench (no tensor copies): not the expert kernel.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace {

constexpr int TILE = 32;
constexpr int ROWS = 8;  // threads per block: TILE x ROWS, each moving TILE / ROWS elements

__global__ void __launch_bounds__(TILE * ROWS)
transpose_kernel(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R, int64_t C,
                 int64_t row_tiles) {
    // 34 bf16 = 17 words per row: a column of the tile falls in 32 different banks.
    __shared__ __nv_bfloat16 tile[TILE][TILE + 2];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int64_t c0 = int64_t(blockIdx.x) * TILE;

    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
        const int64_t r0 = rt * TILE;
        // Read X[r0 + i][c0 + tx] into tile[i][tx].
#pragma unroll
        for (int i = ty; i < TILE; i += ROWS) {
            const int64_t r = r0 + i, c = c0 + tx;
            if (r < R && c < C) tile[i][tx] = X[r * C + c];
        }
        __syncthreads();
        // Write Y[c0 + i][r0 + tx] = X[r0 + tx][c0 + i] = tile[tx][i].
#pragma unroll
        for (int i = ty; i < TILE; i += ROWS) {
            const int64_t c = c0 + i, r = r0 + tx;
            if (c < C && r < R) Y[c * R + r] = tile[tx][i];
        }
        __syncthreads();  // the tile is reused by the next row tile
    }
}

}  // namespace

extern "C" int transpose(
    const __nv_bfloat16* __restrict__ X,
    __nv_bfloat16* __restrict__ Y,
    int64_t R,
    int64_t C,
    cudaStream_t stream) {
    if (R <= 0 || C <= 0) return (int)cudaGetLastError();
    const int64_t col_tiles = (C + TILE - 1) / TILE;
    const int64_t row_tiles = (R + TILE - 1) / TILE;
    const dim3 grid((unsigned)col_tiles, (unsigned)(row_tiles < 65535 ? row_tiles : 65535));
    const dim3 block(TILE, ROWS);
    transpose_kernel<<<grid, block, 0, stream>>>(X, Y, R, C, row_tiles);
    return (int)cudaGetLastError();
}
