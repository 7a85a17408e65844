// The fused elementwise interpreter: a FusedStep program evaluated over
// chunks of the output, each register a chunk-long array (numexpr's design:
// nothing to compile at run time, close to memory bandwidth). Groups with
// integer values run in double so ids stay exact; others in float.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/kernels.h"
#include "kiln/backend/cpu/philox.h"
#include "kiln/backend/cpu/vecmath.h"
#include "kiln/backend/elementwise.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

using compiler::FusedStep;
using compiler::Instr;
using compiler::Operand;
using ir::Op;

namespace {

constexpr int64_t kChunk = 512;

// A stored bf16 element, read as float (exact).
struct StoredBF16 {
  uint16_t bits;
  operator float() const { return bf16_to_float(bits); }
};

template <typename T, typename S>
void load_typed(const Operand& op, const S* base, int64_t start, int64_t len, T* dst) {
  const auto& v = op.view;
  // One value for every element (a rank-0 view too: its invariant array may
  // be longer than the loop).
  if (v.is_broadcast_scalar()) {
    std::fill(dst, dst + len, static_cast<T>(base[v.offset]));
    return;
  }
  if (v.is_contiguous()) {
    const S* src = base + v.offset + start;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) dst[j] = static_cast<T>(src[j]);
    return;
  }
  int64_t rank = static_cast<int64_t>(v.shape.size());
  // Multi-index of `start`, then walk rows of the last dimension.
  int64_t idx[16];
  int64_t rem = start, off = v.offset;
  for (int64_t d = rank - 1; d >= 0; --d) {
    idx[d] = rem % v.shape[d];
    rem /= v.shape[d];
    off += idx[d] * v.strides[d];
  }
  int64_t last = v.shape[rank - 1], ls = v.strides[rank - 1];
  int64_t j = 0;
  while (j < len) {
    int64_t run = std::min(last - idx[rank - 1], len - j);
    const S* src = base + off;
    if (ls == 1) for (int64_t t = 0; t < run; ++t) dst[j + t] = static_cast<T>(src[t]);
    else if (ls == 0) std::fill(dst + j, dst + j + run, static_cast<T>(src[0]));
    else for (int64_t t = 0; t < run; ++t) dst[j + t] = static_cast<T>(src[t * ls]);
    j += run;
    off += run * ls;
    idx[rank - 1] += run;
    for (int64_t d = rank - 1; d > 0 && idx[d] == v.shape[d]; --d) {
      off -= idx[d] * v.strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      off += v.strides[d - 1];
    }
  }
}

template <typename T>
void load(const Operand& op, const char* base, int64_t start, int64_t len, T* dst) {
  switch (op.dtype) {
    case DType::f32: return load_typed(op, reinterpret_cast<const float*>(base), start, len, dst);
    case DType::i32: return load_typed(op, reinterpret_cast<const int32_t*>(base), start, len, dst);
    case DType::i64: return load_typed(op, reinterpret_cast<const int64_t*>(base), start, len, dst);
    case DType::b8: return load_typed(op, reinterpret_cast<const uint8_t*>(base), start, len, dst);
    case DType::bf16: return load_typed(op, reinterpret_cast<const StoredBF16*>(base), start, len, dst);
  }
}

template <typename T>
void store(const Operand& op, char* base, int64_t start, int64_t len, const T* src) {
  switch (op.dtype) {
    case DType::f32: {
      float* o = reinterpret_cast<float*>(base) + op.view.offset + start;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<float>(src[j]);
      return;
    }
    case DType::i32: {
      int32_t* o = reinterpret_cast<int32_t*>(base) + op.view.offset + start;
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<int32_t>(src[j]);
      return;
    }
    case DType::i64: {
      int64_t* o = reinterpret_cast<int64_t*>(base) + op.view.offset + start;
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<int64_t>(src[j]);
      return;
    }
    case DType::b8: {
      uint8_t* o = reinterpret_cast<uint8_t*>(base) + op.view.offset + start;
      for (int64_t j = 0; j < len; ++j) o[j] = src[j] != T(0);
      return;
    }
    case DType::bf16: {
      uint16_t* o = reinterpret_cast<uint16_t*>(base) + op.view.offset + start;
      for (int64_t j = 0; j < len; ++j) o[j] = bf16_from_float(static_cast<float>(src[j]));
      return;
    }
  }
}

// A step of an op with a formula (backend/elementwise.h) over len values:
// the formula as the loop's body, the unused operands never read.
template <Op op, typename T>
void eval_formula(const FusedStep& s, const T* a, const T* b, const T* c, T* r, int64_t len) {
  const auto dtype = static_cast<uint8_t>(s.dtype);
  const int32_t form = ir::GeluAttrs::of(s.attrs).tanh_form ? 1 : 0;
  constexpr int arity = ir::op_min_inputs(op);
  // `omp simd`: GCC's -O2 cost model does not vectorise a loop that needs a
  // run-time aliasing check, and a step's array is never one of its operands'.
  if constexpr (arity == 1) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) r[j] = elementwise::formula<op, T>(dtype, form, a[j], T(0), T(0));
  } else if constexpr (arity == 2) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) r[j] = elementwise::formula<op, T>(dtype, form, a[j], b[j], T(0));
  } else {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) r[j] = elementwise::formula<op, T>(dtype, form, a[j], b[j], c[j]);
  }
}

// A float step of one of ops.def's Call ops through its lane forms
// (elementwise.h's lanes, vecmath.h's VecForm); false for the others.
template <Op op>
bool eval_vector_form(const FusedStep& s, const float* a, const float* b, float* r, int64_t len) {
  if constexpr (ir::op_fused_form(op) == ir::FusedForm::Call) {
    vec::VecForm<op>::array(a, b, r, len, ir::GeluAttrs::of(s.attrs).tanh_form);
    return true;
  } else {
    return false;
  }
}

// How eval_op computed a step: not at all (a load, a constant, a draw),
// through float lane forms, or through the formula.
enum class Eval { None, Lanes, Formula };

// A step with a formula: float Call ops through their lane forms, the
// others through the formula.
template <typename T>
Eval eval_op(const FusedStep& s, const T* a, const T* b, const T* c, T* r, int64_t len) {
  switch (s.op) {
#define KILN_OP(Name, ...)                                                                         \
  case Op::Name:                                                                                   \
    if constexpr (elementwise::has_formula(Op::Name)) {                                            \
      if constexpr (std::is_same_v<T, float>)                                                      \
        if (eval_vector_form<Op::Name>(s, a, b, r, len)) return Eval::Lanes;                       \
      eval_formula<Op::Name, T>(s, a, b, c, r, len);                                               \
      return Eval::Formula;                                                                        \
    }                                                                                              \
    return Eval::None;
#include "kiln/ir/ops.def"
    default: return Eval::None;
  }
}

// Where each step's value lives: a chunk-long array reused once the values
// it held are dead, so a long program (AdamW's update: ~30 steps) keeps its
// working set in L1 instead of one array per step. A step never writes the
// array of one of its own operands. Stored registers live to the end.
// Invariant steps (constants, broadcast scalars, and ops of those only: the
// optimizer's hyper-parameters) are the same in every chunk: they keep their
// own arrays and are computed once per thread.
struct RegisterMap {
  std::vector<int32_t> of;  // step -> array
  std::vector<uint8_t> invariant;
  int32_t arrays = 0;
  // How much of an invariant array is filled: enough for every chunk to come.
  int64_t invariant_len = 0;
  // Where step k's values of the current chunk are.
  template <typename T>
  T* at(std::vector<T>& regs, size_t k) const {
    return regs.data() + static_cast<int64_t>(of[k]) * kChunk;
  }
};

RegisterMap map_registers(const Instr& ins) {
  // How many values the program computes (a fused reduction: before summing).
  const int64_t elements = numel(ins.op == Op::Sum ? ins.program_shape : ins.output.view.shape);
  const auto& prog = ins.program;
  const int32_t n = static_cast<int32_t>(prog.size());
  RegisterMap map;
  map.of.assign(n, -1);
  map.invariant = compiler::invariant_steps(ins);
  // Whole vectors: the math functions give their last n % 8 values through
  // scalar libm, and an invariant array must hold one value throughout (the
  // compiled loops compute invariants 8 lanes at a time).
  map.invariant_len = std::min(kChunk, (elements + 7) / 8 * 8);
  std::vector<int32_t> last = compiler::last_reads(ins);
  std::vector<int32_t> free_arrays;
  for (int32_t k = 0; k < n; ++k) {
    if (map.invariant[k]) {
      map.of[k] = map.arrays++;
      continue;
    }
    if (free_arrays.empty()) free_arrays.push_back(map.arrays++);
    map.of[k] = free_arrays.back();
    free_arrays.pop_back();
    for (int32_t x : {prog[k].a, prog[k].b, prog[k].c})
      if (x >= 0 && last[x] == k && !map.invariant[x]) {
        free_arrays.push_back(map.of[x]);
        last[x] = -1;  // an operand used twice by this step is freed once
      }
    if (last[k] < 0) free_arrays.push_back(map.of[k]);  // never read
  }
  return map;
}

template <typename T>
void eval_chunk(const Instr& ins, const RegisterMap& map, std::span<char* const> inputs, int64_t start,
                int64_t chunk_len, bool first, std::vector<T>& regs) {
  const auto& prog = ins.program;
  auto at = [&](int32_t step) { return map.at(regs, static_cast<size_t>(step)); };
  for (size_t k = 0; k < prog.size(); ++k) {
    if (map.invariant[k] && !first) continue;  // still in its array from this thread's first chunk
    const int64_t len = map.invariant[k] ? map.invariant_len : chunk_len;
    const FusedStep& s = prog[k];
    T* r = at(static_cast<int32_t>(k));
    const T* a = s.a >= 0 ? at(s.a) : nullptr;
    const T* b = s.b >= 0 ? at(s.b) : nullptr;
    const T* c = s.c >= 0 ? at(s.c) : nullptr;
    const Eval how = eval_op(s, a, b, c, r, len);
    if (how == Eval::Lanes) continue;  // lane forms give float values, stored as they are
    if (how == Eval::None) {
      switch (s.op) {
        case Op::Data: load(ins.inputs[s.load], inputs[s.load], start, len, r); break;
        case Op::Constant: std::fill(r, r + len, static_cast<T>(ir::ConstantAttrs::of(s.attrs).value)); break;
        case Op::RandUniform:
        case Op::RandNormal: {
          const Operand& key_op = ins.inputs[s.load];
          const int64_t* key = reinterpret_cast<const int64_t*>(inputs[s.load]) + key_op.view.offset;
          uint64_t seed = static_cast<uint64_t>(key[0]), offset = static_cast<uint64_t>(key[1]);
          const int64_t first = start + (numel(key_op.view.shape) > 2 ? key[2] : 0);
          if (s.op == Op::RandUniform) Philox::uniform_range(seed, offset, static_cast<uint64_t>(first), len, r);
          else Philox::normal_range(seed, offset, static_cast<uint64_t>(first), len, r);
          break;
        }
        default:
          throw Error(std::string("fused kernel: unsupported op ") + ir::op_name(s.op));
      }
    }
    // Values of f32 registers are rounded to f32 even when evaluated in
    // double, values of bf16 ones to bf16.
    if (std::is_same_v<T, double> && s.dtype == DType::f32 && s.op != Op::Data)
      for (int64_t j = 0; j < len; ++j) r[j] = static_cast<float>(r[j]);
    if (s.dtype == DType::bf16 && s.op != Op::Data && s.op != Op::Cast)
      for (int64_t j = 0; j < len; ++j) r[j] = kiln::round_to_bf16(static_cast<float>(r[j]));
  }
}

// A chunk's results: the last step to the output, the extra outputs' steps
// to theirs.
template <typename T>
void store_chunk(const Instr& ins, const RegisterMap& map, std::vector<T>& regs, char* output,
                 std::span<char* const> extra, int64_t start, int64_t len) {
  store(ins.output, output, start, len, map.at(regs, ins.program.size() - 1));
  for (size_t e = 0; e < ins.extra_outputs.size(); ++e)
    store(ins.extra_outputs[e].out, extra[e], start, len, map.at(regs, static_cast<size_t>(ins.extra_outputs[e].reg)));
}

// Every chunk is loaded (all inputs) before any output of it is stored, so an
// output may take the memory of an input it reads element for element.
template <typename T>
void run_program(const Instr& ins, std::span<char* const> inputs, char* output, std::span<char* const> extra) {
  int64_t n = numel(ins.output.view.shape);
  int64_t chunks = (n + kChunk - 1) / kChunk;
  const RegisterMap map = map_registers(ins);
#pragma omp parallel if (n > 32768)
  {
    std::vector<T> regs(static_cast<size_t>(map.arrays) * kChunk);
    bool first = true;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t start = c * kChunk, len = std::min(kChunk, n - start);
      eval_chunk<T>(ins, map, inputs, start, len, first, regs);
      first = false;
      store_chunk(ins, map, regs, output, extra, start, len);
    }
  }
}

// A fused reduction (executor.h's sum_fused_blocks), interpreted: no stored
// values.
template <typename T>
void run_program_sum(const Instr& ins, std::span<char* const> inputs, float* y) {
  const RegisterMap map = map_registers(ins);
  const size_t last = ins.program.size() - 1;
  sum_fused_blocks(ins, y, [&] {  // each thread: its registers, its invariants computed once
    return [&, regs = std::vector<T>(static_cast<size_t>(map.arrays) * kChunk), first = true](
               int64_t start, int64_t len, double* lanes) mutable {
      for (int64_t c = 0; c < len; c += kChunk) {  // chunks start at multiples of 8: lane j % 8
        const int64_t l = std::min(kChunk, len - c);
        eval_chunk<T>(ins, map, inputs, start + c, l, first, regs);
        first = false;
        const T* v = map.at(regs, last);
        int64_t j = 0;
        for (; j + kSumLanes <= l; j += kSumLanes)
          for (int64_t k = 0; k < kSumLanes; ++k) lanes[k] += static_cast<double>(v[j + k]);
        for (; j < l; ++j) lanes[j % kSumLanes] += static_cast<double>(v[j]);
      }
    };
  });
}

}  // namespace

bool copies_rows(const Instr& ins) {
  if (ins.program.size() != 1 || ins.program[0].op != Op::Data || !ins.extra_outputs.empty()) return false;
  const Operand& in = ins.inputs[static_cast<size_t>(ins.program[0].load)];
  const auto& v = in.view;
  return in.dtype == ins.output.dtype && ins.output.view.is_contiguous() && v.shape == ins.output.view.shape &&
         v.shape.size() >= 2 && v.shape.back() >= 16 && v.strides.back() == 1;
}

namespace {

void copy_rows(const Instr& ins, std::span<char* const> inputs, char* output) {
  const Operand& in = ins.inputs[static_cast<size_t>(ins.program[0].load)];
  const auto& v = in.view;
  const size_t esize = dtype_size(in.dtype), rank = v.shape.size();
  const int64_t len = v.shape.back(), rows = numel(v.shape) / len;
  const char* src = inputs[static_cast<size_t>(ins.program[0].load)];
  char* dst = output + ins.output.view.offset * static_cast<int64_t>(esize);
#pragma omp parallel for schedule(static) if (rows * len > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = v.offset, rest = r;
    for (size_t d = rank - 1; d-- > 0;) {
      at += (rest % v.shape[d]) * v.strides[d];
      rest /= v.shape[d];
    }
    // memmove: an output that took a donated parameter's memory may be its own input
    std::memmove(dst + r * len * static_cast<int64_t>(esize), src + at * static_cast<int64_t>(esize),
                 static_cast<size_t>(len) * esize);
  }
}

// What wide_gelu runs: the GELU, or its gradient, of loaded operands
// (x, and dy for the gradient), each f32, or bf16 that a Cast widens; the
// result f32, or rounded to bf16 by a Cast (--bf16's activation and its
// gradient, for the next product).
struct WideGelu {
  bool grad = false, tanh_form = false;
  size_t x = 0, dy = 0;  // the operands
};

std::optional<WideGelu> wide_gelu_form(const Instr& ins) {
#if defined(__AVX512F__) && defined(KILN_HAVE_LIBMVEC)
  const auto& prog = ins.program;
  if (!ins.fused || ins.op == Op::Sum || !ins.extra_outputs.empty() || !ins.output.view.is_contiguous() ||
      prog.empty() || (ins.output.dtype != DType::f32 && ins.output.dtype != DType::bf16))
    return std::nullopt;
  const bool rounded = ins.output.dtype == DType::bf16;
  if (rounded && (prog.back().op != Op::Cast || prog.back().dtype != DType::bf16)) return std::nullopt;
  const auto at = static_cast<int32_t>(prog.size()) - (rounded ? 2 : 1);  // the GELU's step
  const FusedStep& g = prog[static_cast<size_t>(std::max(at, 0))];
  if (at < 1 || (g.op != Op::Gelu && g.op != Op::GeluGrad) || g.dtype != DType::f32 || g.attrs.ints.empty() ||
      (rounded && prog.back().a != at))
    return std::nullopt;
  // Step `step` as an f32 operand of the output's shape: its load.
  auto operand = [&](int32_t step) -> std::optional<size_t> {
    if (step < 0 || step >= at) return std::nullopt;
    const FusedStep* f = &prog[static_cast<size_t>(step)];
    const bool widened = f->op == Op::Cast && f->dtype == DType::f32 && f->a >= 0 && f->a < step;
    if (widened) f = &prog[static_cast<size_t>(f->a)];
    if (f->op != Op::Data) return std::nullopt;
    const auto k = static_cast<size_t>(f->load);
    const Operand& op = ins.inputs[k];
    if (op.dtype != (widened ? DType::bf16 : DType::f32) || op.view.shape != ins.output.view.shape ||
        !op.view.is_contiguous())
      return std::nullopt;
    return k;
  };
  WideGelu w{g.op == Op::GeluGrad, ir::GeluAttrs::of(g.attrs).tanh_form};
  const std::optional<size_t> x = operand(g.a), dy = w.grad ? operand(g.b) : std::optional<size_t>{0};
  // Nothing but the loads (and their casts) before the GELU: the program is the GELU.
  const int32_t loads = (w.grad ? 2 : 1), casts = at - loads;
  int32_t widening = 0;
  for (int32_t k = 0; k < at; ++k) widening += prog[static_cast<size_t>(k)].op == Op::Cast;
  if (!x || !dy || casts < 0 || casts != widening) return std::nullopt;
  w.x = *x;
  w.dy = *dy;
  return w;
#else
  (void)ins;
  return std::nullopt;
#endif
}

std::atomic<bool> g_gelu_tables{true};

#if defined(__AVX512F__) && defined(KILN_HAVE_LIBMVEC)
// The erf form's value for every bf16 x (its bits the index): the GELU, or
// the gradient's factor of dy (dy = 1: that factor's bits, as 1 · f is f),
// by the functions the loops call, so a lookup gives the computed bits.
// 256 KiB each, made on first use. (Only the erf form: a gather costs less
// than its erf, not less than the tanh form's exponential — GPT-2's GELU
// took 10 % longer looked up, its gradient as long.)
const float* gelu_table(bool grad) {
  static std::once_flag once[2];
  static std::vector<float> tables[2];
  std::call_once(once[grad], [grad] {
    std::vector<float> x(65536), one(65536, 1.0f);
    for (uint32_t bits = 0; bits < 65536; ++bits) x[bits] = std::bit_cast<float>(bits << 16);
    std::vector<float>& t = tables[grad];
    t.resize(65536);
    if (grad) vec::VecForm<Op::GeluGrad>::array(x.data(), one.data(), t.data(), 65536, false);
    else vec::VecForm<Op::Gelu>::array(x.data(), nullptr, t.data(), 65536, false);
  });
  return tables[grad].data();
}

// (GCC 12's AVX-512 gather and widening intrinsics pass an undefined
// vector as their unused merge source, which -Wmaybe-uninitialized reports.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// r = table[x] (dy times that where given, as gelu_grad_lanes multiplies)
// for n values, 16 gathered at a time. (bert-base's MLP in the step: the
// GELU 1.35x, its gradient 1.8x as fast as computed. Widening and rounding
// in the same loop, rather than in passes over the block's buffers, made
// both forms 15-40 % slower.)
void look_up(const float* table, const uint16_t* x, const float* dy, float* r, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i at = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)));
    const __m512 t = _mm512_i32gather_ps(at, table, 4);
    _mm512_storeu_ps(r + j, dy ? _mm512_mul_ps(_mm512_loadu_ps(dy + j), t) : t);
  }
  for (; j < n; ++j) r[j] = dy ? dy[j] * table[x[j]] : table[x[j]];
}
#pragma GCC diagnostic pop

// wide_gelu's program over the whole output: blocks of a multiple of 16
// values, so the values computed one by one (the last n % 8) are the
// compiled loop's. bf16 operands are widened a block at a time into
// buffers the L1 cache holds (a bf16 x of the erf form is looked up in
// gelu_table instead); a bf16 result is each block's f32 values rounded
// as the Cast rounds them. Blocks of 1024 values (12 KiB of buffers):
// BERT's and GPT-2's bf16 GELU and gradient took 10-15 % longer with 2048
// and 25 % longer with 8192 (512 as 1024), measured in the step.
void run_wide_gelu(const Instr& ins, std::span<char* const> inputs, char* output) {
  const WideGelu w = *wide_gelu_form(ins);
  const bool rounded = ins.output.dtype == DType::bf16;
  auto base = [&](size_t k) { return inputs[k] + ins.inputs[k].view.offset * dtype_size(ins.inputs[k].dtype); };
  const char* x = base(w.x);
  const char* dy = w.grad ? base(w.dy) : nullptr;
  const bool x16 = ins.inputs[w.x].dtype == DType::bf16, dy16 = w.grad && ins.inputs[w.dy].dtype == DType::bf16;
  const float* table =
      x16 && !w.tanh_form && g_gelu_tables.load(std::memory_order_relaxed) ? gelu_table(w.grad) : nullptr;
  char* r = output + ins.output.view.offset * dtype_size(ins.output.dtype);
  constexpr int64_t buffered = 1024;  // (f32 throughout: larger blocks, straight from and to memory)
  const int64_t n = numel(ins.output.view.shape), block = rounded || x16 || dy16 ? buffered : 16384;
  const int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < blocks; ++i) {
    alignas(64) float xw[buffered], dw[buffered], values[buffered];
    const int64_t start = i * block, len = std::min(block, n - start);
    auto f32_of = [&](const char* v, bool is16, float* wide) {
      if (!is16) return reinterpret_cast<const float*>(v) + start;
      widen_bf16(reinterpret_cast<const uint16_t*>(v) + start, wide, len);
      return static_cast<const float*>(wide);
    };
    float* out = rounded ? values : reinterpret_cast<float*>(r) + start;
    const float* dys = w.grad ? f32_of(dy, dy16, dw) : nullptr;
    if (table) look_up(table, reinterpret_cast<const uint16_t*>(x) + start, dys, out, len);
    else if (w.grad) vec::VecForm<Op::GeluGrad>::array(f32_of(x, x16, xw), dys, out, len, w.tanh_form);
    else vec::VecForm<Op::Gelu>::array(f32_of(x, x16, xw), nullptr, out, len, w.tanh_form);
    if (rounded) round_to_bf16(values, reinterpret_cast<uint16_t*>(r) + start, len);
  }
}
#else
void run_wide_gelu(const Instr&, std::span<char* const>, char*) {}  // (wide_gelu is false: never called)
#endif

// dropout_mask's program: the numbers drawn a block at a time into a buffer
// the L1 cache holds, compared there, as bytes into the output.
void run_dropout_mask(const Instr& ins, std::span<char* const> inputs, char* output) {
  const FusedStep& draw = ins.program[0];
  const Operand& key_op = ins.inputs[static_cast<size_t>(draw.load)];
  const int64_t* key = reinterpret_cast<const int64_t*>(inputs[static_cast<size_t>(draw.load)]) + key_op.view.offset;
  const auto seed = static_cast<uint64_t>(key[0]), offset = static_cast<uint64_t>(key[1]);
  const int64_t first = numel(key_op.view.shape) > 2 ? key[2] : 0;
  const float p = static_cast<float>(ir::ConstantAttrs::of(ins.program[1].attrs).value);  // the interpreter's constant, as float
  uint8_t* out = reinterpret_cast<uint8_t*>(output) + ins.output.view.offset;
  const int64_t n = numel(ins.output.view.shape), block = 2048, blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < blocks; ++i) {
    alignas(64) float u[block];
    const int64_t start = i * block, len = std::min(block, n - start);
    Philox::uniform_range(seed, offset, static_cast<uint64_t>(first + start), len, u);
    uint8_t* o = out + start;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) o[j] = u[j] >= p ? 1 : 0;
  }
}

}  // namespace

bool dropout_mask(const Instr& ins) {
  const auto& prog = ins.program;
  if (!ins.fused || ins.op == Op::Sum || !ins.extra_outputs.empty() || ins.output.dtype != DType::b8 ||
      !ins.output.view.is_contiguous() || prog.size() != 3)
    return false;
  const FusedStep &draw = prog[0], &p = prog[1], &ge = prog[2];
  return draw.op == Op::RandUniform && draw.dtype == DType::f32 && p.op == Op::Constant && p.dtype == DType::f32 &&
         !p.attrs.floats.empty() && ge.op == Op::Ge && ge.a == 0 && ge.b == 1;
}

bool wide_gelu(const Instr& ins) { return wide_gelu_form(ins).has_value(); }

void set_gelu_tables(bool on) { g_gelu_tables.store(on); }

void run_fused_sum(const Instr& ins, std::span<char* const> inputs, char* output) {
  KILN_ASSERT(ins.op == Op::Sum && !ins.program.empty() && ins.output.dtype == DType::f32);
  float* y = reinterpret_cast<float*>(output) + ins.output.view.offset;
  if (compiler::computes_in_double(ins)) run_program_sum<double>(ins, inputs, y);
  else run_program_sum<float>(ins, inputs, y);
}

void run_fused_values(const Instr& ins, std::span<char* const> inputs, int64_t start, int64_t len, float* values) {
  KILN_ASSERT(!compiler::computes_in_double(ins) && len <= kChunk);
  const RegisterMap map = map_registers(ins);
  std::vector<float> regs(static_cast<size_t>(map.arrays) * kChunk);
  eval_chunk<float>(ins, map, inputs, start, len, true, regs);
  const float* v = map.at(regs, ins.program.size() - 1);
  std::copy(v, v + len, values);
}

void run_fused_range(const Instr& ins, std::span<char* const> inputs, char* output, std::span<char* const> extra,
                     int64_t start, int64_t len) {
  KILN_ASSERT(!compiler::computes_in_double(ins) && len <= kChunk);
  const RegisterMap map = map_registers(ins);
  std::vector<float> regs(static_cast<size_t>(map.arrays) * kChunk);
  eval_chunk<float>(ins, map, inputs, start, len, true, regs);
  store_chunk(ins, map, regs, output, extra, start, len);
}

void run_fused(const Instr& ins, std::span<char* const> inputs, char* output, std::span<char* const> extra) {
  KILN_ASSERT(extra.size() == ins.extra_outputs.size());
  if (copies_rows(ins)) return copy_rows(ins, inputs, output);
  if (wide_gelu(ins)) return run_wide_gelu(ins, inputs, output);
  if (dropout_mask(ins)) return run_dropout_mask(ins, inputs, output);
  if (compiler::computes_in_double(ins)) run_program<double>(ins, inputs, output, extra);
  else run_program<float>(ins, inputs, output, extra);
}

}  // namespace kiln::backend::cpu
