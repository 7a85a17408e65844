#pragma once
// The compiler's output: a straight-line list of instructions over memory
// slots, ready for a backend to bind kernels to. Device-independent.
//
// Slots are parameters (the graph's inputs), outputs (buffers that outlive
// the step) and temporaries (placed in one arena by the memory planner).
// Operands are views of slots: movement ops (reshape, permute, broadcast,
// slice) never copy unless a kernel needs contiguous memory.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/ir/node.h"

namespace kiln::compiler {

struct View {
  int64_t offset = 0;            // elements from the slot's start
  Shape shape;
  std::vector<int64_t> strides;  // elements; 0 broadcasts
  static View contiguous(const Shape& shape, int64_t offset = 0);
  bool is_contiguous() const;    // row-major dense (offset may be non-zero)
  bool is_broadcast_scalar() const;  // every stride 0: one element for all (rank 0 too)
  bool operator==(const View&) const = default;
};

enum class SlotKind : uint8_t { Param, Output, Temp };

struct Slot {
  SlotKind kind;
  int32_t index = 0;   // parameter or output number
  size_t nbytes = 0;
  size_t offset = 0;   // Temp: byte offset in the arena
  int32_t first = -1;  // Temp: instruction that writes it
  int32_t last = -1;   // Temp: last instruction that reads it
};

struct Operand {
  int32_t slot = -1;
  View view;
  DType dtype = DType::f32;
  bool operator==(const Operand&) const = default;
};

// One step of a fused elementwise program; the value lands in the register
// numbered by its position. The last register is the result.
struct FusedStep {
  ir::Op op;     // elementwise op, or Data (load operand `load`), Constant,
                 // RandUniform / RandNormal (key operand `load`)
  DType dtype;
  int32_t a = -1, b = -1, c = -1;
  int32_t load = -1;
  ir::Attrs attrs;
};

// A further result of a fused instruction: register `reg` stored to `out`,
// which has the main output's shape (multi-output fusion: AdamW's parameter,
// first and second moment in one pass).
struct ExtraOutput {
  int32_t reg = -1;  // the register stored; -1 on a kernel (its op says what it writes there)
  Operand out;
};

struct Instr {
  bool fused = false;
  ir::Op op = ir::Op::Data;  // kernel op (fused: Data)
  std::vector<Operand> inputs;
  Operand output;                  // fused: the last register
  ir::Attrs attrs;
  // Fused: the elementwise program. A Sum may carry one too (a fused
  // reduction, CompileOptions::fuse_sum_inputs): it sums the program's last
  // register over program_shape instead of reading an input.
  std::vector<FusedStep> program;
  Shape program_shape;                     // fused reduction only
  std::vector<ExtraOutput> extra_outputs;  // fused only
  // May run at the same time as the next instruction, which does not read
  // this one's result (CompileOptions::concurrent_products): the memory plan
  // keeps both instructions' operands apart.
  bool with_next = false;
};

// Fused programs, for the backends' interpreters. The last step that reads
// each register (steps stored as results, the last and the extra outputs,
// read "after" the program: program.size()); -1 when nothing reads it.
std::vector<int32_t> last_reads(const Instr& fused);
// The steps whose value is the same for every element: constants,
// broadcast-scalar loads and ops of those only (never a random draw). Both
// CPU executors compute them once per thread / kernel. `also`, when given,
// names more loads to count as invariant (the compiled loops': an operand
// with one value per row, when a call is one row).
std::vector<uint8_t> invariant_steps(const Instr& fused, bool (*also)(const Instr&, const View&) = nullptr);
// Groups with integer values run in double, so ids stay exact; others in f32.
bool computes_in_double(const Instr& fused);
// A MatMul instruction's reduction length K (its first operand's last axis,
// or the one before when it is read transposed).
int64_t reduction_length(const Instr& matmul);
// A Sum over leading axes [0, a1] of a view whose kept axes are contiguous
// rows (at least 2 values) and whose summed rows are evenly spaced (BERT's
// q, k and v bias gradients, read where they lie in the interleaved attention
// gradient, CompileOptions::strided_row_sums): the distance between rows, in
// elements. 0 when the view or the axes are not such.
int64_t summed_row_stride(const View& v, int64_t a0, int64_t a1);
// What an instruction computes, for dumps and profiles: "matmul",
// "fused[data mul add]", or a fused reduction's "sum of fused[data mul]".
std::string op_label(const Instr& ins);

struct Program {
  std::vector<Slot> slots;
  std::vector<Instr> instrs;
  size_t arena_bytes = 0;
  int32_t num_params = 0;
  std::vector<size_t> output_nbytes;
  std::vector<int32_t> output_donor;  // per output: parameter whose memory it takes, or -1
  size_t temp_bytes_total = 0;        // what the temporaries would take unplanned
  int32_t num_fused = 0;
  std::string dump() const;
};

}  // namespace kiln::compiler
