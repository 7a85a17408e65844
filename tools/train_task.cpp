#include "train_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::cli {

namespace {

// kiln train's own numeric flags: the smallest value each takes.
const std::map<std::string, int64_t> kIntegerFlags = {
    {"max_seq_length", 3},    {"pad_to_multiple_of", 0}, {"max_source_length", 1},   {"max_target_length", 1},
    {"max_train_samples", 1}, {"max_eval_samples", 1},   {"max_predict_samples", 1}, {"validation_split_percentage", 1},
    {"doc_stride", 0},        {"n_best_size", 1},        {"max_answer_length", 1},   {"block_size", 3}};

}  // namespace

int64_t int_flag(const FlagValues& f, const char* name, int64_t fallback) {
  auto it = f.find(name);
  return it == f.end() ? fallback : integer_value("train", name, it->second, kIntegerFlags.at(name));
}

void check_integer_flags(const FlagValues& f) {
  for (const auto& [name, min] : kIntegerFlags) int_flag(f, name.c_str(), 0);
}

bool switch_on(const FlagValues& f, const char* name) {
  auto it = f.find(name);
  return it != f.end() && it->second == "true";
}

std::optional<int64_t> max_seq_length_flag(const FlagValues& f) {
  if (!f.count("max_seq_length")) return std::nullopt;
  return int_flag(f, "max_seq_length", 128);
}

int64_t tokenizer_max_length(const FlagValues& f, int64_t cap) {
  const auto dir = f.count("tokenizer_name") ? f.at("tokenizer_name") : f.count("model_name_or_path") ? f.at("model_name_or_path") : "";
  const std::filesystem::path file = std::filesystem::path(dir) / "tokenizer_config.json";
  if (dir.empty() || !std::filesystem::exists(file)) return cap;
  const nlohmann::json& length = read_json_file(file).value("model_max_length", nlohmann::json());
  // transformers' "no limit" is a huge number (int(1e30)), written as a float.
  if (!length.is_number() || length.get<double>() <= 0 || length.get<double>() >= static_cast<double>(cap)) return cap;
  return static_cast<int64_t>(length.get<double>());
}

int64_t tokenizer_capped_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command,
                                int64_t fallback) {
  const int64_t limit = tokenizer_max_length(f, kNoLengthLimit);
  std::optional<int64_t> asked = max_seq_length_flag(f);
  if (asked && *asked > limit) {
    std::fprintf(stderr,
                 "kiln %s: warning: --max_seq_length %lld is larger than the tokenizer's model_max_length %lld; "
                 "using %lld\n",
                 command, static_cast<long long>(*asked), static_cast<long long>(limit), static_cast<long long>(limit));
    asked = limit;
  }
  return sequence_length(asked, config, command, std::min(fallback, limit));
}

int64_t tokenizer_max_length(const TokenizerBundle& tok, int64_t cap) {
  const std::optional<size_t> length = tok.tokenizer.model_max_length;
  return length && static_cast<int64_t>(*length) < cap ? static_cast<int64_t>(*length) : cap;
}

std::shared_ptr<data::Features> at_most(std::shared_ptr<data::Features> rows, const FlagValues& f, const char* flag) {
  if (f.count(flag)) rows = std::make_shared<data::Features>(rows->head(static_cast<size_t>(int_flag(f, flag, 0))));
  return rows;
}

// Each evaluated example keeps all its windows here, where run_qa's second
// cut can leave the last examples without any.
data::Dataset first_examples(data::Dataset ds, const FlagValues& f, const char* flag) {
  if (f.count(flag)) ds.rows.resize(std::min(ds.rows.size(), static_cast<size_t>(int_flag(f, flag, 0))));
  return ds;
}

// run_qa's "question", "context" and "answers" unless named.
void qa_columns(const FlagValues& f, data::DatasetOptions& o) {
  o.question_answering = true;
  auto get = [&](const char* name, const std::string& fallback) {
    auto it = f.find(name);
    return it == f.end() ? fallback : it->second;
  };
  o.text_column = get("question_column", "");
  o.text_pair_column = get("context_column", "");
  o.label_column = get("answer_column", "answers");
}

train::QaOptions qa_options(const FlagValues& f, const char* command) {
  train::QaOptions o;
  if (f.count("n_best_size")) o.n_best_size = integer_value(command, "n_best_size", f.at("n_best_size"), 1);
  if (f.count("max_answer_length"))
    o.max_answer_length = integer_value(command, "max_answer_length", f.at("max_answer_length"), 1);
  o.version_2_with_negative = switch_on(f, "version_2_with_negative");
  if (f.count("null_score_diff_threshold"))
    o.null_score_diff_threshold = number_value(command, "null_score_diff_threshold", f.at("null_score_diff_threshold"));
  return o;
}

// --doc_stride, or run_qa's default for the sequence length.
int64_t doc_stride(const FlagValues& f, int64_t max_len) { return int_flag(f, "doc_stride", default_doc_stride(max_len)); }

std::string bert_family_architecture(const models::PretrainedConfig& c, const std::string& task, const char* head) {
  KILN_CHECK(c.model_type == "bert" || c.model_type == "roberta" || c.model_type == "distilbert", task,
             ": kiln trains Bert", head, ", Roberta", head, " and DistilBert", head, ", got model_type '", c.model_type,
             "'");
  return c.class_prefix() + head;
}

int64_t TrainTask::max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const {
  return sequence_length(max_seq_length_flag(f), config, command, 128);
}

std::shared_ptr<data::Features> TrainTask::train_features(const data::Dataset& ds, const TaskContext& ctx) const {
  return at_most(features(ds, ctx), ctx.flags, "max_train_samples");
}

std::shared_ptr<data::Features> TrainTask::eval_features(data::Dataset& ds, const TaskContext& ctx) const {
  return at_most(features(ds, ctx), ctx.flags, "max_eval_samples");
}

std::shared_ptr<data::Features> TrainTask::test_features(const data::Dataset& ds, const TaskContext& ctx) const {
  return at_most(features(ds, ctx), ctx.flags, "max_predict_samples");
}

std::string task_of_architecture(const std::string& arch) {
  const auto ends = [&](const char* s) { return arch.ends_with(s); };
  return ends("ForSequenceClassification")      ? "text-classification"
         : ends("ForTokenClassification")       ? "token-classification"
         : ends("ForQuestionAnswering")         ? "question-answering"
         : ends("ForMultipleChoice")            ? "multiple-choice"
         : ends("ForMaskedLM")                  ? "masked-lm"
         : ends("ForCausalLM")                  ? "causal-lm"
         : arch == "GPT2LMHeadModel"            ? "causal-lm"
         : arch == "T5ForConditionalGeneration" ? "seq2seq"
                                                : "";
}

std::unique_ptr<TrainTask> make_train_task(const std::string& name) {
  using Make = std::unique_ptr<TrainTask> (*)();
  static const std::pair<const char*, Make> kTasks[] = {
      {"text-classification", text_classification_task}, {"token-classification", token_classification_task},
      {"question-answering", question_answering_task},   {"multiple-choice", multiple_choice_task},
      {"masked-lm", masked_lm_task},                     {"causal-lm", causal_lm_task},
      {"seq2seq", seq2seq_task},                         {"sft", sft_task}};
  for (const auto& [task, make] : kTasks)
    if (name == task) return make();
  throw Error("train: --task must be text-classification, token-classification, question-answering, "
              "multiple-choice, masked-lm, causal-lm, seq2seq or sft, got '" + name + "'");
}

}  // namespace kiln::cli
