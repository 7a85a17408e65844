#pragma once
// Which parameters get weight decay, as transformers' Trainer.get_decay_parameter_names
// decides it: none for parameters of LayerNorm modules (torch.nn.LayerNorm: BERT's
// LayerNorm, GPT-2's ln_1 / ln_2 / ln_f) nor for names that, lower-cased, contain
// "bias" (T5's relative_attention_bias too), "layernorm", "rmsnorm", a ".norm" /
// "norm." component or "_norm" ending a component (T5's layer_norm, Llama's
// input_layernorm and model.norm, Qwen3's q_norm).
#include <string>
#include <unordered_set>

#include "kiln/nn/module.h"

namespace kiln::train {

// Whether HF's name patterns exempt the parameter `name` from weight decay.
bool decay_exempt_name(const std::string& name);

// The parameters of `model` (named_parameters' names) without weight decay:
// those in an nn::LayerNorm and those decay_exempt_name exempts.
std::unordered_set<std::string> no_decay_parameter_names(nn::Module& model);

}  // namespace kiln::train
