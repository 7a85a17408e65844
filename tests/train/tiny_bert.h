#pragma once
// The tiny sequence classifier the trainer tests train: vocabulary 40, hidden
// 16, 2 heads, 2 labels. Dropout (0.1) stays on, so resuming and splitting a
// batch must repeat the same masks. And n tokenized examples for it: lengths
// 6 to 10 (with [CLS]/[SEP] ids 1 and 2), labels alternating 0 and 1.
#include <memory>

#include "kiln/data/features.h"
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

inline std::shared_ptr<data::Features> tiny_classification_features(int n) {
  auto f = std::make_shared<data::Features>();
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> ids{1};
    for (int t = 0; t < 4 + i % 5; ++t) ids.push_back(5 + (i * 7 + t * 3) % 30);
    ids.push_back(2);
    f->input_ids.push_back(ids);
    f->token_type_ids.push_back(std::vector<int64_t>(ids.size(), 0));
    f->labels.push_back(i % 2);
  }
  return f;
}

}  // namespace kiln::testing
