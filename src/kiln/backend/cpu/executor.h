#pragma once
// Runs a compiled Program on the host: binds each instruction to its kernel
// (the fused elementwise interpreter or a kernel in kernels.cpp). Kernels
// throw kiln::Error for data-dependent failures (an id out of range); the
// caller marks the step failed.
#include <algorithm>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "kiln/compiler/program.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

struct Plan;
// `plan`: the program's compiled loops (jit.h); null runs every fused
// instruction in the interpreter.
void execute(const compiler::Program& program, const Plan* plan, std::span<void* const> params,
             std::span<void* const> outputs, void* arena);

// Kernel entry points used by execute().
// `extra`: the base of each of ins.extra_outputs' slots.
void run_fused(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
               std::span<char* const> extra = {});
// Elements [start, start + len), len <= 512, of a fused f32 program, on this
// thread (the compiled loops' ragged ends).
void run_fused_range(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
                     std::span<char* const> extra, int64_t start, int64_t len);
// The values of a fused f32 program's last step for elements [start, start +
// len), len <= 512, into `values` (a compiled reduction's ragged end).
void run_fused_values(const compiler::Instr& ins, std::span<char* const> inputs, int64_t start, int64_t len,
                      float* values);
// `extra`: the extra outputs' memory (a CrossEntropyGrad's loss,
// CompileOptions::loss_with_gradient).
void run_kernel(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
                std::span<char* const> extra = {});
// Whether run_kernel has a kernel for this op (kernels.h's table).
bool has_kernel(ir::Op op);
// Sums of long rows (the Sum kernel's and fused reductions') go in blocks of
// this many values, each in double, then the blocks in order: the same
// result on any number of threads.
constexpr int64_t kSumBlock = 8192;
// A fused reduction's block is summed in this many double lanes (value i of
// the block into lane i % kSumLanes, each lane in order), then the lanes in
// order: one order for the interpreter and the compiled loops (jit.h).
constexpr int64_t kSumLanes = 8;
inline double sum_lanes(const double* lanes) {
  double s = 0;
  for (int64_t l = 0; l < kSumLanes; ++l) s += lanes[l];
  return s;
}
// A fused reduction's frame, for the interpreter and the compiled loops: the
// program's values summed over the trailing axes of program_shape, blocks of
// kSumBlock values in parallel, each block into zeroed lanes by
// sum_block(first element, count, lanes) (make_block() gives each thread its
// own), then each row's blocks in order: the same result on any number of
// threads.
template <typename MakeBlock>
void sum_fused_blocks(const compiler::Instr& ins, float* y, MakeBlock make_block) {
  const Shape& shape = ins.program_shape;
  const auto axes = ir::ReduceAttrs::of(ins.attrs);
  const AxisSplit p = split_axes(shape, axes.first(), axes.last());
  KILN_ASSERT(p.inner == 1);
  const int64_t blocks = (p.axis + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(p.outer * blocks));
#pragma omp parallel if (numel(shape) > 32768)
  {
    auto sum_block = make_block();
#pragma omp for collapse(2) schedule(static)
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t b = 0; b < blocks; ++b) {
        double lanes[kSumLanes] = {};
        sum_block(o * p.axis + b * kSumBlock, std::min(kSumBlock, p.axis - b * kSumBlock), lanes);
        partial[o * blocks + b] = sum_lanes(lanes);
      }
  }
  for (int64_t o = 0; o < p.outer; ++o) {
    double acc = 0;
    for (int64_t b = 0; b < blocks; ++b) acc += partial[o * blocks + b];
    y[o] = static_cast<float>(acc);
  }
}
// A fused program that is one GELU (either form), or its gradient, of
// contiguous operands of the output's shape, f32 or bf16 widened (BERT's and
// GPT-2's MLP activation and its backward), with an f32 result or one cast
// to bf16 (the activation and its gradient under --bf16): run_fused runs it
// 16 lanes at a time over whole ranges where the build has AVX-512, with the
// bits of the compiled loop's 8 lanes (vecmath.h), and prepare() leaves it
// to run_fused. False elsewhere.
// A bf16 x of the erf form (--bf16's activation, read from the product
// before) has 65536 possible values: the GELU of each, or the factor of dy
// in its gradient (elementwise.h: dy · gelu'(x)), is computed once by the
// same functions into a table and looked up (the same bits, faster).
bool wide_gelu(const compiler::Instr& ins);
// Whether wide_gelu looks bf16 inputs up in those tables (on by default):
// tests compare both ways.
void set_gelu_tables(bool on);
// A fused program that is only a dropout mask, rand_uniform(key) >= p into a
// contiguous b8 output: run_fused draws the numbers a block at a time into a
// buffer in L1 and compares them there (the interpreter's chunks would fill
// the constant and store the comparison as floats first). The same values.
bool dropout_mask(const compiler::Instr& ins);
// A program that only copies a view whose rows (the last axis) are
// contiguous into the contiguous output (a transpose of [B, T, H, D] heads,
// a slice): run_fused copies it row by row with memmove rather than element
// by element.
bool copies_rows(const compiler::Instr& ins);
// wide_gelu, dropout_mask or copies_rows: a program run_fused runs with a
// loop of its own, which prepare() does not compile and the profile does
// not call interpreted.
inline bool own_loop(const compiler::Instr& ins) { return wide_gelu(ins) || dropout_mask(ins) || copies_rows(ins); }
// A Sum that carries an elementwise program (fused.cpp).
void run_fused_sum(const compiler::Instr& ins, std::span<char* const> inputs, char* output);
// The slot of a GEMM or attention operand as f32: `base` as stored (f32), or
// (bf16) the elements the view spans widened into `wide`, at the same offsets.
const float* as_f32_operand(const compiler::Operand& op, const char* base, std::vector<float>& wide);
// Row-major c (M x N, leading dimension ldc) = a·b, or += with accumulate,
// a and b transposed as asked (oneDNN's sgemm; our own loop for M or N ==
// 1). Single-threaded inside a parallel region. False when oneDNN fails.
bool sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc, bool accumulate);
// The same product through oneDNN's matmul primitive (gemm_primitive.cpp),
// with an optional contiguous bias row added to every row of c; false where
// the primitive is not available for it (sgemm then runs it). Used outside
// parallel regions, for the shapes prefers_matmul_primitive names.
bool prefers_matmul_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K);
bool matmul_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float* c, int64_t ldc, const float* bias, bool accumulate);
// The same with bf16 operands (their bits), f32 sums and result: oneDNN's
// bf16 matmul. Also inside parallel regions (single-threaded there). False
// where oneDNN has only its reference implementation for the layout.
bool matmul_primitive_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda,
                           const uint16_t* b, int64_t ldb, float* c, int64_t ldc, const float* bias, bool accumulate);
// The same with a bf16 result: the f32 sums (plus the bias) rounded to the
// nearest bf16 as they are stored.
bool matmul_primitive_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda,
                           const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc, const float* bias);
// Whether the bf16 products run shapes oneDNN is slow at whole in pieces
// (gemm_primitive.cpp; on by default): benchmarks and tests compare both.
void set_bf16_product_pieces(bool on);
// Whether the 2-thread bf16 products of many rows pack their b operand into
// oneDNN's blocked layout first (gemm_primitive.cpp; on by default, the same
// bits): benchmarks and tests compare both.
void set_bf16_packed_operands(bool on);
// Whether a bf16 product of this layout and shape, called here (this thread,
// its OpenMP state), packs its b operand first.
bool bf16_product_packs_b(bool ta, bool tb, int64_t M, int64_t N, int64_t K);
// The CPU has bf16 dot-product instructions (AVX512-BF16 or AMX), as oneDNN
// detects them at run time.
bool cpu_has_bf16_products();
// Products of bf16 operands run as bf16 products: cpu_has_bf16_products()
// and the environment does not force the emulation (KILN_CPU_BF16=emulate).
bool native_bf16_products();
// Tests compare both paths: false forces the emulation; true is ignored on a
// CPU without bf16 products.
void set_native_bf16_products(bool on);
// oneDNN's implementation of a bf16 product (brg:avx512_core_bf16,
// brg:avx512_core_amx, ...), or "" where it has only its reference one.
std::string bf16_matmul_implementation();
// Says once on stderr that bf16 products are emulated (widened to f32).
void note_emulated_bf16();
// The softmax kernel's row steps: the largest of x[0, n), and e = exp(x - m)
// with its sum (float blocks of 512, the blocks in double).
float row_max(const float* x, int64_t n);
double exp_shifted_sum(const float* x, float m, float* e, int64_t n);
// Attention (grad = false; `extra`: its kept probabilities, if any) /
// AttentionGrad (attention.cpp).
void attention_kernel(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
                      std::span<char* const> extra, bool grad);
// Collectives (AllReduce, BroadcastFrom): copies the inputs into the output
// and starts the collective on the replica's collective thread; the output is
// ready when the future is.
std::shared_future<void> start_collective(const compiler::Instr& ins, std::span<char* const> inputs, char* output);

}  // namespace kiln::backend::cpu
