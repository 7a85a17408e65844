#pragma once
// Mixed precision as torch.autocast(dtype=torch.bfloat16) does it for
// matrix products (HF's --bf16): while an Autocast is alive on this thread,
// matmul and linear multiply bf16 copies of their f32 operands (exact
// products, f32 sums and result), GELU and cross_entropy read their input
// rounded to bf16 (as torch's autocast products give it) and compute in
// f32; everything else stays in f32, and the parameters, their gradients
// and the optimizer state stay f32. The casts
// are part of the traced graph, so backward runs the gradient products in
// bf16 as well (autodiff/vjp.cpp).
//
// A trained parameter's bf16 copy is made once a step: an optimizer that
// replaces a parameter an autocast product read since its last update traces
// the copy of the new value with the update (refresh_bf16_copy, fused into
// the update's kernel), and the next step's products read that copy instead
// of casting the weight before each product (forward and input gradient).
// The copy is exactly the cast, so results do not change; it costs the
// parameter's size in bf16, resident between steps.
//
// A weight that does not change between steps (generation:
// keep_bf16_copy) keeps the copy its first autocast product makes, so a
// decode step reads the bf16 copy rather than casting every f32 weight
// again (as torch.autocast caches the casts of its weights).
#include "kiln/ir/node.h"

namespace kiln {

class Tensor;

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

// x as an autocast product reads it: bf16, from x's bf16 copy while that is
// x's current value, else cast here. Floating x only.
ir::NodePtr autocast_bf16(const Tensor& x);
// After an optimizer replaced p's value: p's bf16 copy of the new value,
// traced now, when an autocast product read p since the update before;
// else p keeps no copy.
void refresh_bf16_copy(const Tensor& p);
// p (f32, a weight generation reads) keeps the bf16 copy the first autocast
// product to read it makes, computed with that step, and later products
// read the copy while p's value stays the same (assign and set_data drop
// it). Its memory, half p's, stays until p goes.
void keep_bf16_copy(const Tensor& p);

}  // namespace kiln
