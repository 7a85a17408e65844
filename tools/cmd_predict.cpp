// kiln predict --model DIR --input FILE --output FILE.jsonl [--max_seq_length N] [--text_column C]
// One JSON line per input row: {"label": "positive", "score": 0.98} (regression: {"score": x}).
#include <cstdio>
#include <fstream>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "train_common.h"

namespace {

using namespace kiln;
constexpr const char* kUsage =
    "usage: kiln predict --model DIR --input FILE --output FILE.jsonl [--max_seq_length N] [--text_column C] "
    "[--text_pair_column C] [--batch_size N] [--bf16]";

int run_predict(const std::vector<std::string>& args) {
  cli::Flags flags("predict",
                   {{"model", true, true}, {"input", true, true}, {"output", true, true}, {"max_seq_length"},
                    {"text_column"}, {"text_pair_column"}, {"batch_size"}, {"bf16", false}},
                   kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::filesystem::path dir = flags.get("model");
  auto model = models::from_pretrained(dir, {});
  KILN_CHECK(model->architecture().find("SequenceClassification") != std::string::npos, "predict: ",
             model->architecture(), " is not a sequence classification model");
  cli::TokenizerBundle tok = cli::load_tokenizer(dir);
  data::DatasetOptions dopt;
  dopt.text_column = flags.get("text_column");
  dopt.text_pair_column = flags.get("text_pair_column");
  dopt.label_column = "";  // predictions need no labels
  data::Dataset ds = data::load_dataset(flags.get("input"), dopt);
  const int64_t max_len = cli::sequence_length(
      flags.has("max_seq_length") ? std::optional(flags.integer("max_seq_length", 128, 3)) : std::nullopt,
      model->config(), "predict");
  data::Features feats = data::tokenize_dataset(ds, tok.tokenizer, max_len, nullptr);

  train::TrainingArguments ta;
  ta.output_dir = dir.string();
  ta.per_device_eval_batch_size = flags.integer("batch_size", 32, 1);
  ta.bf16 = flags.has("bf16");  // products in bf16, as Trainer.predict under HF's --bf16
  data::CollatorOptions co;
  co.pad_token_id = tok.pad_id;
  co.max_length = max_len;
  train::Trainer trainer(*model, ta, train::Task::TextClassification, nullptr, nullptr, co);
  train::Predictions p = trainer.predict(feats);

  std::string out;
  for (size_t i = 0; i < feats.size(); ++i) {
    nlohmann::json line;
    if (!p.values.empty()) {
      line["score"] = p.values[i];
    } else {
      int64_t id = p.labels[i];
      auto it = model->config().id2label.find(id);
      line["label"] = it != model->config().id2label.end() ? it->second : std::to_string(id);
      line["score"] = p.probabilities[i][id];
    }
    out += line.dump() + "\n";
  }
  io::write_file_atomic(flags.get("output"), out);
  std::fprintf(stderr, "kiln predict: %zu rows -> %s\n", feats.size(), flags.get("output").c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(predict, "predict labels for a file of texts with a trained classifier", run_predict);
