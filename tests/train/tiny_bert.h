#pragma once
// The tiny sequence classifier the trainer tests train: vocabulary 40, hidden
// 16, 2 heads, 2 labels. Dropout (0.1) stays on, so resuming and splitting a
// batch must repeat the same masks.
#include "kiln/models/bert.h"

namespace kiln::testing {

inline models::BertConfig tiny_bert(int64_t layers) {
  models::BertConfig c = models::BertConfig::from_json({{"model_type", "bert"}}, "test");
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 16;
  c.set_num_labels(2);
  return c;
}

}  // namespace kiln::testing
