#pragma once
// Scaled dot-product attention as the models spell it: the fused kernel
// where it takes the case (runtime's use_fused_attention, per KILN_ATTENTION),
// else HF's composite form, matmul -> scale -> (soft cap) -> causal/window
// fill -> softmax with the additive mask -> dropout -> matmul.
#include <optional>

#include "kiln/nn/module.h"

namespace kiln::models {

struct SelfAttention {
  Tensor mask{};   // additive [B,1,1,Tk] padding mask, or undefined
  double scale = 1.0;
  bool causal = false;
  // Bool [.., Tq, Tk], the keys each query may see (the causal or windowed
  // pattern) for the composite form; the fused kernel derives it from
  // causal and window.
  Tensor allowed{};
  int64_t window = 0;              // causal with a sliding window of this many keys (0: none)
  std::optional<double> soft_cap{};  // Gemma 2: tanh(scores / cap) · cap (composite only)
  bool fusable = true;             // false: the caller's case is one the fused kernel lacks
  // Packed rows (models/packing.h's RowMasks): the segment ids the fused
  // kernel confines each query to, and the block-diagonal additive mask the
  // composite takes instead of `mask`.
  Tensor segments{};
  Tensor composite_mask{};
};

// Whether the fused kernel takes attention over q, k with this additive mask
// and (packed rows; undefined: none) segment ids, per KILN_ATTENTION and the
// device.
bool fused_attention_fits(const Tensor& q, const Tensor& k, const Tensor& mask, const Tensor& segments);

// q [B,NH,Tq,D], k / v [B,NH,Tk,D] -> [B,NH,Tq,D]; `dropout` on the probabilities.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const SelfAttention& a, const nn::Dropout& dropout);

}  // namespace kiln::models
