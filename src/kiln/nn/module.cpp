#include "kiln/nn/module.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/nn/defer_init.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/tensor_impl.h"

namespace kiln::nn {

std::string LoadReport::describe() const {
  std::ostringstream os;
  for (const auto& k : missing) os << "  missing: " << k << "\n";
  for (const auto& k : unexpected) os << "  unexpected: " << k << "\n";
  for (const auto& k : mismatched) os << "  shape mismatch: " << k << "\n";
  return os.str();
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  KILN_CHECK(value.dtype() == DType::f32, "parameter '", name, "' must be f32");
  value.set_name(name);
  if (!value.requires_grad()) value.requires_grad_();
  params_.emplace_back(name, value);
  return value;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params_) {
    if (std::find(seen.begin(), seen.end(), t.impl().get()) != seen.end()) continue;
    seen.push_back(t.impl().get());
    out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(name.empty() ? prefix : prefix + name + ".", out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : named_parameters()) out.emplace(n, t);
  return out;
}

LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& dict, bool strict) {
  LoadReport report;
  auto params = named_parameters();
  std::vector<std::pair<Tensor, Tensor>> assignments;
  for (auto& [name, p] : params) {
    auto it = dict.find(name);
    if (it == dict.end()) {
      report.missing.push_back(name);
      continue;
    }
    if (it->second.shape() != p.shape()) {
      report.mismatched.push_back(name + ": checkpoint " + to_string(it->second.shape()) + ", model " +
                                  to_string(p.shape()));
      continue;
    }
    assignments.emplace_back(p, it->second);
  }
  for (const auto& entry : dict)  // (clang before 16 cannot capture a structured binding)
    if (std::none_of(params.begin(), params.end(), [&](const auto& p) { return p.first == entry.first; }))
      report.unexpected.push_back(entry.first);
  if (strict && !report.ok()) throw Error("load_state_dict: state dict does not match the model:\n" + report.describe());
  NoGradGuard no_grad;
  for (auto& [p, v] : assignments) {
    KILN_CHECK(v.device() == p.device(), "load_state_dict: tensor on ", v.device().str(), ", parameter on ",
               p.device().str());
    p.set_data(v);  // shares a loaded (e.g. memory-mapped) buffer without copying
    p.zero_grad();
  }
  return report;
}

void Module::collect_modules(const std::string& path, std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(path, this);
  for (auto& [name, child] : children_) {
    if (name.empty()) {  // a nameless child's modules sit at this path's level
      const size_t before = out.size();
      child->collect_modules(path, out);
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(before));  // the child itself shares this path
      continue;
    }
    child->collect_modules(path.empty() ? name : path + "." + name, out);
  }
}

void Module::remove_child(const Module* m) {
  std::erase_if(children_, [m](const auto& c) { return c.second.get() == m; });
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Tensor Init::normal(const Shape& shape) const { return randn(shape, *gen, device) * std; }

namespace {
thread_local bool defer_init = false;
}  // namespace

DeferInit::DeferInit() : prev_(defer_init) { defer_init = true; }
DeferInit::~DeferInit() { defer_init = prev_; }
bool init_deferred() { return defer_init; }

void materialize(const std::vector<Tensor>& tensors) {
  if (defer_init) return;
  std::map<Device, std::vector<std::shared_ptr<TensorImpl>>> by_device;
  for (const auto& t : tensors) by_device[t.device()].push_back(t.impl());
  for (auto& [dev, impls] : by_device) runtime::DeviceContext::get(dev).materialize(impls);
  for (const auto& t : tensors) t.node()->data->wait();
}

void Adaptable::attach_lora(std::shared_ptr<LoraBranch> branch) {
  KILN_CHECK(!lora_, "attach_lora: the layer has a LoRA adapter already");
  lora_ = register_module("", std::move(branch));
}

void Adaptable::detach_lora() {
  if (!lora_) return;
  remove_child(lora_.get());
  lora_.reset();
}

Tensor Adaptable::with_lora(const Tensor& x, const Tensor& y, const Tensor& bias) const {
  if (!lora_) return y;
  return lora_->dora() ? lora_->dora_forward(x, y, *this, bias) : y + lora_->forward(x);
}

LoraBranch::LoraBranch(int64_t in, int64_t out, int64_t r, double scaling_, double p,
                       std::shared_ptr<Generator> dropout_gen, Generator& init_gen, Device device, bool bias)
    : scaling(scaling_) {
  KILN_CHECK(r > 0, "LoRA: r must be positive, got ", r);
  // kaiming_uniform_(a=√5) on [r, in]: bound = √(2 / (1 + 5)) · √(3 / in) = 1 / √in.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Init none{&init_gen, 0.0, device};
  lora_A = register_module("lora_A", std::make_shared<Linear>(in, r, none, false));
  lora_B = register_module("lora_B", std::make_shared<Linear>(r, out, none, bias));
  NoGradGuard no_grad;
  lora_A->weight.assign((rand({r, in}, init_gen, device) * 2.0 - 1.0) * bound);
  lora_B->weight.assign(zeros({out, r}, DType::f32, device));
  dropout = register_module("lora_dropout", std::make_shared<Dropout>(p, std::move(dropout_gen)));
}

Tensor LoraBranch::delta_weight() const { return matmul(lora_B->weight, lora_A->weight) * scaling; }

void LoraBranch::enable_dora(const Tensor& weight) {
  KILN_CHECK(!dora(), "enable_dora: the branch has DoRA already");
  KILN_CHECK(weight.shape().size() == 2 && weight.shape()[0] == lora_B->weight.shape()[0] &&
                 weight.shape()[1] == lora_A->weight.shape()[1],
             "enable_dora: the layer's weight has shape ", to_string(weight.shape()), ", the branch needs [",
             lora_B->weight.shape()[0], ", ", lora_A->weight.shape()[1], "]");
  lora_magnitude_vector = register_parameter("lora_magnitude_vector", weight_norm(weight));
}

Tensor LoraBranch::weight_norm(const Tensor& weight) const {
  const Tensor w = cast(weight, DType::f32) + delta_weight().detach();
  return sqrt(sum(w * w, {1})).detach();
}

namespace {
// Whether `seen` still names the graph node that holds `t`'s value.
bool same_value(const std::weak_ptr<const void>& seen, const Tensor& t) {
  return !seen.expired() && seen.lock() == std::static_pointer_cast<const void>(t.impl()->node);
}
}  // namespace

Tensor LoraBranch::eval_weight_norm(const Adaptable& layer) const {
  const Tensor& w = layer.stored_weight();
  if (is_training()) {
    cache_ = {};
    return weight_norm(layer.weight_out_in());
  }
  if (!cache_.norm.defined() || !same_value(cache_.w, w) || !same_value(cache_.a, lora_A->weight) ||
      !same_value(cache_.b, lora_B->weight))
    cache_ = {w.impl()->node, lora_A->weight.impl()->node, lora_B->weight.impl()->node,
              weight_norm(layer.weight_out_in())};
  return cache_.norm;
}

Tensor LoraBranch::dora_forward(const Tensor& x, const Tensor& y, const Adaptable& layer, const Tensor& bias) const {
  const Tensor scale = lora_magnitude_vector / eval_weight_norm(layer);  // [out], broadcast over the rows
  const bool drops = dropout->active_p() > 0;
  const Tensor in = drops ? dropout->forward(x) : x;
  const Tensor base = drops ? linear(in, layer.weight_out_in()) : (bias.defined() ? y - bias : y);
  const Tensor branch = lora_B->forward(lora_A->forward(in)) * scaling;
  return y + (scale - 1.0) * base + scale * branch;
}

EmbeddingLoraBranch::EmbeddingLoraBranch(int64_t num, int64_t dim, int64_t r, double scaling_, Generator& init_gen,
                                         Device device)
    : scaling(scaling_) {
  KILN_CHECK(r > 0, "LoRA: r must be positive, got ", r);
  lora_embedding_A = register_parameter("lora_embedding_A", zeros({r, num}, DType::f32, device));
  lora_embedding_B = register_parameter("lora_embedding_B", randn({dim, r}, init_gen, device));
}

Tensor EmbeddingLoraBranch::forward(const Tensor& ids, int64_t padding_idx) const {
  const Tensor rows = embedding(ids, transpose(lora_embedding_A, 0, 1), padding_idx);  // [..., r]
  return matmul(rows, lora_embedding_B, false, true) * scaling;
}

Tensor EmbeddingLoraBranch::delta_weight() const {
  return matmul(lora_embedding_A, lora_embedding_B, true, true) * scaling;  // (B·A)ᵀ = Aᵀ·Bᵀ
}

Linear::Linear(int64_t in, int64_t out, const Init& init, bool with_bias) {
  weight = register_parameter("weight", init.normal({out, in}));
  if (with_bias) bias = register_parameter("bias", zeros({out}, DType::f32, init.device));
}

Conv1D::Conv1D(int64_t in, int64_t out, const Init& init) {
  weight = register_parameter("weight", init.normal({in, out}));
  bias = register_parameter("bias", zeros({out}, DType::f32, init.device));
}

Tensor Embedding::forward(const Tensor& ids) const {
  Tensor rows = embedding(ids, weight, padding_idx);
  if (tokens_) rows = tokens_->rows(ids, rows);
  return lora_ ? rows + lora_->forward(ids, padding_idx) : rows;
}

Tensor Embedding::tied_logits(const Tensor& h, const Tensor& bias) const {
  const Tensor logits = linear(h, weight, bias);
  return tokens_ ? tokens_->columns(h, logits, bias) : logits;
}

void Embedding::set_token_adapter(std::shared_ptr<TrainableTokens> tokens) {
  if (tokens_) remove_child(tokens_.get());
  tokens_ = tokens ? register_module("token_adapter", std::move(tokens)) : nullptr;
}

Tensor Linear::forward(const Tensor& x) const {
  Tensor y = linear(x, weight, bias);
  if (tokens_) y = tokens_->columns(x, y, bias);
  return with_lora(x, y, bias);
}

void Linear::set_token_adapter(std::shared_ptr<TrainableTokens> tokens) {
  if (tokens_) remove_child(tokens_.get());
  tokens_ = tokens ? register_module("token_adapter", std::move(tokens)) : nullptr;
}

TrainableTokens::TrainableTokens(const Tensor& weight, std::vector<int64_t> indices, int64_t padding_idx)
    : indices_(std::move(indices)) {
  const int64_t rows = weight.dim(0), n = static_cast<int64_t>(indices_.size());
  KILN_CHECK(weight.rank() == 2 && n > 0, "trainable tokens: need a [rows, dim] weight and at least one index");
  std::vector<int64_t> slot(rows, 0), chosen(rows, 0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = indices_[k];
    KILN_CHECK(i >= 0 && i < rows, "trainable tokens: index ", i, " is out of range for a table of ", rows, " rows");
    KILN_CHECK(!chosen[i], "trainable tokens: index ", i, " is given twice");
    slot[i] = k;
    chosen[i] = 1;
    if (i == padding_idx) delta_padding_ = k;
  }
  const Device device = weight.device();
  index_ = Tensor::from_vector(indices_, {n}, device);
  slot_ = Tensor::from_vector(slot, {rows}, device);
  chosen_ = ne(Tensor::from_vector(chosen, {rows}, device), full({}, 0, DType::i64, device));
  NoGradGuard no_grad;
  trainable_tokens_delta = register_parameter("trainable_tokens_delta", cast(index_select(weight, index_), DType::f32));
}

Tensor TrainableTokens::rows(const Tensor& ids, const Tensor& table_rows) const {
  const Tensor trained = embedding(index_select(slot_, ids), trainable_tokens_delta, delta_padding_);
  return where(unsqueeze(index_select(chosen_, ids), -1), trained, table_rows);
}

Tensor TrainableTokens::columns(const Tensor& x, const Tensor& out, const Tensor& bias) const {
  const Tensor trained = linear(x, trainable_tokens_delta, bias.defined() ? index_select(bias, index_) : Tensor());
  Shape one_row(trained.rank(), 1);  // every row of x places its values in the chosen columns
  one_row.back() = static_cast<int64_t>(indices_.size());
  const Tensor index = broadcast_to(reshape(index_, one_row), trained.shape());
  const Tensor placed = scatter_add(zeros_like(out), -1, index, cast(trained, out.dtype()));
  return where(chosen_, placed, out);
}

Tensor TrainableTokens::merged(const Tensor& weight) const {
  return where(unsqueeze(chosen_, 1), cast(index_select(trainable_tokens_delta, slot_), weight.dtype()), weight);
}

void Embedding::attach_lora(std::shared_ptr<EmbeddingLoraBranch> branch) {
  KILN_CHECK(!lora_, "attach_lora: the embedding has a LoRA adapter already");
  lora_ = register_module("", std::move(branch));
}

void Embedding::detach_lora() {
  if (!lora_) return;
  remove_child(lora_.get());
  lora_.reset();
}

Embedding::Embedding(int64_t num, int64_t dim, const Init& init, int64_t padding_idx_) : padding_idx(padding_idx_) {
  Tensor w = init.normal({num, dim});
  if (padding_idx >= 0) {
    KILN_CHECK(padding_idx < num, "Embedding: padding_idx ", padding_idx, " out of range [0, ", num, ")");
    Tensor row = cast(ne(arange(num, DType::i64, init.device), full({}, static_cast<double>(padding_idx),
                                                                     DType::i64, init.device)),
                      DType::f32);
    w = w * reshape(row, {num, 1});
  }
  weight = register_parameter("weight", w);
}

LayerNorm::LayerNorm(int64_t dim, double eps_, Device device) : eps(eps_) {
  weight = register_parameter("weight", ones({dim}, DType::f32, device));
  bias = register_parameter("bias", zeros({dim}, DType::f32, device));
}

RMSNorm::RMSNorm(int64_t dim, double eps_, Device device) : eps(eps_) {
  weight = register_parameter("weight", ones({dim}, DType::f32, device));
}

void check_activation(const std::string& name) {
  static const char* known[] = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "tanh", "sigmoid",
                                "silu", "swish"};
  KILN_CHECK(std::find(std::begin(known), std::end(known), name) != std::end(known), "unsupported activation '",
             name, "' (supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, tanh, sigmoid, silu, swish)");
}

Tensor activation(const std::string& name, const Tensor& x) {
  if (name == "gelu") return gelu(x, "none");
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return gelu(x, "tanh");
  if (name == "relu") return relu(x);
  if (name == "tanh") return tanh(x);
  if (name == "sigmoid") return sigmoid(x);
  if (name == "silu" || name == "swish") return silu(x);
  check_activation(name);
  return x;
}

}  // namespace kiln::nn
