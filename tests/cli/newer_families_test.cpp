// The newer decoder families end to end: a Gemma 2 (soft caps, a sliding
// window shorter than the blocks) and a Llama 3.2-shaped model (llama3 rope
// scaling, tied embeddings, explicit head_dim) train as causal LMs under
// --bf16, save directories that load back, and generate the same tokens
// with the key/value cache as without; a LoRA adapter trains on each under
// --bf16 and generates the same way.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

// The output without kiln's warnings (the recomputing generation warns that it recompiles).
std::string text_of(const std::string& output) {
  std::string text, line;
  std::istringstream in(output);
  while (std::getline(in, line))
    if (line.rfind("kiln: ", 0) != 0) text += line + "\n";
  return text;
}

void train_and_generate(const nlohmann::json& config, const std::string& architecture) {
  testing::TempDir w;
  const fs::path data = w.path() / "data", out = w.path() / "out";
  ASSERT_EQ(run_kiln("demo-data --output_dir " + data.string(), w.path()).status, 0);
  io::write_json_file_atomic(w.path() / "config.json", config);
  const auto trained =
      run_kiln("train --task causal-lm --bf16 --config_name " + (w.path() / "config.json").string() +
                   " --tokenizer_name " + data.string() + " --train_file " + (data / "train.csv").string() +
                   " --validation_file " + (data / "validation.csv").string() + " --max_seq_length 32 --output_dir " +
                   out.string() + " --max_steps 30 --logging_steps 10 --per_device_train_batch_size 16" +
                   " --learning_rate 2e-3",
               w.path(), 600);
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_EQ(read_json_file(out / "config.json")["architectures"][0], architecture);
  const auto log = read_json_file(out / "trainer_state.json")["log_history"];
  ASSERT_GE(log.size(), 3u) << log.dump();
  EXPECT_LT(log[2]["loss"].get<double>(), 0.9 * log[0]["loss"].get<double>()) << log.dump();
  const std::string generate = "generate --model " + out.string() + " --prompt 'the battery is' --max_new_tokens 12";
  const auto cached = run_kiln(generate, w.path()), recomputed = run_kiln(generate + " --no_cache", w.path());
  ASSERT_EQ(cached.status, 0) << cached.output;
  EXPECT_EQ(text_of(cached.output), text_of(recomputed.output));
  EXPECT_EQ(text_of(cached.output).rfind("the battery is", 0), 0u) << cached.output;

  // LoRA on the trained model under --bf16, with PEFT's default targets for the family.
  const fs::path lora = w.path() / "lora";
  const auto adapted =
      run_kiln("train --task causal-lm --bf16 --use_peft --model_name_or_path " + out.string() + " --train_file " +
                   (data / "train.csv").string() + " --max_seq_length 32 --output_dir " + lora.string() +
                   " --max_steps 6 --logging_steps 3 --per_device_train_batch_size 16 --learning_rate 2e-3",
               w.path(), 600);
  ASSERT_EQ(adapted.status, 0) << adapted.output;
  const auto adapter = read_json_file(lora / "adapter_config.json");
  EXPECT_EQ(adapter["peft_type"], "LORA");
  const std::string targets = adapter["target_modules"].dump();
  EXPECT_NE(targets.find("q_proj"), std::string::npos) << targets;
  EXPECT_NE(targets.find("v_proj"), std::string::npos) << targets;
  EXPECT_TRUE(fs::exists(lora / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(lora / "model.safetensors"));
  const std::string with_adapter = generate + " --adapter " + lora.string();
  const auto a_cached = run_kiln(with_adapter, w.path()), a_recomputed = run_kiln(with_adapter + " --no_cache", w.path());
  ASSERT_EQ(a_cached.status, 0) << a_cached.output;
  EXPECT_EQ(text_of(a_cached.output), text_of(a_recomputed.output));
}

TEST(CliNewerFamilies, Gemma2TrainsUnderBf16AndGeneratesWithItsWindow) {
  train_and_generate({{"model_type", "gemma2"}, {"hidden_size", 64}, {"intermediate_size", 128},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"head_dim", 16}, {"query_pre_attn_scalar", 16}, {"sliding_window", 8}},
                     "Gemma2ForCausalLM");
}

TEST(CliNewerFamilies, Llama32ShapedModelTrainsUnderBf16) {
  train_and_generate({{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 128},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"head_dim", 32}, {"tie_word_embeddings", true}, {"rope_theta", 500000.0},
                      {"rope_scaling",
                       {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 16}}}},
                     "LlamaForCausalLM");
}

}  // namespace
}  // namespace kiln
