#pragma once
// The tiny T5 the model tests build: vocabulary 50, d_model 16, 2 layers of
// 4 heads, gated-GELU feed-forward, 8 position buckets; and a padded batch
// of two sentences with labels.
#include "kiln/models/model.h"
#include "kiln/models/t5.h"

namespace kiln::testing {

inline models::T5Config tiny_t5() {
  models::T5Config c;
  c.vocab_size = 50;
  c.d_model = 16;
  c.d_kv = 4;
  c.d_ff = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.relative_attention_num_buckets = 8;
  c.feed_forward_proj = "gated-gelu";
  return c;
}

inline models::ModelInputs tiny_t5_batch() {
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 1, 3, 1, 0, 0}, {2, 4});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 0, 0}, {2, 4});
  in.labels = Tensor::from_vector(std::vector<int64_t>{8, 9, 1, 4, 1, -100}, {2, 3});
  return in;
}

}  // namespace kiln::testing
