// Row composites: softmax and log-softmax, normalisation, cross-entropy,
// and their gradients; the rotary position embedding.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
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

// Rows along `axis` of a contiguous tensor: row r starts at base(r), stride inner.
struct Rows {
  AxisSplit p;
  int64_t count() const { return p.outer * p.inner; }
  int64_t base(int64_t r) const { return (r / p.inner) * p.axis * p.inner + r % p.inner; }
  int64_t step() const { return p.inner; }
  int64_t len() const { return p.axis; }
};
Rows rows_of(const Shape& s, int64_t axis) { return Rows{split_axes(s, axis, axis)}; }

}  // namespace

// Contiguous rows: the largest value, and e = exp(x - m) with its sum — the
// exponentials 16 lanes at a time through vec::exp16 on AVX-512 (the rest,
// and every value without it, through vec::exp), each block of 512 summed
// in float and the blocks in double (a row of 50k logits loses nothing
// visible).
// NaNs are skipped, as std::max(m, x) skips them (GCC leaves that loop
// scalar, so the lanes are spelled out: maxps returns its second operand
// when the first is NaN).
float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t k = 0;
#ifdef __AVX2__
  if (n >= 16) {
    __m256 a = _mm256_set1_ps(m), b = a;
    for (; k + 16 <= n; k += 16) {
      a = _mm256_max_ps(_mm256_loadu_ps(x + k), a);
      b = _mm256_max_ps(_mm256_loadu_ps(x + k + 8), b);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(a, b));
    for (float l : lanes) m = std::max(m, l);
  }
#endif
  for (; k < n; ++k) m = std::max(m, x[k]);
  return m;
}

double exp_shifted_sum(const float* x, float m, float* e, int64_t n) {
  constexpr int64_t kBlock = 512;
  double sum = 0;
  for (int64_t k0 = 0; k0 < n; k0 += kBlock) {
    const int64_t len = std::min(kBlock, n - k0);
    const float* xb = x + k0;
    float* eb = e + k0;
#ifdef __AVX512F__
    // One pass: subtract, exponentiate, store and add up, 16 lanes at a time
    // (the last len % 16 values in masked lanes).
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
      const __mmask16 lanes = len - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (len - k)) - 1);
      const __m512 v = vec::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, xb + k), mv));
      _mm512_mask_storeu_ps(eb + k, lanes, v);
      acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(lanes, v));
    }
    sum += vec::sum16(acc);
#else
    for (int64_t k = 0; k < len; ++k) eb[k] = xb[k] - m;
    vec::exp(eb, eb, len);
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t k = 0; k < len; ++k) part += eb[k];
    sum += part;
#endif
  }
  return sum;
}

namespace {

void softmax_kernel(const Instr& ins, std::span<char* const> in, char* out, bool log_form) {
  const float* x = in_ptr<float>(ins, in, 0);
  const float* mask = ins.inputs.size() > 1 ? in_ptr<float>(ins, in, 1) : nullptr;
  float* y = out_ptr<float>(ins, out);
  Rows rows = rows_of(ins.output.view.shape, ir::AxisAttrs::of(ins.attrs).axis);
  int64_t L = rows.len(), st = rows.step();
  // y = softmax(x + mask) along the row;  log form: y = (x + mask) - logsumexp
  if (st == 1) {
#pragma omp parallel if (rows.count() * L > 16384)
    {
      std::vector<float> e(log_form ? L : 0);
#pragma omp for
      for (int64_t r = 0; r < rows.count(); ++r) {
        const float* xr = x + r * L;
        float* yr = y + r * L;
        if (mask) {
          const float* mr = mask + r * L;
          for (int64_t k = 0; k < L; ++k) yr[k] = xr[k] + mr[k];
          xr = yr;
        }
        float m = row_max(xr, L);
        if (log_form) {
          float lse = m + static_cast<float>(std::log(exp_shifted_sum(xr, m, e.data(), L)));
          for (int64_t k = 0; k < L; ++k) yr[k] = xr[k] - lse;
        } else {
          float inv = static_cast<float>(1.0 / exp_shifted_sum(xr, m, yr, L));
          for (int64_t k = 0; k < L; ++k) yr[k] *= inv;
        }
      }
    }
    return;
  }
#pragma omp parallel for if (rows.count() * L > 16384)
  for (int64_t r = 0; r < rows.count(); ++r) {
    int64_t b = rows.base(r);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < L; ++k) {
      float v = x[b + k * st] + (mask ? mask[b + k * st] : 0.0f);
      y[b + k * st] = v;
      m = std::max(m, v);
    }
    double sum = 0;
    for (int64_t k = 0; k < L; ++k) sum += std::exp(static_cast<double>(y[b + k * st] - m));
    if (log_form) {
      float lse = m + static_cast<float>(std::log(sum));
      for (int64_t k = 0; k < L; ++k) y[b + k * st] -= lse;
    } else {
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < L; ++k) y[b + k * st] = std::exp(y[b + k * st] - m) * inv;
    }
  }
}

void softmax_grad_kernel(const Instr& ins, std::span<char* const> in, char* out, bool log_form) {
  const float* y = in_ptr<float>(ins, in, 0);
  const float* dy = in_ptr<float>(ins, in, 1);
  float* dx = out_ptr<float>(ins, out);
  Rows rows = rows_of(ins.output.view.shape, ir::AxisAttrs::of(ins.attrs).axis);
  int64_t L = rows.len(), st = rows.step();
  // softmax:     dx = y (dy - Σ dy·y)
  // log_softmax: dx = dy - exp(y) Σ dy
#pragma omp parallel for if (rows.count() * L > 16384)
  for (int64_t r = 0; r < rows.count(); ++r) {
    int64_t b = rows.base(r);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < L; ++k) s += log_form ? dy[b + k * st] : static_cast<double>(dy[b + k * st]) * y[b + k * st];
    // dy - s cancels when the row is nearly one-hot: subtract in double.
#pragma omp simd
    for (int64_t k = 0; k < L; ++k) {
      int64_t i = b + k * st;
      double diff = static_cast<double>(dy[i]) - s;
      dx[i] = static_cast<float>(log_form ? dy[i] - std::exp(static_cast<double>(y[i])) * s : y[i] * diff);
    }
  }
}

// Mean and 1/sqrt(var + eps) of one row of C values (biased variance, in
// double). The sums are vectorised (`omp simd` may reassociate them): the
// result depends on the build, not on the thread count.
std::pair<double, double> row_stats(const float* xr, int64_t C, double eps) {
  double mean = 0, var = 0;
#pragma omp simd reduction(+ : mean)
  for (int64_t c = 0; c < C; ++c) mean += xr[c];
  mean /= C;
#pragma omp simd reduction(+ : var)
  for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
  var /= C;
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// x (N, C) -> y (N, C): (x - mean) / sqrt(var + eps) per row
void normalize_kernel(const Instr& ins, std::span<char* const> in, char* out) {
  const float* x = in_ptr<float>(ins, in, 0);
  float* y = out_ptr<float>(ins, out);
  const Shape& s = ins.output.view.shape;
  int64_t C = s.back(), N = numel(s) / std::max<int64_t>(C, 1);
  double eps = ir::NormalizeAttrs::of(ins.attrs).eps;
#pragma omp parallel for if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    auto [mean, rstd] = row_stats(xr, C, eps);
    float fr = static_cast<float>(rstd), fm = static_cast<float>(mean);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (xr[c] - fm) * fr;
  }
}

// dx = rstd (dy - mean(dy) - x̂ mean(dy x̂)),  x̂ = (x - mean) rstd
void normalize_grad_kernel(const Instr& ins, std::span<char* const> in, char* out) {
  const float* x = in_ptr<float>(ins, in, 0);
  const float* dy = in_ptr<float>(ins, in, 1);
  float* dx = out_ptr<float>(ins, out);
  const Shape& s = ins.output.view.shape;
  int64_t C = s.back(), N = numel(s) / std::max<int64_t>(C, 1);
  double eps = ir::NormalizeAttrs::of(ins.attrs).eps;
#pragma omp parallel for if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    const float* gr = dy + n * C;
    double mean, rstd;  // not a structured binding: clang before 16 cannot name one inside the simd loops
    std::tie(mean, rstd) = row_stats(xr, C, eps);
    double mg = 0, mgx = 0;
#pragma omp simd reduction(+ : mg, mgx)
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xr[c] - mean) * rstd;
      mg += gr[c];
      mgx += gr[c] * xh;
    }
    mg /= C;
    mgx /= C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xr[c] - mean) * rstd;
      dx[n * C + c] = static_cast<float>(rstd * (gr[c] - mg - xh * mgx));
    }
  }
}

void check_labels(const Instr& ins, std::span<char* const> in, int64_t N, int64_t C, int64_t ignore) {
  for (int64_t n = 0; n < N; ++n) {
    int64_t y = read_index(ins.inputs[1], in[1], n);
    KILN_CHECK(y == ignore || (y >= 0 && y < C), "cross_entropy: label ", y, " at row ", n,
               " out of range [0, ", C, ") (ignore_index is ", ignore, ")");
  }
}

// logits (N, C), labels (N) -> mean over non-ignored rows of
// (1-ε)·(lse - x_y) + ε·(lse - mean_c x_c). The gradient:
// dx = g/count · (p_c - (1-ε)[c = y] - ε/C); ignored rows get 0. With
// `loss` (CompileOptions::loss_with_gradient) the gradient's instruction
// also writes the loss, from the same pass: the same rows, threads and sums
// as the loss alone, so the same bits. dx may be the logits' own memory
// (CompileOptions::in_place): a row is read before it is written. bf16
// logits (autocast's, runtime/ops.cpp) are read as bf16_row_exp reads them;
// their gradient is bf16 too, each value rounded as it is made.
//
// bf16_row_exp: the largest of a row of bf16 logits (NaNs skipped) into m,
// their sum (in double: a mean for label smoothing), and e = exp(x - m)
// with its sum returned: each piece of 512 widened in L1 once for the
// maximum and once for the exponentials, so that the row is never stored
// widened (GPT-2's [1024, 50257] loss gradient took 11 ms a step with
// the row widened, then read three times, against 8 ms in f32). The same
// values as widening the row first: the maximum skips NaNs whatever the
// order, and exp_shifted_sum adds its pieces of 512 in the same order.
double bf16_row_exp(const uint16_t* x, int64_t C, bool with_mean, float& m, double& mean, float* e) {
  constexpr int64_t kPiece = 512;
  alignas(64) float w[kPiece];
  m = -std::numeric_limits<float>::infinity();
  mean = 0;
  for (int64_t k = 0; k < C; k += kPiece) {
    const int64_t len = std::min(kPiece, C - k);
    widen_bf16(x + k, w, len);
    m = std::max(m, row_max(w, len));
    if (with_mean)
      for (int64_t c = 0; c < len; ++c) mean += w[c];
  }
  double sum = 0;
  for (int64_t k = 0; k < C; k += kPiece) {
    const int64_t len = std::min(kPiece, C - k);
    widen_bf16(x + k, w, len);
    sum += exp_shifted_sum(w, m, e + k, len);
  }
  return sum;
}

void cross_entropy_kernel(const Instr& ins, std::span<char* const> in, char* out, bool grad, float* loss_out) {
  const bool bf16_logits = ins.inputs[0].dtype == DType::bf16;
  const float* x = bf16_logits ? nullptr : in_ptr<float>(ins, in, 0);
  const uint16_t* xb = bf16_logits ? in_ptr<uint16_t>(ins, in, 0) : nullptr;
  const Shape& s = ins.inputs[0].view.shape;
  int64_t N = s[0], C = s[1];
  const auto ce = ir::CrossEntropyAttrs::of(ins.attrs);
  int64_t ignore = ce.ignore_index;
  double eps = ce.smoothing;
  check_labels(ins, in, N, C, ignore);
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += read_index(ins.inputs[1], in[1], n) != ignore;
  // A bf16 gradient (compiler/bf16_results.cpp): each row computed in f32,
  // then rounded, as a Cast of the f32 gradient would round it.
  uint16_t* dx_bf16 = grad && ins.output.dtype == DType::bf16 ? out_ptr<uint16_t>(ins, out) : nullptr;
  float* dx = grad && !dx_bf16 ? out_ptr<float>(ins, out) : nullptr;
  float* loss = grad ? loss_out : out_ptr<float>(ins, out);
  const double scale = grad && count ? *in_ptr<float>(ins, in, 2) / static_cast<double>(count) : 0.0;
  double total = 0;
#pragma omp parallel reduction(+ : total) if (N * C > 16384)
  {
    std::vector<float> e(dx && !xb ? 0 : C);
#pragma omp for
    for (int64_t n = 0; n < N; ++n) {
      const int64_t y = read_index(ins.inputs[1], in[1], n);
      float* dr = dx ? dx + n * C : e.data();
      if (y == ignore) {
        if (dx) std::fill(dr, dr + C, 0.0f);
        if (dx_bf16) std::fill(dx_bf16 + n * C, dx_bf16 + (n + 1) * C, uint16_t{0});
        continue;
      }
      float m, xy;
      double mean = 0, sum;
      if (xb) {  // dr = exp(x - m)
        xy = bf16_to_float(xb[n * C + y]);
        sum = bf16_row_exp(xb + n * C, C, loss && eps > 0, m, mean, dr);
      } else {
        const float* xr = x + n * C;
        m = row_max(xr, C);
        xy = xr[y];
        if (loss && eps > 0)
          for (int64_t c = 0; c < C; ++c) mean += xr[c];
        sum = exp_shifted_sum(xr, m, dr, C);  // dr = exp(x - m); xr may be dr from here on
      }
      if (loss) {
        const double lse = m + std::log(sum);
        total += eps > 0 ? (1 - eps) * (lse - xy) + eps * (lse - mean / C) : lse - xy;
      }
      if (!grad) continue;
      const float a = static_cast<float>(scale / sum), b = static_cast<float>(scale * eps / C);
      const float at_label = static_cast<float>(scale * (1 - eps));
      if (dx_bf16) {  // (rounded as they are made: the row's f32 values are never stored)
        uint16_t* o = dx_bf16 + n * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = static_cast<uint16_t>(bf16_rounded_bits(a * dr[c] - b) >> 16);
        const float t = a * dr[y] - b;
        o[y] = static_cast<uint16_t>(bf16_rounded_bits(t - at_label) >> 16);
        continue;
      }
      for (int64_t c = 0; c < C; ++c) dr[c] = a * dr[c] - b;
      dr[y] -= at_label;
    }
  }
  if (loss) *loss = static_cast<float>(count ? total / count : std::nan(""));
}

void run_softmax(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  softmax_kernel(ins, in, out, false);
}
void run_log_softmax(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  softmax_kernel(ins, in, out, true);
}
void run_softmax_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  softmax_grad_kernel(ins, in, out, false);
}
void run_log_softmax_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  softmax_grad_kernel(ins, in, out, true);
}
void run_normalize(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  normalize_kernel(ins, in, out);
}
void run_normalize_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  normalize_grad_kernel(ins, in, out);
}
void run_cross_entropy(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  cross_entropy_kernel(ins, in, out, false, nullptr);
}
// With an extra output: the loss, from the same pass (CompileOptions::loss_with_gradient).
void run_cross_entropy_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  float* loss = extra.empty() ? nullptr : reinterpret_cast<float*>(extra[0]) + ins.extra_outputs[0].out.view.offset;
  cross_entropy_kernel(ins, in, out, true, loss);
}

// One row of D = 2h values rotated by its tables' row: the forward
// y = x·c + rotate_half(x)·s, or the transpose y = x·c - rotate_half(x·s).
// Each product is rounded before the sum (no FMA), as the composite's fused
// loop rounds them, so the op gives the composite's bits.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void rope_row(const float* x, const float* c, const float* s, float* y, int64_t h, bool transpose) {
  const float* x2 = x + h;
  if (!transpose) {
#pragma omp simd
    for (int64_t i = 0; i < h; ++i) {
      const float a = x[i] * c[i], b = x2[i] * s[i];
      const float a2 = x2[i] * c[h + i], b2 = x[i] * s[h + i];
      y[i] = a - b;
      y[h + i] = a2 + b2;
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < h; ++i) {
    const float a = x[i] * c[i], b = x2[i] * s[h + i];
    const float a2 = x2[i] * c[h + i], b2 = x[i] * s[i];
    y[i] = a + b;
    y[h + i] = a2 - b2;
  }
}

// x [B,H,T,D] (f32, or bf16 widened a row at a time), cos / sin [B or 1,1,T,D] -> y [B,H,T,D].
void run_rope(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shape& xs = ins.inputs[0].view.shape;
  const int64_t B = xs[0], H = xs[1], T = xs[2], D = xs[3], rows = B * H * T;
  const bool per_batch = ins.inputs[1].view.shape[0] == B && B > 1;
  const bool transpose = ir::RopeAttrs::of(ins.attrs).transpose;
  const bool bf16 = ins.inputs[0].dtype == DType::bf16;
  const char* x = in_bytes(ins, in, 0);
  const float* cos = in_ptr<float>(ins, in, 1);
  const float* sin = in_ptr<float>(ins, in, 2);
  float* y = out_ptr<float>(ins, out);
#pragma omp parallel if (rows * D > 16384)
  {
    std::vector<float> wide(bf16 ? static_cast<size_t>(D) : 0);
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t table_row = (per_batch ? r / (H * T) * T : 0) + r % T;
      const float* xr = reinterpret_cast<const float*>(x) + r * D;
      if (bf16) {
        const auto* xb = reinterpret_cast<const uint16_t*>(x) + r * D;
        widen_bf16(xb, wide.data(), D);
        xr = wide.data();
      }
      rope_row(xr, cos + table_row * D, sin + table_row * D, y + r * D, D / 2, transpose);
    }
  }
}

}  // namespace

void add_rows_kernels(KernelTable& t) {
  add_kernel(t, ir::Op::Softmax, run_softmax);
  add_kernel(t, ir::Op::LogSoftmax, run_log_softmax);
  add_kernel(t, ir::Op::SoftmaxGrad, run_softmax_grad);
  add_kernel(t, ir::Op::LogSoftmaxGrad, run_log_softmax_grad);
  add_kernel(t, ir::Op::Normalize, run_normalize);
  add_kernel(t, ir::Op::NormalizeGrad, run_normalize_grad);
  add_kernel(t, ir::Op::CrossEntropy, run_cross_entropy);
  add_kernel(t, ir::Op::CrossEntropyGrad, run_cross_entropy_grad);
  add_kernel(t, ir::Op::Rope, run_rope);
}

}  // namespace kiln::backend::cpu
