#pragma once
// Packed rows for decoder-only models (TRL's packing / padding-free batches):
// several examples one after another in a row, position_ids restarting at 0
// for each. A token attends only to earlier tokens of its own example, so a
// packed row computes what each example would alone.
//
// Two tokens t >= s are in one example exactly when position_ids[t] -
// position_ids[s] equals t - s (a restart between them lowers the
// difference), so the example of token t is told by t - position_ids[t]:
// its segment id. The fused attention takes the segment ids and never reads
// another example's keys (ops.h's AttentionSpec::segments); a composite (or
// a device whose kernel takes no segments) adds the block-diagonal mask
// [B, 1, T, T] instead.
#include "kiln/runtime/tensor.h"

namespace kiln::models {

// The masks of a forward's attention over rows [B, T].
struct RowMasks {
  Tensor padding;         // additive [B, 1, 1, T] (0 or f32 min), or undefined: none
  Tensor segments;        // packed rows: i64 [B, T] segment ids; undefined: not packed
  Tensor block_diagonal;  // packed rows: padding where key and query share an example, f32 min elsewhere
  // The additive mask a composite's softmax takes: the block-diagonal one for packed rows.
  const Tensor& composite() const { return segments.defined() ? block_diagonal : padding; }
  // Whether attention over q, k takes the fused op (fused_attention with padding
  // as the mask and segments) rather than the composite with composite().
  bool fused(const Tensor& q, const Tensor& k) const;
};

// The masks of rows with `padding` (undefined: none) and `position_ids` [B, T]
// (undefined: not packed).
RowMasks row_masks(const Tensor& position_ids, const Tensor& padding);

// The segment ids [B, T] of rows with `position_ids`: t - position_ids[t].
Tensor segment_ids(const Tensor& position_ids);

// The additive attention mask [B, 1, T, T] of rows with `position_ids`
// [B, T]: the padding mask (`padding` [B, 1, 1, T], 0 or f32 min; undefined:
// none) where key and query lie in the same example, f32 min elsewhere.
Tensor packed_attention_mask(const Tensor& position_ids, const Tensor& padding);

// position_ids checked against input_ids [B, T]: the same shape, integers.
void check_position_ids(const Tensor& position_ids, const Tensor& input_ids);

}  // namespace kiln::models
