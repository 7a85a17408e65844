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

#include "kiln/backend/attention_args.h"
#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/philox_core.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

namespace {

using compiler::Instr;

// The instruction's geometry, with its operands' pointers.
struct Geometry : AttentionArgs {
  bool bf16 = false;
  const float* mask = nullptr;  // [B or 1, Tk]
  const int64_t* key = nullptr;
};

Geometry geometry(const Instr& ins, std::span<char* const> in) {
  Geometry g;
  static_cast<AttentionArgs&>(g) = attention_args(ins);
  g.bf16 = ins.inputs[0].dtype == DType::bf16;
  if (g.mask_input >= 0)
    g.mask = reinterpret_cast<const float*>(in[g.mask_input]) + ins.inputs[g.mask_input].view.offset;
  if (g.key_input >= 0) g.key = reinterpret_cast<const int64_t*>(in[g.key_input]) + ins.inputs[g.key_input].view.offset;
  return g;
}

// Operand k as f32 (bf16 widens exactly into `wide`), at its view's start.
const float* operand(const Instr& ins, std::span<char* const> in, size_t k, std::vector<float>& wide) {
  return as_f32_operand(ins.inputs[k], in[k], wide) + ins.inputs[k].view.offset;
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
    if (g.mask) x += g.mask[b * g.mask_batch_stride + j];
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
  std::vector<float> wq, wk, wv;
  const float *q = operand(ins, in, 0, wq), *k = operand(ins, in, 1, wk), *v = operand(ins, in, 2, wv);
  float* y = reinterpret_cast<float*>(out) + ins.output.view.offset;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(g.Tk));
    std::vector<char> keep(static_cast<size_t>(g.Tk));
    std::vector<double> acc(static_cast<size_t>(g.D));
#pragma omp for collapse(2)
    for (int64_t bh = 0; bh < g.B * g.H; ++bh)
      for (int64_t i = 0; i < g.Tq; ++i) {
        probabilities(g, q, k, bh, i, p.data(), reinterpret_cast<bool*>(keep.data()));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < g.Tk; ++j) {
          const float pd = round_if(g.bf16, keep[j] ? p[j] * g.inv_keep : 0.0f);
          const float* vj = v + (bh * g.Tk + j) * g.D;
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
  std::vector<float> wq, wk, wv;
  const float *q = operand(ins, in, 0, wq), *k = operand(ins, in, 1, wk), *v = operand(ins, in, 2, wv);
  const float* g0 = reinterpret_cast<const float*>(in.back()) + ins.inputs.back().view.offset;
  std::vector<float> dout(g0, g0 + numel(ins.inputs.back().view.shape));
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
        probabilities(g, q, k, bh, i, p.data(), reinterpret_cast<bool*>(keep.data()));
        const float* qi = q + (bh * g.Tq + i) * g.D;
        const float* gi = dout.data() + (bh * g.Tq + i) * g.D;
        double delta = 0;
        for (int64_t j = 0; j < g.Tk; ++j) {
          const float* vj = v + (bh * g.Tk + j) * g.D;
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
          const float* kj = k + (bh * g.Tk + j) * g.D;
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
