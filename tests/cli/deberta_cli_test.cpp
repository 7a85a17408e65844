// DeBERTa-v3 end to end: a tiny deberta-v3 layout trains as a sequence
// classifier under --bf16 with gradient checkpointing, saves HF's tensor
// names, and trains again from its saved directory.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

TEST(CliDeberta, V3ClassifierTrainsSavesAndTrainsAgainFromItsDirectory) {
  testing::TempDir w;
  const fs::path data = w.path() / "data", out = w.path() / "out", again = w.path() / "again";
  ASSERT_EQ(run_kiln("demo-data --output_dir " + data.string(), w.path()).status, 0);
  io::write_json_file_atomic(w.path() / "config.json",
                             {{"model_type", "deberta-v2"}, {"vocab_size", 1000}, {"hidden_size", 64},
                              {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                              {"relative_attention", true}, {"position_buckets", 16}, {"max_relative_positions", 64},
                              {"pos_att_type", "p2c|c2p"}, {"share_att_key", true}, {"norm_rel_ebd", "layer_norm"},
                              {"position_biased_input", false}, {"type_vocab_size", 0},
                              {"architectures", {"DebertaV2ForSequenceClassification"}}});
  const std::string common = " --task text-classification --tokenizer_name " + data.string() + " --train_file " +
                             (data / "train.csv").string() + " --validation_file " + (data / "validation.csv").string() +
                             " --max_seq_length 32 --max_steps 12 --logging_steps 4 --per_device_train_batch_size 16" +
                             " --max_eval_samples 64 --learning_rate 1e-3 --do_train --do_eval";
  const auto trained = run_kiln("train --bf16 --gradient_checkpointing --config_name " +
                                    (w.path() / "config.json").string() + " --output_dir " + out.string() + common,
                                w.path(), 600);
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_EQ(read_json_file(out / "config.json")["architectures"][0], "DebertaV2ForSequenceClassification");
  auto saved = io::SafetensorsFile::open(out / "model.safetensors");
  for (const char* name : {"deberta.encoder.rel_embeddings.weight", "deberta.encoder.LayerNorm.weight",
                           "deberta.encoder.layer.1.attention.self.query_proj.weight", "pooler.dense.weight",
                           "classifier.weight"})
    EXPECT_NE(saved.find(name), nullptr) << name;
  EXPECT_EQ(saved.find("deberta.embeddings.position_embeddings.weight"), nullptr);
  const auto log = read_json_file(out / "trainer_state.json")["log_history"];
  ASSERT_GE(log.size(), 3u) << log.dump();
  for (const auto& entry : log) {
    if (entry.contains("loss")) {
      EXPECT_TRUE(std::isfinite(entry["loss"].get<double>())) << log.dump();
    }
  }
  const auto resumed = run_kiln("train --model_name_or_path " + out.string() + " --output_dir " + again.string() + common,
                                w.path(), 600);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(resumed.output.find("newly initialized"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace kiln
