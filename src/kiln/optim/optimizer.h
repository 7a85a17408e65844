#pragma once
// Optimizers trace their update into the same step graph as the forward and
// backward passes. Values that change every step (learning rate, bias
// corrections) enter as scalar graph inputs, so the step compiles once.
#include <vector>

#include "kiln/runtime/ops.h"

namespace kiln::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
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

 protected:
  std::vector<ParamGroup> groups_;
  double lr_ = 0.0;
};

// p ← p - lr·(g + wd·p), with optional momentum (buf ← μ·buf + g).
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;

 private:
  SGDOptions options_;
  std::vector<std::vector<Tensor>> momentum_;
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
  int64_t steps_taken() const { return t_; }
  // Optimizer state, for checkpoints: exp_avg and exp_avg_sq per parameter.
  std::vector<Tensor>& exp_avg(size_t group) { return m_[group]; }
  std::vector<Tensor>& exp_avg_sq(size_t group) { return v_[group]; }
  const std::vector<Tensor>& exp_avg(size_t group) const { return m_[group]; }
  const std::vector<Tensor>& exp_avg_sq(size_t group) const { return v_[group]; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  void init_state();
  AdamWOptions options_;
  int64_t t_ = 0;
  std::vector<std::vector<Tensor>> m_, v_;
};

// Scales the gradients of `params` so their global L2 norm is at most
// max_norm (torch.nn.utils.clip_grad_norm_, inside the traced step); returns
// the norm before clipping.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

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
