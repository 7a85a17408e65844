#pragma once
// Packed rows for decoder-only models (TRL's packing / padding-free batches):
// several examples one after another in a row, position_ids restarting at 0
// for each. A token attends only to earlier tokens of its own example, so a
// packed row computes what each example would alone.
#include "kiln/runtime/tensor.h"

namespace kiln::models {

// The additive attention mask [B, 1, T, T] of rows with `position_ids`
// [B, T]: the padding mask (`padding` [B, 1, 1, T], 0 or f32 min; undefined:
// none) where key and query lie in the same example, f32 min elsewhere. Two
// tokens t >= s are in one example exactly when position_ids[t] - position_ids[s]
// equals t - s (a restart between them lowers the difference), so the
// example of token t is told by t - position_ids[t].
Tensor packed_attention_mask(const Tensor& position_ids, const Tensor& padding);

// position_ids checked against input_ids [B, T]: the same shape, integers.
void check_position_ids(const Tensor& position_ids, const Tensor& input_ids);

}  // namespace kiln::models
