// Weights that stay bf16 (LoadOptions::keep_bf16, --bf16 evaluation and
// generation): a bf16 checkpoint's matrices load without widening, and under an
// Autocast it gives exactly the logits and tokens of the same checkpoint
// widened to f32 (the products round the f32 copies back to the same bf16
// values; everything else widens bf16 exactly).
#include <filesystem>

#include "kiln/io/safetensors.h"
#include "kiln/models/generation.h"
#include "kiln/models/model.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/ops.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string golden(const std::string& name) { return std::string(KILN_TEST_DATA_DIR) + "/" + name; }

// The checkpoint in `from` with its f32 tensors rounded to bf16, written to `to`.
void save_bf16_copy(const fs::path& from, const fs::path& to) {
  fs::copy_file(from / "config.json", to / "config.json");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : io::load_safetensors(from))
    tensors.emplace_back(name, t.dtype() == DType::f32 ? cast(t, DType::bf16) : t);
  io::save_safetensors(to / "model.safetensors", tensors);
}

struct Pair {
  std::unique_ptr<models::PreTrainedModel> kept, widened;
};

Pair load_both(const fs::path& dir) {
  models::LoadOptions keep;
  keep.keep_bf16 = true;
  Pair p{models::from_pretrained(dir, keep), models::from_pretrained(dir)};
  p.kept->eval();
  p.widened->eval();
  return p;
}

TEST(Bf16Weights, SafetensorsKeepsBf16OnlyWhenAsked) {
  TempDir dir;
  std::vector<float> values{1.0f, -2.5f, 3.140625f, 0.0f, 1e-3f, 65280.0f};
  Tensor x = cast(Tensor::from_vector(values, {2, 3}), DType::bf16);
  io::save_safetensors(dir.path() / "w.safetensors", {{"w", x}, {"ids", Tensor::from_vector(std::vector<int64_t>{4, 2}, {2})}});
  auto f = io::SafetensorsFile::open(dir.path() / "w.safetensors");
  Tensor kept = f.load("w", Device::cpu(), /*keep_bf16=*/true), widened = f.load("w");
  EXPECT_EQ(kept.dtype(), DType::bf16);
  EXPECT_EQ(widened.dtype(), DType::f32);
  EXPECT_EQ(kept.shape(), (Shape{2, 3}));
  const std::vector<float> rounded = cast(x, DType::f32).to_vector<float>();
  EXPECT_EQ(cast(kept, DType::f32).to_vector<float>(), rounded);
  EXPECT_EQ(widened.to_vector<float>(), rounded);
  // Other dtypes load as they always do.
  EXPECT_EQ(f.load("ids", Device::cpu(), true).dtype(), DType::i64);
  EXPECT_EQ(io::load_safetensors(dir.path() / "w.safetensors", Device::cpu(), true).at("w").dtype(),
            DType::bf16);
}

TEST(Bf16Weights, KeptCheckpointGeneratesTheTokensOfTheWidenedOne) {
  for (const char* name : {"gpt2/gpt2_lm", "llama/llama_lm", "gemma/gemma2_lm", "phi3/phi3_lm", "t5/t5_relu_tied",
                           "t5/t5_gated_untied"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    save_bf16_copy(golden(name), dir.path());
    Pair p = load_both(dir.path());
    // Matrices and tables stay bf16; norms' and biases' vectors widen.
    for (auto& [param, t] : p.kept->state_dict())
      EXPECT_EQ(t.dtype(), t.rank() >= 2 ? DType::bf16 : DType::f32) << param;
    for (auto& [param, t] : p.widened->state_dict()) EXPECT_EQ(t.dtype(), DType::f32) << param;

    Autocast bf16;
    models::GenerationConfig g;
    g.max_new_tokens = 8;
    g.eos_token_ids = {-1};
    const std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8, 1}, {3, 1}};
    const auto kept = models::generate(*p.kept, prompts, g), widened = models::generate(*p.widened, prompts, g);
    EXPECT_EQ(kept, widened);
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_FALSE(kept[0].empty());
  }
}

TEST(Bf16Weights, KeptCheckpointGivesTheLogitsOfTheWidenedOne) {
  TempDir dir;
  save_bf16_copy(golden("gpt2/gpt2_lm"), dir.path());
  Pair p = load_both(dir.path());
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 0, 4, 8}, {2, 4});
  Autocast bf16;
  const auto a = p.kept->forward(in).logits.to_vector<float>(), b = p.widened->forward(in).logits.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kiln
