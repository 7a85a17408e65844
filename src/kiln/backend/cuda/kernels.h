#pragma once
// The CUDA backend's kernels by family, one file each (backend/cpu/kernels.h's
// counterpart): kernels_reduce.cu (Sum, ReduceMax, ArgMax), kernels_index.cu
// (Iota, SliceGrad, Concat, IndexSelect, IndexAdd, Gather, ScatterAdd,
// IndexCopy), kernels_matmul.cu (MatMul: cuBLAS), kernels_rows.cu (softmax,
// normalisation, cross-entropy and their gradients, Rope) and attention.cu
// (Attention, AttentionGrad). Each family's file holds its __global__
// kernels, their launch code and, per op, the table entry that the executor
// reads (add_<family>_kernels): a function that launches the op's kernels
// for one instruction (KernelCall), and where needed one that checks and
// plans the instruction when its program is prepared, and one that words
// the data errors its kernels report. The fused elementwise programs run
// through fused.cu's interpreter or generated kernels (jit.h), not the table.
//
// The launchers take device pointers already advanced to the operand's
// view offset (KernelCall's accessors); every kernel is queued on the
// step's stream and the launch returns at once.
// Data errors (an id out of range) are written to the step's ErrorReport
// (first one wins); the executor reads it when the step ends.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/backend/cuda/common.h"
#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/cuda/encode.h"
#include "kiln/compiler/program.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda {

namespace kernels {

struct ErrorReport {
  int32_t code = 0;  // ErrorCode; 0: none
  int32_t pad = 0;
  int64_t value = 0, position = 0, limit = 0;
};
enum ErrorCode : int32_t { kNone = 0, kIdOutOfRange = 1, kLabelOutOfRange = 2, kDuplicateId = 3 };

// Fused elementwise program (desc in device memory, host copy for sizes);
// slots: device array of every slot's base address.
void fused(const FusedDesc* desc, const FusedDesc& host, char* const* slots, int sms, cudaStream_t stream);

}  // namespace kernels

// DType as the kernels' element type code (desc.h).
inline uint8_t code(DType t) { return static_cast<uint8_t>(t); }
static_assert(static_cast<uint8_t>(DType::f32) == kF32 && static_cast<uint8_t>(DType::i32) == kI32 &&
              static_cast<uint8_t>(DType::i64) == kI64 && static_cast<uint8_t>(DType::b8) == kB8 &&
              static_cast<uint8_t>(DType::bf16) == kBF16);

// bf16 tensor-core work (bf16 products, fused attention) needs Ampere or newer.
inline void require_bf16_tensor_cores(const DeviceState& ds, const char* what) {
  KILN_CHECK(ds.props.major >= 8, what, " compute capability 8.0 (Ampere) or newer; ", ds.props.name, " is ",
             ds.props.major, ".", ds.props.minor);
}

// What an instruction's kernel needs from its plan, decided once when the
// program is prepared (KernelEntry::prepare).
struct KernelStep {
  GemmPlan gemm;              // MatMul: the cuBLAS calls
  GemmPadding padding;        // MatMul: copies with padded extents (plan_gemm_padding)
  size_t scratch_bytes = 0;   // scratch memory (the plan holds the largest of its steps')
};

// One kernel instruction's operands, as the table's functions read them:
// each input and the output at its view's offset, the step's error report
// and the plan's scratch memory.
struct KernelCall {
  DeviceState& ds;
  const KernelStep& st;
  const compiler::Instr& ins;
  const std::vector<char*>& in;
  char* out;
  kernels::ErrorReport* error_report;  // null unless the op's entry has `report`
  void* scratch_memory;                // null when no step of the plan needs scratch

  cudaStream_t stream() const { return ds.stream; }
  const Shape& shape() const { return ins.output.view.shape; }
  size_t elem() const { return dtype_size(ins.output.dtype); }
  char* o() const { return out + ins.output.view.offset * elem(); }
  float* fo() const { return reinterpret_cast<float*>(o()); }
  char* inp(size_t k) const { return in[k] + ins.inputs[k].view.offset * dtype_size(ins.inputs[k].dtype); }
  const float* f(size_t k) const { return reinterpret_cast<const float*>(inp(k)); }
  kernels::ErrorReport* report() const { return error_report; }
  void* scratch() const { return scratch_memory; }
};

// One op's entry in the kernel table.
struct KernelEntry {
  // Queues the instruction's kernels.
  void (*run)(const KernelCall& k) = nullptr;
  // Optional: checks the instruction when its program is prepared (a
  // kiln::Error is thrown when the step is reached: the step cannot run on
  // CUDA) and fills in its KernelStep.
  void (*prepare)(const compiler::Instr& ins, const DeviceState& ds, KernelStep& st) = nullptr;
  // Set for kernels that check their data: the step gets an ErrorReport,
  // and this words a reported error ("index_select: id 9 at position 2 out
  // of range [0, 5)").
  std::string (*report)(const compiler::Instr& ins, const kernels::ErrorReport& r) = nullptr;
};

// Op -> entry; empty for the ops without a kernel (elementwise ops run
// fused, views and leaves need none, the executor runs the collectives).
using KernelTable = std::array<KernelEntry, static_cast<size_t>(ir::Op::kCount)>;
inline void add_kernel(KernelTable& t, ir::Op op, KernelEntry e) { t[static_cast<size_t>(op)] = e; }
// The table the family files fill (executor.cpp).
const KernelTable& kernel_table();

// Each family's file puts its kernels into the table, next to them: a new
// op of a family is its kernel and one add_kernel line in that file.
void add_reduce_kernels(KernelTable& t);     // kernels_reduce.cu
void add_index_kernels(KernelTable& t);      // kernels_index.cu
void add_matmul_kernels(KernelTable& t);     // kernels_matmul.cu
void add_rows_kernels(KernelTable& t);       // kernels_rows.cu
void add_attention_kernels(KernelTable& t);  // attention.cu

}  // namespace kiln::backend::cuda
