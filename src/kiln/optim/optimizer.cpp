#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/runtime/autocast.h"

namespace kiln::optim {

namespace {
Tensor host_zeros(const Shape& shape, Device device) {
  std::vector<float> z(static_cast<size_t>(numel(shape)), 0.0f);
  return Tensor::from_vector(z, shape, device);
}
// A per-step scalar as a graph input (never a constant: no recompiles).
Tensor step_scalar(double v, Device d, const char* name) { return Tensor::scalar(static_cast<float>(v), d, name); }
}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  for (const auto& g : groups_)
    for (const auto& p : g.params) {
      KILN_CHECK(p.defined(), "optimizer: undefined parameter");
      KILN_CHECK(p.requires_grad() && p.is_leaf(), "optimizer: parameter '", p.name(), "' ",
                 to_string(p.shape()), " is not a leaf that requires grad");
    }
}

void Optimizer::update(Tensor& p, const Tensor& value) {
  p.assign(value);
  refresh_bf16_copy(p);
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad();
}

void Optimizer::init_state() {
  state_.assign(groups_.size(), {});
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (const auto& p : groups_[gi].params) {
      auto& mine = state_[gi].emplace_back();
      for (auto& [name, shape] : state_spec(p.shape())) mine.push_back({name, host_zeros(shape, p.device())});
    }
}

void Optimizer::step_with_l2_decay(
    const std::function<void(size_t, size_t, Tensor&, const Tensor&, const Tensor&)>& update) {
  NoGradGuard no_grad;
  ++t_;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& group = groups_[gi];
    if (group.params.empty()) continue;
    Tensor lr = step_scalar(lr_, group.params[0].device(), "lr");
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (group.weight_decay != 0.0) g = g + p * group.weight_decay;
      update(gi, i, p, g, lr);
    }
  }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), options.weight_decay}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : Optimizer(std::move(groups)), options_(options) {
  lr_ = options.lr;
  KILN_CHECK(options.momentum >= 0, "SGD: momentum must be >= 0, got ", options.momentum);
  init_state();
}

std::vector<std::pair<std::string, Shape>> SGD::state_spec(const Shape& param) const {
  if (options_.momentum == 0.0) return {};
  return {{"momentum_buffer", param}};
}

void SGD::step() {
  step_with_l2_decay([&](size_t gi, size_t i, Tensor& p, const Tensor& g, const Tensor& lr) {
    Tensor step = g;
    if (options_.momentum != 0.0) {
      Tensor& buf = state_value(gi, i, 0);
      buf.assign(buf * options_.momentum + g);
      step = buf;
    }
    update(p, p - lr * step);
  });
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), options.weight_decay}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  lr_ = options.lr;
  KILN_CHECK(options.beta1 >= 0 && options.beta1 < 1, "AdamW: beta1 must be in [0, 1), got ", options.beta1);
  KILN_CHECK(options.beta2 >= 0 && options.beta2 < 1, "AdamW: beta2 must be in [0, 1), got ", options.beta2);
  KILN_CHECK(options.eps >= 0, "AdamW: eps must be >= 0, got ", options.eps);
  init_state();
}

std::vector<std::pair<std::string, Shape>> AdamW::state_spec(const Shape& param) const {
  return {{"exp_avg", param}, {"exp_avg_sq", param}};
}

void AdamW::step() {
  NoGradGuard no_grad;
  ++t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  // torch.optim.AdamW:
  //   p ← p·(1 - lr·wd);  m ← β1 m + (1-β1) g;  v ← β2 v + (1-β2) g²
  //   p ← p - lr/(1-β1ᵗ) · m / (√v / √(1-β2ᵗ) + ε)
  double bc1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  double bc2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& group = groups_[gi];
    if (group.params.empty()) continue;
    Device dev = group.params[0].device();
    Tensor step_size = step_scalar(lr_ / bc1, dev, "adamw_step_size");
    Tensor inv_sqrt_bc2 = step_scalar(1.0 / std::sqrt(bc2), dev, "adamw_inv_sqrt_bc2");
    Tensor decay = step_scalar(1.0 - lr_ * group.weight_decay, dev, "adamw_decay");
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor& m = state_value(gi, i, 0);
      Tensor& v = state_value(gi, i, 1);
      m.assign(m * b1 + g * (1.0 - b1));
      v.assign(v * b2 + g * g * (1.0 - b2));
      Tensor denom = sqrt(v) * inv_sqrt_bc2 + options_.eps;
      update(p, p * decay - step_size * m / denom);
    }
  }
}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  lr_ = options.lr;
  KILN_CHECK(options.eps >= 0, "Adagrad: eps must be >= 0, got ", options.eps);
  init_state();
}

std::vector<std::pair<std::string, Shape>> Adagrad::state_spec(const Shape& param) const {
  return {{"sum", param}};
}

void Adagrad::step() {
  step_with_l2_decay([&](size_t gi, size_t i, Tensor& p, const Tensor& g, const Tensor& lr) {
    Tensor& acc = state_value(gi, i, 0);
    acc.assign(acc + g * g);
    update(p, p - lr * g / (sqrt(acc) + options_.eps));
  });
}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  lr_ = options.lr;
  KILN_CHECK(options.alpha >= 0 && options.alpha <= 1, "RMSprop: alpha must be in [0, 1], got ", options.alpha);
  KILN_CHECK(options.eps >= 0, "RMSprop: eps must be >= 0, got ", options.eps);
  init_state();
}

std::vector<std::pair<std::string, Shape>> RMSprop::state_spec(const Shape& param) const {
  return {{"square_avg", param}};
}

void RMSprop::step() {
  const double a = options_.alpha;
  step_with_l2_decay([&](size_t gi, size_t i, Tensor& p, const Tensor& g, const Tensor& lr) {
    Tensor& sq = state_value(gi, i, 0);
    sq.assign(sq * a + g * g * (1.0 - a));
    update(p, p - lr * g / (sqrt(sq) + options_.eps));
  });
}

Adafactor::Adafactor(std::vector<ParamGroup> groups, AdafactorOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  lr_ = options.lr;
  KILN_CHECK(options.eps1 >= 0, "Adafactor: eps1 must be >= 0, got ", options.eps1);
  KILN_CHECK(options.clip_threshold > 0, "Adafactor: clip_threshold must be positive, got ", options.clip_threshold);
  KILN_CHECK(options.decay_rate < 0, "Adafactor: decay_rate must be negative, got ", options.decay_rate);
  init_state();
}

std::vector<std::pair<std::string, Shape>> Adafactor::state_spec(const Shape& param) const {
  if (param.size() < 2) return {{"exp_avg_sq", param}};
  Shape row(param.begin(), param.end() - 1), col(param.begin(), param.end() - 2);
  col.push_back(param.back());
  return {{"exp_avg_sq_row", row}, {"exp_avg_sq_col", col}};
}

void Adafactor::step() {
  NoGradGuard no_grad;
  ++t_;
  // β₂ₜ = 1 - t^decay_rate: 0 at the first step, so the state starts as g².
  const double beta2t = 1.0 - std::pow(static_cast<double>(t_), options_.decay_rate);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    auto& group = groups_[gi];
    if (group.params.empty()) continue;
    Device dev = group.params[0].device();
    Tensor lr = step_scalar(lr_, dev, "lr");
    Tensor keep = step_scalar(beta2t, dev, "adafactor_beta2t");
    Tensor take = step_scalar(1.0 - beta2t, dev, "adafactor_one_minus_beta2t");
    Tensor decay = step_scalar(-group.weight_decay * lr_, dev, "adafactor_decay");
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor sq = g * g + options_.eps1;
      Tensor u;
      const int64_t r = p.rank();
      if (r >= 2) {
        Tensor& row = state_value(gi, i, 0);
        Tensor& col = state_value(gi, i, 1);
        row.assign(row * keep + mean(sq, {r - 1}) * take);
        col.assign(col * keep + mean(sq, {r - 2}) * take);
        // v̂ = row·col / mean(row): u = g · rsqrt(row / mean(row)) · rsqrt(col)
        Tensor r_factor = unsqueeze(rsqrt(row / mean(row, {r - 2}, true)), r - 1);
        Tensor c_factor = rsqrt(unsqueeze(col, r - 2));
        u = r_factor * c_factor * g;
      } else {
        Tensor& v = state_value(gi, i, 0);
        v.assign(v * keep + sq * take);
        u = rsqrt(v) * g;
      }
      // rms(u) = ‖u‖ / √n; u / max(1, rms(u) / clip_threshold)
      Tensor rms = sqrt(sum(u * u)) / std::sqrt(static_cast<double>(u.numel()));
      u = u / maximum(rms / options_.clip_threshold, ones({}, DType::f32, dev));
      u = u * lr;
      Tensor decayed = group.weight_decay != 0.0 ? p + p * decay : p;
      update(p, decayed - u);
    }
  }
}

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names{"adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad",
                                              "rmsprop"};
  return names;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups,
                                          const OptimizerHyper& hyper) {
  if (name == "adamw_torch" || name == "adamw_torch_fused")
    return std::make_unique<AdamW>(std::move(groups), AdamWOptions{.lr = hyper.lr,
                                                                   .beta1 = hyper.adam_beta1,
                                                                   .beta2 = hyper.adam_beta2,
                                                                   .eps = hyper.adam_epsilon});
  if (name == "adafactor") return std::make_unique<Adafactor>(std::move(groups), AdafactorOptions{.lr = hyper.lr});
  if (name == "sgd") return std::make_unique<SGD>(std::move(groups), SGDOptions{.lr = hyper.lr});
  if (name == "adagrad") return std::make_unique<Adagrad>(std::move(groups), AdagradOptions{.lr = hyper.lr});
  if (name == "rmsprop") return std::make_unique<RMSprop>(std::move(groups), RMSpropOptions{.lr = hyper.lr});
  throw Error(detail::concat("optim: unknown optimizer '", name, "' (expected one of: ", joined(optimizer_names()),
                             ")"));
}

Tensor grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  Tensor total;
  // Last parameter first: the compiler visits the sum's operands in order, and
  // the last layers' gradients are the first the backward pass has (see
  // ir::flatten), so each layer's weight gradients are computed, and its
  // intermediate gradients freed, as the backward pass reaches it.
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const Tensor& p = *it;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor s = sum(g * g);
    total = total.defined() ? total + s : s;
  }
  return total.defined() ? sqrt(total) : Tensor();
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  Tensor norm = grad_norm(params);
  if (!norm.defined()) return {};
  // coef = min(1, max_norm / (norm + 1e-6)), as torch computes it
  Tensor coef = minimum(max_norm / (norm + 1e-6), ones({}, DType::f32, norm.device()));
  for (auto p : params) {
    Tensor g = p.grad();
    if (g.defined()) p.set_grad(g * coef);
  }
  return norm;
}

std::vector<Tensor> all_reduce_gradients(const std::vector<Tensor>& params, double scale, double bucket_mb,
                                         const std::vector<Tensor>& extra) {
  struct Item {
    Tensor param;  // undefined for extras
    Tensor value;
  };
  std::vector<Item> items;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    Tensor g = it->grad();
    if (g.defined()) items.push_back({*it, g});
  }
  for (const auto& e : extra) items.push_back({Tensor(), e});
  std::vector<Tensor> reduced_extra;
  const double bucket_elems = std::max(1.0, bucket_mb * 1e6 / sizeof(float));
  size_t begin = 0;
  while (begin < items.size()) {
    // A bucket: consecutive gradients up to the size limit (at least one);
    // the extras always join the last one.
    size_t end = begin;
    double elems = 0;
    while (end < items.size() && (end == begin || elems + items[end].value.numel() <= bucket_elems ||
                                  !items[end].param.defined()))
      elems += items[end++].value.numel();
    std::vector<Tensor> values;
    for (size_t k = begin; k < end; ++k) values.push_back(items[k].value);
    Tensor flat = all_reduce(values, scale);
    int64_t off = 0;
    for (size_t k = begin; k < end; ++k) {
      const Tensor& v = items[k].value;
      Tensor piece = reshape(slice(flat, 0, off, off + v.numel()), v.shape());
      off += v.numel();
      if (items[k].param.defined()) {
        Tensor p = items[k].param;
        p.set_grad(piece);
      } else {
        reduced_extra.push_back(piece);
      }
    }
    begin = end;
  }
  return reduced_extra;
}

std::vector<int64_t> shard_owners(const std::vector<Tensor>& params, int world) {
  KILN_CHECK(world >= 1, "shard_owners: world size must be at least 1, got ", world);
  std::vector<size_t> order(params.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(world), 0), owner(params.size(), 0);
  for (size_t k : order) {
    auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[k] = least;
    load[least] += params[k].numel();
  }
  return owner;
}

std::vector<Tensor> gather_from_owners(const std::vector<Tensor>& values, const std::vector<int64_t>& owners,
                                       double bucket_mb) {
  KILN_CHECK(values.size() == owners.size(), "gather_from_owners: ", values.size(), " tensors, ", owners.size(),
             " owners");
  std::vector<Tensor> out(values.size());
  const double bucket_elems = std::max(1.0, bucket_mb * 1e6 / sizeof(float));
  size_t begin = 0;
  while (begin < values.size()) {
    size_t end = begin;
    double elems = 0;
    while (end < values.size() && (end == begin || elems + values[end].numel() <= bucket_elems))
      elems += values[end++].numel();
    std::vector<Tensor> part(values.begin() + begin, values.begin() + end);
    std::vector<int64_t> roots(owners.begin() + begin, owners.begin() + end);
    Tensor flat = broadcast_from(part, roots);
    int64_t off = 0;
    for (size_t k = begin; k < end; ++k) {
      out[k] = reshape(slice(flat, 0, off, off + values[k].numel()), values[k].shape());
      off += values[k].numel();
    }
    begin = end;
  }
  return out;
}

}  // namespace kiln::optim
