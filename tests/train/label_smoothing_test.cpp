// label_smoothing_factor: HF's LabelSmoother on the model's logits, and the heads it refuses.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/models/model.h"
#include "kiln/train/label_smoothing.h"
#include "support/test_util.h"
#include "tiny_bert.h"

namespace kiln {
namespace {

// LabelSmoother by hand: (1 - eps) * nll + eps * mean over the classes of -log p, over the rows not -100.
double by_hand(const std::vector<std::vector<double>>& logits, const std::vector<int64_t>& labels, double eps) {
  double sum = 0;
  int n = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] == -100) continue;
    double z = 0;
    for (double v : logits[r]) z += std::exp(v);
    double nll = std::log(z) - logits[r][labels[r]], smooth = 0;
    for (double v : logits[r]) smooth += std::log(z) - v;
    sum += (1 - eps) * nll + eps * smooth / static_cast<double>(logits[r].size());
    ++n;
  }
  return sum / n;
}

TEST(LabelSmoothing, SmoothsTheCrossEntropyOverTheCountedLabels) {
  const std::vector<std::vector<double>> rows{{1.0, 2.0, 0.5}, {0.1, -1.0, 3.0}, {2.0, 2.0, 2.0}};
  models::ModelOutputs out;
  out.logits = Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 0.5f, 0.1f, -1.0f, 3.0f, 2.0f, 2.0f, 2.0f}, {3, 3});
  models::ModelInputs in;
  in.labels = Tensor::from_vector(std::vector<int64_t>{0, -100, 2}, {3});
  EXPECT_NEAR(train::smoothed_loss(out, in, 0.1, false).item(), by_hand(rows, {0, -100, 2}, 0.1), 1e-6);
  // A causal LM's labels shift left: position t is scored against label t+1, the last position against nothing.
  out.logits = reshape(out.logits, {1, 3, 3});
  in.labels = Tensor::from_vector(std::vector<int64_t>{7, 1, 0}, {1, 3});
  EXPECT_NEAR(train::smoothed_loss(out, in, 0.2, true).item(), by_hand(rows, {1, 0, -100}, 0.2), 1e-6);
}

TEST(LabelSmoothing, RefusesHeadsWithoutClassLogits) {
  auto classifier = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
  EXPECT_FALSE(train::label_smoothing_applies(0.0, *classifier, false, false));
  EXPECT_TRUE(train::label_smoothing_applies(0.1, *classifier, false, false));
  EXPECT_CONTAINS(testing::error_of([&] { train::label_smoothing_applies(0.1, *classifier, true, false); }),
                  "label_smoothing_factor 0.1: question answering");
  models::BertConfig one = testing::tiny_bert(1);
  one.set_num_labels(1);
  auto regression = models::create_model("BertForSequenceClassification", one, 1);
  EXPECT_CONTAINS(testing::error_of([&] { train::label_smoothing_applies(0.1, *regression, false, false); }),
                  "regression head");
  models::BertConfig multi = testing::tiny_bert(1);
  multi.problem_type = "multi_label_classification";
  auto multi_label = models::create_model("BertForSequenceClassification", multi, 1);
  EXPECT_FALSE(train::label_smoothing_applies(0.1, *multi_label, false, false));  // HF runs it without smoothing
}

}  // namespace
}  // namespace kiln
