// Packed rows (models/packing.h): several examples in one row with position
// ids restarting per example compute, token for token, what each example
// computes alone, and the loss of the packed row (the first token of each
// example no target, as TRL's padding-free collator labels it) equals the
// token-weighted mean of the examples' own losses, with the same parameter
// gradients. GPT-2 and Llama, with and without a padded second row.
#include <cmath>
#include <numeric>

#include "kiln/models/model.h"
#include "kiln/models/packing.h"
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

// Each parameter's gradient of the packed row's loss (the token-weighted mean)
// is that of the examples' own losses weighted alike: on the CPU the fused
// attention with segment ids, for GPT-2 and Llama.
void check_packed_gradients(models::PreTrainedModel& model) {
  model.eval();
  auto gradients = [&](const Tensor& loss) {
    for (const Tensor& p : model.parameters()) Tensor(p).zero_grad();
    loss.backward();
    std::vector<std::vector<double>> g;
    for (const Tensor& p : model.parameters()) g.push_back(p.grad().to_vector<double>());
    return g;
  };
  double targets = 0;
  for (const auto& ex : kExamples) targets += static_cast<double>(ex.size() - 1);
  Tensor weighted;
  std::vector<int64_t> ids, pos, labels;
  for (const auto& ex : kExamples) {
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(ex, {1, static_cast<int64_t>(ex.size())});
    in.labels = in.input_ids;
    Tensor term = model.forward(in).loss * (static_cast<double>(ex.size() - 1) / targets);
    weighted = weighted.defined() ? weighted + term : term;
    for (size_t p = 0; p < ex.size(); ++p) {
      ids.push_back(ex[p]);
      pos.push_back(static_cast<int64_t>(p));
      labels.push_back(p == 0 ? -100 : ex[p]);
    }
  }
  const auto alone = gradients(weighted);
  models::ModelInputs in;
  const auto T = static_cast<int64_t>(ids.size());
  in.input_ids = Tensor::from_vector(ids, {1, T});
  in.position_ids = Tensor::from_vector(pos, {1, T});
  in.labels = Tensor::from_vector(labels, {1, T});
  const auto packed = gradients(model.forward(in).loss);
  ASSERT_EQ(packed.size(), alone.size());
  for (size_t i = 0; i < packed.size(); ++i)
    EXPECT_LE(testing::relative_error(packed[i], alone[i]), 1e-4) << "parameter " << model.named_parameters()[i].first;
}

TEST(Packing, Gpt2PackedEqualsAlone) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
  check_packed(*model, false);
  check_packed(*model, true);
  check_packed_gradients(*model);
}

TEST(Packing, LlamaPackedEqualsAlone) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/llama/llama_lm");
  check_packed(*model, false);
  check_packed(*model, true);
  check_packed_gradients(*model);
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

// On the CPU packed rows take the fused kernel with each token's example as its segment id (t - position_ids[t]);
// the block-diagonal mask is what a composite adds instead.
TEST(Packing, CpuRowsTakeTheFusedKernelWithSegmentIds) {
  const Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 0, 0}, {2, 6});
  const Tensor padding = zeros({2, 1, 1, 6});
  const models::RowMasks m = models::row_masks(pos, padding);
  EXPECT_EQ(m.segments.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 3, 3, 5, 0, 0, 0, 0, 4, 5}));
  const Tensor q = zeros({2, 2, 6, 8});
  EXPECT_TRUE(m.fused(q, q));
  EXPECT_EQ(m.composite().shape(), (Shape{2, 1, 6, 6}));
  const models::RowMasks plain = models::row_masks(Tensor(), padding);
  EXPECT_FALSE(plain.segments.defined());
  EXPECT_EQ(plain.composite().shape(), (Shape{2, 1, 1, 6}));
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
