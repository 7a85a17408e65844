// --task seq2seq (run_summarization): T5 on source/target text pairs; with
// --do_predict the test loss, and with --predict_with_generate (HF's
// Seq2SeqTrainer) every evaluation also generates: the outputs' ROUGE, BLEU
// and gen_len, and --do_predict's generated_predictions.txt.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "flags.h"
#include "generation_flags.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/error.h"
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "kiln/train/generation_metrics.h"
#include "train_task.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// A decoded text as run_summarization writes and scores it: one line, stripped.
std::string one_line(std::string line) {
  std::replace(line.begin(), line.end(), '\n', ' ');
  const size_t first = line.find_first_not_of(" \t"), last = line.find_last_not_of(" \t");
  return first == std::string::npos ? "" : line.substr(first, last - first + 1);
}

// run_summarization's rounding of its scores: round(v, 4).
double round4(double v) { return std::round(v * 1e4) / 1e4; }

// Each row's output, decoded without special tokens onto one line, and run_summarization's gen_len: the mean
// count of generated ids that are not the tokenizer's pad id.
struct Generated {
  std::vector<std::string> lines;
  double mean_length = 0;
};

// Seq2SeqTrainer's generation_max_length, generate's max_length: for an encoder-decoder it counts the decoder's
// start token, so at most max_length - 1 new tokens (none for max_length 1: the start token alone, decoded as "").
void set_generation_max_length(models::GenerationConfig& g, int64_t max_length) {
  g.max_new_tokens = max_length - 1;
  g.max_length.reset();
}

// generate() over `sources` in batches of `batch`: num_return_sequences sequences per source (source-major), each
// empty when max_new_tokens is 0.
std::vector<std::vector<int64_t>> generate_in_batches(models::PreTrainedModel& model,
                                                      const std::vector<std::vector<int64_t>>& sources,
                                                      const models::GenerationConfig& g, size_t batch) {
  const auto R = static_cast<size_t>(std::max<int64_t>(g.num_return_sequences, 1));
  if (g.max_new_tokens < 1) return std::vector<std::vector<int64_t>>(sources.size() * R);
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < sources.size(); i += batch) {
    const std::vector<std::vector<int64_t>> chunk(sources.begin() + static_cast<std::ptrdiff_t>(i),
                                                  sources.begin() + static_cast<std::ptrdiff_t>(std::min(sources.size(), i + batch)));
    for (auto& seq : models::generate(model, chunk, g)) out.push_back(std::move(seq));
  }
  return out;
}

// Seq2SeqTrainer's generate over `rows`: greedy, or beam search with --generation_num_beams or the model's
// generation_config.json in `model_dir`; generate's max_length is --generation_max_length (else
// `max_target_length`, as run_summarization passes it).
Generated generate_rows(models::PreTrainedModel& model, const data::Features& rows, const train::TrainingArguments& ta,
                        int64_t max_target_length, const TokenizerBundle& tok, const fs::path& model_dir) {
  model.eval();
  models::GenerationConfig g;
  models::apply_generation_config(model_dir, g);  // the model's beam settings, as Seq2SeqTrainer's generate reads them
  set_generation_max_length(g, ta.generation_max_length.value_or(max_target_length));
  if (ta.generation_num_beams) g.num_beams = *ta.generation_num_beams;
  g.num_return_sequences = 1;
  Generated out;
  int64_t tokens = 0;
  for (const auto& seq : generate_in_batches(model, rows.input_ids, g, static_cast<size_t>(ta.per_device_eval_batch_size))) {
    tokens += std::count_if(seq.begin(), seq.end(), [&](int64_t id) { return id != tok.pad_id; });
    out.lines.push_back(one_line(tok.tokenizer.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true)));
  }
  out.mean_length = static_cast<double>(tokens) / static_cast<double>(std::max<size_t>(out.lines.size(), 1));
  return out;
}

// run_summarization's and run_translation's scores of generated text against the rows' targets (decoded as
// HF decodes the labels: without special tokens, stripped): ROUGE-1/2/L/Lsum F-measures x 100 (Porter-stemmed
// tokens), sacrebleu's BLEU and gen_len, each named <prefix>_<metric>.
std::map<std::string, double> score_generated(const Generated& generated, const data::Features& rows,
                                              const TokenizerBundle& tok, const std::string& prefix) {
  std::vector<std::string> refs;
  for (const auto& t : rows.target_ids) {
    std::vector<uint32_t> ids;
    for (int64_t id : t)
      if (id >= 0) ids.push_back(static_cast<uint32_t>(id));
    refs.push_back(one_line(tok.tokenizer.decode(ids, true)));
  }
  const train::RougeScores r = train::rouge(generated.lines, refs, /*use_stemmer=*/true);  // as run_summarization
  return {{prefix + "_rouge1", round4(r.rouge1 * 100)},
          {prefix + "_rouge2", round4(r.rouge2 * 100)},
          {prefix + "_rougeL", round4(r.rougeL * 100)},
          {prefix + "_rougeLsum", round4(r.rougeLsum * 100)},
          {prefix + "_bleu", train::corpus_bleu(generated.lines, {refs})},
          {prefix + "_gen_len", round4(generated.mean_length)}};
}

class Seq2Seq : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::Seq2Seq; }
  // --source_column / --target_column are the text pair of each row.
  void adapt_flags(FlagValues& f) const override {
    f["text_column"] = f.count("source_column") ? f["source_column"] : "source";
    f["text_pair_column"] = f.count("target_column") ? f["target_column"] : "target";
    f["label_column"] = "";
  }
  void saved_flags(FlagValues& f, const models::PretrainedConfig& c) const override {
    if (!f.count("source_prefix")) f["source_prefix"] = saved_source_prefix(c);
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    KILN_CHECK(c.model_type == "t5", "seq2seq: needs a t5 model, got model_type '", c.model_type, "'");
    return "T5ForConditionalGeneration";
  }
  void finish_model(models::PreTrainedModel& model, const TaskContext& ctx) const override {
    save_source_prefix(model.config(), source_prefix(ctx.flags));
  }
  // run_summarization's --pad_to_max_length pads the sources to max_source_length, as it cuts them.
  void collator(data::CollatorOptions& co, const TaskContext& ctx) const override {
    co.max_length = int_flag(ctx.flags, "max_source_length", ctx.max_len);
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_seq2seq(
        ds, ctx.tok.tokenizer, int_flag(ctx.flags, "max_source_length", ctx.max_len),
        int_flag(ctx.flags, "max_target_length", ctx.max_len), source_prefix(ctx.flags)));
  }
  bool predicts() const override { return true; }
  bool generates() const override { return true; }
  // Seq2SeqTrainer under --predict_with_generate: every evaluation (during training, at its end, kiln eval's,
  // --do_predict's) generates from its rows and scores the outputs; the test set's are written, one per line,
  // to generated_predictions.txt in output_dir.
  void add_eval_metrics(train::Trainer& trainer, models::PreTrainedModel& model, const TaskContext& ctx) const override {
    if (!trainer.args().predict_with_generate) return;
    const fs::path model_dir = ctx.flags.count("model_name_or_path") ? ctx.flags.at("model_name_or_path") : "";
    const int64_t max_target_length = int_flag(ctx.flags, "max_target_length", ctx.max_len);
    const TokenizerBundle& tok = ctx.tok;  // the run's, alive as long as the trainer
    trainer.set_extra_metrics([&model, &trainer, &tok, model_dir, max_target_length](const data::Features& rows,
                                                                                      const std::string& prefix) {
      const train::TrainingArguments& ta = trainer.args();
      const Generated generated = generate_rows(model, rows, ta, max_target_length, tok, model_dir);
      if (prefix == "predict") {
        std::string text;
        for (const auto& line : generated.lines) text += line + "\n";
        const fs::path path = fs::path(ta.output_dir) / "generated_predictions.txt";
        write_file_atomic(path, text);
        std::fprintf(stderr, "kiln train: %zu generated predictions -> %s\n", rows.size(), path.string().c_str());
      }
      return score_generated(generated, rows, tok, prefix);
    });
  }
  // run_summarization: the test loss, and with predict_with_generate the outputs' scores (add_eval_metrics).
  void predict(const PredictRun& run, const TaskContext&, nlohmann::json& predict, nlohmann::json& all) const override {
    auto m = run.trainer.evaluate("predict", run.test);
    m.erase("perplexity");
    for (auto& [k, v] : m) predict[k] = all[k] = v;
  }
  // kiln predict: each row's source (a text line, or --text_column, default "source") with the source prefix,
  // generated from as Seq2SeqTrainer.predict(predict_with_generate=True) does; {"generated_text": best} per row
  // (and "candidates", best first, with --num_return_sequences > 1).
  PredictionLines prediction_lines(const PredictionRequest& r) const override {
    const Flags& f = r.flags;
    const TokenizerBundle tok = prediction_tokenizer(r);
    const std::vector<std::vector<int64_t>> sources = prediction_sources(r, tok);
    models::GenerationConfig g;
    models::apply_generation_config(r.model_dir, g);
    read_beam_flags(f, g, "predict");
    attach_stop_strings(g, tok);
    KILN_CHECK(!(f.has("max_new_tokens") && f.has("generation_max_length")),
               "predict: --max_new_tokens N (N new tokens) and --generation_max_length N (N - 1 new tokens: the ",
               "decoder's start token counts) bound the same output; give one");
    if (f.has("generation_max_length")) {
      set_generation_max_length(g, f.integer("generation_max_length", 129, 1));
    } else {
      g.max_new_tokens = f.integer("max_new_tokens", 128, 1);  // run_summarization's max_target_length
      g.max_length.reset();
    }
    const auto batch = static_cast<size_t>(f.integer("batch_size", 32, 1));
    const auto seqs = generate_in_batches(r.model, sources, g, batch);
    const auto R = static_cast<size_t>(std::max<int64_t>(g.num_return_sequences, 1));
    PredictionLines out{{}, "generated rows"};
    for (size_t row = 0; row < seqs.size(); row += R) {
      nlohmann::ordered_json line;
      nlohmann::json candidates = nlohmann::json::array();
      for (size_t k = row; k < row + R; ++k)
        candidates.push_back(tok.tokenizer.decode(std::vector<uint32_t>(seqs[k].begin(), seqs[k].end()), true));
      line["generated_text"] = candidates[0];
      if (R > 1) line["candidates"] = candidates;
      out.lines.push_back(std::move(line));
    }
    return out;
  }

 private:
  // kiln predict's sources: --text_column (default "source") of each row with the source prefix (--source_prefix,
  // else the model's), encoded and cut to --max_seq_length (default 1024, run_summarization's) as HF's tokenizer
  // truncates: the closing </s> stays.
  static std::vector<std::vector<int64_t>> prediction_sources(const PredictionRequest& r, const TokenizerBundle& tok) {
    const Flags& f = r.flags;
    data::DatasetOptions o;
    o.text_column = f.get("text_column", "source");
    o.label_column = "";
    const data::Dataset ds = data::load_dataset(f.get("input"), o);
    const std::string prefix = f.has("source_prefix") ? f.get("source_prefix") : saved_source_prefix(r.model.config());
    const auto max_len = static_cast<size_t>(f.integer("max_seq_length", 1024, 2));
    std::vector<std::vector<int64_t>> sources;
    for (const auto& row : ds.rows) {
      auto e = tok.tokenizer.encode(prefix + row.text, /*add_special_tokens=*/true);
      std::vector<int64_t> ids(e.ids.begin(), e.ids.end());
      if (ids.size() > max_len) ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(max_len) - 1, ids.end() - 1);
      sources.push_back(std::move(ids));
    }
    return sources;
  }

  static std::string source_prefix(const FlagValues& f) { return f.count("source_prefix") ? f.at("source_prefix") : ""; }
};

}  // namespace

std::unique_ptr<TrainTask> seq2seq_task() { return std::make_unique<Seq2Seq>(); }

}  // namespace kiln::cli
