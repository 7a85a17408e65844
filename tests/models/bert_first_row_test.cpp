// A BERT sequence classifier reads position 0 of the last layer only, so
// that layer computes its query, attention output and feed-forward for that
// row alone: the pooled output and every gradient equal the full layer's.
#include "kiln/models/bert.h"
#include "support/test_util.h"
#include "train/tiny_bert.h"

namespace kiln {
namespace {

using testing::all_close;

TEST(BertFirstRow, TheLastLayerForPositionZeroGivesTheFullLayersValuesAndGradients) {
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{2, 7, 9, 3, 2, 11, 3, 0}, {2, 4});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0}, {2, 4});
  std::vector<std::vector<double>> pooled, grads[2];
  for (const bool first_only : {false, true}) {
    auto model = models::create_model("BertModel", testing::tiny_bert(3), 5);
    model->eval();  // no dropout: both runs compute the same function
    auto& backbone = dynamic_cast<models::BertForTask&>(*model).backbone();
    models::BertBackbone::Out out = backbone.forward(in, first_only);
    EXPECT_EQ(out.sequence.dim(1), first_only ? 1 : 4);
    pooled.push_back(out.pooled.to_vector<double>());
    sum(out.pooled * out.pooled).backward();
    for (const auto& [name, p] : model->named_parameters())
      grads[first_only].push_back(p.grad().defined() ? p.grad().to_vector<double>() : std::vector<double>{});
  }
  EXPECT_TRUE(all_close(pooled[1], pooled[0], 1e-5, 1e-6));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t k = 0; k < grads[0].size(); ++k) EXPECT_TRUE(all_close(grads[1][k], grads[0][k], 1e-4, 1e-6)) << k;
}

}  // namespace
}  // namespace kiln
