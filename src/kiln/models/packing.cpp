#include "kiln/models/packing.h"

#include <limits>

#include "kiln/core/error.h"
#include "kiln/runtime/ops.h"

namespace kiln::models {

Tensor packed_attention_mask(const Tensor& position_ids, const Tensor& padding) {
  const int64_t B = position_ids.dim(0), T = position_ids.dim(1);
  const Device dev = position_ids.device();
  const Tensor example = reshape(arange(T, DType::i64, dev), {1, T}) - cast(position_ids, DType::i64);  // [B, T]
  const Tensor same = eq(reshape(example, {B, 1, T, 1}), reshape(example, {B, 1, 1, T}));
  const Tensor lowest = full({}, static_cast<double>(std::numeric_limits<float>::lowest()), DType::f32, dev);
  const Tensor keep = padding.defined() ? broadcast_to(padding, {B, 1, T, T}) : zeros({}, DType::f32, dev);
  return where(same, keep, lowest);
}

void check_position_ids(const Tensor& position_ids, const Tensor& input_ids) {
  KILN_CHECK(position_ids.shape() == input_ids.shape() && is_integral(position_ids.dtype()), "forward: position_ids ",
             to_string(position_ids.shape()), " must be integer positions like input_ids ",
             to_string(input_ids.shape()));
}

}  // namespace kiln::models
