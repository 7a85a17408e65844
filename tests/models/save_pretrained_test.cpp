// save_pretrained computes each weight as it writes it: a model built under
// nn::DeferInit and saved (as f32, or cast to bf16 as model.to(bfloat16)
// would) gives the very bytes of the same model built eagerly, then cast and
// saved whole; past max_shard_size the weights go to shards that load back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kiln/io/safetensors.h"
#include "kiln/models/model.h"
#include "kiln/nn/defer_init.h"
#include "kiln/nn/module.h"
#include "kiln/runtime/ops.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::unique_ptr<models::PreTrainedModel> build(const std::string& preset, bool deferred) {
  auto config = models::preset_config(preset);
  EXPECT_TRUE(config) << preset;
  std::optional<nn::DeferInit> defer;
  if (deferred) defer.emplace();
  return models::create_model(config->architectures.at(0), *config, 7);
}

// The whole-model way: every weight computed, then cast, then written.
void save_eagerly(const std::string& preset, bool bf16, const fs::path& dir) {
  auto model = build(preset, false);
  if (bf16)
    for (auto& [name, p] : model->named_parameters()) {
      Tensor half = cast(p, DType::bf16);
      nn::materialize({half});
      p.requires_grad_(false);
      p.set_data(half);
    }
  model->save_pretrained(dir);
}

class StreamedSave : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamedSave, DeferredModelSavesTheEagerModelsBytes) {
  const std::string preset = GetParam();
  testing::TempDir tmp;
  for (bool bf16 : {false, true}) {
    const std::string tag = bf16 ? "bf16" : "f32";
    save_eagerly(preset, bf16, tmp / ("eager_" + tag));
    auto model = build(preset, true);
    models::PreTrainedModel::SaveOptions options;
    if (bf16) options.dtype = DType::bf16;
    model->save_pretrained(tmp / ("streamed_" + tag), options);
    // (EXPECT_TRUE: a failure printing megabytes of weights helps no one.)
    const std::string streamed = file_bytes(tmp / ("streamed_" + tag) / "model.safetensors");
    const std::string eager = file_bytes(tmp / ("eager_" + tag) / "model.safetensors");
    EXPECT_TRUE(streamed == eager) << preset << " " << tag << ": " << streamed.size() << " vs " << eager.size()
                                   << " bytes";
    EXPECT_EQ(file_bytes(tmp / ("streamed_" + tag) / "config.json"), file_bytes(tmp / ("eager_" + tag) / "config.json"));
    // Writing did not keep the values in the model: its weights are still pending.
    for (auto& [name, p] : model->named_parameters()) EXPECT_FALSE(p.is_ready()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, StreamedSave,
                         ::testing::Values("llama-tiny", "t5-tiny"));

TEST(StreamedSave, ShardsLoadBackAsTheSingleFile) {
  testing::TempDir tmp;
  auto model = build("llama-tiny", true);
  models::PreTrainedModel::SaveOptions options;
  options.dtype = DType::bf16;
  model->save_pretrained(tmp / "one", options);
  options.max_shard_size = 20'000;
  model->save_pretrained(tmp / "sharded", options);
  EXPECT_FALSE(fs::exists(tmp / "sharded" / "model.safetensors"));
  ASSERT_TRUE(fs::exists(tmp / "sharded" / "model.safetensors.index.json"));
  auto one = io::load_safetensors(tmp / "one", Device::cpu(), true);
  auto sharded = io::load_safetensors(tmp / "sharded", Device::cpu(), true);
  ASSERT_EQ(one.size(), sharded.size());
  for (auto& [name, t] : one) EXPECT_EQ(sharded.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  // And the sharded directory is a model from_pretrained opens.
  models::LoadOptions load;
  load.keep_bf16 = true;
  auto loaded = models::from_pretrained(tmp / "sharded", load);
  EXPECT_EQ(loaded->named_parameters().size(), model->named_parameters().size());
}

}  // namespace
}  // namespace kiln
