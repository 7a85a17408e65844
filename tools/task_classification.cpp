// --task text-classification (run_glue) and token-classification (run_ner):
// a classification head over a label set read from the training file.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "flags.h"
#include "kiln/io/compressed.h"
#include "kiln/io/json_file.h"
#include "train_task.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

class ClassificationTask : public TrainTask {
 public:
  bool classification_head() const override { return true; }
  bool predicts() const override { return true; }
  // Label names into config.json (id2label / label2id), or the regression problem type.
  void finish_model(models::PreTrainedModel& model, const TaskContext& ctx) const override {
    if (ctx.labels.is_regression) {
      model.config().problem_type = "regression";
      return;
    }
    model.config().id2label.clear();
    for (size_t i = 0; i < ctx.labels.labels.size(); ++i)
      model.config().id2label[static_cast<int64_t>(i)] = ctx.labels.labels[i];
  }
  void require_labels(const std::string& file, const data::Dataset& ds, const data::DatasetOptions& o,
                      const char* use) const override {
    KILN_CHECK(ds.has_labels, file, ": no labels to ", use, " (column '", o.label_column,
               "' is missing, or empty in every row)");
  }
};

// run_glue's predict_results: "index<TAB>prediction" per test row, the label's name (or the value, "%3.3f",
// for regression).
void write_predictions(const train::Predictions& p, const data::LabelMap& labels, const fs::path& path) {
  std::string text = "index\tprediction\n";
  const size_t rows = p.values.empty() ? p.labels.size() : p.values.size();
  for (size_t i = 0; i < rows; ++i) {
    char value[64];
    if (!p.values.empty()) std::snprintf(value, sizeof value, "%3.3f", static_cast<double>(p.values[i]));
    text += std::to_string(i) + "\t" +
            (p.values.empty() ? labels.labels.at(static_cast<size_t>(p.labels[i])) : std::string(value)) + "\n";
  }
  write_file_atomic(path, text);
  std::fprintf(stderr, "kiln train: %zu predictions -> %s\n", rows, path.string().c_str());
}

// The predicted tags run_ner writes for a row: those of the tokens with a label (with --label_all_tokens every
// token of a word, else its first), or for untagged rows each word's first token's.
std::vector<int64_t> written_tags(const train::Predictions& p, const data::Features& test, size_t r) {
  if (test.token_labels.empty()) return data::per_word(p.token_labels[r], test.word_ids[r]);
  std::vector<int64_t> tags;
  const std::vector<int64_t>& gold = test.token_labels[r];
  for (size_t k = 0; k < std::min(gold.size(), p.token_labels[r].size()); ++k)
    if (gold[k] != -100) tags.push_back(p.token_labels[r][k]);
  return tags;
}

// run_ner's predictions.txt: per test row, the predicted tags, space-separated.
void write_word_predictions(const train::Predictions& p, const data::Features& test, const data::LabelMap& labels,
                            const fs::path& path) {
  std::string text;
  for (size_t r = 0; r < p.token_labels.size(); ++r) {
    std::string line;
    for (int64_t tag : written_tags(p, test, r))
      line += (line.empty() ? "" : " ") + labels.labels.at(static_cast<size_t>(tag));
    text += line + "\n";
  }
  write_file_atomic(path, text);
  std::fprintf(stderr, "kiln train: %zu tagged rows -> %s\n", p.token_labels.size(), path.string().c_str());
}

// run_ner keeps a checkpoint's tag order (its id2label) when the training tags are the same set, so a fine-tuned
// tagger's head keeps its classes; a checkpoint naming other tags is told and ignored, as run_ner warns.
data::LabelMap in_checkpoint_order(data::LabelMap tags, const fs::path& model) {
  const fs::path file = model / "config.json";
  const std::unique_ptr<models::PretrainedConfig> config = models::load_config(file);
  if (std::optional<data::LabelMap> ordered = tags.in_model_order(config->id2label)) {
    std::fprintf(stderr, "kiln train: the tags take the ids of %s's id2label\n", file.string().c_str());
    return *ordered;
  }
  if (config->id2label.size() == tags.size() && data::has_named_labels(config->id2label)) {
    std::string theirs;
    for (const auto& [id, name] : config->id2label) theirs += (theirs.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "kiln train: warning: %s's id2label (%s) is not the training file's tag set: the tags take "
                 "sorted ids instead\n",
                 file.string().c_str(), theirs.c_str());
  }
  return tags;
}

class TextClassification : public ClassificationTask {
 public:
  train::Task trainer_task() const override { return train::Task::TextClassification; }
  data::LabelMap read_labels(const FlagValues& f, const data::Dataset& train, const data::DatasetOptions& o) const override {
    require_labels(f.at("train_file"), train, o, "train on");
    return data::LabelMap::from_dataset(train);
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    return c.class_prefix() + "ForSequenceClassification";
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_dataset(ds, ctx.tok.tokenizer, ctx.max_len, &ctx.labels));
  }
  // As run_glue: the test rows are predicted without labels.
  bool reads_test_labels() const override { return false; }
  std::shared_ptr<data::Features> test_features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return at_most(std::make_shared<data::Features>(data::tokenize_dataset(ds, ctx.tok.tokenizer, ctx.max_len, nullptr)),
                   ctx.flags, "max_predict_samples");
  }
  void predict(const PredictRun& run, const TaskContext& ctx, nlohmann::json&, nlohmann::json&) const override {
    write_predictions(run.trainer.predict(*run.test), ctx.labels, run.out / "predict_results.txt");
  }
  // kiln predict: {"label": name, "score": probability} per row, or a regression head's {"score": value}.
  PredictionLines prediction_lines(const PredictionRequest& r) const override {
    warn_question_answering_flags(r.flags);
    const TokenizerBundle tok = prediction_tokenizer(r);
    const data::Dataset ds = data::load_dataset(r.flags.get("input"), prediction_options(r.flags));
    const int64_t max_len = prediction_length(r, 128);
    const data::Features feats = data::tokenize_dataset(ds, tok.tokenizer, max_len, nullptr);
    return choice_lines(trainer_predictions(r, tok, feats, trainer_task(), max_len), &r.model.config());
  }
};

class TokenClassification : public ClassificationTask {
 public:
  train::Task trainer_task() const override { return train::Task::TokenClassification; }
  // run_ner: a list of words and a list of tags per row.
  void dataset_options(const FlagValues&, data::DatasetOptions& o) const override { o.split_into_words = true; }
  // run_ner's --return_entity_level_metrics: seqeval's scores per entity type too.
  void add_eval_metrics(train::Trainer& trainer, models::PreTrainedModel&, const TaskContext& ctx) const override {
    trainer.set_entity_level_metrics(switch_on(ctx.flags, "return_entity_level_metrics"));
  }
  // run_ner truncates to --max_seq_length, else to the tokenizer's model_max_length.
  int64_t max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const override {
    return sequence_length(max_seq_length_flag(f), config, command, tokenizer_max_length(f, kNoLengthLimit));
  }
  data::LabelMap read_labels(const FlagValues& f, const data::Dataset& train, const data::DatasetOptions& o) const override {
    require_labels(f.at("train_file"), train, o, "train on");
    data::LabelMap tags = data::LabelMap::from_word_labels(train);
    return f.count("model_name_or_path") ? in_checkpoint_order(std::move(tags), f.at("model_name_or_path")) : tags;
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    return bert_family_architecture(c, "token-classification", "ForTokenClassification");
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_words(ds, ctx.tok.tokenizer, ctx.max_len, &ctx.labels,
                                                                 switch_on(ctx.flags, "label_all_tokens")));
  }
  // run_ner: predict_* scores when the test rows are tagged, and predictions.txt.
  void predict(const PredictRun& run, const TaskContext& ctx, nlohmann::json& predict,
               nlohmann::json& all) const override {
    if (!run.test->token_labels.empty())
      for (auto& [k, v] : run.trainer.evaluate("predict", run.test)) predict[k] = all[k] = v;
    write_word_predictions(run.trainer.predict(*run.test), *run.test, ctx.labels, run.out / "predictions.txt");
  }
  // kiln predict: {"tags": [...], "words": [...]} per row, each word's tag its first token's prediction (words cut
  // by --max_seq_length get none). JSON rows hold lists of words; text lines are split at whitespace.
  PredictionLines prediction_lines(const PredictionRequest& r) const override {
    warn_question_answering_flags(r.flags);
    const TokenizerBundle tok = prediction_tokenizer(r);
    data::DatasetOptions o = prediction_options(r.flags);
    const bool text_lines = io::without_compression(r.flags.get("input")).extension() == ".txt";
    o.split_into_words = !text_lines;
    data::Dataset ds = data::load_dataset(r.flags.get("input"), o);
    if (text_lines)
      for (auto& row : ds.rows) {
        std::istringstream words(row.text);
        for (std::string w; words >> w;) row.words.push_back(w);
      }
    const int64_t max_len = prediction_length(r, tokenizer_max_length(tok, kNoLengthLimit));
    const data::Features feats = data::tokenize_words(ds, tok.tokenizer, max_len, nullptr, false);
    const train::Predictions p = trainer_predictions(r, tok, feats, trainer_task(), max_len);
    PredictionLines out;
    for (size_t i = 0; i < feats.size(); ++i) {
      nlohmann::json tags = nlohmann::json::array();
      for (int64_t tag : data::per_word(p.token_labels[i], feats.word_ids[i]))
        tags.push_back(label_name(r.model.config(), tag));
      out.lines.push_back({{"tags", tags}, {"words", ds.rows[i].words}});
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<TrainTask> text_classification_task() { return std::make_unique<TextClassification>(); }
std::unique_ptr<TrainTask> token_classification_task() { return std::make_unique<TokenClassification>(); }

}  // namespace kiln::cli
