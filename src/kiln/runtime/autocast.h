#pragma once
// Mixed precision as torch.autocast(dtype=torch.bfloat16) does it for
// matrix products (HF's --bf16): while an Autocast is alive on this thread,
// matmul and linear multiply bf16 copies of their f32 operands (exact
// products, f32 sums and result); everything else stays in f32, and the
// parameters, their gradients and the optimizer state stay f32. The casts
// are part of the traced graph, so backward runs the gradient products in
// bf16 as well (autodiff/vjp.cpp).
namespace kiln {

class Autocast {
 public:
  // Autocast(false) turns it off inside an enabled one, as in torch.
  explicit Autocast(bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

  // True inside an enabled Autocast on this thread.
  static bool active();

 private:
  bool prev_;
};

}  // namespace kiln
