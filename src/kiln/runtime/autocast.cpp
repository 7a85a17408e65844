#include "kiln/runtime/autocast.h"

#include "kiln/ir/builder.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/tensor_impl.h"

namespace kiln {
namespace {
thread_local bool t_autocast = false;
}

Autocast::Autocast(bool enabled) : prev_(t_autocast) { t_autocast = enabled; }
Autocast::~Autocast() { t_autocast = prev_; }
bool Autocast::active() { return t_autocast; }

ir::NodePtr autocast_bf16(const Tensor& x) {
  TensorImpl& t = *x.impl();
  if ((!t.leaf_requires_grad && !t.keeps_bf16_copy) || x.dtype() != DType::f32) return ir::cast(t.node, DType::bf16);
  t.read_as_bf16 = true;
  auto current = [&] { return t.bf16_copy && t.copy_version == t.value_version; };
  if (t.keeps_bf16_copy && !current()) {  // computed with this step, read as stored by the next ones
    t.bf16_copy = Tensor(ir::cast(t.node, DType::bf16)).impl();
    t.copy_version = t.value_version;
  }
  const ir::NodePtr copy = current() ? t.bf16_copy->node : nullptr;
  // A kept copy not computed yet is read as the cast it is; an optimizer's
  // (traced with the update, without gradients) is the same cast of the
  // same pending value, cast again here.
  if (copy && copy->op != ir::Op::Data && t.keeps_bf16_copy) return copy;
  if (!copy || copy->op != ir::Op::Data) return ir::cast(t.node, DType::bf16);
  if (!t.leaf_requires_grad) return copy;
  // Gradients reach the parameter through the cast the copy stands for
  // (traced with gradients: one traced under no_grad, an evaluation's, would
  // not pass them on).
  const ir::NodePtr& source = copy->grad_source;
  if (ir::GradMode::enabled() && (!source || source->inputs[0] != t.node || !source->requires_grad)) {
    copy->grad_source = ir::cast(t.node, DType::bf16);
    copy->requires_grad = true;
  }
  return copy;
}

void keep_bf16_copy(const Tensor& p) { p.impl()->keeps_bf16_copy = true; }

void refresh_bf16_copy(const Tensor& p) {
  TensorImpl& t = *p.impl();
  t.bf16_copy.reset();
  if (!t.read_as_bf16) return;
  t.read_as_bf16 = false;
  t.bf16_copy = Tensor(ir::cast(t.node, DType::bf16)).impl();
  t.copy_version = t.value_version;
}

}  // namespace kiln
