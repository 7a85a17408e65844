// The fused Attention op and its gradient on the host (ir/op.h). The CPU
// runs the composite (matmul, softmax, dropout, matmul) by default, whose
// GEMMs are faster here; this kernel defines the op's numbers for the other
// backends' tests and runs it when a graph asks for it. Rounding follows the
// composite: scores and probabilities are f32, sums are in double, and with
// bf16 inputs the dropped probabilities, the output gradient and the score
// gradient are rounded to bf16 before their products, as autocast does.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/philox_core.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

namespace {

using compiler::Instr;

struct Geometry {
  int64_t B, H, Tq, Tk, D;
  bool causal, bf16;
  float scale, dropout, inv_keep;
  const float* mask = nullptr;  // [B or 1, Tk]
  int64_t mask_stride = 0;
  const int64_t* key = nullptr;
};

// Inputs as f32 (bf16 widens exactly).
std::vector<float> as_f32(const Instr& ins, std::span<char* const> in, size_t k) {
  const auto& op = ins.inputs[k];
  const int64_t n = numel(op.view.shape);
  std::vector<float> x(static_cast<size_t>(n));
  if (op.dtype == DType::bf16) {
    const auto* p = reinterpret_cast<const uint16_t*>(in[k]) + op.view.offset;
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(p[i]);
  } else {
    const auto* p = reinterpret_cast<const float*>(in[k]) + op.view.offset;
    std::copy(p, p + n, x.begin());
  }
  return x;
}

Geometry geometry(const Instr& ins, std::span<char* const> in) {
  const Shape& qs = ins.inputs[0].view.shape;
  Geometry g{qs[0], qs[1], qs[2], ins.inputs[1].view.shape[2], qs[3], ins.attrs.ints[0] != 0,
             ins.inputs[0].dtype == DType::bf16, static_cast<float>(ins.attrs.floats[0]),
             static_cast<float>(ins.attrs.floats[1]), 1.0f};
  if (g.dropout > 0) g.inv_keep = static_cast<float>(1.0 / (1.0 - ins.attrs.floats[1]));
  size_t next = 3;
  if (ins.attrs.ints[1]) {
    g.mask = reinterpret_cast<const float*>(in[next]) + ins.inputs[next].view.offset;
    g.mask_stride = ins.inputs[next].view.shape[0] == g.B && g.B > 1 ? g.Tk : 0;
    ++next;
  }
  if (ins.attrs.ints[2]) g.key = reinterpret_cast<const int64_t*>(in[next]) + ins.inputs[next].view.offset;
  return g;
}

float round_if(bool bf16, float x) { return bf16 ? round_to_bf16(x) : x; }

// Row i of (b, h): the softmax probabilities p[Tk] and the dropout's keep flags.
void probabilities(const Geometry& g, const float* q, const float* k, int64_t bh, int64_t i, float* p, bool* keep) {
  const int64_t b = bh / g.H;
  const float* qi = q + (bh * g.Tq + i) * g.D;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < g.Tk; ++j) {
    const float* kj = k + (bh * g.Tk + j) * g.D;
    double s = 0;
    for (int64_t d = 0; d < g.D; ++d) s += static_cast<double>(qi[d]) * kj[d];
    float x = static_cast<float>(s) * g.scale;
    if (g.causal && j > i) x = std::numeric_limits<float>::lowest();
    if (g.mask) x += g.mask[b * g.mask_stride + j];
    p[j] = x;
    m = std::max<double>(m, x);
  }
  double sum = 0;
  for (int64_t j = 0; j < g.Tk; ++j) sum += std::exp(static_cast<double>(p[j]) - m);
  for (int64_t j = 0; j < g.Tk; ++j) {
    p[j] = static_cast<float>(std::exp(static_cast<double>(p[j]) - m) / sum);
    const uint64_t index = static_cast<uint64_t>(g.key ? g.key[2] + (bh * g.Tq + i) * g.Tk + j : 0);
    keep[j] = !g.key || philox_uniform(static_cast<uint64_t>(g.key[0]), static_cast<uint64_t>(g.key[1]), index) >=
                            g.dropout;
  }
}

void forward(const Instr& ins, std::span<char* const> in, char* out) {
  const Geometry g = geometry(ins, in);
  const std::vector<float> q = as_f32(ins, in, 0), k = as_f32(ins, in, 1), v = as_f32(ins, in, 2);
  float* y = reinterpret_cast<float*>(out) + ins.output.view.offset;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(g.Tk));
    std::vector<char> keep(static_cast<size_t>(g.Tk));
    std::vector<double> acc(static_cast<size_t>(g.D));
#pragma omp for collapse(2)
    for (int64_t bh = 0; bh < g.B * g.H; ++bh)
      for (int64_t i = 0; i < g.Tq; ++i) {
        probabilities(g, q.data(), k.data(), bh, i, p.data(), reinterpret_cast<bool*>(keep.data()));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < g.Tk; ++j) {
          const float pd = round_if(g.bf16, keep[j] ? p[j] * g.inv_keep : 0.0f);
          const float* vj = v.data() + (bh * g.Tk + j) * g.D;
          for (int64_t d = 0; d < g.D; ++d) acc[d] += static_cast<double>(pd) * vj[d];
        }
        for (int64_t d = 0; d < g.D; ++d) y[(bh * g.Tq + i) * g.D + d] = static_cast<float>(acc[d]);
      }
  }
}

// dP = dout vᵀ, dropped as the forward dropped; dS = P (dP - Σ P dP) · scale;
// dq = dS k, dk = dSᵀ q, dv = dropped Pᵀ dout (sums in double per (b, h)).
void backward(const Instr& ins, std::span<char* const> in, char* out) {
  const Geometry g = geometry(ins, in);
  const std::vector<float> q = as_f32(ins, in, 0), k = as_f32(ins, in, 1), v = as_f32(ins, in, 2);
  std::vector<float> dout = as_f32(ins, in, ins.inputs.size() - 1);
  for (float& x : dout) x = round_if(g.bf16, x);
  float* dq = reinterpret_cast<float*>(out) + ins.output.view.offset;
  float* dk = dq + g.B * g.H * g.Tq * g.D;
  float* dv = dk + g.B * g.H * g.Tk * g.D;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(g.Tk)), dp(static_cast<size_t>(g.Tk));
    std::vector<char> keep(static_cast<size_t>(g.Tk));
    std::vector<double> dkv(static_cast<size_t>(2 * g.Tk * g.D)), dqi(static_cast<size_t>(g.D));
#pragma omp for
    for (int64_t bh = 0; bh < g.B * g.H; ++bh) {
      std::fill(dkv.begin(), dkv.end(), 0.0);
      double* dkb = dkv.data();
      double* dvb = dkv.data() + g.Tk * g.D;
      for (int64_t i = 0; i < g.Tq; ++i) {
        probabilities(g, q.data(), k.data(), bh, i, p.data(), reinterpret_cast<bool*>(keep.data()));
        const float* qi = q.data() + (bh * g.Tq + i) * g.D;
        const float* gi = dout.data() + (bh * g.Tq + i) * g.D;
        double delta = 0;
        for (int64_t j = 0; j < g.Tk; ++j) {
          const float* vj = v.data() + (bh * g.Tk + j) * g.D;
          double s = 0;
          for (int64_t d = 0; d < g.D; ++d) s += static_cast<double>(gi[d]) * vj[d];
          dp[j] = keep[j] ? static_cast<float>(s) * g.inv_keep : 0.0f;
          delta += static_cast<double>(dp[j]) * p[j];
          const float pd = round_if(g.bf16, keep[j] ? p[j] * g.inv_keep : 0.0f);
          for (int64_t d = 0; d < g.D; ++d) dvb[j * g.D + d] += static_cast<double>(pd) * gi[d];
        }
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int64_t j = 0; j < g.Tk; ++j) {
          const float ds = round_if(g.bf16, static_cast<float>(p[j] * (dp[j] - delta)) * g.scale);
          const float* kj = k.data() + (bh * g.Tk + j) * g.D;
          for (int64_t d = 0; d < g.D; ++d) {
            dqi[d] += static_cast<double>(ds) * kj[d];
            dkb[j * g.D + d] += static_cast<double>(ds) * qi[d];
          }
        }
        for (int64_t d = 0; d < g.D; ++d) dq[(bh * g.Tq + i) * g.D + d] = static_cast<float>(dqi[d]);
      }
      for (int64_t e = 0; e < g.Tk * g.D; ++e) {
        dk[bh * g.Tk * g.D + e] = static_cast<float>(dkb[e]);
        dv[bh * g.Tk * g.D + e] = static_cast<float>(dvb[e]);
      }
    }
  }
}

}  // namespace

void attention_kernel(const Instr& ins, std::span<char* const> in, char* out, bool grad) {
  if (grad) backward(ins, in, out);
  else forward(ins, in, out);
}

}  // namespace kiln::backend::cpu
