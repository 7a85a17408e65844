// kiln train: fine-tune (or train from scratch) with run_glue / run_ner / run_qa / run_swag / run_mlm /
// run_clm / run_summarization style flags plus the TrainingArguments fields:
//
//   kiln train --model_name_or_path DIR | --config_name PRESET_OR_FILE --tokenizer_name DIR
//              --task text-classification|token-classification|question-answering|multiple-choice|
//                     masked-lm|causal-lm|seq2seq|sft
//              --train_file F [--validation_file F]
//              [--text_column C] [--text_pair_column C] [--label_column C]
//              [--max_seq_length 128] [--pad_to_max_length] [--pad_to_multiple_of N] [--mlm_probability 0.15]
//              --output_dir DIR [TrainingArguments flags...]
//   kiln train --args_file run.json [flags...]   (the same names as JSON; the command line wins)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "flags.h"
#include "hf_output_files.h"
#include "kiln/core/error.h"
#include "kiln/distributed/replica.h"
#include "kiln/core/atomic_file.h"
#include "kiln/io/compressed.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#include "kiln/models/t5.h"
#include "kiln/models/token_ids.h"
#include "kiln/train/generation_metrics.h"
#include "kiln/train/hf_fields.h"
#include "kiln/train/output_dir.h"
#include "kiln/train/stop_signals.h"
#include "kiln/train/trainer.h"
#include "lora_flags.h"
#include "train_common.h"
#include "train_sft.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;

const std::vector<std::string> kBaseFlags = {"model_name_or_path", "config_name", "tokenizer_name", "task",
                                              "train_file", "validation_file", "text_column", "text_pair_column",
                                              "label_column", "max_seq_length", "pad_to_multiple_of",
                                              "mlm_probability", "source_column", "target_column", "source_prefix",
                                              "max_source_length", "max_target_length", "test_file",
                                              "max_train_samples", "max_eval_samples", "max_predict_samples",
                                              "validation_split_percentage", "doc_stride", "n_best_size",
                                              "max_answer_length", "null_score_diff_threshold", "question_column",
                                              "context_column", "answer_column", "block_size", "summary_column",
                                              "train_file_field", "validation_file_field", "test_file_field"};
const std::vector<std::string> kBaseSwitches = {"pad_to_max_length", "ignore_mismatched_sizes", "label_all_tokens",
                                                 "version_2_with_negative", "keep_linebreaks"};
// With --task sft's own (train_sft.h).
const std::vector<std::string> kExtraFlags = [] {
  auto v = kBaseFlags;
  v.insert(v.end(), cli::kSftFlags.begin(), cli::kSftFlags.end());
  return v;
}();
const std::vector<std::string> kExtraSwitches = [] {
  auto v = kBaseSwitches;
  v.insert(v.end(), cli::kSftSwitches.begin(), cli::kSftSwitches.end());
  return v;
}();

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// kiln train's own numeric flags: the smallest value each takes.
const std::map<std::string, int64_t> kIntegerFlags = {
    {"max_seq_length", 3},    {"pad_to_multiple_of", 0}, {"max_source_length", 1},   {"max_target_length", 1},
    {"max_train_samples", 1}, {"max_eval_samples", 1},   {"max_predict_samples", 1}, {"validation_split_percentage", 1},
    {"doc_stride", 0},        {"n_best_size", 1},        {"max_answer_length", 1},   {"block_size", 3}};

int64_t int_flag(const std::map<std::string, std::string>& f, const char* name, int64_t fallback) {
  auto it = f.find(name);
  return it == f.end() ? fallback : cli::integer_value("train", name, it->second, kIntegerFlags.at(name));
}

// A switch (kExtraSwitches) that is on: "--pad_to_max_length" or "--pad_to_max_length true", not "... false".
bool switch_on(const std::map<std::string, std::string>& f, const char* name) {
  auto it = f.find(name);
  return it != f.end() && it->second == "true";
}

// --max_seq_length when given.
std::optional<int64_t> max_seq_length_flag(const std::map<std::string, std::string>& f) {
  if (!f.count("max_seq_length")) return std::nullopt;
  return int_flag(f, "max_seq_length", 128);
}

// Every value checked before any data is read, and a flag the task does not
// use is a warning (kiln train serves run_glue, run_ner, run_mlm, run_clm
// and run_summarization's flags at once, so it is not an error).
void check_task_flags(const std::map<std::string, std::string>& f, const std::string& task) {
  for (const auto& [name, min] : kIntegerFlags) int_flag(f, name.c_str(), 0);
  if (f.count("mlm_probability")) cli::number_value("train", "mlm_probability", f.at("mlm_probability"), 0, 1);
  if (f.count("null_score_diff_threshold"))
    cli::number_value("train", "null_score_diff_threshold", f.at("null_score_diff_threshold"));
  const std::vector<std::pair<std::string, std::vector<std::string>>> only = {
      {"masked-lm", {"mlm_probability"}},
      {"question-answering",
       {"doc_stride", "n_best_size", "max_answer_length", "null_score_diff_threshold", "version_2_with_negative",
        "question_column", "context_column", "answer_column"}},
      {"seq2seq", {"source_column", "target_column", "source_prefix", "max_source_length", "max_target_length"}},
      {"token-classification", {"label_all_tokens"}},
      {"text-classification", {"text_pair_column"}},
      {"sft", {"assistant_only_loss", "completion_only_loss", "packing", "max_length", "dataset_text_field"}}};
  if (task == "question-answering")
    for (const char* name : {"text_column", "text_pair_column"})
      if (f.count(name))
        std::fprintf(stderr, "kiln train: warning: --%s is ignored with --task question-answering, which reads "
                     "--question_column, --context_column and --answer_column\n", name);
  if (task != "text-classification" && task != "token-classification" && task != "multiple-choice" &&
      f.count("label_column"))
    std::fprintf(stderr, "kiln train: warning: --label_column is for classification; ignored with --task %s\n",
                 task.c_str());
  if (task == "seq2seq")
    for (const char* name : {"text_column", "text_pair_column"})
      if (f.count(name))
        std::fprintf(stderr, "kiln train: warning: --%s is ignored with --task seq2seq, which reads "
                     "--source_column and --target_column\n", name);
  for (const auto& [for_task, names] : only) {
    if (for_task == task) continue;
    for (const auto& name : names)
      // run_swag reads the choices' start from the text pair column; seq2seq and run_qa warned above.
      if (f.count(name) &&
          !(name == "text_pair_column" && (task == "multiple-choice" || task == "seq2seq" || task == "question-answering")))
        std::fprintf(stderr, "kiln train: warning: --%s is for --task %s; ignored with --task %s\n", name.c_str(),
                     for_task.c_str(), task.c_str());
  }
}

// The task an architecture's head was trained for ("" for none kiln knows).
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

// kiln train without --task: the task of the model's architecture (config.json's architectures), as kiln eval
// decides it. A pretraining checkpoint (*ForMaskedLM, *ForPreTraining, as bert-base-uncased is saved) is
// fine-tuned for text classification on a table or JSON file (run_glue) and keeps pretraining on a .txt file
// (run_mlm). Nothing to go by: text-classification.
std::string infer_task(const std::map<std::string, std::string>& f) {
  std::unique_ptr<models::PretrainedConfig> c;
  if (f.count("model_name_or_path")) c = models::load_config(fs::path(f.at("model_name_or_path")) / "config.json");
  else if (f.count("config_name") && !(c = models::preset_config(f.at("config_name")))) c = models::load_config(f.at("config_name"));
  const std::string arch = c && !c->architectures.empty() ? c->architectures.front() : "";
  std::string task = task_of_architecture(arch);
  const bool text_file = f.count("train_file") && io::without_compression(f.at("train_file")).extension() == ".txt";
  if (arch.ends_with("ForMaskedLM") || arch.ends_with("ForPreTraining")) task = text_file ? "masked-lm" : "";
  if (task.empty()) task = "text-classification";
  if (task != "text-classification")  // the default needs no word (errors stay one line)
      std::fprintf(stderr, "kiln train: task %s (from the model's %s; --task chooses another)\n", task.c_str(),
                 arch.c_str());
  return task;
}

// HF's example scripts' own spellings of kiln's flags: run_clm's --block_size (--max_seq_length) and
// run_summarization's --text_column / --summary_column (--source_column / --target_column).
void hf_spellings(std::map<std::string, std::string>& f, const std::string& task, const char* command) {
  auto rename = [&](const char* from, const char* to) {
    if (!f.count(from)) return;
    KILN_CHECK(!f.count(to), command, ": --", from, " and --", to, " name the same setting; give one");
    f[to] = f[from];
    f.erase(from);
  };
  rename("block_size", "max_seq_length");
  if (task == "seq2seq") {
    rename("text_column", "source_column");
    rename("summary_column", "target_column");
  } else if (f.count("summary_column")) {
    std::fprintf(stderr, "kiln %s: warning: --summary_column is for --task seq2seq; ignored with --task %s\n",
                 command, task.c_str());
  }
}

// .txt line breaks: --keep_linebreaks, or run_clm's default (kept) for causal-lm; run_mlm's text loader drops them.
bool keep_linebreaks(const std::map<std::string, std::string>& f, const std::string& task) {
  auto it = f.find("keep_linebreaks");
  return it == f.end() ? task == "causal-lm" : it->second == "true";
}

// `kiln train --help` / `kiln eval --help`: the usage, the tasks, kiln's data flags and the TrainingArguments
// fields with their defaults (as HfArgumentParser's --help lists them).
bool print_help(const std::vector<std::string>& args, const char* usage) {
  if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; }))
    return false;
  std::string flags;
  for (const auto& n : kExtraFlags) flags += "  --" + n + " VALUE\n";
  for (const auto& n : kExtraSwitches) flags += "  --" + n + "\n";
  std::printf("%s\n\ntasks: text-classification (run_glue), token-classification (run_ner), question-answering "
              "(run_qa),\n       multiple-choice (run_swag), masked-lm (run_mlm), causal-lm (run_clm), seq2seq "
              "(run_summarization),\n       sft (TRL's SFTTrainer: conversations, prompt-completion pairs; docs/sft.md)\n\ndata and model flags:\n%s\nTrainingArguments (Hugging Face's names and "
              "defaults):\n%s",
              usage, flags.c_str(), train::TrainingArguments::help().c_str());
  return true;
}

// run_qa's post-processing flags.
train::QaOptions qa_options(const std::map<std::string, std::string>& f, const char* command) {
  train::QaOptions o;
  if (f.count("n_best_size")) o.n_best_size = cli::integer_value(command, "n_best_size", f.at("n_best_size"), 1);
  if (f.count("max_answer_length"))
    o.max_answer_length = cli::integer_value(command, "max_answer_length", f.at("max_answer_length"), 1);
  o.version_2_with_negative = switch_on(f, "version_2_with_negative");
  if (f.count("null_score_diff_threshold"))
    o.null_score_diff_threshold = cli::number_value(command, "null_score_diff_threshold", f.at("null_score_diff_threshold"));
  return o;
}

// The question, context and answers columns of a question-answering file
// (run_qa's "question", "context", "answers" unless named).
void qa_columns(const std::map<std::string, std::string>& f, data::DatasetOptions& o) {
  o.question_answering = true;
  auto get = [&](const char* name, const std::string& fallback) {
    auto it = f.find(name);
    return it == f.end() ? fallback : it->second;
  };
  o.text_column = get("question_column", "");
  o.text_pair_column = get("context_column", "");
  o.label_column = get("answer_column", "answers");
}

// --doc_stride, or run_qa's default for the sequence length.
int64_t doc_stride(const std::map<std::string, std::string>& f, int64_t max_len) {
  return int_flag(f, "doc_stride", cli::default_doc_stride(max_len));
}

// run_qa selects N examples first (then, for training, N of their windows): each evaluated example keeps all
// its windows here, where run_qa's second cut can leave the last examples without any.
data::Dataset first_examples(data::Dataset ds, const std::map<std::string, std::string>& f, const char* flag) {
  if (f.count(flag)) ds.rows.resize(std::min(ds.rows.size(), static_cast<size_t>(int_flag(f, flag, 0))));
  return ds;
}

// Every token id the run feeds the model lies inside its vocabulary of `vocab` (vocab_size in `config`), checked
// before the first step as kiln generate checks its prompts: on the device an id past the embedding fails every
// step that meets it. `sets` are the tokenized files by name.
void check_vocabulary(int64_t vocab, const std::string& config, const cli::TokenizerBundle& tok,
                      const std::vector<std::pair<std::string, const data::Features*>>& sets,
                      const data::CollatorOptions& co) {
  const std::string tokenizer = "the tokenizer in " + tok.dir.string() + " has " +
                                std::to_string(tok.tokenizer.vocab_size()) + " tokens";
  const std::string fix = "; train with the model's own tokenizer (--tokenizer_name)";
  for (const auto& [file, rows] : sets) {
    if (!rows) continue;
    for (const auto* ids : {&rows->input_ids, &rows->target_ids})
      if (auto bad = models::id_outside_vocabulary(*ids, vocab))
        throw Error(detail::concat(file, ": token id ", bad->id, bad->id < 0 ? "" : " (the largest)",
                                   " is outside the model's vocabulary of ", vocab, " (vocab_size in ", config, "): ",
                                   tokenizer, fix));
  }
  KILN_CHECK(co.pad_token_id >= 0 && co.pad_token_id < vocab, "the padding id ", co.pad_token_id,
             " is outside the model's vocabulary of ", vocab, " (vocab_size in ", config, "): ", tokenizer, fix);
  // masked-lm replaces a tenth of the masked tokens with random ids of the tokenizer's vocabulary (HF's collator).
  KILN_CHECK(!co.mlm || (co.mask_token_id < vocab && co.vocab_size <= vocab), "masked-lm: the collator draws ids up to ",
             co.vocab_size - 1, ", outside the model's vocabulary of ", vocab, " (vocab_size in ", config, "): ",
             tokenizer, fix);
}

// Whether output directory `dir` holds anything but kiln's own bookkeeping (the lock file, a write probe).
bool holds_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".kiln", 0) != 0) return true;
  return false;
}

// --args_file F.json: the JSON object's fields as flags (HF's parse_json_file),
// before the command line's own, which win. A file HF's
// TrainingArguments.to_json_string() wrote loads: its fields kiln has no use
// for are listed once as ignored when their values ask for nothing, and are
// errors when they ask for what kiln lacks (train::classify_hf_field).
std::vector<std::string> expand_args_file(const std::vector<std::string>& args) {
  std::vector<std::string> out, rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--args_file" && i + 1 < args.size()) path = args[++i];
    else if (args[i].rfind("--args_file=", 0) == 0) path = args[i].substr(12);
    else {
      rest.push_back(args[i]);
      continue;
    }
    nlohmann::json j = read_json_file(path);
    KILN_CHECK(j.is_object(), path, ": expected a JSON object of argument names and values");
    std::string ignored;
    for (const auto& item : j.items()) {
      std::string k = item.key(), why;
      nlohmann::json v = item.value();
      if (auto kiln_form = train::translate_hf_field(k, v, path)) {
        std::tie(k, v) = *kiln_form;
      } else if (const train::HfField use = train::classify_hf_field(k, v, &why); use == train::HfField::Ignored) {
        ignored += (ignored.empty() ? "" : ", ") + k;
        continue;
      } else if (use == train::HfField::Lacking) {
        throw Error(detail::concat(path, ": key '", k, "': ", v.dump(), " asks for ", why, ", which kiln does not have"));
      }
      if (v.is_null()) continue;
      if (std::find(kExtraSwitches.begin(), kExtraSwitches.end(), k) != kExtraSwitches.end()) {
        KILN_CHECK(v.is_boolean(), path, ": '", k, "' must be true or false, got ", json_found(v));
        if (v.get<bool>()) out.push_back("--" + k);
        continue;
      }
      out.push_back("--" + k);
      out.push_back(v.is_string() ? v.get<std::string>() : v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.dump());
    }
    if (!ignored.empty())
      std::fprintf(stderr, "kiln train: %s: ignored (HF fields kiln has no use for, at values that ask for nothing): %s\n",
                   path.c_str(), ignored.c_str());
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

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

// run_ner's predictions.txt: per test row, the tag of each word (its first
// token's prediction), space-separated.
void write_word_predictions(const train::Predictions& p, const data::Features& test, const data::LabelMap& labels,
                            const fs::path& path) {
  std::string text;
  for (size_t r = 0; r < p.token_labels.size(); ++r) {
    std::string line;
    for (int64_t tag : data::per_word(p.token_labels[r], test.word_ids[r]))
      line += (line.empty() ? "" : " ") + labels.labels.at(static_cast<size_t>(tag));
    text += line + "\n";
  }
  write_file_atomic(path, text);
  std::fprintf(stderr, "kiln train: %zu tagged rows -> %s\n", p.token_labels.size(), path.string().c_str());
}

// A decoded text as run_summarization writes and scores it: one line, stripped.
std::string one_line(std::string line) {
  std::replace(line.begin(), line.end(), '\n', ' ');
  const size_t first = line.find_first_not_of(" \t"), last = line.find_last_not_of(" \t");
  return first == std::string::npos ? "" : line.substr(first, last - first + 1);
}

// run_summarization's generated_predictions.txt: each test source's greedy
// output, decoded without special tokens, one per line. Returns the lines.
std::vector<std::string> write_generated(models::PreTrainedModel& model, const data::Features& test, const train::TrainingArguments& ta,
                     int64_t max_target_length, const cli::TokenizerBundle& tok, const fs::path& path) {
  model.eval();
  models::GenerationConfig g;
  g.max_new_tokens = ta.generation_max_length.value_or(max_target_length);
  std::string text;
  std::vector<std::string> lines;
  const auto batch = static_cast<size_t>(ta.per_device_eval_batch_size);
  for (size_t i = 0; i < test.size(); i += batch) {
    std::vector<std::vector<int64_t>> chunk(test.input_ids.begin() + static_cast<std::ptrdiff_t>(i),
                                            test.input_ids.begin() + static_cast<std::ptrdiff_t>(std::min(test.size(), i + batch)));
    for (const auto& seq : models::generate(model, chunk, g)) {
      std::vector<uint32_t> ids(seq.begin(), seq.end());
      lines.push_back(one_line(tok.tokenizer.decode(ids, true)));
      text += lines.back() + "\n";
    }
  }
  write_file_atomic(path, text);
  std::fprintf(stderr, "kiln train: %zu generated predictions -> %s\n", test.size(), path.string().c_str());
  return lines;
}

// run_summarization's and run_translation's scores of generated text against the test targets (decoded as
// HF decodes the labels: without special tokens, stripped): ROUGE-1/2/L F-measures x 100, sacrebleu's BLEU.
void score_generated(const std::vector<std::string>& generated, const data::Features& test,
                     const cli::TokenizerBundle& tok, nlohmann::json& metrics) {
  std::vector<std::string> refs;
  for (const auto& t : test.target_ids) {
    std::vector<uint32_t> ids;
    for (int64_t id : t)
      if (id >= 0) ids.push_back(static_cast<uint32_t>(id));
    refs.push_back(one_line(tok.tokenizer.decode(ids, true)));
  }
  const train::RougeScores r = train::rouge(generated, refs);
  auto percent = [](double v) { return std::round(v * 100 * 1e4) / 1e4; };  // run_summarization's round(v * 100, 4)
  metrics["predict_rouge1"] = percent(r.rouge1);
  metrics["predict_rouge2"] = percent(r.rouge2);
  metrics["predict_rougeL"] = percent(r.rougeL);
  metrics["predict_bleu"] = train::corpus_bleu(generated, {refs});
}

int run_train(const std::vector<std::string>& raw_args) {
  if (print_help(raw_args, "usage: kiln train --task TASK (--model_name_or_path DIR | --config_name PRESET_OR_FILE "
                           "--tokenizer_name DIR)\n                  --train_file F [--validation_file F] "
                           "[--do_predict --test_file F] --output_dir DIR [flags]\n       kiln train --args_file "
                           "run.json [flags]   (the same names as JSON; the command line wins)"))
    return 0;
  std::map<std::string, std::string> f;
  std::vector<std::string> args = cli::with_hf_names(expand_args_file(raw_args), {"batch_size"});
  train::TrainingArguments ta = train::TrainingArguments::parse(args, &f, with(kExtraFlags, cli::kLoraFlags),
                                                                with(kExtraSwitches, cli::kLoraSwitches));
  ta.do_train = true;
  std::optional<models::LoraConfig> lora = cli::lora_from_flags(f, ta.seed);
  if (lora && f.count("model_name_or_path"))
    lora->base_model_name_or_path = fs::absolute(f["model_name_or_path"]).lexically_normal().string();
  else if (lora)
    std::fprintf(stderr, "kiln train: warning: --use_peft with --config_name adapts fresh weights that are not saved "
                         "(only the adapter is): the adapter cannot be used without them\n");
  std::string task = f.count("task") ? f["task"] : infer_task(f);
  KILN_CHECK(task == "text-classification" || task == "token-classification" || task == "question-answering" ||
                 task == "multiple-choice" || task == "masked-lm" || task == "causal-lm" || task == "seq2seq" ||
                 task == "sft",
             "train: --task must be text-classification, token-classification, question-answering, multiple-choice, ",
             "masked-lm, causal-lm, seq2seq or sft, got '", task, "'");
  if (task == "causal-lm" && f.count("train_file") && cli::is_sft_file(f["train_file"])) {
    std::fprintf(stderr, "kiln train: %s holds conversations or prompt-completion pairs: training as --task sft\n",
                 f["train_file"].c_str());
    task = "sft";
  }
  hf_spellings(f, task, "train");
  const bool sft = task == "sft";  // causal-lm's model and loss on SFT data (train_sft.h)
  check_task_flags(f, task);
  const bool s2s = task == "seq2seq";
  if (s2s) {  // --source_column / --target_column are the text pair of each row
    f["text_column"] = f.count("source_column") ? f["source_column"] : "source";
    f["text_pair_column"] = f.count("target_column") ? f["target_column"] : "target";
    f["label_column"] = "";
  }
  KILN_CHECK(f.count("train_file"), "train: --train_file is required");
  // --do_predict: run_glue's predictions for --test_file, or run_summarization's generated outputs.
  if (ta.do_predict) {
    KILN_CHECK(f.count("test_file"), "train: --do_predict needs --test_file (the rows to predict)");
    KILN_CHECK(task == "text-classification" || task == "token-classification" || task == "question-answering" ||
                   task == "seq2seq",
               "train: --do_predict is for --task text-classification, token-classification, question-answering or ",
               "seq2seq (HF's run_swag, ",
               "run_mlm and run_clm have no prediction step), not ", task);
  } else {
    for (const char* flag : {"test_file", "max_predict_samples"})
      if (f.count(flag)) std::fprintf(stderr, "kiln train: warning: --%s is read only with --do_predict\n", flag);
  }
  if (ta.predict_with_generate && !s2s)
    std::fprintf(stderr, "kiln train: warning: --predict_with_generate is for --task seq2seq; ignored\n");
  KILN_CHECK(f.count("model_name_or_path") || f.count("config_name"),
             "train: pass --model_name_or_path DIR (fine-tune) or --config_name PRESET_OR_FILE with --tokenizer_name DIR (from scratch)");

  // A writable directory, this run's alone, and nothing in it overwritten unless asked. Only the first process
  // of an mpirun writes, so only it looks and locks (the others may start after it has begun writing).
  fs::path out(ta.output_dir);
  std::shared_ptr<train::OutputDirLock> out_lock;
  if (this_replica().process_rank == 0) {
    train::prepare_output_dir(out);
    out_lock = train::OutputDirLock::acquire(out);
    if (holds_files(out) && !ta.overwrite_output_dir && ta.resume_from_checkpoint.empty())
      throw Error("output_dir '" + out.string() + "' already exists and is not empty; pass --overwrite_output_dir, " +
                  "or --resume_from_checkpoint latest to continue");
  }

  fs::path tok_dir = f.count("tokenizer_name") ? f["tokenizer_name"] : f.count("model_name_or_path") ? f["model_name_or_path"] : "";
  KILN_CHECK(!tok_dir.empty(), "train: --tokenizer_name DIR is required with --config_name");
  cli::TokenizerBundle tok = cli::load_tokenizer(tok_dir);

  const bool ner = task == "token-classification", qa = task == "question-answering", mc = task == "multiple-choice";
  data::DatasetOptions dopt = cli::dataset_options(f);
  dopt.multiple_choice = mc;  // run_swag: sent1, sent2, ending0, ending1, ..., label
  dopt.split_into_words = ner;  // run_ner: a list of words and a list of tags per row
  dopt.keep_linebreaks = keep_linebreaks(f, task);
  if (qa) qa_columns(f, dopt);  // run_qa: id, question, context and answers per row
  // datasets' JSON `field` of each file (--train_file_field data), else found.
  auto with_field = [&](data::DatasetOptions o, const char* flag) {
    o.json_field = f.count(flag) ? f[flag] : "";
    return o;
  };
  data::Dataset train_ds = sft ? data::Dataset{} : data::load_dataset(f["train_file"], with_field(dopt, "train_file_field"));
  std::optional<data::Dataset> eval_ds;
  if (f.count("validation_file"))
    eval_ds = sft ? data::Dataset{} : data::load_dataset(f["validation_file"], with_field(dopt, "validation_file_field"));
  KILN_CHECK(!sft || !f.count("validation_split_percentage"), "train: --validation_split_percentage is not read by ",
             "--task sft; pass --validation_file");
  if (f.count("validation_split_percentage")) {  // run_mlm / run_clm: train[:p%] validates, train[p%:] trains
    const int64_t pct = int_flag(f, "validation_split_percentage", 5);
    KILN_CHECK(pct < 100, "train: --validation_split_percentage must be below 100, got ", pct);
    if (eval_ds) {
      std::fprintf(stderr, "kiln train: warning: --validation_split_percentage is ignored: --validation_file is given\n");
    } else {
      // datasets' percent slices round to the closest row (ties to even, as Python's round).
      const auto cut = static_cast<size_t>(std::nearbyint(static_cast<double>(train_ds.rows.size()) * pct / 100.0));
      KILN_CHECK(cut > 0 && cut < train_ds.rows.size(), "train: --validation_split_percentage ", pct, " of ",
                 train_ds.rows.size(), " rows leaves ", cut, " for validation and ", train_ds.rows.size() - cut,
                 " for training; both need rows");
      eval_ds = train_ds;
      eval_ds->rows.resize(cut);
      train_ds.rows.erase(train_ds.rows.begin(), train_ds.rows.begin() + static_cast<std::ptrdiff_t>(cut));
      eval_ds->source = train_ds.source + " [:" + std::to_string(pct) + "%]";
    }
  }
  // run_glue: --do_eval (set too by an eval_strategy) requires a validation set.
  KILN_CHECK(!ta.do_eval || eval_ds, "train: ",
             ta.eval_strategy != "no" ? "--eval_strategy " + ta.eval_strategy : std::string("--do_eval"),
             " needs a validation set: --validation_file F, or --validation_split_percentage P");
  // The model's config (to fit --max_seq_length to its positions): the
  // checkpoint's, the preset or the config file.
  std::unique_ptr<models::PretrainedConfig> run_config =
      f.count("model_name_or_path") ? models::load_config(fs::path(f["model_name_or_path"]) / "config.json")
                                    : models::preset_config(f["config_name"]);
  if (!run_config) run_config = models::load_config(f["config_name"]);
  const int64_t max_len = sft ? cli::sequence_length(cli::sft_max_length_flag(f), *run_config, "train", 1024)
                              : cli::sequence_length(max_seq_length_flag(f), *run_config, "train",
                                                     qa ? cli::kQaMaxSeqLength : 128);

  const bool mlm = task == "masked-lm", clm = task == "causal-lm" || sft, lm = mlm || clm || s2s;
  const bool classes = !lm && !qa && !mc;  // a classification head with a label set
  if (qa)
    KILN_CHECK(train_ds.has_labels, f["train_file"], ": no answers to train on (key '", dopt.label_column,
               "' is missing, or null, in every row)");
  if (mc)
    KILN_CHECK(train_ds.has_labels, f["train_file"], ": no labels to train on (column '", dopt.label_column,
               "', the right ending's index, is missing, or empty in every row)");
  data::LabelMap labels;
  if (classes) {
    KILN_CHECK(train_ds.has_labels, f["train_file"], ": no labels to train on (column '", dopt.label_column,
               "' is missing, or empty in every row)");
    labels = ner ? data::LabelMap::from_word_labels(train_ds) : data::LabelMap::from_dataset(train_ds);
  }

  // The architecture follows the task: <Type>ForSequenceClassification, <Type>ForMaskedLM, GPT2LMHeadModel /
  // LlamaForCausalLM.
  auto arch_for = [&](const models::PretrainedConfig& c) {
    if (clm) {
      std::string arch = models::causal_lm_architecture(c);
      KILN_CHECK(!arch.empty(), "causal-lm: needs a model of type ", models::causal_lm_types(),
                 ", got model_type '", c.model_type, "'");
      return arch;
    }
    if (s2s) {
      KILN_CHECK(c.model_type == "t5", "seq2seq: needs a t5 model, got model_type '", c.model_type, "'");
      return std::string("T5ForConditionalGeneration");
    }
    // run_ner's, run_qa's and run_swag's heads: the BERT family's.
    if (const char* head = ner ? "ForTokenClassification" : qa ? "ForQuestionAnswering" : mc ? "ForMultipleChoice" : nullptr)
      KILN_CHECK(c.model_type == "bert" || c.model_type == "roberta" || c.model_type == "distilbert", task,
                 ": kiln trains Bert", head, ", Roberta", head, " and DistilBert", head, ", got model_type '",
                 c.model_type, "'");
    return c.class_prefix() + (mlm  ? "ForMaskedLM"
                               : ner ? "ForTokenClassification"
                               : qa  ? "ForQuestionAnswering"
                               : mc  ? "ForMultipleChoice"
                                     : "ForSequenceClassification");
  };
  const int64_t num_labels = labels.is_regression ? 1 : static_cast<int64_t>(labels.labels.size());
  // One model per replica, on the replica's device.
  auto make_model = [&](Device device) {
  std::unique_ptr<models::PreTrainedModel> model;
  if (f.count("model_name_or_path")) {
    models::LoadOptions lo;
    lo.seed = ta.seed;
    lo.device = device;
    lo.architecture = arch_for(*run_config);
    if (classes) lo.num_labels = num_labels;
    lo.ignore_mismatched_sizes = switch_on(f, "ignore_mismatched_sizes");
    lo.keep_bf16 = lora.has_value();  // a frozen base stays bf16 as loaded (docs/lora.md)
    model = models::from_pretrained(f["model_name_or_path"], lo);
  } else {
    std::unique_ptr<models::PretrainedConfig> c = run_config->clone();  // each replica's own, set below
    const int64_t vocab = static_cast<int64_t>(tok.tokenizer.vocab_size());
    if (auto* b = dynamic_cast<models::BertConfig*>(c.get())) {
      b->vocab_size = vocab;
      b->pad_token_id = tok.pad_id;
    } else if (auto* g = dynamic_cast<models::GPT2Config*>(c.get())) {
      g->vocab_size = vocab;
      if (!g->pad_token_id) g->pad_token_id = tok.pad_id;  // as for Llama below: GPT2ForSequenceClassification needs it
    } else if (auto* l = dynamic_cast<models::LlamaConfig*>(c.get())) {
      l->vocab_size = vocab;
      // LlamaForSequenceClassification finds each row's end by it; the collator pads with the same id.
      if (!l->pad_token_id) l->pad_token_id = tok.pad_id;
    } else if (auto* t5 = dynamic_cast<models::T5Config*>(c.get())) {
      t5->vocab_size = vocab;
      t5->pad_token_id = tok.pad_id;
      t5->decoder_start_token_id = tok.pad_id;
      // Targets end with the tokenizer's end token; generation stops there.
      for (const char* end : {"</s>", "[SEP]"})
        if (auto id = tok.tokenizer.token_to_id(end)) {
          t5->eos_token_id = *id;
          break;
        }
    }
    if (classes) c->set_num_labels(num_labels);
    model = models::create_model(arch_for(*c), *c, ta.seed, device);
  }
  if (classes && !labels.is_regression) {  // label names into config.json (id2label / label2id)
    model->config().id2label.clear();
    for (size_t i = 0; i < labels.labels.size(); ++i) model->config().id2label[static_cast<int64_t>(i)] = labels.labels[i];
  }
  if (classes && labels.is_regression) model->config().problem_type = "regression";
  if (s2s) cli::save_source_prefix(model->config(), f.count("source_prefix") ? f["source_prefix"] : "");
  if (lora) models::apply_lora(*model, *lora);  // --use_peft: the base frozen, adapters train
  return model;
  };

  // Language modelling: text concatenated into blocks (run_mlm / run_clm's group_texts).
  auto features = [&](const data::Dataset& ds) {
    if (s2s)
      return std::make_shared<data::Features>(data::tokenize_seq2seq(
          ds, tok.tokenizer, int_flag(f, "max_source_length", max_len), int_flag(f, "max_target_length", max_len),
          f.count("source_prefix") ? f["source_prefix"] : ""));
    if (ner)
      return std::make_shared<data::Features>(
          data::tokenize_words(ds, tok.tokenizer, max_len, &labels, switch_on(f, "label_all_tokens")));
    if (qa)
      return std::make_shared<data::Features>(data::tokenize_qa(std::make_shared<const data::Dataset>(ds),
                                                                tok.tokenizer, max_len, doc_stride(f, max_len)));
    if (mc) return std::make_shared<data::Features>(data::tokenize_choices(ds, tok.tokenizer, max_len));
    return std::make_shared<data::Features>(lm ? data::group_texts(ds, tok.tokenizer, max_len, mlm)
                                               : data::tokenize_dataset(ds, tok.tokenizer, max_len, &labels));
  };
  // --max_*_samples: the first N rows after preprocessing (blocks for language models), as HF's scripts select them.
  auto at_most = [&](std::shared_ptr<data::Features> rows, const char* flag) {
    if (f.count(flag)) rows = std::make_shared<data::Features>(rows->head(static_cast<size_t>(int_flag(f, flag, 0))));
    return rows;
  };
  auto train_f = sft ? at_most(cli::sft_features(f["train_file"], tok, f, max_len), "max_train_samples")
                     : at_most(features(qa ? first_examples(train_ds, f, "max_train_samples") : train_ds),
                               "max_train_samples");
  std::shared_ptr<data::Features> eval_f;
  if (eval_ds && sft) {
    eval_f = at_most(cli::sft_features(f["validation_file"], tok, f, max_len), "max_eval_samples");
    eval_ds->source = f["validation_file"];
  } else if (eval_ds) {
    eval_f = qa ? features(first_examples(*eval_ds, f, "max_eval_samples"))
                : at_most(features(*eval_ds), "max_eval_samples");
  }
  // The test rows, read before training so a bad file fails at once. As run_glue, classification
  // predicts without labels; seq2seq keeps its targets for predict_loss.
  std::shared_ptr<data::Features> test_f;
  if (ta.do_predict) {
    data::DatasetOptions topt = dopt;
    if (!s2s && !ner && !qa) topt.label_column = "";
    const data::Dataset test_ds = data::load_dataset(f["test_file"], with_field(topt, "test_file_field"));
    // run_ner and run_qa keep the tags / answers for predict_* scores (a file without them is predicted only),
    // seq2seq its targets.
    if (qa) {
      test_f = features(first_examples(test_ds, f, "max_predict_samples"));
    } else {
      test_f = s2s || ner ? features(test_ds)
                          : std::make_shared<data::Features>(
                                data::tokenize_dataset(test_ds, tok.tokenizer, max_len, nullptr));
      test_f = at_most(test_f, "max_predict_samples");
    }
  }
  if (eval_f && ta.eval_strategy == "no") ta.do_eval = true;

  data::CollatorOptions co;
  co.pad_token_id = sft ? cli::sft_padding_id(tok) : cli::padding_id(tok, *run_config);
  co.max_length = max_len;
  co.pad_to_max_length = switch_on(f, "pad_to_max_length");
  co.pad_to_multiple_of = int_flag(f, "pad_to_multiple_of", 0);
  co.mlm = mlm;
  co.causal_lm = clm;
  if (mlm) {
    KILN_CHECK(tok.mask_id >= 0, "masked-lm: the tokenizer in ", tok.dir.string(), " has no [MASK] or <mask> token");
    co.mask_token_id = tok.mask_id;
    co.vocab_size = static_cast<int64_t>(tok.tokenizer.vocab_size());
    co.special_token_ids = tok.special_ids;
    if (f.count("mlm_probability"))  // checked by check_task_flags
      co.mlm_probability = cli::number_value("train", "mlm_probability", f["mlm_probability"], 0, 1);
  }
  co.seed = ta.seed;

  co.max_target_length = int_flag(f, "max_target_length", 0);
  if (f.count("model_name_or_path")) {  // from scratch, the model's vocabulary is the tokenizer's
    // Every config.json names it vocab_size.
    const int64_t vocab = run_config->to_json().value("vocab_size", int64_t{-1});
    if (vocab > 0)
      check_vocabulary(vocab, (fs::path(f["model_name_or_path"]) / "config.json").string(), tok,
                       {{f["train_file"], train_f.get()},
                        {eval_ds ? eval_ds->source : std::string(), eval_f.get()},
                        {f["test_file"], test_f.get()}},
                       co);
  }
  train::Task t = mlm   ? train::Task::MaskedLM
                   : clm ? train::Task::CausalLM
                   : s2s ? train::Task::Seq2Seq
                   : ner ? train::Task::TokenClassification
                   : qa  ? train::Task::QuestionAnswering
                   : mc  ? train::Task::MultipleChoice
                         : train::Task::TextClassification;
  const train::QaOptions qa_opts = qa_options(f, "train");
  // A first SIGINT / SIGTERM while training stops it after the step in flight, with a checkpoint to resume from.
  train::install_stop_handlers();
  std::atomic<bool> stopped = false;  // every replica stops at the same step
  // --num_replicas N: N replicas in this process (and as many in every
  // process mpirun started); the data and tokenizer above are shared.
  spawn([&](int) {
  auto model = make_model(train::replica_device(ta));
  train::Trainer trainer(*model, ta, t, train_f, eval_f, co);
  trainer.set_question_answering(qa_opts);
  trainer.set_extra_files(tok.files);
  auto train_metrics = trainer.train();
  if (trainer.stopped_by_signal()) stopped = true;
  if (trainer.stopped_by_signal() || !this_replica().is_master()) return;
  nlohmann::json all = nlohmann::json::object();
  for (auto& [k, v] : train_metrics) all[k] = v;
  if (eval_f) {
    auto m = trainer.evaluate("eval");
    nlohmann::json ej = nlohmann::json::object();
    for (auto& [k, v] : m) ej[k] = all[k] = v;
    ej["epoch"] = trainer.state().epoch;
    io::write_json_file_atomic(out / "eval_results.json", ej);
    for (const char* k : {"eval_accuracy", "eval_exact_match", "eval_exact", "eval_f1", "eval_loss", "perplexity"})
      if (m.count(k)) std::printf("%s = %.4f\n", k, m[k]);
  }
  if (test_f) {
    nlohmann::json pj = nlohmann::json::object();
    if (s2s) {  // run_summarization: the test loss, and with predict_with_generate the outputs
      auto m = trainer.evaluate("predict", test_f);
      m.erase("perplexity");
      for (auto& [k, v] : m) pj[k] = all[k] = v;
      if (ta.predict_with_generate) {
        const auto generated = write_generated(*model, *test_f, ta, int_flag(f, "max_target_length", max_len), tok,
                                               out / "generated_predictions.txt");
        score_generated(generated, *test_f, tok, pj);
        for (const char* k : {"predict_rouge1", "predict_rouge2", "predict_rougeL", "predict_bleu"}) all[k] = pj[k];
      }
    } else if (qa) {  // run_qa: predict_predictions.json, and predict_* scores when the test rows have answers
      for (auto& [k, v] : trainer.evaluate("predict", test_f)) pj[k] = all[k] = v;
    } else if (ner) {  // run_ner: predict_* scores when the test rows are tagged, and predictions.txt
      if (!test_f->token_labels.empty())
        for (auto& [k, v] : trainer.evaluate("predict", test_f)) pj[k] = all[k] = v;
      write_word_predictions(trainer.predict(*test_f), *test_f, labels, out / "predictions.txt");
    } else {
      write_predictions(trainer.predict(*test_f), labels, out / "predict_results.txt");
    }
    if (!pj.empty()) io::write_json_file_atomic(out / "predict_results.json", pj);
  }
  io::write_json_file_atomic(out / "all_results.json", all);
  cli::ModelCard card{out.filename().empty() ? out.parent_path().filename().string() : out.filename().string(),
                      f.count("model_name_or_path") ? f["model_name_or_path"] : "", f.count("config_name") ? f["config_name"] : "", task,
                      {f["train_file"]}, {}, &ta, trainer.state().log_history, this_replica().world_size()};
  if (eval_ds) card.eval_files = {eval_ds->source};
  cli::write_hf_output_files(out, card, *model, tok);
  std::printf("model saved to %s\n", out.string().c_str());
  }, static_cast<int>(ta.num_replicas));
  if (stopped) {  // the shell's status for a process a signal ended: 128 + the signal
    const int sig = train::stop_requested();
    return 128 + (sig ? sig : SIGTERM);
  }
  return 0;
}

// The task a saved model is evaluated on: --task when given (it must fit the
// architecture), else the one its architecture was trained for.
std::string eval_task(const std::string& arch, const std::map<std::string, std::string>& f) {
  const std::string fits = task_of_architecture(arch);
  KILN_CHECK(!fits.empty(), "eval: cannot evaluate a ", arch,
             " (a *ForSequenceClassification, *ForTokenClassification, *ForQuestionAnswering, *ForMultipleChoice, ",
             "*ForMaskedLM, ",
             "*ForCausalLM, GPT2LMHeadModel or T5ForConditionalGeneration can be)");
  if (auto it = f.find("task"); it != f.end())
    KILN_CHECK(it->second == fits, "eval: --task ", it->second, " does not fit the model's ", arch,
               " (its task is ", fits, ")");
  return fits;
}

int run_eval(const std::vector<std::string>& args) {
  if (print_help(args, "usage: kiln eval --model_name_or_path DIR --validation_file F [--output_dir DIR] [flags]\n"
                       "(the task is the model's: its architecture decides; kiln train's data flags apply)"))
    return 0;
  std::map<std::string, std::string> f;
  std::vector<std::string> a = cli::with_hf_names(args);
  bool has_out = false;
  for (const auto& s : a) has_out = has_out || s.rfind("--output_dir", 0) == 0;
  if (!has_out) {  // without --output_dir, only a question-answering model writes (its predictions) into the model dir
    for (size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == "--model_name_or_path") a.insert(a.end(), {"--output_dir", a[i + 1]});
  }
  train::TrainingArguments ta = train::TrainingArguments::parse(a, &f, with(kExtraFlags, {"adapter"}), kExtraSwitches);
  KILN_CHECK(f.count("model_name_or_path"), "eval: --model_name_or_path DIR is required");
  KILN_CHECK(f.count("validation_file"), "eval: --validation_file is required");
  // kiln train's flags that evaluating does not use: named, not silently dropped.
  for (const char* flag : {"train_file", "test_file", "config_name", "max_train_samples", "max_predict_samples",
                           "validation_split_percentage", "ignore_mismatched_sizes"})
    if (f.count(flag)) std::fprintf(stderr, "kiln eval: warning: --%s is for kiln train; ignored\n", flag);
  for (const auto& [name, min] : kIntegerFlags) int_flag(f, name.c_str(), 0);  // bad values fail before loading
  fs::path dir = f["model_name_or_path"];
  const fs::path adapter = f.count("adapter") ? fs::path(f["adapter"]) : fs::path();
  cli::TokenizerBundle tok =
      cli::load_tokenizer(f.count("tokenizer_name") ? fs::path(f["tokenizer_name"]) : cli::tokenizer_dir_for(dir, adapter));
  auto model = models::from_pretrained_with_adapter(dir, adapter, {});
  const std::string task = eval_task(model->architecture(), f);
  hf_spellings(f, task, "eval");
  const bool mlm = task == "masked-lm", clm = task == "causal-lm", s2s = task == "seq2seq",
             ner = task == "token-classification", qa = task == "question-answering", mc = task == "multiple-choice";
  if (s2s) {  // as kiln train: the source and target columns are each row's text pair
    f["text_column"] = f.count("source_column") ? f["source_column"] : "source";
    f["text_pair_column"] = f.count("target_column") ? f["target_column"] : "target";
    f["label_column"] = "";
  }
  data::DatasetOptions dopt = cli::dataset_options(f);
  dopt.split_into_words = ner;
  dopt.multiple_choice = mc;
  dopt.keep_linebreaks = keep_linebreaks(f, task);
  if (qa) qa_columns(f, dopt);
  if (f.count("validation_file_field")) dopt.json_field = f["validation_file_field"];
  const bool sft = clm && cli::is_sft_file(f["validation_file"]);  // conversations: as kiln train --task sft
  data::Dataset ds = sft ? data::Dataset{} : data::load_dataset(f["validation_file"], dopt);
  const int64_t max_len =
      sft ? cli::sequence_length(cli::sft_max_length_flag(f), model->config(), "eval", 1024)
          : cli::sequence_length(max_seq_length_flag(f), model->config(), "eval", qa ? cli::kQaMaxSeqLength : 128);
  std::vector<std::string> names;
  for (auto& [id, l] : model->config().id2label) names.push_back(l);
  data::LabelMap labels = data::LabelMap::from_labels(names);
  // A regression head (as HF decides: problem_type, or one label without it) reads numbers.
  const auto& problem = model->config().problem_type;
  if (problem ? *problem == "regression" : model->config().num_labels() == 1) labels = data::LabelMap{{}, true};
  std::shared_ptr<data::Features> feats;
  if (s2s)
    feats = std::make_shared<data::Features>(data::tokenize_seq2seq(
        ds, tok.tokenizer, int_flag(f, "max_source_length", max_len), int_flag(f, "max_target_length", max_len),
        f.count("source_prefix") ? f["source_prefix"] : cli::saved_source_prefix(model->config())));
  else if (sft)
    feats = cli::sft_features(f["validation_file"], tok, f, max_len);
  else if (mlm || clm)
    feats = std::make_shared<data::Features>(data::group_texts(ds, tok.tokenizer, max_len, mlm));
  else if (ner) {
    KILN_CHECK(ds.has_labels, f["validation_file"], ": no tags to evaluate against (a list of tags per row)");
    feats = std::make_shared<data::Features>(
        data::tokenize_words(ds, tok.tokenizer, max_len, &labels, switch_on(f, "label_all_tokens")));
  } else if (qa) {  // --max_eval_samples: the first N examples, each with all its windows (see kiln train)
    KILN_CHECK(ds.has_labels, f["validation_file"], ": no answers to evaluate against (key '", dopt.label_column,
               "' is missing, or null, in every row)");
    feats = std::make_shared<data::Features>(
        data::tokenize_qa(std::make_shared<const data::Dataset>(first_examples(ds, f, "max_eval_samples")),
                          tok.tokenizer, max_len, doc_stride(f, max_len)));
  } else if (mc) {
    KILN_CHECK(ds.has_labels, f["validation_file"], ": no labels to evaluate against (column '", dopt.label_column,
               "' is missing, or empty in every row)");
    feats = std::make_shared<data::Features>(data::tokenize_choices(ds, tok.tokenizer, max_len));
  } else {
    KILN_CHECK(ds.has_labels, f["validation_file"], ": no labels to evaluate against (column '", dopt.label_column,
               "' is missing, or empty in every row)");
    feats = std::make_shared<data::Features>(data::tokenize_dataset(ds, tok.tokenizer, max_len, &labels));
  }
  data::CollatorOptions co;
  co.pad_token_id = sft ? cli::sft_padding_id(tok) : cli::padding_id(tok, model->config());
  co.max_length = max_len;
  co.mlm = mlm;
  co.causal_lm = clm;
  co.mask_token_id = tok.mask_id;
  co.vocab_size = static_cast<int64_t>(tok.tokenizer.vocab_size());
  co.special_token_ids = tok.special_ids;
  co.max_target_length = int_flag(f, "max_target_length", 0);
  // The data flags as kiln train reads them (run_mlm evaluates with the same masking probability).
  co.pad_to_max_length = switch_on(f, "pad_to_max_length");
  co.pad_to_multiple_of = int_flag(f, "pad_to_multiple_of", 0);
  if (f.count("mlm_probability")) co.mlm_probability = cli::number_value("eval", "mlm_probability", f["mlm_probability"], 0, 1);
  co.seed = ta.seed;
  if (f.count("max_eval_samples") && !qa)
    feats = std::make_shared<data::Features>(feats->head(static_cast<size_t>(int_flag(f, "max_eval_samples", 0))));
  const train::Task t = mlm   ? train::Task::MaskedLM
                         : clm ? train::Task::CausalLM
                         : s2s ? train::Task::Seq2Seq
                         : ner ? train::Task::TokenClassification
                         : qa  ? train::Task::QuestionAnswering
                         : mc  ? train::Task::MultipleChoice
                               : train::Task::TextClassification;
  train::Trainer trainer(*model, ta, t, nullptr, feats, co);
  trainer.set_question_answering(qa_options(f, "eval"));
  auto m = trainer.evaluate("eval");
  for (auto& [k, v] : m) std::printf("%s = %.4f\n", k.c_str(), v);
  if (has_out) {  // HF's trainer.save_metrics("eval", metrics): output_dir/eval_results.json
    nlohmann::json ej = nlohmann::json::object();
    for (auto& [k, v] : m) ej[k] = v;
    fs::create_directories(ta.output_dir);
    io::write_json_file_atomic(fs::path(ta.output_dir) / "eval_results.json", ej);
    std::fprintf(stderr, "kiln eval: metrics -> %s\n", (fs::path(ta.output_dir) / "eval_results.json").string().c_str());
  }
  return 0;
}

}  // namespace

KILN_COMMAND(train, "train or fine-tune a model (Hugging Face Trainer flags)", run_train);
KILN_COMMAND(eval, "evaluate a model on a labelled file", run_eval);
