// --task question-answering (run_qa): questions over contexts cut into
// overlapping windows, the predictions answers (train/question_answering.h);
// --task multiple-choice (run_swag): a question and its endings, one right.
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
    return sequence_length(max_seq_length_flag(f), config, command, kQaMaxSeqLength);
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
};

// run_swag: sent1, sent2, ending0, ending1, ..., label.
class MultipleChoice : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::MultipleChoice; }
  void dataset_options(const FlagValues&, data::DatasetOptions& o) const override { o.multiple_choice = true; }
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
};

}  // namespace

std::unique_ptr<TrainTask> question_answering_task() { return std::make_unique<QuestionAnswering>(); }
std::unique_ptr<TrainTask> multiple_choice_task() { return std::make_unique<MultipleChoice>(); }

}  // namespace kiln::cli
