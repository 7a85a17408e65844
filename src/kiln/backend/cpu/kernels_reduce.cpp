// Reductions: Sum and ReduceMax over a run of axes, ArgMax along one.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/backend/cpu/kernels.h"
#include "kiln/backend/cpu/vecmath.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

using compiler::Instr;
using compiler::Operand;
using ir::Op;

namespace {

// A bf16 element (its bits), read as the f32 value it widens to exactly.
struct Bf16 {
  uint16_t bits;
  explicit operator double() const { return bf16_to_float(bits); }
};

// y = the sums (maxima) of x over the axes; In: the stored elements (T, or
// Bf16 for a Sum of bf16 values into f32: compiler/bf16_results.cpp).
template <typename T, typename In = T>
void reduce_kernel(const Instr& ins, const In* x, T* y) {
  const Shape& s = ins.inputs[0].view.shape;
  const auto axes = ir::ReduceAttrs::of(ins.attrs);
  AxisSplit p = split_axes(s, axes.first(), axes.last());
  bool is_max = ins.op == Op::ReduceMax;
  // x (outer, axis, inner) -> y (outer, inner); rows of inner values ld
  // apart (a strided view: outer is 1, CompileOptions::strided_row_sums)
  const compiler::View& v = ins.inputs[0].view;
  const int64_t ld = v.is_contiguous() ? p.inner
                                       : compiler::summed_row_stride(v, axes.first(), axes.last());
  KILN_ASSERT(ld == p.inner || (ld > 0 && p.outer == 1));
  if (!is_max && p.inner >= 16 && p.axis >= 128) {
    // Sums down the rows of a wide matrix (bias gradients: [B*T, C] -> [C]):
    // each block of kRows rows is summed row by row into a vector of partial
    // sums (contiguous, vectorised), then the blocks are added in block order
    // — the same order on any number of threads.
    constexpr int64_t kRows = 64;
    const int64_t blocks = (p.axis + kRows - 1) / kRows;
    std::vector<double> partial(static_cast<size_t>(blocks * p.inner));
    for (int64_t o = 0; o < p.outer; ++o) {
      const In* xo = x + o * p.axis * p.inner;
#pragma omp parallel for if (p.axis * p.inner > 32768)
      for (int64_t b = 0; b < blocks; ++b) {
        double* acc = partial.data() + b * p.inner;
        std::fill(acc, acc + p.inner, 0.0);
        for (int64_t a = b * kRows; a < std::min(p.axis, (b + 1) * kRows); ++a) {
          const In* row = xo + a * ld;
#pragma omp simd
          for (int64_t i = 0; i < p.inner; ++i) acc[i] += static_cast<double>(row[i]);
        }
      }
#pragma omp parallel for if (blocks * p.inner > 32768)
      for (int64_t i = 0; i < p.inner; ++i) {
        double acc = 0;
        for (int64_t b = 0; b < blocks; ++b) acc += partial[b * p.inner + i];
        y[o * p.inner + i] = static_cast<T>(acc);
      }
    }
    return;
  }
  if (!is_max && p.inner == 1 && p.axis >= 8192) {
    // Long contiguous rows (a gradient's sum of squares for clipping): fixed
    // blocks summed in vectorised double, then the blocks in order — the same
    // result on any number of threads.
    const int64_t blocks = (p.axis + kSumBlock - 1) / kSumBlock;
    std::vector<double> partial(static_cast<size_t>(p.outer * blocks));
#pragma omp parallel for collapse(2) if (p.outer * p.axis > 32768)
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t b = 0; b < blocks; ++b) {
        const In* row = x + o * p.axis;
        double acc = 0;
        const int64_t end = std::min(p.axis, (b + 1) * kSumBlock);
#pragma omp simd reduction(+ : acc)
        for (int64_t a = b * kSumBlock; a < end; ++a) acc += static_cast<double>(row[a]);
        partial[o * blocks + b] = acc;
      }
    for (int64_t o = 0; o < p.outer; ++o) {
      double acc = 0;
      for (int64_t b = 0; b < blocks; ++b) acc += partial[o * blocks + b];
      y[o] = static_cast<T>(acc);
    }
    return;
  }
#pragma omp parallel for collapse(2) if (p.outer * p.inner * p.axis > 32768)
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      const In* row = x + o * p.axis * ld + i;
      if constexpr (std::is_same_v<In, T>) {
        if (is_max) {
          T m = row[0];
          for (int64_t a = 1; a < p.axis; ++a) m = std::max(m, row[a * ld]);
          y[o * p.inner + i] = m;
          continue;
        }
      }
      {
        double acc = 0;
        for (int64_t a = 0; a < p.axis; ++a) acc += static_cast<double>(row[a * ld]);
        y[o * p.inner + i] = static_cast<T>(acc);
      }
    }
}

template <typename T>
void argmax_kernel(const Instr& ins, const T* x, int64_t* y) {
  const Shape& s = ins.inputs[0].view.shape;
  int64_t ax = ir::ReduceAttrs::of(ins.attrs).first();
  AxisSplit p = split_axes(s, ax, ax);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      const T* row = x + o * p.axis * p.inner + i;
      int64_t best = 0;
      for (int64_t a = 1; a < p.axis; ++a)
        if (row[a * p.inner] > row[best * p.inner]) best = a;
      y[o * p.inner + i] = best;
    }
}

void run_reduce(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  if (!ins.program.empty()) return run_fused_sum(ins, in, out);
  const char* x = in_bytes(ins, in, 0);
  char* o = out_bytes(ins, out);
  if (ins.inputs[0].dtype == DType::bf16) {
    KILN_CHECK(ins.op == Op::Sum && ins.output.dtype == DType::f32, "reduce: bf16 operands are summed into f32 only");
    return reduce_kernel(ins, reinterpret_cast<const Bf16*>(x), reinterpret_cast<float*>(o));
  }
  switch (ins.output.dtype) {
    case DType::f32: return reduce_kernel(ins, reinterpret_cast<const float*>(x), reinterpret_cast<float*>(o));
    case DType::i32: return reduce_kernel(ins, reinterpret_cast<const int32_t*>(x), reinterpret_cast<int32_t*>(o));
    case DType::i64: return reduce_kernel(ins, reinterpret_cast<const int64_t*>(x), reinterpret_cast<int64_t*>(o));
    default: throw Error("reduce: unsupported dtype");
  }
}

void run_argmax(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const char* x = in_bytes(ins, in, 0);
  auto* y = reinterpret_cast<int64_t*>(out_bytes(ins, out));
  switch (ins.inputs[0].dtype) {
    case DType::f32: return argmax_kernel(ins, reinterpret_cast<const float*>(x), y);
    case DType::i32: return argmax_kernel(ins, reinterpret_cast<const int32_t*>(x), y);
    case DType::i64: return argmax_kernel(ins, reinterpret_cast<const int64_t*>(x), y);
    default: throw Error("argmax: unsupported dtype");
  }
}

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  add_kernel(t, ir::Op::Sum, run_reduce);
  add_kernel(t, ir::Op::ReduceMax, run_reduce);
  add_kernel(t, ir::Op::ArgMax, run_argmax);
}

}  // namespace kiln::backend::cpu
