// HF TrainingArguments fields kiln lacks: ignored at values that ask for nothing, errors otherwise.
#include "kiln/train/hf_fields.h"

#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "support/test_util.h"

namespace kiln::train {
namespace {

using nlohmann::json;

TEST(HfFields, OffValuesAreIgnoredOthersLack) {
  std::string why;
  EXPECT_EQ(classify_hf_field("torch_compile", false), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("deepspeed", nullptr), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("fsdp", json::array()), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("hub_token", "<HUB_TOKEN>"), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("torch_compile", true, &why), HfField::Lacking);
  EXPECT_EQ(why, "torch.compile");
  EXPECT_EQ(classify_hf_field("deepspeed", "ds_config.json", &why), HfField::Lacking);
  EXPECT_EQ(why, "DeepSpeed");
  EXPECT_EQ(classify_hf_field("average_tokens_across_devices", false), HfField::Lacking);
  EXPECT_EQ(classify_hf_field("average_tokens_across_devices", true), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("past_index", -1), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("past_index", 2), HfField::Lacking);
  EXPECT_EQ(classify_hf_field("learning_rate", 1e-5), HfField::NotHf);  // kiln's own
  EXPECT_EQ(classify_hf_field("learning_rat", 1e-5), HfField::NotHf);   // a typo: the parser suggests
}

TEST(HfFields, AcceleratorConfigDefaultsOnly) {
  const json defaults = {{"split_batches", false},   {"dispatch_batches", nullptr}, {"even_batches", true},
                         {"use_seedable_sampler", true}, {"non_blocking", false}, {"gradient_accumulation_kwargs", nullptr}};
  EXPECT_EQ(classify_hf_field("accelerator_config", defaults), HfField::Ignored);
  json split = defaults;
  split["split_batches"] = true;
  EXPECT_EQ(classify_hf_field("accelerator_config", split), HfField::Lacking);
}

TEST(HfFields, TranslatesHfSpellings) {
  EXPECT_EQ(translate_hf_field("report_to", json::array({"tensorboard"}), "a.json")->second, "tensorboard");
  EXPECT_EQ(translate_hf_field("report_to", json::array(), "a.json")->second, "none");
  EXPECT_EQ(translate_hf_field("report_to", "all", "a.json"), std::nullopt);  // a string is kiln's form already
  EXPECT_EQ(translate_hf_field("include_num_input_tokens_seen", "no", "a.json")->second, false);
  EXPECT_EQ(translate_hf_field("include_num_input_tokens_seen", "all", "a.json")->second, true);
  auto sampler = translate_hf_field("train_sampling_strategy", "group_by_length", "a.json");
  EXPECT_EQ(sampler->first, "group_by_length");
  EXPECT_EQ(sampler->second, true);
  try {
    translate_hf_field("include_num_input_tokens_seen", "non_padding", "a.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "a.json: key 'include_num_input_tokens_seen': 'non_padding' is not available");
  }
  EXPECT_THROW(translate_hf_field("report_to", json::array({1}), "a.json"), Error);
}

// transformers 5 renamed gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs) and writes both,
// mirrored; the new name wins unless it is null, as TrainingArguments resolves them.
TEST(HfFields, ActivationCheckpointingIsGradientCheckpointing) {
  json hf = {{"activation_checkpointing", true}, {"activation_checkpointing_kwargs", {{"use_reentrant", false}}},
             {"gradient_checkpointing", true}, {"gradient_checkpointing_kwargs", {{"use_reentrant", false}}}};
  resolve_hf_aliases(hf);
  EXPECT_EQ(hf, (json{{"activation_checkpointing", true}, {"activation_checkpointing_kwargs", {{"use_reentrant", false}}}}));
  json old = {{"activation_checkpointing", nullptr}, {"gradient_checkpointing", true}};
  resolve_hf_aliases(old);
  EXPECT_EQ(old, (json{{"gradient_checkpointing", true}}));
  // Arguments that only change how torch recomputes ask for nothing; thinning or offloading the checkpoints does.
  EXPECT_EQ(classify_hf_field("activation_checkpointing_kwargs", {{"use_reentrant", false}, {"every_n_layers", 1}}),
            HfField::Ignored);
  EXPECT_EQ(classify_hf_field("gradient_checkpointing_kwargs", nullptr), HfField::Ignored);
  EXPECT_EQ(classify_hf_field("activation_checkpointing_kwargs", {{"every_n_layers", 2}}), HfField::Lacking);
  EXPECT_EQ(classify_hf_field("gradient_checkpointing_kwargs", {{"offload", true}}), HfField::Lacking);
}

}  // namespace
}  // namespace kiln::train
