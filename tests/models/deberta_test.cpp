// DeBERTa-v2/v3 beyond the goldens (model_goldens_test.cpp): the relative
// position buckets of a real-size config against transformers', config
// errors, and the kiln init preset's parameter names.
#include <algorithm>
#include <filesystem>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/deberta.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(KILN_TEST_DATA_DIR) / "deberta";

// Every distance -1100..1100 under deberta-v3-base's 256 buckets and 512
// positions, as transformers' make_log_bucket_position gives it.
TEST(DebertaRelativePositions, MatchTransformersAtDebertaV3BaseSize) {
  json j = read_json_file(kData / "relative_positions.json");
  const auto want = j.at("buckets").get<std::vector<int64_t>>();
  const int64_t first = j.at("first_distance").get<int64_t>();
  const int64_t T = 1101;
  ASSERT_EQ(static_cast<int64_t>(want.size()), 2 * T - 1);
  auto rel = models::deberta_relative_positions(T, j.at("bucket_size"), j.at("max_position"));
  ASSERT_EQ(static_cast<int64_t>(rel.size()), T * T);
  int mismatches = 0;
  for (int64_t d = first; d <= -first; ++d) {
    // distance d = i - j: row T-1 holds 0..T-1, row 0 holds 0..-(T-1).
    const int64_t got = d >= 0 ? rel[static_cast<size_t>((T - 1) * T + (T - 1 - d))] : rel[static_cast<size_t>(-d)];
    if (got != want[static_cast<size_t>(d - first)] && ++mismatches <= 5)
      ADD_FAILURE() << "distance " << d << ": " << got << " vs transformers' " << want[static_cast<size_t>(d - first)];
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DebertaRelativePositions, WithoutBucketsAreDistances) {
  auto rel = models::deberta_relative_positions(3, -1, 4);
  EXPECT_EQ(rel, (std::vector<int64_t>{0, -1, -2, 1, 0, -1, 2, 1, 0}));
}

json base_config() {
  return read_json_file(kData / "deberta_v3_seqcls" / "config.json");
}

std::string config_error(const json& j) {
  return testing::error_of([&] { models::config_from_json(j, "cfg.json"); });
}

TEST(DebertaConfig, ReadsBothPosAttTypeForms) {
  json j = base_config();
  j["pos_att_type"] = "P2C | c2p";
  auto c = models::DebertaV2Config::from_json(j, "cfg.json");
  EXPECT_EQ(c.pos_att_type, (std::vector<std::string>{"p2c", "c2p"}));
  EXPECT_TRUE(c.c2p() && c.p2c());
  EXPECT_EQ(c.to_json()["pos_att_type"], json::array({"p2c", "c2p"}));
  j["pos_att_type"] = nullptr;
  EXPECT_TRUE(models::DebertaV2Config::from_json(j, "cfg.json").pos_att_type.empty());
}

TEST(DebertaConfig, UnsupportedFieldsAreErrorsNamingTheKey) {
  auto with = [](const char* key, json v) {
    json j = base_config();
    j[key] = std::move(v);
    return config_error(j);
  };
  EXPECT_CONTAINS(with("conv_kernel_size", 3), "'conv_kernel_size' 3 is not supported");
  EXPECT_CONTAINS(with("embedding_size", 16), "'embedding_size' 16 differs from hidden_size 32");
  EXPECT_CONTAINS(with("z_steps", 2), "'z_steps' 2 > 1 is not supported");
  EXPECT_CONTAINS(with("pooler_hidden_size", 8), "'pooler_hidden_size' 8 must equal hidden_size 32");
  EXPECT_CONTAINS(with("pos_att_type", json::array({"p2p"})), "'pos_att_type' entry 'p2p' is not supported");
  EXPECT_CONTAINS(with("pos_att_type", 3), "'pos_att_type' must be a list");
  EXPECT_CONTAINS(with("norm_rel_ebd", "batch_norm"), "'norm_rel_ebd' 'batch_norm' is not supported");
  EXPECT_CONTAINS(with("position_buckets", 1), "'position_buckets' 1 must be in [2, 2^24]");
  EXPECT_CONTAINS(with("max_relative_positions", 5), "'max_relative_positions' 5 must exceed position_buckets / 2 + 1");
  EXPECT_CONTAINS(with("pad_token_id", 99), "pad_token_id 99 out of range [0, 99)");
  EXPECT_CONTAINS(with("pooler_hidden_act", "swishy"), "pooler_hidden_act");
  EXPECT_CONTAINS(with("hidden_size", "x"), "cfg.json: 'hidden_size' must be");
}

TEST(DebertaConfig, PresetBuildsTransformersParameterNames) {
  auto config = models::preset_config("deberta-v3-tiny");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->model_type, "deberta-v2");
  auto model = models::create_model("DebertaV2ForSequenceClassification", *config, 0, Device::cpu());
  // deberta_v3_seqcls is the same layout (2 layers, shared keys, no absolute positions, no token types).
  auto theirs = io::SafetensorsFile::open(kData / "deberta_v3_seqcls" / "model.safetensors");
  std::vector<std::string> their_names, our_names;
  for (const auto& t : theirs.entries()) their_names.push_back(t.name);
  for (const auto& [name, t] : model->named_parameters()) our_names.push_back(name);
  std::sort(their_names.begin(), their_names.end());
  std::sort(our_names.begin(), our_names.end());
  EXPECT_EQ(our_names, their_names);
  EXPECT_EQ(model->state_dict().at("deberta.encoder.rel_embeddings.weight").shape(), (Shape{512, 128}));
  EXPECT_FALSE(model->tokenizer_gives_token_types());
}

// HF's loss without a problem_type drops rows labelled below 0; with none
// left it is 0 (the goldens cover a partly labelled batch).
TEST(DebertaModel, SequenceLossWithEveryRowUnlabelledIsZero) {
  json j = base_config();
  j.erase("problem_type");
  auto config = models::config_from_json(j, "cfg.json");
  auto model = models::create_model("DebertaV2ForSequenceClassification", *config, 0, Device::cpu());
  model->eval();
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 6, 7, 8, 9, 10}, {2, 3});
  in.labels = Tensor::from_vector(std::vector<int64_t>{-1, -3}, {2});
  EXPECT_EQ(model->forward(in).loss.item(), 0.0);
  in.labels = Tensor::from_vector(std::vector<int64_t>{7, 0}, {2});  // past the 3 labels
  EXPECT_NE(testing::error_of([&] { model->forward(in).loss.item(); }), "");
}

TEST(DebertaModel, TokenTypesWithoutTypeVocabularyAreAnError) {
  auto config = models::config_from_json(base_config(), "cfg.json");
  auto model = models::create_model("DebertaV2ForTokenClassification", *config, 0, Device::cpu());
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 6, 7}, {1, 3});
  in.token_type_ids = zeros({1, 3}, DType::i64);
  EXPECT_CONTAINS(testing::error_of([&] { model->forward(in); }), "no token types (type_vocab_size 0)");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// deberta-v3-base's checkpoint holds its pre-training heads (lm_predictions.*,
// mask_predictions.*); HF also ignores absolute position embeddings a model
// without them is given. Both load, into the base model and a classifier.
TEST(DebertaLoad, IgnoresPretrainingHeadsAndUnusedPositionEmbeddings) {
  auto config = models::preset_config("deberta-v3-tiny");
  auto base = models::create_model("DebertaV2Model", *config, 0, Device::cpu());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : base->named_parameters()) tensors.emplace_back("deberta." + name, t);
  tensors.emplace_back("deberta.embeddings.position_embeddings.weight", zeros({512, 128}));
  tensors.emplace_back("lm_predictions.lm_head.dense.weight", zeros({128, 128}));
  tensors.emplace_back("mask_predictions.classifier.weight", zeros({1, 128}));
  testing::TempDir dir;
  io::save_safetensors(dir.path() / "model.safetensors", tensors, {{"format", "pt"}});
  io::write_json_file_atomic(dir.path() / "config.json", config->to_json());
  for (const char* arch : {"DebertaV2Model", "DebertaV2ForSequenceClassification"}) {
    models::LoadOptions options;
    options.architecture = arch;
    std::unique_ptr<models::PreTrainedModel> model;
    EXPECT_EQ(testing::error_of([&] { model = models::from_pretrained(dir.path(), options); }), "") << arch;
  }
  // A missing backbone tensor is still an error.
  tensors.erase(std::find_if(tensors.begin(), tensors.end(),
                             [](auto& t) { return t.first == "deberta.encoder.rel_embeddings.weight"; }));
  io::save_safetensors(dir.path() / "model.safetensors", tensors, {{"format", "pt"}});
  EXPECT_CONTAINS(testing::error_of([&] { models::from_pretrained(dir.path()); }),
                  "missing tensor 'deberta.encoder.rel_embeddings.weight'");
}

}  // namespace
}  // namespace kiln
