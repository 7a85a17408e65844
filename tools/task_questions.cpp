// --task question-answering (run_qa): questions over contexts cut into
// overlapping windows, the predictions answers (train/question_answering.h);
// --task multiple-choice (run_swag): a question and its endings, one right.
#include "flags.h"
#include "kiln/core/error.h"
#include "train_task.h"

namespace kiln::cli {
namespace {

class QuestionAnswering : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::QuestionAnswering; }
  // run_qa: id, question, context and answers per row.
  void dataset_options(const FlagValues& f, data::DatasetOptions& o) const override { qa_columns(f, o); }
  int64_t max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const override {
    return tokenizer_capped_length(f, config, command, kQaMaxSeqLength);
  }
  void require_labels(const std::string& file, const data::Dataset& ds, const data::DatasetOptions& o,
                      const char* use) const override {
    KILN_CHECK(ds.has_labels, file, ": no answers to ", use, " (key '", o.label_column,
               "' is missing, or null, in every row)");
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    return bert_family_architecture(c, "question-answering", "ForQuestionAnswering");
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_qa(std::make_shared<const data::Dataset>(ds),
                                                              ctx.tok.tokenizer, ctx.max_len,
                                                              doc_stride(ctx.flags, ctx.max_len)));
  }
  // run_qa selects N examples first, then (for training) N of their windows.
  std::shared_ptr<data::Features> train_features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return at_most(features(first_examples(ds, ctx.flags, "max_train_samples"), ctx), ctx.flags, "max_train_samples");
  }
  std::shared_ptr<data::Features> eval_features(data::Dataset& ds, const TaskContext& ctx) const override {
    return features(first_examples(ds, ctx.flags, "max_eval_samples"), ctx);
  }
  bool predicts() const override { return true; }
  std::shared_ptr<data::Features> test_features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return features(first_examples(ds, ctx.flags, "max_predict_samples"), ctx);
  }
  // run_qa: predict_predictions.json, and predict_* scores when the test rows have answers.
  void predict(const PredictRun& run, const TaskContext&, nlohmann::json& predict, nlohmann::json& all) const override {
    for (auto& [k, v] : run.trainer.evaluate("predict", run.test)) predict[k] = all[k] = v;
  }
  // kiln predict: each question's best span over its context's windows (run_qa's post-processing), as
  // {"id", "answer", "start", "end", "score"} (characters of the context; the null answer has only id and "").
  PredictionLines prediction_lines(const PredictionRequest& r) const override {
    const Flags& f = r.flags;
    const TokenizerBundle tok = prediction_tokenizer(r);
    data::DatasetOptions o = prediction_options(f);
    o.question_answering = true;
    const auto ds = std::make_shared<const data::Dataset>(data::load_dataset(f.get("input"), o));
    const int64_t max_len = prediction_length(r, kQaMaxSeqLength);
    const data::Features feats =
        data::tokenize_qa(ds, tok.tokenizer, max_len, f.integer("doc_stride", default_doc_stride(max_len), 0));
    const train::Predictions p = trainer_predictions(r, tok, feats, trainer_task(), max_len);
    train::QaOptions qo;
    qo.max_answer_length = f.integer("max_answer_length", 30, 1);
    qo.version_2_with_negative = f.has("version_2_with_negative");
    const train::QaPredictions answers = train::postprocess_qa_predictions(feats, p.start_logits, p.end_logits, qo);
    PredictionLines out{{}, "answers"};
    for (size_t e = 0; e < answers.ids.size(); ++e) {
      nlohmann::ordered_json line = {{"id", answers.ids[e]}, {"answer", answers.answers[e]}};
      if (const int64_t k = answers.chosen[e]; k >= 0) {
        const train::QaCandidate& c = answers.nbest[e][static_cast<size_t>(k)];
        line["start"] = c.offsets.first;
        line["end"] = c.offsets.second;
        line["score"] = c.probability;
      }
      out.lines.push_back(std::move(line));
    }
    return out;
  }
};

// run_swag: sent1, sent2, ending0, ending1, ..., label.
class MultipleChoice : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::MultipleChoice; }
  void dataset_options(const FlagValues&, data::DatasetOptions& o) const override { o.multiple_choice = true; }
  // run_swag: --max_seq_length, else the tokenizer's model_max_length up to 1024.
  int64_t max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const override {
    return tokenizer_capped_length(f, config, command, 1024);
  }
  void require_labels(const std::string& file, const data::Dataset& ds, const data::DatasetOptions& o,
                      const char* use) const override {
    KILN_CHECK(ds.has_labels, file, ": no labels to ", use, " (column '", o.label_column,
               "', the right ending's index, is missing, or empty in every row)");
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    return bert_family_architecture(c, "multiple-choice", "ForMultipleChoice");
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_choices(ds, ctx.tok.tokenizer, ctx.max_len));
  }
  // kiln predict: {"label": k, "score": p} per row, the chosen ending's index.
  PredictionLines prediction_lines(const PredictionRequest& r) const override {
    warn_question_answering_flags(r.flags);
    const TokenizerBundle tok = prediction_tokenizer(r);
    data::DatasetOptions o = prediction_options(r.flags);
    o.multiple_choice = true;
    const data::Dataset ds = data::load_dataset(r.flags.get("input"), o);
    const int64_t max_len = prediction_length(r, tokenizer_max_length(tok, 1024));
    const data::Features feats = data::tokenize_choices(ds, tok.tokenizer, max_len);
    return choice_lines(trainer_predictions(r, tok, feats, trainer_task(), max_len), nullptr);
  }
};

}  // namespace

std::unique_ptr<TrainTask> question_answering_task() { return std::make_unique<QuestionAnswering>(); }
std::unique_ptr<TrainTask> multiple_choice_task() { return std::make_unique<MultipleChoice>(); }

}  // namespace kiln::cli
