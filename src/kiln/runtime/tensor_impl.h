#pragma once
// Internal state behind a Tensor. Every impl is registered with its device's
// context so mark_step() can find the live tensors whose values are pending.
#include <memory>
#include <string>

#include "kiln/ir/node.h"

namespace kiln {

struct TensorImpl : std::enable_shared_from_this<TensorImpl> {
  explicit TensorImpl(ir::NodePtr n);
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  ir::NodePtr node;
  Device device;
  bool leaf_requires_grad = false;  // set by requires_grad_() on leaves
  std::shared_ptr<TensorImpl> grad;
  std::string name;
  // Creation order: mark_step() lists pending tensors in this order, so the
  // same program traces the same graph every step.
  uint64_t seq;

  // Autocast's bf16 copy of a parameter (runtime/autocast.h): made with the
  // optimizer's update when an autocast product read the parameter since
  // the update before, and used while value_version still is copy_version.
  uint64_t value_version = 0;  // bumped by assign() and set_data()
  bool read_as_bf16 = false;
  std::shared_ptr<TensorImpl> bf16_copy;
  uint64_t copy_version = 0;
  // A weight of inference (keep_bf16_copy): the first autocast product to
  // read it makes the copy, kept while value_version stays copy_version.
  bool keeps_bf16_copy = false;
};

}  // namespace kiln
