#pragma once
// kiln::Tensor: the user's handle to a lazily computed value (PyTorch/XLA's
// LazyTensor). Operations only record IR nodes; mark_step() compiles and runs
// everything pending; reading a value (item(), to_vector()) waits for it.
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/ir/node.h"

namespace kiln {

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  // Wraps an IR node (used by ops; users create tensors with the factories).
  explicit Tensor(ir::NodePtr node);

  // Host data → device. Copies; the tensor is a graph input (never a constant).
  static Tensor from_data(const void* data, DType dtype, Shape shape, Device device = Device::cpu(),
                          std::string name = {});
  static Tensor from_vector(const std::vector<float>& v, Shape shape, Device device = Device::cpu(),
                            std::string name = {});
  static Tensor from_vector(const std::vector<int64_t>& v, Shape shape, Device device = Device::cpu(),
                            std::string name = {});
  static Tensor scalar(float v, Device device = Device::cpu(), std::string name = {});
  // Wraps existing device memory without copying (e.g. a memory-mapped
  // safetensors file). The storage must hold numel(shape) elements of dtype.
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::string name = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim(int64_t axis) const;
  int64_t rank() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  const std::string& name() const;
  Tensor& set_name(std::string name);

  // Autograd (PyTorch semantics).
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g);
  void zero_grad();  // drops .grad (set_to_none, PyTorch's default)
  void backward(const Tensor& gradient = {}) const;
  Tensor detach() const;
  // Replaces the value (an optimizer update). A leaf stays a leaf.
  void assign(const Tensor& value);
  // Makes this tensor share `value`'s computed memory (no copy; PyTorch's
  // `.data = value`). Falls back to assign() when value is still pending.
  void set_data(const Tensor& value);

  // Reading values: compiles/runs what is pending for this tensor and waits.
  template <typename T>
  std::vector<T> to_vector() const;
  float item() const;
  int64_t item_int() const;
  // True when the value is computed (or failed) on the device; false while
  // its step is queued or it is still a pending IR expression.
  bool is_ready() const;

  ir::NodePtr node() const;
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  std::string to_string(int64_t max_elems = 16) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Runs `fn` without recording gradients (torch.no_grad()).
struct NoGradGuard {
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
