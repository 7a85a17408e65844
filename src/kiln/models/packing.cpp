#include "kiln/models/packing.h"

#include <limits>

#include "kiln/core/error.h"
#include "kiln/models/attention.h"
#include "kiln/runtime/ops.h"

namespace kiln::models {

namespace {

// The block-diagonal mask of rows whose tokens have segment ids `example` [B, T].
Tensor block_diagonal_mask(const Tensor& example, const Tensor& padding) {
  const int64_t B = example.dim(0), T = example.dim(1);
  const Device dev = example.device();
  const Tensor same = eq(reshape(example, {B, 1, T, 1}), reshape(example, {B, 1, 1, T}));
  const Tensor lowest = full({}, static_cast<double>(std::numeric_limits<float>::lowest()), DType::f32, dev);
  const Tensor keep = padding.defined() ? broadcast_to(padding, {B, 1, T, T}) : zeros({}, DType::f32, dev);
  return where(same, keep, lowest);
}

}  // namespace

bool RowMasks::fused(const Tensor& q, const Tensor& k) const {
  return fused_attention_fits(q, k, padding, segments);
}

RowMasks row_masks(const Tensor& position_ids, const Tensor& padding) {
  RowMasks m;
  m.padding = padding;
  if (position_ids.defined()) {  // (lazy: the mask a fused forward never reads is never computed)
    m.segments = segment_ids(position_ids);
    m.block_diagonal = block_diagonal_mask(m.segments, padding);
  }
  return m;
}

Tensor segment_ids(const Tensor& position_ids) {
  const int64_t T = position_ids.dim(1);
  return reshape(arange(T, DType::i64, position_ids.device()), {1, T}) - cast(position_ids, DType::i64);
}

Tensor packed_attention_mask(const Tensor& position_ids, const Tensor& padding) {
  return block_diagonal_mask(segment_ids(position_ids), padding);
}

void check_position_ids(const Tensor& position_ids, const Tensor& input_ids) {
  KILN_CHECK(position_ids.shape() == input_ids.shape() && is_integral(position_ids.dtype()), "forward: position_ids ",
             to_string(position_ids.shape()), " must be integer positions like input_ids ",
             to_string(input_ids.shape()));
}

}  // namespace kiln::models
