// kiln init writes shards past --max_shard_size as save_pretrained does, the
// sharded directory is a model every command opens (its logits are the
// single file's), and a size that is not one is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

std::string file_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(InitCli, ShardsPastMaxShardSizeAndLoadsThem) {
  testing::TempDir dir;
  const std::string one = (dir / "one").string(), sharded = (dir / "sharded").string();
  auto r = run_kiln("init --config llama-tiny --torch_dtype bfloat16 --output_dir " + one, dir.path());
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_kiln("init --config llama-tiny --torch_dtype bfloat16 --max_shard_size 5MB --output_dir " + sharded,
               dir.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir / "sharded" / "model.safetensors"));
  const auto index = read_json_file(dir / "sharded" / "model.safetensors.index.json");
  const size_t shards = std::count_if(fs::directory_iterator(dir / "sharded"), fs::directory_iterator{},
                                      [](const auto& e) { return e.path().extension() == ".safetensors"; });
  // The embeddings and the head (8 MB each as bf16) each alone, placed when
  // met; the layers together in the shard still open at the end.
  EXPECT_EQ(shards, 3u);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["metadata"]["total_parameters"], 8561280);
  std::ofstream(dir / "in.json") << R"({"input_ids": [[1, 20, 30, 40], [1, 50, 60, 0]]})";
  for (const auto& model : {one, sharded}) {
    r = run_kiln("forward --model " + model + " --inputs " + (dir / "in.json").string() + " --output " + model +
                     ".json",
                 dir.path());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  EXPECT_EQ(file_text(sharded + ".json"), file_text(one + ".json"));

  r = run_kiln("init --config llama-tiny --max_shard_size 5XB --output_dir " + (dir / "bad").string(), dir.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "init: --max_shard_size: '5XB' is not a size");
}

}  // namespace
}  // namespace kiln
