#pragma once
// The CPU backend's kernels by family, one file each: kernels_reduce.cpp
// (Sum, ReduceMax, ArgMax), kernels_index.cpp (Iota, SliceGrad, Concat,
// IndexSelect, IndexAdd, Gather, ScatterAdd, IndexCopy), kernels_matmul.cpp (MatMul),
// kernels_rows.cpp (softmax, normalisation, cross-entropy and their
// gradients) and attention.cpp; each family's file adds its ops' entries
// to the kernel table (add_*_kernels), which run_kernel reads. Every kernel
// has the Kernel signature: the instruction, its inputs' slots, the
// output's slot and the extra outputs' slots. Shapes in
// comments: N rows, C classes / features; "row" = one slice along the
// reduced axis. Inputs are contiguous except GEMM operands (views).
#include <array>
#include <bit>
#include <cstring>
#include <span>

#include "kiln/backend/cpu/executor.h"

namespace kiln::backend::cpu {

using Kernel = void (*)(const compiler::Instr& ins, std::span<char* const> in, char* out,
                        std::span<char* const> extra);

// Input k's (output's) first element.
template <typename T>
const T* in_ptr(const compiler::Instr& ins, std::span<char* const> in, size_t k) {
  return reinterpret_cast<const T*>(in[k]) + ins.inputs[k].view.offset;
}
template <typename T>
T* out_ptr(const compiler::Instr& ins, char* out) {
  return reinterpret_cast<T*>(out) + ins.output.view.offset;
}
inline const char* in_bytes(const compiler::Instr& ins, std::span<char* const> in, size_t k) {
  return in[k] + ins.inputs[k].view.offset * static_cast<int64_t>(dtype_size(ins.inputs[k].dtype));
}
inline char* out_bytes(const compiler::Instr& ins, char* out) {
  return out + ins.output.view.offset * static_cast<int64_t>(dtype_size(ins.output.dtype));
}
// Element i of an i32 or i64 index operand.
inline int64_t read_index(const compiler::Operand& op, const char* base, int64_t i) {
  if (op.dtype == DType::i64) return reinterpret_cast<const int64_t*>(base)[op.view.offset + i];
  return reinterpret_cast<const int32_t*>(base)[op.view.offset + i];
}
inline void copy_elems(char* dst, const char* src, int64_t n, size_t es) { std::memcpy(dst, src, n * es); }
// x rounded to the nearest bf16 (ties to even; a NaN stays a NaN, quiet),
// as bf16_from_float rounds, in the high half of the bits: without its
// branch, so that loops over it vectorize.
inline uint32_t bf16_rounded_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return ((u & 0x7fffffffu) > 0x7f800000u ? (u | 0x400000u) : u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
// y = x rounded to bf16 (their bits): a kernel's bf16 result
// (compiler/bf16_results.cpp) from its f32 values, attention's bf16 blocks.
inline void round_to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint16_t>(bf16_rounded_bits(x[i]) >> 16);
}
// y = x's bf16 values (their bits) widened to f32, exactly.
inline void widen_bf16(const uint16_t* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
}

// Op -> kernel; null for the ops without one (elementwise ops run fused,
// views and leaves need none, collectives start with start_collective).
using KernelTable = std::array<Kernel, static_cast<size_t>(ir::Op::kCount)>;
inline void add_kernel(KernelTable& t, ir::Op op, Kernel k) { t[static_cast<size_t>(op)] = k; }

// Each family's file puts its kernels into the table, next to them: a new
// op of a family is its kernel and one add_kernel line in that file.
void add_reduce_kernels(KernelTable& t);  // kernels_reduce.cpp
void add_index_kernels(KernelTable& t);   // kernels_index.cpp
void add_matmul_kernels(KernelTable& t);  // kernels_matmul.cpp
void add_rows_kernels(KernelTable& t);    // kernels_rows.cpp

}  // namespace kiln::backend::cpu
