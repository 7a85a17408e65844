// BERT-family parity with Hugging Face's definitions: logits, loss and the
// gradient of every parameter of tiny random models (padded batches) against
// goldens from tools/goldens/gen_bert_goldens.py (PyTorch, float64).
#include <filesystem>

#include "kiln/io/safetensors.h"
#include "kiln/models/model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
const fs::path kBertData = fs::path(KILN_TEST_DATA_DIR) / "bert";

class BertGolden : public ::testing::TestWithParam<std::string> {};

::testing::AssertionResult close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << to_string(got.shape()) << " vs " << to_string(want.shape());
  return testing::all_close(got.to_vector<double>(), want.to_vector<double>(), rtol, atol);
}

TEST_P(BertGolden, LogitsLossAndGradientsMatch) {
  fs::path dir = kBertData / GetParam();
  auto model = models::from_pretrained(dir);
  model->eval();  // goldens have no dropout
  auto golden = io::load_safetensors(dir / "golden.safetensors");
  auto get = [&](const char* k) { return golden.count(k) ? golden.at(k) : Tensor(); };
  models::ModelInputs in{get("input_ids"), get("attention_mask"), get("token_type_ids"), get("labels"),
                         get("start_positions"), get("end_positions")};
  models::ModelOutputs out = model->forward(in);
  Tensor loss = out.loss;
  if (!loss.defined()) {  // BertModel: a fixed weighting of both outputs
    loss = sum(out.last_hidden_state * golden.at("loss_weight_hidden")) +
           sum(out.pooler_output * golden.at("loss_weight_pooler"));
  }
  loss.backward();
  for (const auto& [name, t] : out.named()) {
    if (name == "loss" || !golden.count(name)) continue;
    EXPECT_TRUE(close(t, golden.at(name), 1e-4, 1e-5)) << name;
  }
  EXPECT_TRUE(close(loss, golden.at("loss"), 1e-5, 1e-6)) << "loss";
  int checked = 0;
  for (auto& [name, p] : model->named_parameters()) {
    auto it = golden.find("grad." + name);
    ASSERT_NE(it, golden.end()) << "no golden gradient for " << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(close(p.grad(), it->second, 1e-4, 1e-5)) << "grad of " << name;
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, BertGolden,
                         ::testing::Values("bert_model", "bert_seqcls", "bert_regression", "bert_multilabel",
                                           "bert_tokcls", "bert_qa", "bert_mlm", "roberta_seqcls", "roberta_mlm",
                                           "bert_seqcls_gelu_new"));

}  // namespace
}  // namespace kiln
