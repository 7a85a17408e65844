// model.gradient_checkpointing_enable(): every transformer layer recomputed in
// the backward pass gives the same loss and gradients as keeping its
// activations — dropout on, so the recomputation must replay the masks; T5's
// layers also read the shared position bias and the encoder output.
#include <functional>

#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "models/tiny_t5.h"
#include "support/test_util.h"
#include "train/tiny_bert.h"

namespace kiln {
namespace {

using kiln::testing::all_close;

struct Run {
  double loss = 0;
  std::vector<std::pair<std::string, std::vector<double>>> grads;
  int barriers = 0;  // recomputed layers in the gradient graph
};

Run train_step(const std::function<std::unique_ptr<models::PreTrainedModel>()>& make, const models::ModelInputs& in,
               bool checkpointing, bool bf16 = false) {
  auto model = make();
  model->train();
  model->set_gradient_checkpointing(checkpointing);
  Tensor loss;
  {
    Autocast autocast(bf16);
    loss = model->forward(in).loss;
  }
  loss.backward();  // outside the scope, as the Trainer does: the recomputation restores it
  Run r;
  std::vector<ir::NodePtr> grads;
  for (const auto& [name, p] : model->named_parameters())
    if (p.grad().defined()) grads.push_back(p.grad().node());
  for (const auto& n : ir::flatten(grads, nullptr).nodes) r.barriers += n.op == ir::Op::Barrier;
  r.loss = loss.item();
  for (const auto& [name, p] : model->named_parameters())
    if (p.grad().defined()) r.grads.emplace_back(name, p.grad().to_vector<double>());
  return r;
}

void expect_same(const Run& plain, const Run& ckpt, int layers) {
  EXPECT_EQ(plain.barriers, 0);
  EXPECT_EQ(ckpt.barriers, layers);
  EXPECT_NEAR(ckpt.loss, plain.loss, 1e-6 * std::abs(plain.loss));
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(all_close(ckpt.grads[i].second, plain.grads[i].second, 1e-4, 1e-7)) << plain.grads[i].first;
}

models::ModelInputs bert_batch() {
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{2, 7, 9, 3, 2, 11, 3, 0}, {2, 4});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0}, {2, 4});
  in.labels = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2});
  return in;
}

TEST(GradientCheckpointing, BertLayersRecomputedGiveTheSameGradients) {
  auto make = [] { return models::create_model("BertForSequenceClassification", kiln::testing::tiny_bert(2), 5); };
  const models::ModelInputs in = bert_batch();
  expect_same(train_step(make, in, false), train_step(make, in, true), 2);
}

TEST(GradientCheckpointing, Gpt2BlocksRecomputedGiveTheSameGradients) {
  auto make = [] {
    auto c = models::preset_config("gpt2-tiny");
    auto* g = dynamic_cast<models::GPT2Config*>(c.get());
    g->vocab_size = 60;
    g->n_positions = 16;
    g->n_layer = 3;
    return models::create_model("GPT2LMHeadModel", *c, 4);
  };
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 1, 8, 2}, {2, 4});
  in.labels = in.input_ids;
  expect_same(train_step(make, in, false), train_step(make, in, true), 3);
}

TEST(GradientCheckpointing, LlamaLayersRecomputedGiveTheSameGradients) {
  auto make = [] {
    models::LlamaConfig c = models::LlamaConfig::from_json(
        {{"model_type", "llama"}, {"vocab_size", 60}, {"hidden_size", 32}, {"intermediate_size", 40},
         {"num_hidden_layers", 3}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"attention_dropout", 0.1}},
        "test");
    return models::create_model("LlamaForCausalLM", c, 4);
  };
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 1, 8, 2}, {2, 4});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0}, {2, 4});
  in.labels = in.input_ids;
  expect_same(train_step(make, in, false), train_step(make, in, true), 3);  // attention dropout replayed too
}

// DeBERTa's layers also read the relative embeddings (LayerNorm'd once,
// outside the layers) and drop them out inside each layer.
TEST(GradientCheckpointing, DebertaLayersRecomputedGiveTheSameGradients) {
  auto make = [] {
    auto c = models::config_from_json({{"model_type", "deberta-v2"}, {"vocab_size", 60}, {"hidden_size", 32},
                                       {"intermediate_size", 40}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                                       {"relative_attention", true}, {"position_buckets", 4},
                                       {"max_relative_positions", 16}, {"pos_att_type", "p2c|c2p"},
                                       {"share_att_key", true}, {"norm_rel_ebd", "layer_norm"},
                                       {"position_biased_input", false}},
                                      "test");
    return models::create_model("DebertaV2ForSequenceClassification", *c, 4);
  };
  expect_same(train_step(make, bert_batch(), false), train_step(make, bert_batch(), true), 3);
}

// Under --bf16 the recomputed layers run their products in bf16 again
// (backward runs outside the forward's Autocast scope).
TEST(GradientCheckpointing, Bf16LayersAreRecomputedInBf16) {
  auto make = [] { return models::create_model("BertForSequenceClassification", kiln::testing::tiny_bert(2), 5); };
  const models::ModelInputs in = bert_batch();
  const auto plain = train_step(make, in, false, true), ckpt = train_step(make, in, true, true);
  EXPECT_EQ(ckpt.barriers, 2);
  EXPECT_EQ(ckpt.loss, plain.loss);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i)
    EXPECT_TRUE(all_close(ckpt.grads[i].second, plain.grads[i].second, 1e-5, 1e-8)) << plain.grads[i].first;
}

TEST(GradientCheckpointing, T5BlocksRecomputedGiveTheSameGradients) {
  auto make = [] { return models::create_model("T5ForConditionalGeneration", kiln::testing::tiny_t5(), 3); };
  models::ModelInputs in = kiln::testing::tiny_t5_batch();
  expect_same(train_step(make, in, false), train_step(make, in, true), 4);  // 2 encoder + 2 decoder blocks
}

}  // namespace
}  // namespace kiln
