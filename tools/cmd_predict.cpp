// kiln predict --model_name_or_path DIR --test_file FILE --output FILE.jsonl [--max_seq_length N] [--text_column C]
// (--model, --input and --batch_size are kiln's short names for them)
// One JSON line per input row: {"label": "positive", "score": 0.98} (regression: {"score": x}); a token
// classifier gives {"words": [...], "tags": [...]}, one tag per word; a question-answering model
// {"id": ..., "answer": "...", "start": c, "end": c, "score": p} (characters of the context); a
// multiple-choice model {"label": k, "score": p}, the chosen ending's index.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "command.h"
#include "flags.h"
#include "generation_flags.h"
#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"
#include "kiln/io/compressed.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "lora_flags.h"
#include "train_common.h"

namespace {

using namespace kiln;
constexpr const char* kUsage =
    "usage: kiln predict --model_name_or_path DIR --test_file FILE --output FILE.jsonl [--max_seq_length N] "
    "[--text_column C] [--text_pair_column C] [--per_device_eval_batch_size N] [--bf16] [--doc_stride N] [--max_answer_length N] "
    "[--version_2_with_negative] [--adapter LORA_DIR]\n"
    "A sequence classifier reads CSV/TSV/JSON rows or text lines; a token classifier reads JSON rows with a list "
    "of words (--text_column, default 'tokens') or text lines split at whitespace; a question-answering model "
    "reads JSON rows with a question and a context (--text_column, default 'question'; --text_pair_column, "
    "default 'context'); a multiple-choice model reads run_swag's rows (sent1, sent2, ending0, ending1, ...).\n"
    "A seq2seq model (T5) generates from each row's source (text lines, or --text_column, default 'source'; "
    "--predict_with_generate is implied) with [--max_new_tokens N (--generation_max_length), default 128] "
    "[--num_beams N (--generation_num_beams)] [--length_penalty L] [--early_stopping true|false|never] "
    "[--num_return_sequences R] [--source_prefix P]: {\"generated_text\": ...} per row.";

// A seq2seq model (T5): each row's source (a text line, or --text_column, default "source") with the source
// prefix, generated from as Seq2SeqTrainer.predict(predict_with_generate=True) does; one JSON line per row,
// {"generated_text": best} (and "candidates", best first, with --num_return_sequences > 1).
int predict_seq2seq(const cli::Flags& flags, models::PreTrainedModel& model, const std::filesystem::path& dir) {
  cli::TokenizerBundle tok = cli::load_tokenizer(cli::tokenizer_dir_for(dir, flags.get("adapter")));
  data::DatasetOptions dopt;
  dopt.text_column = flags.get("text_column", "source");
  dopt.label_column = "";
  const data::Dataset ds = data::load_dataset(flags.get("input"), dopt);
  const std::string prefix =
      flags.has("source_prefix") ? flags.get("source_prefix") : cli::saved_source_prefix(model.config());
  const auto max_len = static_cast<size_t>(flags.integer("max_seq_length", 1024, 2));  // run_summarization's default
  std::vector<std::vector<int64_t>> sources;
  for (const auto& row : ds.rows) {
    auto e = tok.tokenizer.encode(prefix + row.text, /*add_special_tokens=*/true);
    std::vector<int64_t> ids(e.ids.begin(), e.ids.end());
    if (ids.size() > max_len) {  // truncated as HF's tokenizer does: the closing </s> stays
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(max_len) - 1, ids.end() - 1);
    }
    sources.push_back(std::move(ids));
  }
  models::GenerationConfig g;
  models::apply_generation_config(dir, g);
  cli::read_beam_flags(flags, g, "predict");
  g.max_new_tokens = flags.integer("max_new_tokens", 128, 1);  // run_summarization's max_target_length
  g.max_length.reset();
  const auto batch = static_cast<size_t>(flags.integer("batch_size", 32, 1));
  const auto R = static_cast<size_t>(std::max<int64_t>(g.num_return_sequences, 1));
  std::string out;
  for (size_t i = 0; i < sources.size(); i += batch) {
    std::vector<std::vector<int64_t>> chunk(sources.begin() + static_cast<std::ptrdiff_t>(i),
                                            sources.begin() + static_cast<std::ptrdiff_t>(std::min(sources.size(), i + batch)));
    const auto seqs = models::generate(model, chunk, g);
    for (size_t r = 0; r < seqs.size(); r += R) {
      nlohmann::ordered_json line;
      nlohmann::json candidates = nlohmann::json::array();
      for (size_t k = r; k < r + R; ++k)
        candidates.push_back(tok.tokenizer.decode(std::vector<uint32_t>(seqs[k].begin(), seqs[k].end()), true));
      line["generated_text"] = candidates[0];
      if (R > 1) line["candidates"] = candidates;
      out += line.dump() + "\n";
    }
  }
  write_file_atomic(flags.get("output"), out);
  std::fprintf(stderr, "kiln predict: %zu generated rows -> %s\n", sources.size(), flags.get("output").c_str());
  return 0;
}

int run_predict(const std::vector<std::string>& args) {
  std::vector<cli::FlagSpec> specs = {
      {"model_name_or_path", true, true}, {"test_file", true, true, "input"}, {"output", true, true},
      {"max_seq_length"}, {"text_column"}, {"text_pair_column"}, {"per_device_eval_batch_size"}, {"bf16", false},
      {"doc_stride"}, {"max_answer_length"}, {"version_2_with_negative", false}, {"adapter"},
      {"predict_with_generate", false}, {"max_new_tokens", true, false, "generation_max_length"}, {"source_prefix"}};
  for (auto& s : cli::beam_flag_specs()) specs.push_back(std::move(s));
  cli::Flags flags("predict", std::move(specs), kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::filesystem::path dir = flags.get("model");
  models::LoadOptions load;
  load.keep_bf16 = flags.has("bf16");  // nothing trains: a bf16 checkpoint stays bf16
  auto model = models::from_pretrained_with_adapter(dir, flags.get("adapter"), load);
  const bool tokens = model->architecture().ends_with("ForTokenClassification");
  const bool qa = model->architecture().ends_with("ForQuestionAnswering");
  const bool mc = model->architecture().ends_with("ForMultipleChoice");
  if (model->architecture() == "T5ForConditionalGeneration") return predict_seq2seq(flags, *model, dir);
  if (flags.has("predict_with_generate"))
    std::fprintf(stderr, "kiln predict: warning: --predict_with_generate is for seq2seq models (T5); ignored\n");
  KILN_CHECK(tokens || qa || mc || model->architecture().find("SequenceClassification") != std::string::npos,
             "predict: ", model->architecture(), " is not a sequence classification, token classification, ",
             "question-answering or multiple-choice model");
  for (const char* name : {"doc_stride", "max_answer_length", "version_2_with_negative"})
    if (!qa && flags.has(name))
      std::fprintf(stderr, "kiln predict: warning: --%s is for question-answering models; ignored\n", name);
  cli::TokenizerBundle tok = cli::load_tokenizer(cli::tokenizer_dir_for(dir, flags.get("adapter")));
  data::DatasetOptions dopt;
  dopt.text_column = flags.get("text_column");
  dopt.text_pair_column = flags.get("text_pair_column");
  dopt.label_column = "";  // predictions need no labels
  // A token classifier reads JSON rows of words, or text lines split at whitespace.
  const bool text_lines = io::without_compression(flags.get("input")).extension() == ".txt";
  dopt.split_into_words = tokens && !text_lines;
  dopt.question_answering = qa;
  dopt.multiple_choice = mc;
  data::Dataset ds = data::load_dataset(flags.get("input"), dopt);
  if (tokens && text_lines)
    for (auto& row : ds.rows) {
      std::istringstream words(row.text);
      for (std::string w; words >> w;) row.words.push_back(w);
    }
  const int64_t max_len = cli::sequence_length(
      flags.has("max_seq_length") ? std::optional(flags.integer("max_seq_length", 128, 3)) : std::nullopt,
      model->config(), "predict", qa ? cli::kQaMaxSeqLength : 128);
  data::Features feats =
      qa ? data::tokenize_qa(std::make_shared<const data::Dataset>(ds), tok.tokenizer, max_len,
                             flags.integer("doc_stride", cli::default_doc_stride(max_len), 0))
      : mc     ? data::tokenize_choices(ds, tok.tokenizer, max_len)
      : tokens ? data::tokenize_words(ds, tok.tokenizer, max_len, nullptr, false)
               : data::tokenize_dataset(ds, tok.tokenizer, max_len, nullptr);

  train::TrainingArguments ta;
  ta.output_dir = dir.string();
  ta.per_device_eval_batch_size = flags.integer("batch_size", 32, 1);
  ta.bf16 = flags.has("bf16");  // products in bf16, as Trainer.predict under HF's --bf16
  data::CollatorOptions co;
  co.pad_token_id = cli::padding_id(tok, model->config());
  co.max_length = max_len;
  train::Trainer trainer(*model, ta,
                         qa       ? train::Task::QuestionAnswering
                         : mc     ? train::Task::MultipleChoice
                         : tokens ? train::Task::TokenClassification
                                  : train::Task::TextClassification,
                         nullptr, nullptr, co);
  train::Predictions p = trainer.predict(feats);
  if (qa) {  // each question's best span over its context's windows (run_qa's post-processing)
    train::QaOptions qo;
    qo.max_answer_length = flags.integer("max_answer_length", 30, 1);
    qo.version_2_with_negative = flags.has("version_2_with_negative");
    const train::QaPredictions answers = train::postprocess_qa_predictions(feats, p.start_logits, p.end_logits, qo);
    std::string out;
    for (size_t e = 0; e < answers.ids.size(); ++e) {
      // The answer's own candidate (the null answer is "" at (0, 0) with the null score's probability).
      nlohmann::ordered_json line = {{"id", answers.ids[e]}, {"answer", answers.answers[e]}};
      if (const int64_t k = answers.chosen[e]; k >= 0) {
        const train::QaCandidate& c = answers.nbest[e][static_cast<size_t>(k)];
        line["start"] = c.offsets.first;
        line["end"] = c.offsets.second;
        line["score"] = c.probability;
      }
      out += line.dump() + "\n";
    }
    write_file_atomic(flags.get("output"), out);
    std::fprintf(stderr, "kiln predict: %zu answers -> %s\n", answers.ids.size(), flags.get("output").c_str());
    return 0;
  }
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
    write_file_atomic(flags.get("output"), out);
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
      if (mc) line["label"] = id;  // the ending's index
      else line["label"] = label_name(id);
      line["score"] = p.probabilities[i][id];
    }
    out += line.dump() + "\n";
  }
  write_file_atomic(flags.get("output"), out);
  std::fprintf(stderr, "kiln predict: %zu rows -> %s\n", feats.size(), flags.get("output").c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(predict, "predict labels, tags or answers for a file of texts with a trained model", run_predict);
