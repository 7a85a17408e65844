// Streamed safetensors writing (each tensor produced as it is written) and
// save_pretrained's sharded layout: the same bytes as the in-memory writer,
// huggingface_hub's split, an index load_safetensors reads, and clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "io/io_test_util.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/runtime/ops.h"

namespace kiln::io {
namespace {

using testing::TempDir;
using testing::throws_with;

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::pair<std::string, Tensor>> mixed_tensors() {
  uint8_t mask[3] = {1, 0, 1};
  int32_t ids[2] = {-7, 2147483647};
  return {
      {"w", Tensor::from_vector(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, -0.f, 1e-30f}, {2, 3})},
      {"half", cast(Tensor::from_vector(std::vector<float>{1.f, -0.5f, 3.f}, {3}), DType::bf16)},  // pending
      {"pos", Tensor::from_vector(std::vector<int64_t>{0, 1, -1}, {3})},
      {"ids", Tensor::from_data(ids, DType::i32, {2})},
      {"mask", Tensor::from_data(mask, DType::b8, {3})},
      {"empty", Tensor::from_vector(std::vector<float>{}, {0, 5})},
  };
}

std::vector<TensorSpec> specs_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
  return specs;
}

TEST(SafetensorsStream, SameBytesAsTheInMemoryWriterProducedInOrder) {
  TempDir dir;
  auto tensors = mixed_tensors();
  save_safetensors(dir / "whole.safetensors", tensors, {{"step", "3"}});
  std::vector<size_t> asked;
  save_safetensors(
      dir / "streamed.safetensors", specs_of(tensors),
      [&](size_t i) {
        asked.push_back(i);
        return tensors[i].second;
      },
      {{"step", "3"}});
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(file_bytes(dir / "streamed.safetensors"), file_bytes(dir / "whole.safetensors"));
  auto f = SafetensorsFile::open(dir / "streamed.safetensors");
  EXPECT_EQ(f.find("half")->dtype, "BF16");
  EXPECT_EQ(f.load("half").to_vector<float>(), (std::vector<float>{1.f, -0.5f, 3.f}));
  EXPECT_EQ(f.metadata().at("step"), "3");
}

TEST(SafetensorsStream, AProducedTensorUnlikeItsSpecIsAnErrorAndNoFileIsLeft) {
  TempDir dir;
  const std::vector<TensorSpec> specs{{"a", DType::f32, {2}}, {"b", DType::f32, {2, 2}}};
  auto wrong_shape = [](size_t i) { return i == 0 ? zeros({2}, DType::f32) : zeros({4}, DType::f32); };
  EXPECT_TRUE(throws_with([&] { save_safetensors(dir / "m.safetensors", specs, wrong_shape); },
                          {"m.safetensors: tensor 'b' was declared f32[2,2] in the header but is f32[4]"}));
  auto wrong_dtype = [](size_t) { return zeros({2, 2}, DType::i64); };
  EXPECT_TRUE(throws_with([&] { save_safetensors(dir / "m.safetensors", {specs[1]}, wrong_dtype); },
                          {"tensor 'b' was declared f32", "but is i64"}));
  auto throws = [](size_t) -> Tensor { throw Error("no value"); };
  EXPECT_THROW(save_safetensors(dir / "m.safetensors", specs, throws), Error);
  EXPECT_TRUE(dir.listing().empty());
  EXPECT_TRUE(throws_with([&] { save_safetensors(dir / "m.safetensors", {specs[0], specs[0]}, wrong_shape); },
                          {"tensor 'a' is given twice"}));
}

TEST(ShardSize, ParsesHuggingFaceSizes) {
  EXPECT_EQ(parse_shard_size("5GB", "x"), 5'000'000'000ULL);
  EXPECT_EQ(parse_shard_size("50GB", "x"), 50'000'000'000ULL);
  EXPECT_EQ(parse_shard_size("1.5kb", "x"), 1500u);
  EXPECT_EQ(parse_shard_size("10MB", "x"), 10'000'000u);
  EXPECT_EQ(parse_shard_size("2TB", "x"), 2'000'000'000'000ULL);
  EXPECT_EQ(parse_shard_size("4096", "x"), 4096u);
  for (const char* bad : {"", "GB", "5XB", "-1GB", "0", "5 G", "1e30TB", "12abc"})
    EXPECT_TRUE(throws_with([&] { parse_shard_size(bad, "init: --max_shard_size"); },
                            {"init: --max_shard_size: '" + std::string(bad) + "' is not a size"}))
        << bad;
}

// Six f32 tensors of 16, 40, 8, 100, 8 and 8 bytes.
std::vector<std::pair<std::string, Tensor>> sized_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  int64_t counts[] = {4, 10, 2, 25, 2, 2};
  float v = 0;
  for (int i = 0; i < 6; ++i) {
    std::vector<float> values;
    for (int64_t k = 0; k < counts[i]; ++k) values.push_back(v++);
    out.emplace_back("t" + std::to_string(i), Tensor::from_vector(values, {counts[i]}));
  }
  return out;
}

TEST(SavePretrainedWeights, ShardsAsHuggingFaceHubSplitsThem) {
  TempDir dir;
  auto tensors = sized_tensors();
  auto produce = [&](size_t i) { return tensors[i].second; };
  // Limit 60 bytes: t0 t1 (56) fill the first shard; t2 opens the next; t3
  // (100 bytes, over the limit) gets a shard of its own when met; t4 and t5
  // join t2's, as huggingface_hub splits.
  save_pretrained_weights(dir.path(), specs_of(tensors), produce, 60);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                     "model-00002-of-00003.safetensors",
                                                     "model-00003-of-00003.safetensors",
                                                     "model.safetensors.index.json"}));
  const nlohmann::json index = read_json_file(dir / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 180);
  EXPECT_EQ(index["metadata"]["total_parameters"], 45);
  const char* shard_of[] = {"00001", "00001", "00003", "00002", "00003", "00003"};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(index["weight_map"]["t" + std::to_string(i)],
              "model-" + std::string(shard_of[i]) + "-of-00003.safetensors");
  EXPECT_EQ(SafetensorsFile::open(dir / "model-00001-of-00003.safetensors").metadata().at("format"), "pt");
  auto loaded = load_safetensors(dir.path());
  ASSERT_EQ(loaded.size(), 6u);
  for (const auto& [name, t] : tensors) EXPECT_EQ(loaded.at(name).to_vector<float>(), t.to_vector<float>()) << name;
}

TEST(SavePretrainedWeights, OneFileWhenItFitsAndNoStaleLayoutIsLeft) {
  TempDir dir;
  auto tensors = sized_tensors();
  auto produce = [&](size_t i) { return tensors[i].second; };
  save_pretrained_weights(dir.path(), specs_of(tensors), produce, 60);
  std::ofstream(dir / "notes.txt") << "kept";
  // Saved again within the limit: one file, the shards and index of the first save gone.
  save_pretrained_weights(dir.path(), specs_of(tensors), produce, 180);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"model.safetensors", "notes.txt"}));
  save_safetensors(dir / "in_memory.safetensors", tensors, {{"format", "pt"}});
  EXPECT_EQ(file_bytes(dir / "model.safetensors"), file_bytes(dir / "in_memory.safetensors"));
  // And sharded again: the single file goes (transformers prefers it when both exist).
  save_pretrained_weights(dir.path(), specs_of(tensors), produce, 100);
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  EXPECT_EQ(load_safetensors(dir.path()).size(), 6u);
}

}  // namespace
}  // namespace kiln::io
