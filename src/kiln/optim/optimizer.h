#pragma once
// Optimizers trace their update into the same step graph as the forward and
// backward passes. Values that change every step (learning rate, bias
// corrections) enter as scalar graph inputs, so the step compiles once.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/ops.h"

namespace kiln::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
};

// One tensor of a parameter's optimizer state, by PyTorch's name for it
// (torch.optim's state_dict keys: exp_avg, exp_avg_sq, momentum_buffer, sum,
// square_avg; Hugging Face's Adafactor: exp_avg_sq_row, exp_avg_sq_col).
struct StateTensor {
  std::string name;
  Tensor value;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();  // set_to_none, as PyTorch's default
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // The names and shapes of the state a parameter of this shape has (what
  // state() holds for it), for checkpoints: a replica that does not own a
  // parameter (ZeRO-1) still knows what its owner keeps.
  virtual std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const = 0;
  // Parameter i of group g's state, in state_spec's order.
  std::vector<StateTensor>& state(size_t g, size_t i) { return state_[g][i]; }
  const std::vector<StateTensor>& state(size_t g, size_t i) const { return state_[g][i]; }
  // Steps taken (PyTorch's per-parameter "step", the same for all of them).
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 protected:
  // Zero state for every parameter, as state_spec lists it.
  void init_state();
  // p ← value, with the bf16 copy autocast's products read (runtime/autocast.h).
  static void update(Tensor& p, const Tensor& value);
  Tensor& state_value(size_t g, size_t i, size_t k) { return state_[g][i][k].value; }
  // One step of a torch.optim optimizer whose weight decay is L2 (SGD,
  // Adagrad, RMSprop): update(g, i, p, grad + wd·p, lr) for every parameter
  // with a gradient; lr is the step's learning rate as a graph input.
  void step_with_l2_decay(const std::function<void(size_t, size_t, Tensor&, const Tensor&, const Tensor&)>& update);

  std::vector<ParamGroup> groups_;
  double lr_ = 0.0;
  int64_t t_ = 0;

 private:
  std::vector<std::vector<std::vector<StateTensor>>> state_;  // group, parameter, tensor
};

// torch.optim.SGD: p ← p - lr·(g + wd·p), with optional momentum
// (buf ← μ·buf + g; the first step's buf is g).
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  void step() override;
  std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const override;

 private:
  SGDOptions options_;
};

// AdamW (Loshchilov & Hutter) as torch.optim.AdamW computes it; defaults are
// Hugging Face TrainingArguments' (lr 5e-5, betas 0.9/0.999, eps 1e-8, wd 0).
struct AdamWOptions {
  double lr = 5e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  // Groups carry their own weight decay (HF: none for biases and LayerNorm weights).
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
  void step() override;
  std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const override;  // exp_avg, exp_avg_sq

 private:
  AdamWOptions options_;
};

// torch.optim.Adagrad (lr_decay 0, initial accumulator 0):
//   g ← g + wd·p;  sum ← sum + g²;  p ← p - lr·g / (√sum + ε)
struct AdagradOptions {
  double lr = 1e-2;
  double eps = 1e-10;
  double weight_decay = 0.0;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options);
  void step() override;
  std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const override;  // sum

 private:
  AdagradOptions options_;
};

// torch.optim.RMSprop (no momentum, not centered):
//   g ← g + wd·p;  sq ← α·sq + (1-α)·g²;  p ← p - lr·g / (√sq + ε)
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options);
  void step() override;
  std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const override;  // square_avg

 private:
  RMSpropOptions options_;
};

// Hugging Face's Adafactor (transformers.optimization.Adafactor, Shazeer &
// Stern 2018) with an external learning rate, as the Trainer builds it for
// `--optim adafactor`: scale_parameter=False, relative_step=False,
// warmup_init=False, beta1=None. A parameter of rank >= 2 keeps the running
// mean of g² + ε₁ factored, per row (exp_avg_sq_row, the shape without its
// last axis) and per column (exp_avg_sq_col, without the second-to-last);
// the others keep exp_avg_sq whole. With β₂ₜ = 1 - t^decay_rate:
//   u = g / √v̂  (v̂: the factored estimate, row/mean(row) × col)
//   u ← u / max(1, rms(u) / clip_threshold) · lr
//   p ← p - wd·lr·p - u
struct AdafactorOptions {
  double lr = 1e-3;
  double eps1 = 1e-30;  // eps[0], added to g²
  double clip_threshold = 1.0;
  double decay_rate = -0.8;
  double weight_decay = 0.0;
};

class Adafactor : public Optimizer {
 public:
  Adafactor(std::vector<ParamGroup> groups, AdafactorOptions options);
  void step() override;
  std::vector<std::pair<std::string, Shape>> state_spec(const Shape& param) const override;

 private:
  AdafactorOptions options_;
};

// The optimizers `TrainingArguments::optim` names, as Hugging Face's Trainer
// builds them (get_optimizer_cls_and_kwargs): adamw_torch and
// adamw_torch_fused (AdamW with adam_beta1/2 and adam_epsilon), adafactor,
// sgd, adagrad and rmsprop (PyTorch's defaults besides the learning rate).
struct OptimizerHyper {
  double lr = 5e-5;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
};
const std::vector<std::string>& optimizer_names();
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups,
                                          const OptimizerHyper& hyper);

// Scales the gradients of `params` so their global L2 norm is at most
// max_norm (torch.nn.utils.clip_grad_norm_, inside the traced step); returns
// the norm before clipping.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The global L2 norm of the parameters' gradients, unclipped (undefined when none has one).
Tensor grad_norm(const std::vector<Tensor>& params);

// Data parallelism (the all-reduce of xm.optimizer_step): replaces each
// parameter's gradient by its sum over every replica times `scale`, inside the
// step graph. Gradients go in buckets of about bucket_mb megabytes, in
// reverse parameter order (the order backward produces them), one AllReduce
// node per bucket. `extra` values (a loss, say) ride in the last bucket and
// come back reduced the same way. Parameters without a gradient are skipped.
std::vector<Tensor> all_reduce_gradients(const std::vector<Tensor>& params, double scale, double bucket_mb = 25.0,
                                         const std::vector<Tensor>& extra = {});

// Sharded optimizer state (ZeRO-1): each parameter is updated, and its
// optimizer state kept, by one replica, its owner (a global rank): the
// largest parameters first, each to the least loaded replica (ties: the
// lowest rank). The same assignment on every replica.
std::vector<int64_t> shard_owners(const std::vector<Tensor>& params, int world);
// values[k] as replica owners[k] holds it, for every k (non-owners pass a
// tensor of the same shape, which is not read), in buckets of ~bucket_mb.
std::vector<Tensor> gather_from_owners(const std::vector<Tensor>& values, const std::vector<int64_t>& owners,
                                       double bucket_mb = 25.0);

}  // namespace kiln::optim
