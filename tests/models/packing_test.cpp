// Packed rows (models/packing.h): several examples in one row with position
// ids restarting per example compute, token for token, what each example
// computes alone, and the loss of the packed row (the first token of each
// example no target, as TRL's padding-free collator labels it) equals the
// token-weighted mean of the examples' own losses. GPT-2 and Llama, with and
// without a padded second row.
#include <cmath>
#include <numeric>

#include "kiln/models/model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

const std::vector<std::vector<int64_t>> kExamples = {{5, 17, 42, 8, 61}, {3, 9, 27}, {11, 2, 50, 33, 7, 19, 4}};

struct Alone {
  std::vector<std::vector<float>> logits;  // [T_i * V] each
  double loss_sum = 0;                     // sum of each example's mean loss x its targets
  double targets = 0;
};

Alone run_alone(models::PreTrainedModel& model) {
  Alone a;
  for (const auto& ex : kExamples) {
    models::ModelInputs in;
    const auto T = static_cast<int64_t>(ex.size());
    in.input_ids = Tensor::from_vector(ex, {1, T});
    in.labels = in.input_ids;
    auto out = model.forward(in);
    a.logits.push_back(out.logits.to_vector<float>());
    a.loss_sum += out.loss.to_vector<float>()[0] * static_cast<double>(T - 1);
    a.targets += static_cast<double>(T - 1);
  }
  return a;
}

// The examples packed into row 0 (and, with `second_row`, example 1 again alone in a padded row 1).
void check_packed(models::PreTrainedModel& model, bool second_row) {
  SCOPED_TRACE(second_row ? "with a padded second row" : "one row");
  model.eval();
  const Alone alone = run_alone(model);
  std::vector<int64_t> ids, pos, labels;
  for (const auto& ex : kExamples) {
    for (size_t p = 0; p < ex.size(); ++p) {
      ids.push_back(ex[p]);
      pos.push_back(static_cast<int64_t>(p));
      labels.push_back(p == 0 ? -100 : ex[p]);
    }
  }
  const auto T = static_cast<int64_t>(ids.size());
  std::vector<int64_t> mask(ids.size(), 1);
  int64_t B = 1;
  double extra_targets = 0;
  if (second_row) {  // example 1 alone, padded to T with id 0, positions 0 and labels -100 on the padding
    B = 2;
    for (int64_t t = 0; t < T; ++t) {
      const bool real = t < static_cast<int64_t>(kExamples[1].size());
      ids.push_back(real ? kExamples[1][t] : 0);
      pos.push_back(real ? t : 0);
      labels.push_back(real && t > 0 ? kExamples[1][t] : -100);
      mask.push_back(real ? 1 : 0);
    }
    extra_targets = static_cast<double>(kExamples[1].size() - 1);
  }
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {B, T});
  in.position_ids = Tensor::from_vector(pos, {B, T});
  in.labels = Tensor::from_vector(labels, {B, T});
  if (second_row) in.attention_mask = Tensor::from_vector(mask, {B, T});
  auto out = model.forward(in);
  const std::vector<float> logits = out.logits.to_vector<float>();
  const int64_t V = out.logits.dim(2);
  int64_t at = 0;
  for (size_t e = 0; e < kExamples.size(); ++e) {
    const auto n = static_cast<int64_t>(kExamples[e].size());
    for (int64_t i = 0; i < n * V; ++i)
      ASSERT_NEAR(logits[static_cast<size_t>(at * V + i)], alone.logits[e][static_cast<size_t>(i)], 2e-5)
          << "example " << e << " logit " << i;
    at += n;
  }
  double want_sum = alone.loss_sum, want_targets = alone.targets;
  if (second_row) {
    // Example 1's own loss, once more, for row 1.
    models::ModelInputs one;
    one.input_ids = Tensor::from_vector(kExamples[1], {1, static_cast<int64_t>(kExamples[1].size())});
    one.labels = one.input_ids;
    want_sum += model.forward(one).loss.to_vector<float>()[0] * extra_targets;
    want_targets += extra_targets;
  }
  EXPECT_NEAR(out.loss.to_vector<float>()[0], want_sum / want_targets, 2e-5);
}

TEST(Packing, Gpt2PackedEqualsAlone) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
  check_packed(*model, false);
  check_packed(*model, true);
}

TEST(Packing, LlamaPackedEqualsAlone) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/llama/llama_lm");
  check_packed(*model, false);
  check_packed(*model, true);
}

// Without restarting positions the row is one sequence: the later examples see the earlier ones, and the logits
// differ (the test above can fail).
TEST(Packing, WithoutPositionIdsExamplesSeeEachOther) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/llama/llama_lm");
  model->eval();
  std::vector<int64_t> ids;
  for (const auto& ex : kExamples) ids.insert(ids.end(), ex.begin(), ex.end());
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
  const auto packed = model->forward(in).logits.to_vector<float>();
  models::ModelInputs one;
  one.input_ids = Tensor::from_vector(kExamples[1], {1, 3});
  const auto alone = model->forward(one).logits.to_vector<float>();
  const int64_t V = static_cast<int64_t>(alone.size()) / 3;
  double diff = 0;
  for (int64_t i = 0; i < 3 * V; ++i) diff = std::max(diff, std::abs(double(packed[5 * V + i]) - alone[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(Packing, BadPositionIdsAreAClearError) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/llama/llama_lm");
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {1, 3});
  in.position_ids = Tensor::from_vector(std::vector<int64_t>{0, 1}, {1, 2});
  EXPECT_THROW(model->forward(in), Error);
}

}  // namespace
}  // namespace kiln
