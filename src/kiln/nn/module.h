#pragma once
// nn::Module: a tree of parameters with Hugging Face's dotted names
// ("bert.encoder.layer.0.attention.self.query.weight"), state_dict() and a
// load_state_dict() that reports every missing, unexpected and mis-shaped key.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/ops.h"

namespace kiln::nn {

// What load_state_dict found. Empty lists: an exact match.
struct LoadReport {
  std::vector<std::string> missing;     // in the module, not in the dict
  std::vector<std::string> unexpected;  // in the dict, not in the module
  std::vector<std::string> mismatched;  // "name: checkpoint [a,b], model [c,d]"
  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string describe() const;  // one line per problem
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted names in registration order (depth first); shared tensors once.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::map<std::string, Tensor> state_dict() const;
  // Every module under this one (itself first, as ""), by dotted path, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Copies matching tensors in (shape-checked, cast to the parameter's dtype).
  // strict: any missing, unexpected or mis-shaped key throws with the report.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& dict, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

 protected:
  // Registers a trainable parameter; returns it (requires_grad set, named).
  Tensor register_parameter(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  void remove_child(const Module* m);

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
               std::vector<const TensorImpl*>& seen) const;
  void collect_modules(const std::string& path, std::vector<std::pair<std::string, Module*>>& out);
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Weight initialisation as Hugging Face's _init_weights: normal(0, std) for
// weights, zeros for biases, ones/zeros for LayerNorm.
struct Init {
  Generator* gen;
  double std;
  Device device;
  Tensor normal(const Shape& shape) const;
};

// Materialises every parameter (runs their initialisers) and waits: after
// this, training steps start from data, so they compile once.
void materialize(const std::vector<Tensor>& tensors);

class LoraBranch;
class TrainableTokens;

// What a layer a LoRA adapter can sit beside has: its branch, attached as a
// child without a name of its own, so the adapter's parameters are the
// layer's "lora_A.weight" and "lora_B.weight", as PEFT names them.
class Adaptable : public Module {
 public:
  void attach_lora(std::shared_ptr<LoraBranch> branch);
  void detach_lora();
  const std::shared_ptr<LoraBranch>& lora() const { return lora_; }
  // The layer's weight as stored, and whether that is [in, out] (a Conv1D,
  // PEFT's fan_in_fan_out) rather than [out, in].
  virtual const Tensor& stored_weight() const = 0;
  virtual bool fan_in_fan_out() const = 0;
  // The layer's bias, undefined when it has none.
  virtual const Tensor& stored_bias() const = 0;
  // The weight as [out, in], which DoRA normalises.
  Tensor weight_out_in() const { return fan_in_fan_out() ? transpose(stored_weight(), 0, 1) : stored_weight(); }

 protected:
  // y: the layer's output for x; `bias` its bias (undefined when it has none).
  Tensor with_lora(const Tensor& x, const Tensor& y, const Tensor& bias) const;

 private:
  std::shared_ptr<LoraBranch> lora_;
};

class Linear : public Adaptable {
 public:
  Linear(int64_t in, int64_t out, const Init& init, bool bias = true);
  Tensor forward(const Tensor& x) const;
  // PEFT's trainable tokens on an output head: trained rows of the weight
  // (its child "token_adapter"); nullptr to remove them.
  void set_token_adapter(std::shared_ptr<TrainableTokens> tokens);
  const std::shared_ptr<TrainableTokens>& token_adapter() const { return tokens_; }
  const Tensor& stored_weight() const override { return weight; }
  bool fan_in_fan_out() const override { return false; }
  const Tensor& stored_bias() const override { return bias; }
  Tensor weight, bias;  // [out, in], [out]

 private:
  std::shared_ptr<TrainableTokens> tokens_;
};

// GPT-2's Conv1D: a linear layer whose weight is stored [in, out]: y = x·W + b.
class Conv1D : public Adaptable {
 public:
  Conv1D(int64_t in, int64_t out, const Init& init);
  Tensor forward(const Tensor& x) const { return with_lora(x, matmul(x, weight) + bias, bias); }
  const Tensor& stored_weight() const override { return weight; }
  bool fan_in_fan_out() const override { return true; }
  const Tensor& stored_bias() const override { return bias; }
  Tensor weight, bias;  // [in, out], [out]
};

class EmbeddingLoraBranch;

class Embedding : public Module {
 public:
  // padding_idx >= 0: that row starts at zero (as HF initialises it).
  Embedding(int64_t num, int64_t dim, const Init& init, int64_t padding_idx = -1);
  // The table's rows, plus the LoRA branch's where one is attached.
  Tensor forward(const Tensor& ids) const;
  // A LoRA branch (PEFT's lora.Embedding), attached without a name of its
  // own, so its parameters are the layer's "lora_embedding_A" / "_B".
  void attach_lora(std::shared_ptr<EmbeddingLoraBranch> branch);
  void detach_lora();
  const std::shared_ptr<EmbeddingLoraBranch>& lora() const { return lora_; }
  // PEFT's trainable tokens: trained rows of the table (its child
  // "token_adapter"), read by forward() and by an output head tied to the
  // table (tied_logits); nullptr to remove them.
  void set_token_adapter(std::shared_ptr<TrainableTokens> tokens);
  const std::shared_ptr<TrainableTokens>& token_adapter() const { return tokens_; }
  // h · weightᵀ + bias: the logits of an output head tied to this table, with the
  // trained token rows in place (not the LoRA branch: PEFT's adapts the input side only).
  Tensor tied_logits(const Tensor& h, const Tensor& bias = {}) const;
  Tensor weight;  // [num, dim]
  int64_t padding_idx;  // its row gets no gradient

 private:
  std::shared_ptr<EmbeddingLoraBranch> lora_;
  std::shared_ptr<TrainableTokens> tokens_;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, Device device);
  Tensor forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }
  Tensor weight, bias;
  double eps;
};

// T5LayerNorm / LlamaRMSNorm: x · rsqrt(mean(x²) + eps) · w, no mean
// subtraction, no bias.
class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Device device);
  Tensor forward(const Tensor& x) const { return x * rsqrt(mean(x * x, {-1}, true) + eps) * weight; }
  Tensor weight;
  double eps;
};

// Dropout drawing from a generator shared by the model (seeded, so runs repeat).
class Dropout : public Module {
 public:
  Dropout(double p, std::shared_ptr<Generator> gen) : p(p), gen_(std::move(gen)) {}
  Tensor forward(const Tensor& x) const { return dropout(x, p, *gen_, is_training() && p > 0); }
  // The probability forward() drops with now (0 in eval mode), and its generator.
  double active_p() const { return is_training() ? p : 0.0; }
  Generator* generator() const { return gen_.get(); }
  double p;

 private:
  std::shared_ptr<Generator> gen_;
};

// PEFT's LoRA branch beside a frozen layer: scaling · B(A(dropout(x))), with
// lora_A [r, in] Kaiming-uniform (a = √5, as nn.Linear initialises) and
// lora_B [out, r] zero, so a fresh adapter leaves the layer's output as it was.
// With `bias` (PEFT's lora_bias) lora_B also has a bias [out], zero at first,
// scaled with the product.
class LoraBranch : public Module {
 public:
  LoraBranch(int64_t in, int64_t out, int64_t r, double scaling, double dropout, std::shared_ptr<Generator> dropout_gen,
             Generator& init_gen, Device device, bool bias = false);
  Tensor forward(const Tensor& x) const { return lora_B->forward(lora_A->forward(dropout->forward(x))) * scaling; }
  // scaling · B·A, [out, in]: what merging adds to the layer's weight.
  Tensor delta_weight() const;

  // DoRA (Liu et al. 2024, PEFT's use_dora): the layer's weight split into a
  // trained magnitude m [out] ("lora_magnitude_vector") and a direction,
  // W' = m · (W + ΔW) / ‖W + ΔW‖ per output row. enable_dora starts m at
  // the norm of `weight` [out, in] plus the branch (‖W‖ for a fresh one).
  void enable_dora(const Tensor& weight);
  bool dora() const { return lora_magnitude_vector.defined(); }
  // ‖W + ΔW‖ per output row, without gradient (PEFT detaches it, as the paper advises).
  Tensor weight_norm(const Tensor& weight) const;
  // The layer's DoRA output, as PEFT's DoraLinearLayer: y + (m/‖W + ΔW‖ − 1)·x·Wᵀ
  // + m/‖W + ΔW‖ · scaling·B·A·x, where with active dropout x is dropped once
  // for both products (x·Wᵀ then recomputed), else x·Wᵀ is y less its bias.
  // `layer` is the adapted layer (its weight and bias).
  Tensor dora_forward(const Tensor& x, const Tensor& y, const Adaptable& layer, const Tensor& bias) const;
  std::shared_ptr<Linear> lora_A, lora_B;
  std::shared_ptr<Dropout> dropout;
  double scaling;
  Tensor lora_magnitude_vector;  // defined with DoRA only

 private:
  // In eval mode the norm of W + ΔW is kept while W, A and B hold the values
  // it was computed from (the same graph nodes), so decoding computes it
  // once rather than every token; training recomputes it every step.
  struct NormCache {
    std::weak_ptr<const void> w, a, b;
    Tensor norm;
  };
  Tensor eval_weight_norm(const Adaptable& layer) const;
  mutable NormCache cache_;
};

// PEFT's LoRA branch beside an embedding table: scaling · embedding(ids, Aᵀ) · Bᵀ,
// with lora_embedding_A [r, num] zero and lora_embedding_B [dim, r] N(0, 1)
// (the zero one is A here, so a fresh adapter still leaves the output as it
// was). The tensors are the branch's own parameters, as PEFT's are (no
// ".weight"), and no dropout applies: PEFT's embedding branch has none.
class EmbeddingLoraBranch : public Module {
 public:
  EmbeddingLoraBranch(int64_t num, int64_t dim, int64_t r, double scaling, Generator& init_gen, Device device);
  // padding_idx: the base table's; that column of A gets no gradient, as in PEFT.
  Tensor forward(const Tensor& ids, int64_t padding_idx) const;
  // scaling · (B·A)ᵀ, [num, dim]: what merging adds to the table.
  Tensor delta_weight() const;
  Tensor lora_embedding_A, lora_embedding_B;
  double scaling;
};

// PEFT's trainable tokens (LoraConfig.trainable_token_indices): chosen rows
// of a frozen embedding table or output head replaced by trained values
// ("trainable_tokens_delta" [n, dim], starting as those rows), so new
// tokens learn without training the whole table. The rows are replaced,
// not added to, as PEFT's index_copy does.
class TrainableTokens : public Module {
 public:
  // `weight`: the layer's [rows, dim] table; `indices`: distinct rows of it.
  // `padding_idx`: the table's padding row (no gradient reaches it), or -1.
  TrainableTokens(const Tensor& weight, std::vector<int64_t> indices, int64_t padding_idx = -1);
  // The rows `ids` look up, given the table's `table_rows`, with trained rows in their place.
  Tensor rows(const Tensor& ids, const Tensor& table_rows) const;
  // x·W'ᵀ + bias with W' the weight holding the trained rows, given
  // `out` = x·Wᵀ + bias: the chosen columns replaced.
  Tensor columns(const Tensor& x, const Tensor& out, const Tensor& bias) const;
  // `weight` with the trained rows in place: what merging writes.
  Tensor merged(const Tensor& weight) const;
  const std::vector<int64_t>& indices() const { return indices_; }
  Tensor trainable_tokens_delta;

 private:
  std::vector<int64_t> indices_;
  int64_t delta_padding_ = -1;  // the delta row of the table's padding row, or -1
  Tensor index_;    // [n] i64: the chosen rows
  Tensor slot_;     // [rows] i64: each row's position among them (0 where not chosen)
  Tensor chosen_;   // [rows] bool
};

// HF's ACT2FN: "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh form),
// "relu", "tanh", "sigmoid", "silu" / "swish" (x · sigmoid(x)); anything
// else is an error naming it.
Tensor activation(const std::string& name, const Tensor& x);
void check_activation(const std::string& name);

}  // namespace kiln::nn
