// Which parameters get weight decay: transformers' Trainer.get_decay_parameter_names
// for every preset model (tests/goldens/trainer/decay.json, gen_trainer_goldens.py).
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/models/config.h"
#include "kiln/models/model.h"
#include "kiln/train/decay.h"

namespace kiln {
namespace {

using nlohmann::json;

TEST(WeightDecay, NamePatternsAsTransformers) {
  for (const char* exempt : {"bert.encoder.layer.0.output.dense.bias", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                             "bert.embeddings.LayerNorm.weight", "model.layers.0.input_layernorm.weight",
                             "model.norm.weight", "norm.weight", "model.layers.0.self_attn.q_norm.weight",
                             "decoder.final_layer_norm.weight", "x.RMSNorm.weight", "distilbert.transformer.layer.0.sa_layer_norm.weight"})
    EXPECT_TRUE(train::decay_exempt_name(exempt)) << exempt;
  for (const char* decays : {"bert.encoder.layer.0.output.dense.weight", "transformer.h.0.ln_1.weight", "lm_head.weight",
                             "model.normal.weight", "model.enorm.weight", "transformer.wte.weight", "classifier.weight"})
    EXPECT_FALSE(train::decay_exempt_name(decays)) << decays;
}

TEST(WeightDecay, GroupsOfEveryPresetMatchTransformers) {
  const json golden = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/trainer/decay.json");
  ASSERT_GE(golden.size(), 10u);
  for (const auto& [preset, g] : golden.items()) {
    SCOPED_TRACE(preset);
    auto config = models::preset_config(preset);
    ASSERT_TRUE(config);
    auto model = models::create_model(g.at("architecture").get<std::string>(), *config, 1);
    const auto names = model->named_parameters();
    EXPECT_EQ(static_cast<int64_t>(names.size()), g.at("parameters").get<int64_t>());
    std::set<std::string> want, got;
    for (const auto& n : g.at("no_decay")) want.insert(n.get<std::string>());
    for (const auto& n : train::no_decay_parameter_names(*model)) got.insert(n);
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace kiln
