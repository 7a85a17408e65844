// kiln predict's steps that the tasks share: the tokenizer, the test rows' options, the sequence length, the
// Trainer's predictions, and the JSON lines written in one place.
#include <cstdio>

#include "flags.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "lora_flags.h"
#include "train_task.h"

namespace kiln::cli {

void cannot_predict(const std::string& architecture) {
  throw Error("predict: " + architecture +
              " is not a sequence classification, token classification, question-answering or multiple-choice model");
}

PredictionLines TrainTask::prediction_lines(const PredictionRequest& r) const { cannot_predict(r.model.architecture()); }

TokenizerBundle prediction_tokenizer(const PredictionRequest& r) {
  return load_tokenizer(tokenizer_dir_for(r.model_dir, r.adapter));
}

data::DatasetOptions prediction_options(const Flags& flags) {
  data::DatasetOptions o;
  o.text_column = flags.get("text_column");
  o.text_pair_column = flags.get("text_pair_column");
  o.label_column = "";  // predictions need no labels
  return o;
}

int64_t prediction_length(const PredictionRequest& r, int64_t fallback) {
  const Flags& f = r.flags;
  return sequence_length(f.has("max_seq_length") ? std::optional(f.integer("max_seq_length", 128, 3)) : std::nullopt,
                         r.model.config(), "predict", fallback);
}

void warn_question_answering_flags(const Flags& flags) {
  for (const char* name : {"doc_stride", "max_answer_length", "version_2_with_negative"})
    if (flags.has(name))
      std::fprintf(stderr, "kiln predict: warning: --%s is for question-answering models; ignored\n", name);
}

train::Predictions trainer_predictions(const PredictionRequest& r, const TokenizerBundle& tok,
                                       const data::Features& feats, train::Task task, int64_t max_len) {
  train::TrainingArguments ta;
  ta.output_dir = r.model_dir.string();
  ta.per_device_eval_batch_size = r.flags.integer("batch_size", 32, 1);
  ta.bf16 = r.flags.has("bf16");  // products in bf16, as Trainer.predict under HF's --bf16
  data::CollatorOptions co;
  co.pad_token_id = padding_id(tok, r.model.config());
  co.max_length = max_len;
  train::Trainer trainer(r.model, ta, task, nullptr, nullptr, co);
  return trainer.predict(feats);
}

std::string label_name(const models::PretrainedConfig& config, int64_t id) {
  auto it = config.id2label.find(id);
  return it != config.id2label.end() ? it->second : std::to_string(id);
}

PredictionLines choice_lines(const train::Predictions& p, const models::PretrainedConfig* names) {
  PredictionLines out;
  const size_t rows = p.values.empty() ? p.labels.size() : p.values.size();
  for (size_t i = 0; i < rows; ++i) {
    nlohmann::ordered_json line;
    if (!p.values.empty()) {
      line["score"] = p.values[i];
    } else {
      const int64_t id = p.labels[i];
      if (names) line["label"] = label_name(*names, id);
      else line["label"] = id;
      line["score"] = p.probabilities[i][static_cast<size_t>(id)];
    }
    out.lines.push_back(std::move(line));
  }
  return out;
}

void write_prediction_lines(const std::string& path, const PredictionLines& p) {
  std::string out;
  for (const auto& line : p.lines) out += line.dump() + "\n";
  write_file_atomic(path, out);
  std::fprintf(stderr, "kiln predict: %zu %s -> %s\n", p.lines.size(), p.noun, path.c_str());
}

}  // namespace kiln::cli
