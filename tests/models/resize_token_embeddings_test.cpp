// resize_token_embeddings: transformers' mean_resizing (new rows at the mean
// of the old ones), every other tensor kept, a frozen bf16 table kept bf16.
#include <filesystem>

#include "kiln/io/safetensors.h"
#include "kiln/models/model.h"
#include "models/golden_inputs.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path data(const std::string& rel) { return fs::path(KILN_TEST_DATA_DIR) / rel; }

// Row `r` of a [rows, dim] tensor, and the mean of its first `n` rows.
std::vector<double> row(const Tensor& t, int64_t r) {
  const auto v = t.to_vector<double>();
  const int64_t d = t.dim(1);
  return std::vector<double>(v.begin() + r * d, v.begin() + (r + 1) * d);
}
std::vector<double> mean_of_rows(const Tensor& t, int64_t n) {
  std::vector<double> m(t.dim(1), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const auto x = row(t, r);
    for (size_t i = 0; i < m.size(); ++i) m[i] += x[i] / static_cast<double>(n);
  }
  return m;
}

TEST(ResizeTokenEmbeddings, NewRowsStartAtTheMeanAndTheRestIsKept) {
  // An untied head (Llama) and a head tied to the table (GPT-2).
  for (const auto& [base, table, head] : {std::tuple{"llama/llama_lm", "model.embed_tokens.weight", "lm_head.weight"},
                                          {"gpt2/gpt2_lm", "transformer.wte.weight", ""}}) {
    auto model = models::from_pretrained(data(base));
    const int64_t vocab = model->config().vocabulary_size();
    auto grown = models::resize_token_embeddings(*model, vocab + 3);
    EXPECT_EQ(grown->config().vocabulary_size(), vocab + 3) << base;
    const auto before = model->state_dict(), after = grown->state_dict();
    for (const std::string& name : {std::string(table), std::string(head)}) {
      if (name.empty()) continue;
      const Tensor& t = after.at(name);
      ASSERT_EQ(t.dim(0), vocab + 3) << name;
      EXPECT_EQ(row(t, vocab - 1), row(before.at(name), vocab - 1)) << name;
      EXPECT_TRUE(testing::all_close(row(t, vocab + 2), mean_of_rows(before.at(name), vocab), 1e-6, 1e-7)) << name;
    }
    for (const auto& [name, t] : before) {
      if (name == table || name == head) continue;
      EXPECT_EQ(after.at(name).to_vector<double>(), t.to_vector<double>()) << name;
    }
    // Old ids give the old logits; a new one is a valid id.
    auto golden = io::load_safetensors(data(std::string(base) + "/golden.safetensors"));
    model->eval();
    grown->eval();
    const Tensor old_logits = model->forward(testing::golden_inputs(golden)).logits;
    const Tensor new_logits = grown->forward(testing::golden_inputs(golden)).logits;
    EXPECT_EQ(new_logits.dim(-1), vocab + 3);
    EXPECT_TRUE(testing::all_close(slice(new_logits, -1, 0, vocab).to_vector<double>(), old_logits.to_vector<double>(),
                                   1e-5, 1e-6))
        << base;
  }
}

TEST(ResizeTokenEmbeddings, ShrinksAndKeepsAFrozenBf16TableBf16) {
  auto model = models::from_pretrained(data("llama/llama_lm"));
  auto smaller = models::resize_token_embeddings(*model, 50);
  EXPECT_EQ(smaller->state_dict().at("model.embed_tokens.weight").dim(0), 50);
  EXPECT_EQ(smaller->config().vocabulary_size(), 50);
  // A frozen bf16 table (what LoRA keeps of a bf16 checkpoint) stays bf16 and frozen.
  for (auto& [name, p] : model->named_parameters()) {
    if (name != "model.embed_tokens.weight") continue;
    NoGradGuard no_grad;
    p.requires_grad_(false);
    Tensor narrow = cast(p, DType::bf16);
    nn::materialize({narrow});
    p.set_data(narrow);
  }
  auto grown = models::resize_token_embeddings(*model, 120);
  for (auto& [name, p] : grown->named_parameters()) {
    if (name != "model.embed_tokens.weight") continue;
    EXPECT_EQ(p.dtype(), DType::bf16);
    EXPECT_FALSE(p.requires_grad());
    EXPECT_EQ(p.dim(0), 120);
  }
  EXPECT_CONTAINS(testing::error_of([&] { models::resize_token_embeddings(*model, 0); }),
                  "the vocabulary must have at least one id, got 0");
}

}  // namespace
}  // namespace kiln
