#include "kiln/runtime/tensor.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <sstream>

#include "kiln/autodiff/backward.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/metrics.h"
#include "kiln/runtime/tensor_impl.h"

namespace kiln {

bool runtime_shutting_down();

TensorImpl::TensorImpl(ir::NodePtr n) : node(std::move(n)), device(node->device) {
  static std::atomic<uint64_t> counter{0};
  seq = counter++;
  runtime::DeviceContext::get(device).register_tensor(this);
}

TensorImpl::~TensorImpl() {
  if (!runtime_shutting_down()) runtime::DeviceContext::get(device).unregister_tensor(this);
}

Tensor::Tensor(ir::NodePtr node) {
  KILN_ASSERT(node != nullptr);
  impl_ = std::make_shared<TensorImpl>(std::move(node));
  if (eager_mode() && impl_->node->op != ir::Op::Data) {
    runtime::DeviceContext::get(impl_->device).materialize({impl_});
    impl_->node->data->wait();
  }
}

Tensor Tensor::from_data(const void* data, DType dtype, Shape shape, Device device, std::string name) {
  for (int64_t d : shape) KILN_CHECK(d >= 0, "from_data: negative extent in shape ", kiln::to_string(shape));
  size_t nbytes = kiln::numel(shape) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(device, nbytes);
  storage->copy_from_host(data, nbytes);
  metrics::record_transfer(static_cast<int64_t>(nbytes), 0);
  auto buffer = std::make_shared<Buffer>(Buffer{std::move(storage), nullptr});
  Tensor t(ir::data(std::move(buffer), std::move(shape), dtype, device, name));
  t.impl_->name = std::move(name);
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::string name) {
  KILN_CHECK(storage != nullptr, "from_storage: null storage");
  size_t need = kiln::numel(shape) * dtype_size(dtype);
  KILN_CHECK(storage->nbytes() >= need, "from_storage: ", storage->nbytes(), " bytes cannot hold ", dtype_name(dtype),
             kiln::to_string(shape), " (", need, " bytes)");
  Device device = storage->device();
  auto buffer = std::make_shared<Buffer>(Buffer{std::move(storage), nullptr});
  Tensor t(ir::data(std::move(buffer), std::move(shape), dtype, device, name));
  t.impl_->name = std::move(name);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, Shape shape, Device device, std::string name) {
  KILN_CHECK(static_cast<int64_t>(v.size()) == kiln::numel(shape), "from_vector: ", v.size(),
             " values for shape ", kiln::to_string(shape), " (", kiln::numel(shape), " elements)");
  return from_data(v.data(), DType::f32, std::move(shape), device, std::move(name));
}

Tensor Tensor::from_vector(const std::vector<int64_t>& v, Shape shape, Device device, std::string name) {
  KILN_CHECK(static_cast<int64_t>(v.size()) == kiln::numel(shape), "from_vector: ", v.size(),
             " values for shape ", kiln::to_string(shape), " (", kiln::numel(shape), " elements)");
  return from_data(v.data(), DType::i64, std::move(shape), device, std::move(name));
}

Tensor Tensor::scalar(float v, Device device, std::string name) {
  return from_data(&v, DType::f32, {}, device, std::move(name));
}

static const TensorImpl& check(const std::shared_ptr<TensorImpl>& impl) {
  KILN_CHECK(impl != nullptr, "use of an undefined tensor");
  return *impl;
}

const Shape& Tensor::shape() const { return check(impl_).node->shape; }
int64_t Tensor::dim(int64_t axis) const { return shape()[normalize_axis(axis, rank(), "dim")]; }
int64_t Tensor::rank() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::numel() const { return kiln::numel(shape()); }
DType Tensor::dtype() const { return check(impl_).node->dtype; }
Device Tensor::device() const { return check(impl_).device; }
const std::string& Tensor::name() const { return check(impl_).name; }
ir::NodePtr Tensor::node() const { return check(impl_).node; }

Tensor& Tensor::set_name(std::string name) {
  check(impl_);
  impl_->name = name;
  if (impl_->node->op == ir::Op::Data) impl_->node->name = std::move(name);
  return *this;
}

bool Tensor::requires_grad() const { return check(impl_).node->requires_grad; }

bool Tensor::is_leaf() const {
  const auto& n = check(impl_).node;
  return !n->requires_grad || impl_->leaf_requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  check(impl_);
  KILN_CHECK(!on || dtype() == DType::f32, "requires_grad_: only f32 tensors can require gradients, got ",
             dtype_name(dtype()));
  KILN_CHECK(is_leaf(), "requires_grad_: only leaf tensors can be set to require grad (use detach())");
  impl_->leaf_requires_grad = on;
  if (on && impl_->node->op != ir::Op::Data) impl_->node = ir::detach(impl_->node);
  impl_->node->requires_grad = on;
  impl_->node->grad_owner = on ? std::weak_ptr<void>(impl_) : std::weak_ptr<void>();
  return *this;
}

Tensor Tensor::grad() const {
  check(impl_);
  Tensor g;
  g.impl_ = impl_->grad;
  return g;
}

void Tensor::set_grad(const Tensor& g) {
  check(impl_);
  if (g.defined())
    KILN_CHECK(g.shape() == shape(), "set_grad: gradient shape ", kiln::to_string(g.shape()), " does not match ",
               kiln::to_string(shape()));
  impl_->grad = g.impl_;
}

void Tensor::zero_grad() {
  check(impl_);
  impl_->grad.reset();
}

void Tensor::backward(const Tensor& gradient) const {
  check(impl_);

  ir::NodePtr seed;
  if (gradient.defined()) {
    seed = gradient.node();
  } else {
    KILN_CHECK(numel() == 1, "backward: gradient can be implicitly created only for a scalar output, got shape ",
               kiln::to_string(shape()));
    seed = ir::constant(1.0, shape(), DType::f32, device());
  }
  auto grads = autodiff::backward(impl_->node, seed);
  for (auto& [leaf, g] : grads) {
    auto owner = std::static_pointer_cast<TensorImpl>(leaf->grad_owner.lock());
    if (!owner) continue;
    ir::NodePtr acc = owner->grad ? ir::binary(ir::Op::Add, owner->grad->node, g) : g;
    Tensor t(acc);
    owner->grad = t.impl_;
  }
}

void Tensor::set_data(const Tensor& value) {
  check(impl_);
  const ir::NodePtr& v = value.node();
  // A tensor that does not train takes a floating value's dtype, as torch's
  // `.data =` does: a frozen weight loaded bf16 stays bf16 (half the memory,
  // and products read it directly). A trained one keeps its dtype (f32 master weights).
  const bool adopt = !impl_->leaf_requires_grad && is_floating(v->dtype) && is_floating(dtype()) &&
                     v->op == ir::Op::Data;
  if (v->op != ir::Op::Data || (value.dtype() != dtype() && !adopt)) {
    assign(Tensor(ir::cast(value.node(), dtype())));
    return;
  }
  KILN_CHECK(value.shape() == shape(), "set_data: value ", kiln::to_string(value.shape()), " does not match tensor ",
             kiln::to_string(shape()));
  auto n = ir::data(v->data, v->shape, v->dtype, v->device, impl_->name);
  if (impl_->leaf_requires_grad) {
    n->requires_grad = true;
    n->grad_owner = std::weak_ptr<void>(impl_);
  }
  impl_->node = std::move(n);
  ++impl_->value_version;
}

Tensor Tensor::detach() const { return Tensor(ir::detach(node())); }

void Tensor::assign(const Tensor& value) {
  check(impl_);
  KILN_CHECK(value.shape() == shape() && value.dtype() == dtype(), "assign: value ", dtype_name(value.dtype()),
             kiln::to_string(value.shape()), " does not match tensor ", dtype_name(dtype()), kiln::to_string(shape()));
  KILN_CHECK(value.device() == device(), "assign: value on ", value.device().str(), ", tensor on ",
             device().str());
  ir::NodePtr n = value.node();
  if (impl_->leaf_requires_grad) {
    n = ir::detach(n);
    n->requires_grad = true;
    n->grad_owner = std::weak_ptr<void>(impl_);
  }
  impl_->node = std::move(n);
  ++impl_->value_version;
  if (eager_mode() && impl_->node->op != ir::Op::Data) {
    runtime::DeviceContext::get(impl_->device).materialize({impl_});
    impl_->node->data->wait();
  }
}

static const ir::Node& realized(const std::shared_ptr<TensorImpl>& impl) {
  check(impl);
  if (impl->node->op != ir::Op::Data) runtime::DeviceContext::get(impl->device).materialize({impl});
  const ir::Node& n = *impl->node;
  auto t0 = std::chrono::steady_clock::now();
  n.data->wait();
  metrics::record_host_wait(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return n;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const ir::Node& n = realized(impl_);
  int64_t count = n.numel();
  std::vector<T> out(count);
  const Storage& storage = *n.data->storage;
  const void* p = storage.data();
  std::vector<unsigned char> staged;  // device memory is read through a host copy
  if (!storage.on_host()) {
    staged.resize(count * dtype_size(n.dtype));
    storage.copy_to_host(staged.data(), staged.size());
    p = staged.data();
  }
  for (int64_t i = 0; i < count; ++i) {
    switch (n.dtype) {
      case DType::f32: out[i] = static_cast<T>(static_cast<const float*>(p)[i]); break;
      case DType::i32: out[i] = static_cast<T>(static_cast<const int32_t*>(p)[i]); break;
      case DType::i64: out[i] = static_cast<T>(static_cast<const int64_t*>(p)[i]); break;
      case DType::b8: out[i] = static_cast<T>(static_cast<const uint8_t*>(p)[i]); break;
      case DType::bf16: out[i] = static_cast<T>(bf16_to_float(static_cast<const uint16_t*>(p)[i])); break;
    }
  }
  metrics::record_transfer(0, count * static_cast<int64_t>(dtype_size(n.dtype)));
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

float Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: tensor of shape ", kiln::to_string(shape()), " has ", numel(),
             " elements, expected 1");
  return to_vector<float>()[0];
}

int64_t Tensor::item_int() const {
  KILN_CHECK(numel() == 1, "item_int: tensor of shape ", kiln::to_string(shape()), " has ", numel(),
             " elements, expected 1");
  return to_vector<int64_t>()[0];
}

bool Tensor::is_ready() const {
  const auto& n = check(impl_).node;
  return n->op == ir::Op::Data && (!n->data->ready || n->data->ready->ready());
}

std::string Tensor::to_string(int64_t max_elems) const {
  std::ostringstream os;
  os << "tensor(" << dtype_name(dtype()) << kiln::to_string(shape()) << " [";
  auto v = to_vector<double>();
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()) && i < max_elems; ++i) os << (i ? ", " : "") << v[i];
  if (static_cast<int64_t>(v.size()) > max_elems) os << ", ...";
  os << "])";
  return os.str();
}

NoGradGuard::NoGradGuard() : prev_(ir::GradMode::enabled()) { ir::GradMode::set(false); }
NoGradGuard::~NoGradGuard() { ir::GradMode::set(prev_); }

}  // namespace kiln
