// kiln predict --model DIR --input FILE --output FILE.jsonl [--max_seq_length N] [--text_column C]
// One JSON line per input row: {"label": "positive", "score": 0.98} (regression: {"score": x}); a token
// classifier gives {"words": [...], "tags": [...]}, one tag per word.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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
    "[--text_pair_column C] [--batch_size N] [--bf16]\n"
    "A sequence classifier reads CSV/TSV/JSON rows or text lines; a token classifier reads JSON rows with a list "
    "of words (--text_column, default 'tokens') or text lines split at whitespace.";

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
  const bool tokens = model->architecture().ends_with("ForTokenClassification");
  KILN_CHECK(tokens || model->architecture().find("SequenceClassification") != std::string::npos, "predict: ",
             model->architecture(), " is not a sequence or token classification model");
  cli::TokenizerBundle tok = cli::load_tokenizer(dir);
  data::DatasetOptions dopt;
  dopt.text_column = flags.get("text_column");
  dopt.text_pair_column = flags.get("text_pair_column");
  dopt.label_column = "";  // predictions need no labels
  // A token classifier reads JSON rows of words, or text lines split at whitespace.
  const bool text_lines = std::filesystem::path(flags.get("input")).extension() == ".txt";
  dopt.split_into_words = tokens && !text_lines;
  data::Dataset ds = data::load_dataset(flags.get("input"), dopt);
  if (tokens && text_lines)
    for (auto& row : ds.rows) {
      std::istringstream words(row.text);
      for (std::string w; words >> w;) row.words.push_back(w);
    }
  const int64_t max_len = cli::sequence_length(
      flags.has("max_seq_length") ? std::optional(flags.integer("max_seq_length", 128, 3)) : std::nullopt,
      model->config(), "predict");
  data::Features feats = tokens ? data::tokenize_words(ds, tok.tokenizer, max_len, nullptr, false)
                                : data::tokenize_dataset(ds, tok.tokenizer, max_len, nullptr);

  train::TrainingArguments ta;
  ta.output_dir = dir.string();
  ta.per_device_eval_batch_size = flags.integer("batch_size", 32, 1);
  ta.bf16 = flags.has("bf16");  // products in bf16, as Trainer.predict under HF's --bf16
  data::CollatorOptions co;
  co.pad_token_id = tok.pad_id;
  co.max_length = max_len;
  train::Trainer trainer(*model, ta, tokens ? train::Task::TokenClassification : train::Task::TextClassification,
                         nullptr, nullptr, co);
  train::Predictions p = trainer.predict(feats);
  auto label_name = [&](int64_t id) {
    auto it = model->config().id2label.find(id);
    return it != model->config().id2label.end() ? it->second : std::to_string(id);
  };
  if (tokens) {  // each word's tag: its first token's prediction (words cut by --max_seq_length get none)
    std::string out;
    for (size_t r = 0; r < feats.size(); ++r) {
      nlohmann::json tags = nlohmann::json::array();
      for (int64_t tag : data::per_word(p.token_labels[r], feats.word_ids[r])) tags.push_back(label_name(tag));
      out += nlohmann::json{{"words", ds.rows[r].words}, {"tags", tags}}.dump() + "\n";
    }
    io::write_file_atomic(flags.get("output"), out);
    std::fprintf(stderr, "kiln predict: %zu rows -> %s\n", feats.size(), flags.get("output").c_str());
    return 0;
  }

  std::string out;
  for (size_t i = 0; i < feats.size(); ++i) {
    nlohmann::json line;
    if (!p.values.empty()) {
      line["score"] = p.values[i];
    } else {
      int64_t id = p.labels[i];
      line["label"] = label_name(id);
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
