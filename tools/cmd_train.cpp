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
#include "kiln/core/host_memory.h"
#include "kiln/core/error.h"
#include "kiln/distributed/replica.h"
#include "kiln/core/atomic_file.h"
#include "kiln/io/compressed.h"
#include "kiln/io/json_file.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#include "kiln/models/t5.h"
#include "kiln/models/token_ids.h"
#include "kiln/train/hf_fields.h"
#include "kiln/train/output_dir.h"
#include "kiln/train/stop_signals.h"
#include "kiln/train/trainer.h"
#include "lora_flags.h"
#include "train_common.h"
#include "train_sft.h"
#include "train_task.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;
using cli::int_flag;
using cli::qa_options;
using cli::switch_on;
using cli::task_of_architecture;

const std::vector<std::string> kBaseFlags = {"model_name_or_path", "config_name", "tokenizer_name", "task",
                                              "train_file", "validation_file", "text_column", "text_pair_column",
                                              "label_column", "max_seq_length", "pad_to_multiple_of",
                                              "mlm_probability", "source_column", "target_column", "source_prefix",
                                              "max_source_length", "max_target_length", "test_file",
                                              "max_train_samples", "max_eval_samples", "max_predict_samples",
                                              "validation_split_percentage", "doc_stride", "n_best_size",
                                              "max_answer_length", "null_score_diff_threshold", "question_column",
                                              "context_column", "answer_column", "block_size", "summary_column",
                                              "train_file_field", "validation_file_field", "test_file_field",
                                              "text_column_name", "label_column_name", "task_name"};
const std::vector<std::string> kBaseSwitches = {"pad_to_max_length", "ignore_mismatched_sizes", "label_all_tokens",
                                                 "version_2_with_negative", "keep_linebreaks",
                                                 "return_entity_level_metrics"};
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

// Every value checked before any data is read, and a flag the task does not
// use is a warning (kiln train serves run_glue, run_ner, run_mlm, run_clm
// and run_summarization's flags at once, so it is not an error).
void check_task_flags(const std::map<std::string, std::string>& f, const std::string& task) {
  cli::check_integer_flags(f);
  if (f.count("mlm_probability")) cli::number_value("train", "mlm_probability", f.at("mlm_probability"), 0, 1);
  if (f.count("null_score_diff_threshold"))
    cli::number_value("train", "null_score_diff_threshold", f.at("null_score_diff_threshold"));
  const std::vector<std::pair<std::string, std::vector<std::string>>> only = {
      {"masked-lm", {"mlm_probability"}},
      {"question-answering",
       {"doc_stride", "n_best_size", "max_answer_length", "null_score_diff_threshold", "version_2_with_negative",
        "question_column", "context_column", "answer_column"}},
      {"seq2seq", {"source_column", "target_column", "source_prefix", "max_source_length", "max_target_length"}},
      {"token-classification", {"label_all_tokens", "return_entity_level_metrics", "task_name"}},
      {"text-classification", {"text_pair_column"}},
      {"sft", {"assistant_only_loss", "completion_only_loss", "packing", "packing_strategy", "padding_free",
               "max_length", "dataset_text_field", "eval_packing"}}};
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

// HF's example scripts' own spellings of kiln's flags: run_clm's --block_size (--max_seq_length), run_ner's
// --text_column_name / --label_column_name and run_summarization's --text_column / --summary_column
// (--source_column / --target_column).
void hf_spellings(std::map<std::string, std::string>& f, const std::string& task, const char* command) {
  auto rename = [&](const char* from, const char* to) {
    if (!f.count(from)) return;
    KILN_CHECK(!f.count(to), command, ": --", from, " and --", to, " name the same setting; give one");
    f[to] = f[from];
    f.erase(from);
  };
  rename("block_size", "max_seq_length");
  rename("text_column_name", "text_column");  // run_ner's names
  rename("label_column_name", "label_column");
  // run_ner's --task_name (ner, pos, chunk): its tags are the column "<task_name>_tags".
  if (task == "token-classification" && f.count("task_name") && !f.count("label_column"))
    f["label_column"] = f.at("task_name") + "_tags";
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

// `kiln train --help` / `kiln eval --help`: the usage, the tasks, kiln's data flags (with `lora`, TRL's LoRA
// flags) and the TrainingArguments fields with their defaults (as HfArgumentParser's --help lists them).
bool print_help(const std::vector<std::string>& args, const char* usage, bool lora = false) {
  if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; }))
    return false;
  std::string flags;
  for (const auto& n : kExtraFlags) flags += "  --" + n + " VALUE\n";
  for (const auto& n : kExtraSwitches) flags += "  --" + n + "\n";
  if (lora) {
    flags += "\nLoRA / DoRA adapters (TRL's names; docs/lora.md):\n";
    for (const auto& n : cli::kLoraSwitches) flags += "  --" + n + "\n";
    for (const auto& n : cli::kLoraFlags) flags += "  --" + n + " VALUE\n";
  }
  std::printf("%s\n\ntasks: text-classification (run_glue), token-classification (run_ner), question-answering "
              "(run_qa),\n       multiple-choice (run_swag), masked-lm (run_mlm), causal-lm (run_clm), seq2seq "
              "(run_summarization),\n       sft (TRL's SFTTrainer: conversations, prompt-completion pairs; docs/sft.md)\n\ndata and model flags:\n%s\nTrainingArguments (Hugging Face's names and "
              "defaults):\n%s",
              usage, flags.c_str(), train::TrainingArguments::help().c_str());
  return true;
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
    train::resolve_hf_aliases(j);
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

// --task, or the model's; a causal-lm file of conversations or
// prompt-completion pairs trains as sft.
std::string choose_task(const std::map<std::string, std::string>& f) {
  std::string task = f.count("task") ? f.at("task") : infer_task(f);
  cli::make_train_task(task);  // an error for a task kiln does not know
  if (task == "causal-lm" && f.count("train_file") && cli::is_sft_file(f.at("train_file"))) {
    std::fprintf(stderr, "kiln train: %s holds conversations or prompt-completion pairs: training as --task sft\n",
                 f.at("train_file").c_str());
    task = "sft";
  }
  return task;
}

// The flags that every task needs, and --do_predict's.
void check_run_flags(const std::map<std::string, std::string>& f, const train::TrainingArguments& ta,
                     const cli::TrainTask& task, const std::string& name) {
  KILN_CHECK(f.count("train_file"), "train: --train_file is required");
  // --do_predict: run_glue's predictions for --test_file, or run_summarization's generated outputs.
  if (ta.do_predict) {
    KILN_CHECK(f.count("test_file"), "train: --do_predict needs --test_file (the rows to predict)");
    KILN_CHECK(task.predicts(),
               "train: --do_predict is for --task text-classification, token-classification, question-answering or ",
               "seq2seq (HF's run_swag, ",
               "run_mlm and run_clm have no prediction step), not ", name);
  } else {
    for (const char* flag : {"test_file", "max_predict_samples"})
      if (f.count(flag)) std::fprintf(stderr, "kiln train: warning: --%s is read only with --do_predict\n", flag);
  }
  if (ta.predict_with_generate && !task.generates())
    std::fprintf(stderr, "kiln train: warning: --predict_with_generate is for --task seq2seq; ignored\n");
  KILN_CHECK(f.count("model_name_or_path") || f.count("config_name"),
             "train: pass --model_name_or_path DIR (fine-tune) or --config_name PRESET_OR_FILE with --tokenizer_name DIR (from scratch)");
}

// A writable directory, this run's alone, and nothing in it overwritten unless asked. Only the first process
// of an mpirun writes, so only it looks and locks (the others may start after it has begun writing).
std::shared_ptr<train::OutputDirLock> lock_output_dir(const train::TrainingArguments& ta) {
  const fs::path out(ta.output_dir);
  std::shared_ptr<train::OutputDirLock> out_lock;
  if (this_replica().process_rank == 0) {
    train::prepare_output_dir(out);
    out_lock = train::OutputDirLock::acquire(out);
    if (holds_files(out) && !ta.overwrite_output_dir && ta.resume_from_checkpoint.empty())
      throw Error("output_dir '" + out.string() + "' already exists and is not empty; pass --overwrite_output_dir, " +
                  "or --resume_from_checkpoint latest to continue");
  }
  return out_lock;
}

// The rows of a run: the training file and the validation file, or
// run_mlm / run_clm's --validation_split_percentage of the training rows.
struct RunRows {
  data::DatasetOptions options;
  data::Dataset train;
  std::optional<data::Dataset> eval;
};

// datasets' JSON `field` of each file (--train_file_field data), else found.
data::DatasetOptions with_field(data::DatasetOptions o, const std::map<std::string, std::string>& f, const char* flag) {
  o.json_field = f.count(flag) ? f.at(flag) : "";
  return o;
}

// How task `name` reads its files, from the common data flags.
data::DatasetOptions task_dataset_options(const std::map<std::string, std::string>& f, const cli::TrainTask& task,
                                          const std::string& name) {
  data::DatasetOptions o = cli::dataset_options(f);
  task.dataset_options(f, o);
  o.keep_linebreaks = keep_linebreaks(f, name);
  return o;
}

RunRows load_rows(const std::map<std::string, std::string>& f, const cli::TrainTask& task, const std::string& name) {
  RunRows r;
  r.options = task_dataset_options(f, task, name);
  const bool rows = task.reads_rows();
  if (rows) r.train = data::load_dataset(f.at("train_file"), with_field(r.options, f, "train_file_field"));
  if (f.count("validation_file"))
    r.eval = rows ? data::load_dataset(f.at("validation_file"), with_field(r.options, f, "validation_file_field"))
                  : data::Dataset{};
  KILN_CHECK(rows || !f.count("validation_split_percentage"), "train: --validation_split_percentage is not read by ",
             "--task ", name, "; pass --validation_file");
  if (!f.count("validation_split_percentage")) return r;
  // run_mlm / run_clm: train[:p%] validates, train[p%:] trains
  const int64_t pct = int_flag(f, "validation_split_percentage", 5);
  KILN_CHECK(pct < 100, "train: --validation_split_percentage must be below 100, got ", pct);
  if (r.eval) {
    std::fprintf(stderr, "kiln train: warning: --validation_split_percentage is ignored: --validation_file is given\n");
    return r;
  }
  // datasets' percent slices round to the closest row (ties to even, as Python's round).
  const auto cut = static_cast<size_t>(std::nearbyint(static_cast<double>(r.train.rows.size()) * pct / 100.0));
  KILN_CHECK(cut > 0 && cut < r.train.rows.size(), "train: --validation_split_percentage ", pct, " of ",
             r.train.rows.size(), " rows leaves ", cut, " for validation and ", r.train.rows.size() - cut,
             " for training; both need rows");
  r.eval = r.train;
  r.eval->rows.resize(cut);
  r.train.rows.erase(r.train.rows.begin(), r.train.rows.begin() + static_cast<std::ptrdiff_t>(cut));
  r.eval->source = r.train.source + " [:" + std::to_string(pct) + "%]";
  return r;
}

// Every replica in this process builds its own copy of the model (and its
// gradients and optimizer state): a count whose f32 weights and gradients
// alone exceed the memory is refused before the copies are made, not left to the
// out-of-memory killer. (A LoRA base is shared between replicas, so its
// runs are not bounded this way.)
void check_replica_memory(const models::PretrainedConfig& config, int64_t replicas, bool lora) {
  if (replicas <= 1 || lora) return;
  long double parameters = 0;
  for (const auto& t : config.size_terms()) parameters += t.parameters;
  const long double need = parameters * 8.0L * static_cast<long double>(replicas);
  const long double have = static_cast<long double>(host_memory::physical_bytes());
  KILN_CHECK(have == 0 || need <= have, "train: --num_replicas ", replicas, ": as many copies of the model's ",
             static_cast<double>(parameters), " parameters need ", static_cast<double>(need / 1e9),
             " GB for f32 weights and gradients alone, more than this machine's ", static_cast<double>(have / 1e9),
             " GB");
}

// What a replica's model is made from.
struct ModelRecipe {
  const std::map<std::string, std::string>& flags;
  const train::TrainingArguments& args;
  const models::PretrainedConfig& config;  // the checkpoint's, the preset or the config file
  const cli::TrainTask& task;
  const cli::TaskContext& ctx;
  const std::optional<models::LoraConfig>& lora;
  int64_t resize_vocabulary = 0;  // > 0: the checkpoint's token embeddings resized to it (the tokenizer's size)
};

// The model on `device`: the checkpoint with the task's head, or a fresh one
// whose vocabulary is the tokenizer's.
std::unique_ptr<models::PreTrainedModel> make_model(const ModelRecipe& r, Device device) {
  const auto& f = r.flags;
  const int64_t num_labels =
      r.ctx.labels.is_regression ? 1 : static_cast<int64_t>(r.ctx.labels.labels.size());
  std::unique_ptr<models::PreTrainedModel> model;
  if (f.count("model_name_or_path")) {
    models::LoadOptions lo;
    lo.seed = r.args.seed;
    lo.device = device;
    lo.architecture = r.task.architecture(r.config);
    if (r.task.classification_head()) lo.num_labels = num_labels;
    lo.ignore_mismatched_sizes = switch_on(f, "ignore_mismatched_sizes");
    lo.keep_bf16 = r.lora.has_value();  // a frozen base stays bf16 as loaded (docs/lora.md)
    model = models::from_pretrained(f.at("model_name_or_path"), lo);
    if (r.resize_vocabulary > 0) model = models::resize_token_embeddings(*model, r.resize_vocabulary);
  } else {
    std::unique_ptr<models::PretrainedConfig> c = r.config.clone();  // each replica's own, set below
    c->adapt_to_tokenizer(cli::tokenizer_ids(r.ctx.tok));  // from scratch, the vocabulary and ids are the tokenizer's
    if (r.task.classification_head()) c->set_num_labels(num_labels);
    model = models::create_model(r.task.architecture(*c), *c, r.args.seed, device);
  }
  r.task.finish_model(*model, r.ctx);
  if (r.lora) models::apply_lora(*model, *r.lora);  // --use_peft: the base frozen, adapters train
  return model;
}

// The test rows, read before training so a bad file fails at once. As run_glue, classification
// predicts without labels; run_ner and run_qa keep the tags / answers for predict_* scores (a file without
// them is predicted only), seq2seq its targets for predict_loss.
std::shared_ptr<data::Features> test_rows(const cli::TrainTask& task, const data::DatasetOptions& options,
                                          const cli::TaskContext& ctx) {
  data::DatasetOptions topt = options;
  if (!task.reads_test_labels()) topt.label_column = "";
  const data::Dataset test_ds = data::load_dataset(ctx.flags.at("test_file"), with_field(topt, ctx.flags, "test_file_field"));
  return task.test_features(test_ds, ctx);
}

data::CollatorOptions collator_options(const cli::TrainTask& task, const cli::TaskContext& ctx,
                                       const models::PretrainedConfig& config, int64_t seed) {
  const auto& f = ctx.flags;
  data::CollatorOptions co;
  co.pad_token_id = cli::padding_id(ctx.tok, config);
  co.max_length = ctx.max_len;
  co.pad_to_max_length = switch_on(f, "pad_to_max_length");
  co.pad_to_multiple_of = int_flag(f, "pad_to_multiple_of", 0);
  task.collator(co, ctx);
  co.seed = seed;
  co.max_target_length = int_flag(f, "max_target_length", 0);
  return co;
}

// What the master writes after training: the evaluation and --do_predict's
// results, all_results.json, and HF's model card and files.
struct RunOutputs {
  const cli::TrainTask& task;
  const std::string& name;
  const cli::TaskContext& ctx;
  const train::TrainingArguments& args;
  std::shared_ptr<data::Features> eval, test;
  const std::optional<data::Dataset>& eval_rows;
};

void write_outputs(const RunOutputs& o, train::Trainer& trainer, models::PreTrainedModel& model,
                   const std::map<std::string, double>& train_metrics) {
  const auto& f = o.ctx.flags;
  const fs::path out(o.args.output_dir);
  nlohmann::json all = nlohmann::json::object();
  for (auto& [k, v] : train_metrics) all[k] = v;
  if (o.eval) {
    auto m = trainer.evaluate("eval");
    nlohmann::json ej = nlohmann::json::object();
    for (auto& [k, v] : m) ej[k] = all[k] = v;
    ej["epoch"] = trainer.state().epoch;
    io::write_json_file_atomic(out / "eval_results.json", ej);
    for (const char* k : {"eval_accuracy", "eval_exact_match", "eval_exact", "eval_f1", "eval_loss", "perplexity"})
      if (m.count(k)) std::printf("%s = %.4f\n", k, m[k]);
  }
  if (o.test) {
    nlohmann::json pj = nlohmann::json::object();
    o.task.predict(cli::PredictRun{trainer, model, o.test, o.args, out}, o.ctx, pj, all);
    if (!pj.empty()) io::write_json_file_atomic(out / "predict_results.json", pj);
  }
  io::write_json_file_atomic(out / "all_results.json", all);
  cli::ModelCard card{out.filename().empty() ? out.parent_path().filename().string() : out.filename().string(),
                      f.count("model_name_or_path") ? f.at("model_name_or_path") : "",
                      f.count("config_name") ? f.at("config_name") : "", o.name, {f.at("train_file")}, {}, &o.args,
                      trainer.state().log_history, this_replica().world_size()};
  if (o.eval_rows) card.eval_files = {o.eval_rows->source};
  cli::write_hf_output_files(out, card, model, o.ctx.tok);
  std::printf("model saved to %s\n", out.string().c_str());
}

int run_train(const std::vector<std::string>& raw_args) {
  if (print_help(raw_args, "usage: kiln train --task TASK (--model_name_or_path DIR | --config_name PRESET_OR_FILE "
                           "--tokenizer_name DIR)\n                  --train_file F [--validation_file F] "
                           "[--do_predict --test_file F] --output_dir DIR [flags]\n       kiln train --args_file "
                           "run.json [flags]   (the same names as JSON; the command line wins)",
                 true))
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
  const std::string name = choose_task(f);
  const std::unique_ptr<cli::TrainTask> task = cli::make_train_task(name);
  hf_spellings(f, name, "train");
  check_task_flags(f, name);
  task->adapt_flags(f);
  check_run_flags(f, ta, *task, name);
  const std::shared_ptr<train::OutputDirLock> out_lock = lock_output_dir(ta);

  fs::path tok_dir = f.count("tokenizer_name") ? f["tokenizer_name"] : f.count("model_name_or_path") ? f["model_name_or_path"] : "";
  KILN_CHECK(!tok_dir.empty(), "train: --tokenizer_name DIR is required with --config_name");
  cli::TokenizerBundle tok = cli::load_tokenizer(tok_dir);
  RunRows rows = load_rows(f, *task, name);
  // run_glue: --do_eval (set too by an eval_strategy) requires a validation set.
  KILN_CHECK(!ta.do_eval || rows.eval, "train: ",
             ta.eval_strategy != "no" ? "--eval_strategy " + ta.eval_strategy : std::string("--do_eval"),
             " needs a validation set: --validation_file F, or --validation_split_percentage P");
  // The model's config (to fit --max_seq_length to its positions): the
  // checkpoint's, the preset or the config file.
  std::unique_ptr<models::PretrainedConfig> run_config =
      f.count("model_name_or_path") ? models::load_config(fs::path(f["model_name_or_path"]) / "config.json")
                                    : models::preset_config(f["config_name"]);
  if (!run_config) run_config = models::load_config(f["config_name"]);
  const int64_t max_len = task->max_length(f, *run_config, "train");
  const data::LabelMap labels = task->read_labels(f, rows.train, rows.options);
  const cli::TaskContext ctx{f, tok, max_len, labels};

  auto train_f = task->train_features(rows.train, ctx);
  std::shared_ptr<data::Features> eval_f = rows.eval ? task->eval_features(*rows.eval, ctx) : nullptr;
  std::shared_ptr<data::Features> test_f = ta.do_predict ? test_rows(*task, rows.options, ctx) : nullptr;
  if (eval_f && ta.eval_strategy == "no") ta.do_eval = true;

  const data::CollatorOptions co = collator_options(*task, ctx, *run_config, ta.seed);
  int64_t resize_vocabulary = 0;
  if (f.count("model_name_or_path")) {  // from scratch, the model's vocabulary is the tokenizer's
    // Every config.json names it vocab_size.
    int64_t vocab = run_config->to_json().value("vocab_size", int64_t{-1});
    const int64_t tokens = tok.tokenizer.vocab_size();
    if (vocab > 0 && tokens > vocab) {  // run_clm: resize_token_embeddings(len(tokenizer)) when the tokenizer is larger
      std::fprintf(stderr,
                   "kiln train: the tokenizer in %s has %lld tokens, the model's vocabulary %lld: resizing the token "
                   "embeddings to %lld as run_clm does (the new rows start at the mean of the others)\n",
                   tok.dir.string().c_str(), static_cast<long long>(tokens), static_cast<long long>(vocab),
                   static_cast<long long>(tokens));
      resize_vocabulary = vocab = tokens;
    }
    if (vocab > 0)
      check_vocabulary(vocab, (fs::path(f["model_name_or_path"]) / "config.json").string(), tok,
                       {{f["train_file"], train_f.get()},
                        {rows.eval ? rows.eval->source : std::string(), eval_f.get()},
                        {f["test_file"], test_f.get()}},
                       co);
  }
  const train::QaOptions qa_opts = qa_options(f, "train");
  check_replica_memory(*run_config, ta.num_replicas, lora.has_value());
  const ModelRecipe recipe{f, ta, *run_config, *task, ctx, lora, resize_vocabulary};
  const RunOutputs outputs{*task, name, ctx, ta, eval_f, test_f, rows.eval};
  // A first SIGINT / SIGTERM while training stops it after the step in flight, with a checkpoint to resume from.
  train::install_stop_handlers();
  std::atomic<bool> stopped = false;  // every replica stops at the same step
  // --num_replicas N: N replicas in this process (and as many in every
  // process mpirun started); the data and tokenizer above are shared.
  spawn([&](int) {
    auto model = make_model(recipe, train::replica_device(ta));
    train::Trainer trainer(*model, ta, task->trainer_task(), train_f, eval_f, co);
    trainer.set_question_answering(qa_opts);
    task->add_eval_metrics(trainer, *model, ctx);
    std::vector<fs::path> extra_files = tok.files;
    // The model's own generation_config.json (its decoding settings) travels with it, as save_pretrained keeps it.
    if (f.count("model_name_or_path") && fs::exists(fs::path(f["model_name_or_path"]) / "generation_config.json"))
      extra_files.push_back(fs::path(f["model_name_or_path"]) / "generation_config.json");
    trainer.set_extra_files(extra_files);
    auto train_metrics = trainer.train();
    if (trainer.stopped_by_signal()) stopped = true;
    if (trainer.stopped_by_signal() || !this_replica().is_master()) return;
    write_outputs(outputs, trainer, *model, train_metrics);
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

// The label set of a trained classifier (config.json's id2label), or a regression head's (as HF decides:
// problem_type, or one label without it).
data::LabelMap saved_labels(const models::PretrainedConfig& config) {
  if (config.problem_type ? *config.problem_type == "regression" : config.num_labels() == 1)
    return data::LabelMap{{}, true};
  std::vector<std::string> names;
  for (const auto& [id, l] : config.id2label) names.push_back(l);
  return data::LabelMap::from_labels(names);
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
  cli::check_integer_flags(f);  // bad values fail before loading
  fs::path dir = f["model_name_or_path"];
  const fs::path adapter = f.count("adapter") ? fs::path(f["adapter"]) : fs::path();
  cli::TokenizerBundle tok =
      cli::load_tokenizer(f.count("tokenizer_name") ? fs::path(f["tokenizer_name"]) : cli::tokenizer_dir_for(dir, adapter));
  auto model = models::from_pretrained_with_adapter(dir, adapter, {});
  std::string name = eval_task(model->architecture(), f);
  hf_spellings(f, name, "eval");
  if (name == "causal-lm" && cli::is_sft_file(f["validation_file"])) name = "sft";  // conversations: as kiln train
  const std::unique_ptr<cli::TrainTask> task = cli::make_train_task(name);
  task->adapt_flags(f);
  task->saved_flags(f, model->config());
  const data::DatasetOptions dopt = with_field(task_dataset_options(f, *task, name), f, "validation_file_field");
  data::Dataset ds = task->reads_rows() ? data::load_dataset(f["validation_file"], dopt) : data::Dataset{};
  if (task->reads_rows()) task->require_labels(f["validation_file"], ds, dopt, "evaluate against");
  const int64_t max_len = task->max_length(f, model->config(), "eval");
  const data::LabelMap labels = saved_labels(model->config());
  const cli::TaskContext ctx{f, tok, max_len, labels};
  const std::shared_ptr<data::Features> feats = task->eval_features(ds, ctx);
  train::Trainer trainer(*model, ta, task->trainer_task(), nullptr, feats,
                         collator_options(*task, ctx, model->config(), ta.seed));
  trainer.set_question_answering(qa_options(f, "eval"));
  task->add_eval_metrics(trainer, *model, ctx);  // run_summarization's eval under --predict_with_generate: the scores too
  if (ta.predict_with_generate && !task->generates())
    std::fprintf(stderr, "kiln eval: warning: --predict_with_generate is for seq2seq models; ignored\n");
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
