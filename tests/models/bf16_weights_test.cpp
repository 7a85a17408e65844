// Weights that stay bf16 (LoadOptions::keep_bf16, --bf16 evaluation and
// generation): a bf16 checkpoint's matrices load without widening, and under an
// Autocast it gives exactly the logits and tokens of the same checkpoint
// widened to f32 (the products round the f32 copies back to the same bf16
// values; everything else widens bf16 exactly). Generation's key and value
// caches are bf16 under an Autocast too (models::zero_kv_cache).
#include <filesystem>
#include <optional>

#include "kiln/io/safetensors.h"
#include "kiln/models/generation.h"
#include "kiln/models/model.h"
#include "kiln/models/t5.h"
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

// Decode steps under an Autocast against bf16 caches (made by zero_kv_cache
// inside it) and f32 ones: the same logits, bit for bit. Only products read
// a cache, and they round it to bf16 either way. The prompt's positions
// (prefill) and generated ones, each family's decode.
TEST(Bf16Weights, Bf16CachesGiveTheLogitsOfF32Ones) {
  const std::vector<int64_t> tokens{5, 17, 42, 8, 1, 30, 2};
  const int64_t L = 12, P = 3;
  auto caches = [](const Shape& shape, int64_t layers, bool bf16) {
    std::optional<Autocast> on;
    if (bf16) on.emplace();
    std::vector<Tensor> c;
    for (int64_t l = 0; l < layers; ++l) c.push_back(models::zero_kv_cache(shape, Device::cpu(), "cache"));
    return c;
  };
  for (const char* name : {"gpt2/gpt2_lm", "llama/llama_lm", "gemma/gemma2_lm", "phi3/phi3_lm"}) {
    SCOPED_TRACE(name);
    auto model = models::from_pretrained(golden(name));
    model->eval();
    auto& lm = dynamic_cast<models::CausalLM&>(*model);
    const auto cs = lm.cache_shape();
    const Shape shape{1, cs.kv_heads, L, cs.head_dim};
    std::vector<Tensor> k16 = caches(shape, cs.layers, true), v16 = caches(shape, cs.layers, true);
    std::vector<Tensor> k32 = caches(shape, cs.layers, false), v32 = caches(shape, cs.layers, false);
    EXPECT_EQ(k16[0].dtype(), DType::bf16);
    EXPECT_EQ(k32[0].dtype(), DType::f32);
    NoGradGuard no_grad;
    Autocast bf16;
    for (int64_t t = 0; t < static_cast<int64_t>(tokens.size()); ++t) {
      const Tensor token = Tensor::from_vector(std::vector<int64_t>{tokens[t]}, {1, 1});
      const Tensor pos = Tensor::from_vector(std::vector<int64_t>{t}, {});
      const std::optional<int64_t> prefill = t < P ? std::optional<int64_t>(P) : std::nullopt;
      const Tensor a = lm.decode_step(token, pos, k16, v16, prefill, Tensor());
      const Tensor b = lm.decode_step(token, pos, k32, v32, prefill, Tensor());
      mark_step();
      EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << "position " << t;
      EXPECT_EQ(k16[0].dtype(), DType::bf16);
      EXPECT_EQ(k32[0].dtype(), DType::f32);
    }
  }
  auto model = models::from_pretrained(golden("t5/t5_relu_tied"));
  model->eval();
  auto& t5 = dynamic_cast<models::T5ForTask&>(*model);
  NoGradGuard no_grad;
  Autocast bf16;
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{4, 8, 15, 16, 1}, {1, 5});
  const Tensor enc = t5.encode(ids, Tensor());
  models::T5DecoderCache c16 = t5.start_decoding(enc, Tensor(), L), c32 = c16;
  const int64_t NH = t5.t5_config().num_heads, D = t5.t5_config().d_kv;
  c32.self_k = caches({1, NH, L, D}, static_cast<int64_t>(c16.self_k.size()), false);
  c32.self_v = caches({1, NH, L, D}, static_cast<int64_t>(c16.self_v.size()), false);
  EXPECT_EQ(c16.self_k[0].dtype(), DType::bf16);
  mark_step();
  for (int64_t t = 0; t < 5; ++t) {
    const Tensor token = Tensor::from_vector(std::vector<int64_t>{tokens[t]}, {1, 1});
    const Tensor pos = Tensor::from_vector(std::vector<int64_t>{t}, {});
    const Tensor a = t5.decode_step(token, pos, c16), b = t5.decode_step(token, pos, c32);
    mark_step();
    EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>()) << "T5, position " << t;
  }
}

}  // namespace
}  // namespace kiln
