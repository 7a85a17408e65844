#pragma once
// The CPU backend's kernels by family, one file each: kernels_reduce.cpp
// (Sum, ReduceMax, ArgMax), kernels_index.cpp (Iota, SliceGrad, Concat,
// IndexSelect, IndexAdd, Gather, ScatterAdd), kernels_matmul.cpp (MatMul),
// kernels_rows.cpp (softmax, normalisation, cross-entropy and their
// gradients) and attention.cpp; kernels.cpp maps each op to its function
// (run_kernel). Every kernel has the Kernel signature: the instruction, its
// inputs' slots, the output's slot and the extra outputs' slots. Shapes in
// comments: N rows, C classes / features; "row" = one slice along the
// reduced axis. Inputs are contiguous except GEMM operands (views).
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

#define KILN_CPU_KERNEL(name)                                                                       \
  void name(const compiler::Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra)
// kernels_reduce.cpp
KILN_CPU_KERNEL(run_reduce);
KILN_CPU_KERNEL(run_argmax);
// kernels_index.cpp
KILN_CPU_KERNEL(run_iota);
KILN_CPU_KERNEL(run_slice_grad);
KILN_CPU_KERNEL(run_concat);
KILN_CPU_KERNEL(run_index_select);
KILN_CPU_KERNEL(run_index_add);
KILN_CPU_KERNEL(run_gather_scatter);
// kernels_matmul.cpp
KILN_CPU_KERNEL(run_matmul);
// kernels_rows.cpp
KILN_CPU_KERNEL(run_softmax);
KILN_CPU_KERNEL(run_log_softmax);
KILN_CPU_KERNEL(run_softmax_grad);
KILN_CPU_KERNEL(run_log_softmax_grad);
KILN_CPU_KERNEL(run_normalize);
KILN_CPU_KERNEL(run_normalize_grad);
KILN_CPU_KERNEL(run_cross_entropy);
KILN_CPU_KERNEL(run_cross_entropy_grad);
#undef KILN_CPU_KERNEL

}  // namespace kiln::backend::cpu
