#include "hf_output_files.h"

#include <cstdio>
#include <set>

#include "kiln/core/file.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/json.h"

namespace kiln::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// HF's _maybe_round: a float with more than four decimals to four, anything else as Python prints it.
std::string rounded(const json& v) {
  if (!v.is_number_float()) return v.is_string() ? v.get<std::string>() : v.dump();
  std::string text = v.dump();
  const size_t dot = text.find('.');
  if (dot != std::string::npos && text.find_first_of("eE") == std::string::npos && text.size() - dot - 1 > 4) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", v.get<double>());
    return buf;
  }
  return text;
}

// "eval_f1" -> "F1", "eval_exact_match" -> "Exact Match" (HF's metric names in the card).
std::string metric_title(const std::string& key) {
  std::string out;
  size_t start = key.rfind("eval_", 0) == 0 ? 5 : 0;
  while (start <= key.size()) {
    size_t end = key.find('_', start);
    if (end == std::string::npos) end = key.size();
    std::string part = key.substr(start, end - start);
    if (!part.empty()) {
      for (auto& c : part) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      part[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(part[0])));
      out += (out.empty() ? "" : " ") + part;
    }
    start = end + 1;
  }
  return out;
}

// The evaluation metrics of a log entry the card shows (not its timing or counts).
bool shown_metric(const std::string& key) {
  if (key.rfind("eval_", 0) != 0) return key == "perplexity";
  for (const char* suffix : {"_runtime", "_samples_per_second", "_steps_per_second", "_samples"})
    if (key.ends_with(suffix)) return false;
  return true;
}

using Row = std::vector<std::pair<std::string, std::string>>;

// HF's parse_log_history: a row per evaluation during training (before the summary that has train_runtime)
// with the training loss logged last before it. The summary is the entry with train_runtime and no loss: with
// include_num_input_tokens_seen every training log has a train_runtime too.
std::vector<Row> results_table(const std::vector<json>& history) {
  std::vector<Row> rows;
  std::string training_loss = "No log";
  for (const auto& e : history) {
    if (e.contains("train_runtime") && !e.contains("loss")) break;
    if (e.contains("loss")) training_loss = rounded(e["loss"]);
    if (!e.contains("eval_loss")) continue;
    Row row = {{"Training Loss", training_loss},
                                                            {"Epoch", rounded(e.value("epoch", json(0)))},
                                                            {"Step", rounded(e.value("step", json(0)))},
                                                            {"Validation Loss", rounded(e["eval_loss"])}};
    for (const auto& [k, v] : e.items())
      if (k != "eval_loss" && shown_metric(k)) row.emplace_back(metric_title(k), rounded(v));
    rows.push_back(std::move(row));
  }
  return rows;
}

// The last evaluation's metrics, the loss first (HF's eval_results).
Row final_results(const std::vector<json>& history) {
  Row out;
  for (auto e = history.rbegin(); e != history.rend(); ++e) {
    if (!e->contains("eval_loss")) continue;
    out.emplace_back("Loss", rounded((*e)["eval_loss"]));
    for (const auto& [k, v] : e->items())
      if (k != "eval_loss" && shown_metric(k)) out.emplace_back(metric_title(k), rounded(v));
    break;
  }
  return out;
}

std::string markdown_table(const std::vector<Row>& rows) {
  std::string head = "|", rule = "|", body;
  for (const auto& [name, value] : rows.front()) {
    head += " " + name + " |";
    rule += ":" + std::string(std::max<size_t>(name.size(), 3), '-') + ":|";
  }
  for (const auto& row : rows) {
    body += "|";
    for (const auto& [name, value] : row) body += " " + value + " |";
    body += "\n";
  }
  return head + "\n" + rule + "\n" + body;
}

std::string hyperparameters(const ModelCard& card) {
  const train::TrainingArguments& a = *card.args;
  auto num = [](double v) { return rounded(json(v)); };
  std::string s = "- learning_rate: " + num(a.learning_rate) + "\n" +
                  "- train_batch_size: " + std::to_string(a.per_device_train_batch_size) + "\n" +
                  "- eval_batch_size: " + std::to_string(a.per_device_eval_batch_size) + "\n" +
                  "- seed: " + std::to_string(a.seed) + "\n";
  if (card.replicas > 1) s += "- distributed_type: data parallel\n- num_devices: " + std::to_string(card.replicas) + "\n";
  if (a.gradient_accumulation_steps > 1)
    s += "- gradient_accumulation_steps: " + std::to_string(a.gradient_accumulation_steps) + "\n";
  const int64_t total = a.per_device_train_batch_size * a.gradient_accumulation_steps * card.replicas;
  if (total != a.per_device_train_batch_size) s += "- total_train_batch_size: " + std::to_string(total) + "\n";
  s += "- optimizer: " + a.optim;
  if (a.optim.rfind("adamw", 0) == 0)
    s += " with betas=(" + num(a.adam_beta1) + "," + num(a.adam_beta2) + ") and epsilon=" + num(a.adam_epsilon);
  s += "\n- lr_scheduler_type: " + a.lr_scheduler_type + "\n";
  if (a.warmup_ratio != 0) s += "- lr_scheduler_warmup_ratio: " + num(a.warmup_ratio) + "\n";
  if (a.warmup_steps != 0) s += "- lr_scheduler_warmup_steps: " + std::to_string(a.warmup_steps) + "\n";
  s += a.max_steps > 0 ? "- training_steps: " + std::to_string(a.max_steps) + "\n"
                       : "- num_epochs: " + num(a.num_train_epochs) + "\n";
  if (a.bf16) s += "- mixed_precision_training: bf16\n";
  if (a.label_smoothing_factor != 0) s += "- label_smoothing_factor: " + num(a.label_smoothing_factor) + "\n";
  return s;
}

std::string joined(const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += (s.empty() ? "" : ", ") + fs::path(f).filename().string();
  return s;
}

}  // namespace

std::string model_card_text(const ModelCard& card) {
  const auto table = results_table(card.log_history);
  const Row results = final_results(card.log_history);
  std::set<std::string> metric_names;
  for (size_t i = 1; i < results.size(); ++i) metric_names.insert(results[i].first);
  std::string yaml = "---\nlibrary_name: kiln\n";
  if (!card.base_model.empty()) yaml += "base_model: " + json(card.base_model).dump() + "\n";
  yaml += "tags:\n- generated_from_trainer\n- " + card.task + "\n";
  if (!metric_names.empty()) {
    yaml += "metrics:\n";
    for (const auto& m : metric_names) {
      std::string lower = m;
      for (auto& c : lower) c = static_cast<char>(c == ' ' ? '_' : std::tolower(static_cast<unsigned char>(c)));
      yaml += "- " + lower + "\n";
    }
  }
  yaml += "model-index:\n- name: " + json(card.name).dump() + "\n  results: []\n---\n\n";

  std::string text = yaml + "<!-- This model card was written by kiln train from what the run knew. Proofread and "
                            "complete it, then remove this comment. -->\n\n# " + card.name + "\n\n";
  text += card.base_model.empty() ? "This model was trained from scratch (" + card.config + ")"
                                  : "This model is a fine-tuned version of " + card.base_model;
  text += " on " + (card.train_files.empty() ? std::string("an unknown dataset") : joined(card.train_files)) + ".\n";
  if (!results.empty()) {
    text += "It achieves the following results on the evaluation set" +
            (card.eval_files.empty() ? std::string() : " (" + joined(card.eval_files) + ")") + ":\n";
    for (const auto& [name, value] : results) text += "- " + name + ": " + value + "\n";
  }
  text += "\n## Model description\n\nMore information needed\n\n## Intended uses & limitations\n\nMore information "
          "needed\n\n## Training and evaluation data\n\n";
  text += "Training: " + (card.train_files.empty() ? std::string("unknown") : joined(card.train_files)) + "\n";
  if (!card.eval_files.empty()) text += "Evaluation: " + joined(card.eval_files) + "\n";
  text += "\n## Training procedure\n\n### Training hyperparameters\n\nThe following hyperparameters were used during "
          "training:\n" + hyperparameters(card);
  if (!table.empty()) text += "\n### Training results\n\n" + markdown_table(table);
  text += "\n### Framework versions\n\n- kiln\n";
  return text;
}

ordered_json special_tokens_map(const TokenizerBundle& tok) {
  ordered_json out = ordered_json::object();
  const fs::path config = tok.dir / "tokenizer_config.json";
  if (fs::exists(config)) {
    const ordered_json c = read_ordered_json_file(config);
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
      auto it = c.find(key);
      if (it == c.end()) continue;
      if (it->is_string() && !it->get<std::string>().empty()) out[key] = *it;
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out[key] = (*it)["content"];
    }
    if (auto it = c.find("additional_special_tokens"); it != c.end() && it->is_array() && !it->empty())
      out["additional_special_tokens"] = *it;
  }
  if (!out.empty()) return out;
  // No names in the config: the conventional tokens of the vocabulary, as the tokenizer classes default them.
  const std::vector<std::pair<const char*, std::vector<const char*>>> conventions = {
      {"bos_token", {"<s>", "<|endoftext|>"}}, {"eos_token", {"</s>", "<|endoftext|>"}},
      {"unk_token", {"[UNK]", "<unk>", "<|endoftext|>"}}, {"sep_token", {"[SEP]"}},
      {"pad_token", {"[PAD]", "<pad>"}}, {"cls_token", {"[CLS]"}}, {"mask_token", {"[MASK]", "<mask>"}}};
  for (const auto& [key, names] : conventions)
    for (const char* n : names)
      if (tok.tokenizer.token_to_id(n)) {
        out[key] = n;
        break;
      }
  return out;
}

void write_hf_output_files(const fs::path& dir, const ModelCard& card, const models::PreTrainedModel& /*model*/,
                           const TokenizerBundle& tok) {
  write_file_atomic(dir / "README.md", model_card_text(card));
  if (!fs::exists(tok.dir / "special_tokens_map.json"))
    write_file_atomic(dir / "special_tokens_map.json", special_tokens_map(tok).dump(2) + "\n");
}

}  // namespace kiln::cli
