#include "kiln/nn/module.h"

#include <algorithm>
#include <sstream>

#include "kiln/core/error.h"
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

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Tensor Init::normal(const Shape& shape) const { return randn(shape, *gen, device) * std; }

void materialize(const std::vector<Tensor>& tensors) {
  std::map<Device, std::vector<std::shared_ptr<TensorImpl>>> by_device;
  for (const auto& t : tensors) by_device[t.device()].push_back(t.impl());
  for (auto& [dev, impls] : by_device) runtime::DeviceContext::get(dev).materialize(impls);
  for (const auto& t : tensors) t.node()->data->wait();
}

Linear::Linear(int64_t in, int64_t out, const Init& init, bool with_bias) {
  weight = register_parameter("weight", init.normal({out, in}));
  if (with_bias) bias = register_parameter("bias", zeros({out}, DType::f32, init.device));
}

Conv1D::Conv1D(int64_t in, int64_t out, const Init& init) {
  weight = register_parameter("weight", init.normal({in, out}));
  bias = register_parameter("bias", zeros({out}, DType::f32, init.device));
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
  if (name == "silu" || name == "swish") return x * sigmoid(x);
  check_activation(name);
  return x;
}

}  // namespace kiln::nn
