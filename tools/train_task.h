#pragma once
// kiln train's tasks: one object per --task holds what differs between them
// (HF's run_glue, run_ner, run_qa, run_swag, run_mlm, run_clm,
// run_summarization and TRL's SFTTrainer): how its files are read, the
// labels, the model's head, the tokenized features, the collator, what
// --do_predict writes, and kiln predict's JSON lines from a saved model.
// run_train and run_eval (cmd_train.cpp) and run_predict (cmd_predict.cpp)
// drive them.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/models/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "kiln/train/training_args.h"
#include "train_common.h"

namespace kiln::cli {

// The flags a run was given, by name (TrainingArguments::parse leaves them).
using FlagValues = std::map<std::string, std::string>;

// What a task's steps read once the run's inputs are known.
struct TaskContext {
  const FlagValues& flags;
  const TokenizerBundle& tok;
  int64_t max_len = 0;          // the sequence length
  const data::LabelMap& labels;  // a classification head's label set (empty otherwise)
};

// What --do_predict works with after training.
struct PredictRun {
  train::Trainer& trainer;
  models::PreTrainedModel& model;
  std::shared_ptr<const data::Features> test;
  const train::TrainingArguments& args;
  std::filesystem::path out;  // output_dir
};

class Flags;

// kiln predict: a saved model of the task, and the command's flags (--test_file, --output, the task's own).
struct PredictionRequest {
  const Flags& flags;
  models::PreTrainedModel& model;
  std::filesystem::path model_dir;
  std::filesystem::path adapter;  // empty without --adapter
};

// What kiln predict writes: one JSON object per input row (per question for question answering), and what its
// summary line calls them.
struct PredictionLines {
  std::vector<nlohmann::ordered_json> lines;
  const char* noun = "rows";
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual train::Task trainer_task() const = 0;
  // The task's own flags in kiln's common spellings (seq2seq's source and target columns).
  virtual void adapt_flags(FlagValues& f) const {}
  // Whether its files are rows read by data::load_dataset (sft reads its own).
  virtual bool reads_rows() const { return true; }
  // The dataset options of the task's files, from the common ones.
  virtual void dataset_options(const FlagValues& f, data::DatasetOptions& o) const {}
  // The sequence length: --max_seq_length (or the task's own flag) fitted to the model's positions (errors
  // name `command`).
  virtual int64_t max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const;
  // Checks that the rows of `file` have what the task learns or scores (`use`: "train on", "evaluate against").
  virtual void require_labels(const std::string& file, const data::Dataset& ds, const data::DatasetOptions& o,
                              const char* use) const {}
  // Checks the training set (require_labels); a classification head's label set.
  virtual data::LabelMap read_labels(const FlagValues& f, const data::Dataset& train,
                                     const data::DatasetOptions& o) const {
    require_labels(f.at("train_file"), train, o, "train on");
    return {};
  }
  // kiln eval: what a trained model keeps for its task (seq2seq's source prefix) as flags, unless given.
  virtual void saved_flags(FlagValues& f, const models::PretrainedConfig& c) const {}
  // Whether the model has a classification head sized by the label set.
  virtual bool classification_head() const { return false; }
  // The architecture the task trains for a model of config `c` (an error naming what it needs otherwise).
  virtual std::string architecture(const models::PretrainedConfig& c) const = 0;
  // What the task writes into the model's config (label names, a source prefix).
  virtual void finish_model(models::PreTrainedModel& model, const TaskContext& ctx) const {}
  // The tokenized rows of a dataset.
  virtual std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const = 0;
  // The training and evaluation rows, --max_train_samples / --max_eval_samples applied as HF's scripts apply
  // them. `ds` may take the name of the file the rows came from.
  virtual std::shared_ptr<data::Features> train_features(const data::Dataset& ds, const TaskContext& ctx) const;
  virtual std::shared_ptr<data::Features> eval_features(data::Dataset& ds, const TaskContext& ctx) const;
  virtual void collator(data::CollatorOptions& co, const TaskContext& ctx) const {}
  // --do_predict: whether the task has a prediction step, whether the test file's labels are read, its rows,
  // and what it writes after training (metrics into `predict` and `all`).
  virtual bool predicts() const { return false; }
  virtual bool reads_test_labels() const { return true; }
  virtual std::shared_ptr<data::Features> test_features(const data::Dataset& ds, const TaskContext& ctx) const;
  virtual void predict(const PredictRun& run, const TaskContext& ctx, nlohmann::json& predict,
                       nlohmann::json& all) const {}
  // Whether --predict_with_generate applies, and what it adds to each of `trainer`'s evaluations of `model`.
  virtual bool generates() const { return false; }
  virtual void add_eval_metrics(train::Trainer& trainer, models::PreTrainedModel& model, const TaskContext& ctx) const {}
  // kiln predict: the lines for the request's --test_file rows (an error for a task without them: the language
  // models').
  virtual PredictionLines prediction_lines(const PredictionRequest& r) const;
};

// The task an architecture's head was trained for ("" for none kiln knows).
std::string task_of_architecture(const std::string& arch);

// The task of --task `name` (text-classification, token-classification, question-answering, multiple-choice,
// masked-lm, causal-lm, seq2seq, sft); an error listing them for another name.
std::unique_ptr<TrainTask> make_train_task(const std::string& name);

std::unique_ptr<TrainTask> text_classification_task();
std::unique_ptr<TrainTask> token_classification_task();
std::unique_ptr<TrainTask> question_answering_task();
std::unique_ptr<TrainTask> multiple_choice_task();
std::unique_ptr<TrainTask> masked_lm_task();
std::unique_ptr<TrainTask> causal_lm_task();
std::unique_ptr<TrainTask> sft_task();
std::unique_ptr<TrainTask> seq2seq_task();

// kiln predict's steps, shared by the tasks (task_prediction.cpp).
// The error for a model kiln predict has no lines for.
[[noreturn]] void cannot_predict(const std::string& architecture);
// The tokenizer beside the model (or its adapter).
TokenizerBundle prediction_tokenizer(const PredictionRequest& r);
// The --test_file options every task starts from: --text_column and --text_pair_column, no labels.
data::DatasetOptions prediction_options(const Flags& flags);
// --max_seq_length (at least 3) fitted to the model's positions, `fallback` when absent.
int64_t prediction_length(const PredictionRequest& r, int64_t fallback);
// --doc_stride, --max_answer_length and --version_2_with_negative are question answering's: named, not used.
void warn_question_answering_flags(const Flags& flags);
// Trainer.predict over `feats` (--per_device_eval_batch_size, --bf16), padded with the model's pad id.
train::Predictions trainer_predictions(const PredictionRequest& r, const TokenizerBundle& tok,
                                       const data::Features& feats, train::Task task, int64_t max_len);
// A classifier's name for label `id` (id2label), its number without one.
std::string label_name(const models::PretrainedConfig& config, int64_t id);
// A classifier's line per row: {"label": name, "score": probability}, with `names` null the label's index (a
// multiple-choice model's ending); a regression head's {"score": value}.
PredictionLines choice_lines(const train::Predictions& p, const models::PretrainedConfig* names);
// The lines into `path` (JSONL, written atomically), and kiln predict's summary line.
void write_prediction_lines(const std::string& path, const PredictionLines& p);

// kiln train's flag readers, shared by the tasks and kiln eval.
// A numeric flag checked against its smallest value (`fallback` when absent).
int64_t int_flag(const FlagValues& f, const char* name, int64_t fallback);
// Every numeric flag checked, before any data is read.
void check_integer_flags(const FlagValues& f);
// A switch that is on: "--pad_to_max_length" or "--pad_to_max_length true", not "... false".
bool switch_on(const FlagValues& f, const char* name);
// --max_seq_length when given.
std::optional<int64_t> max_seq_length_flag(const FlagValues& f);
// run_ner's and run_swag's sequence length without --max_seq_length: the
// tokenizer's model_max_length (its tokenizer_config.json, in
// --tokenizer_name or the model's directory), at most `cap` (run_swag's
// 1024); without one, `cap`. sequence_length() then keeps it within the
// model's positions.
int64_t tokenizer_max_length(const FlagValues& f, int64_t cap);
// The same for a tokenizer already loaded (kiln predict).
int64_t tokenizer_max_length(const TokenizerBundle& tok, int64_t cap);
constexpr int64_t kNoLengthLimit = int64_t{1} << 40;
// run_qa's and run_swag's sequence length: --max_seq_length, or `fallback`,
// at most the tokenizer's model_max_length (a given length above it is a
// warning, as the scripts warn), then within the model's positions.
int64_t tokenizer_capped_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command,
                                int64_t fallback);
// --max_*_samples: the first N rows after preprocessing (blocks for language models), as HF's scripts select them.
std::shared_ptr<data::Features> at_most(std::shared_ptr<data::Features> rows, const FlagValues& f, const char* flag);
// run_qa selects N examples first (then, for training, N of their windows).
data::Dataset first_examples(data::Dataset ds, const FlagValues& f, const char* flag);
// run_qa's question, context and answers columns; its post-processing flags; --doc_stride.
void qa_columns(const FlagValues& f, data::DatasetOptions& o);
train::QaOptions qa_options(const FlagValues& f, const char* command);
int64_t doc_stride(const FlagValues& f, int64_t max_len);
// run_ner's, run_qa's and run_swag's heads are the BERT family's: <Type><head>, an error for another model.
std::string bert_family_architecture(const models::PretrainedConfig& c, const std::string& task, const char* head);

}  // namespace kiln::cli
