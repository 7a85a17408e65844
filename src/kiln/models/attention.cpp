#include "kiln/models/attention.h"

#include <limits>

namespace kiln::models {

bool fused_attention_fits(const Tensor& q, const Tensor& k, const Tensor& mask, const Tensor& segments) {
  return use_fused_attention(q, k, mask) && (!segments.defined() || fused_attention_takes_segments(q));
}

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const SelfAttention& a, const nn::Dropout& dropout) {
  if (!a.soft_cap && a.fusable && fused_attention_fits(q, k, a.mask, a.segments))
    return fused_attention(q, k, v,
                           {a.mask, a.causal, a.scale, dropout.active_p(), dropout.generator(), a.window, a.segments});
  Tensor scores = matmul(q, k, false, true) * a.scale;
  if (a.soft_cap) scores = tanh(scores / *a.soft_cap) * *a.soft_cap;
  // Hidden keys get finfo(float32).min, as HF's torch.where does; padding adds the mask.
  if (a.allowed.defined())
    scores = where(a.allowed, scores, full({}, std::numeric_limits<float>::lowest(), DType::f32, q.device()));
  return matmul(dropout.forward(softmax(scores, -1, a.composite_mask.defined() ? a.composite_mask : a.mask)), v);
}

}  // namespace kiln::models
