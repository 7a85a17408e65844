#pragma once
// Host-side translation of compiler::Program pieces into what the CUDA
// kernels read (desc.h): views, fused programs with their registers
// allocated, GEMM calls. No CUDA headers: the tests check these on the host.
#include <string>
#include <vector>

#include "kiln/backend/cuda/desc.h"
#include "kiln/compiler/program.h"

namespace kiln::backend::cuda {

// Throws kiln::Error for a view of rank > kMaxRank.
ViewDesc view_desc(const compiler::Operand& op);

// A fused instruction as one record: FusedDesc, then its steps, input
// views, output views (the main output first, then extra_outputs) and
// output registers, in 8-byte words ready to upload. Registers are
// allocated by a linear scan (a value's register is reused once its last
// reader has run). Throws kiln::Error for an op the interpreter lacks or a
// program needing more than kFusedMaxRegs live values.
struct FusedRecord {
  FusedDesc desc;
  std::vector<int64_t> words;
};
FusedRecord encode_fused(const compiler::Instr& ins);

// (outer, axis, inner) of a shape around axes [a0, a1].
Split split_shape(const Shape& s, int64_t a0, int64_t a1);

// A matrix product as cuBLAS calls (column-major: C^T = op(B)^T op(A)^T).
// Offsets in elements from the operands' slots' starts.
struct GemmCall {
  int64_t a = 0, b = 0, c = 0;        // first matrix of each
  int64_t stride_a = 0, stride_b = 0;  // between the batch's matrices (C: m * n)
  int64_t batch = 1;
};
struct GemmPlan {
  bool trans_a = false, trans_b = false;  // row-major sense, as the CPU's sgemm
  bool bf16 = false;                      // bf16 operands (f32 sums and result), else f32
  int64_t lda = 0, ldb = 0;
  int64_t M = 0, N = 0, K = 0;  // per call: M rows (all batches stacked when fused into one)
  std::vector<GemmCall> calls;
  int64_t c_elems = 0;  // the whole output, zeroed when K == 0
};
// Batches whose operands' offsets are not one arithmetic progression (a
// broadcast over several batch dims) become several strided-batched calls:
// the longest run of trailing batch dims that is regular.
GemmPlan plan_gemm(const compiler::Instr& ins);

// cuBLAS's fast kernels want 16-byte aligned rows and extents that are
// multiples of 8. A large product that has neither (GPT-2's LM head: 50257
// vocabulary rows) runs on slower kernels, several times the cost of copying
// its operands into padded buffers: products of 2^28 multiply-adds and more
// (one call) run on copies with M, N and K rounded up to multiples of 8 (the
// extra K columns zero) into a padded result that is copied back. The
// executor lays out A' [M' x K'] (or [K' x M'] when transposed), B' and C'
// [M' x N'], dense and row-major, each at a 256-byte boundary of its scratch.
struct GemmPadding {
  bool on = false;
  int64_t M = 0, N = 0, K = 0;  // the padded extents
  size_t bytes = 0;             // scratch: A', B', C'
};
GemmPadding plan_gemm_padding(const GemmPlan& g);

}  // namespace kiln::backend::cuda
