#pragma once
// bf16 matrix products on operands laid out as pairs, for the fused
// attention's block products (attention.cpp) on a CPU with AVX512-BF16: its
// dot product instruction (vdpbf16ps) multiplies two bf16 pairs exactly and
// adds both products to an f32 sum, so an operand is read as 32-bit words
// holding two consecutive elements of the reduction. oneDNN's matmul packs
// its B operand into that layout on every call; a head's attention blocks
// run thousands of small products that read the same q, k, v and output
// gradient, so attention.cpp packs each once per head and runs these
// register tiles on them (2-3x oneDNN's rate at a block's shape inside the
// step, where the repacking and the per-call overhead are most of the time).
//
// A pair word holds element 2p of its row or column in the low half, 2p + 1
// in the high half (a missing odd element: 0).
//   B operand: word (p, n) at b[p·ldb + n] (a reduction pair's row: the
//     columns contiguous, read 16 at a time).
//   A operand: word (i, p) at the bf16 element a[i·row + p·pair]
//     (broadcast one at a time: any layout; row-major bf16 rows of an even
//     length in place, with pair 2).
#include <cstdint>

namespace kiln::backend::cpu {

// c[M × N] = A·B (c += A·B with accumulate) for A (M × 2·K2) and B (2·K2 ×
// N) as pair words: each element of c the sum in f32 of exact products, two
// at a time (bf16 subnormals read as zero, as oneDNN's bf16 products read
// them). Only where cpu_has_bf16_products() (executor.h: AVX512-BF16 or
// AMX, whose CPUs have AVX512-BF16 too).
// With AMX (amx_tiles()) the products run as AMX tiles, else as AVX512-BF16
// register tiles: the same exact products, summed in another order.
void tile_product(int64_t M, int64_t N, int64_t K2, const uint16_t* a, int64_t a_row, int64_t a_pair,
                  const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);

// The CPU has AMX tiles with bf16 products, and the operating system lets
// this process use them (asked once).
bool amx_usable();
// tile_product runs on AMX: amx_usable() and not turned off by the
// environment (KILN_CPU_AMX=off).
bool amx_tiles();
// Tests and benchmarks compare both: false runs the AVX512-BF16 tiles; true
// is ignored where AMX is not usable.
void set_amx_tiles(bool on);

// Rows [0, R) of x (bf16 bits, rows ld apart, N columns) as pairs of rows,
// a B operand: out[p·ldo + j] = x(2p, j) | x(2p + 1, j) << 16 for p <
// ⌈R/2⌉ (an odd R's last pair with a zero row).
void pack_row_pairs(const uint16_t* x, int64_t ld, int64_t R, int64_t N, uint32_t* out, int64_t ldo);

// The columns [0, C) of x's rows [0, R) (bf16 bits, rows ld apart) as pairs
// along each row: out[p·ldo + j] = x(j, 2p) | x(j, 2p + 1) << 16 for p <
// ⌈C/2⌉ (an odd C's last pair with a zero high half). As a B operand it is
// xᵀ; as an A operand (row 2, pair 2·ldo), x itself.
void pack_column_pairs(const uint16_t* x, int64_t ld, int64_t R, int64_t C, uint32_t* out, int64_t ldo);

}  // namespace kiln::backend::cpu
