#include "kiln/models/lora.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/defer_init.h"
#include "kiln/tokenizers/regex.h"

namespace kiln::models {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";
constexpr const char* kKeyPrefix = "base_model.model.";
// Far above any useful rank; a bound so a hostile file cannot ask for terabytes.
constexpr int64_t kMaxRank = 65536;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PEFT's list matching: the whole path, or a suffix after a dot.
bool matches_name_list(const std::string& path, const std::vector<std::string>& names) {
  return std::any_of(names.begin(), names.end(),
                     [&](const std::string& n) { return path == n || ends_with(path, "." + n); });
}

// PEFT's patterns are Python regular expressions; PCRE2 reads their syntax
// (lookarounds, (?P<name>...)) and gives up on one that backtracks without end.
tokenizers::Regex compile_regex(const std::string& pattern, const std::string& what) {
  return tokenizers::Regex(pattern, "LoRA: " + what + " is not a valid regular expression");
}

// PEFT's check for LoRA inside a modules_to_save module: a whole component run equal to it.
bool inside_module_to_save(const std::string& path, const std::vector<std::string>& modules_to_save) {
  const std::string dotted = "." + path + ".";
  return std::any_of(modules_to_save.begin(), modules_to_save.end(),
                     [&](const std::string& m) { return dotted.find("." + m + ".") != std::string::npos; });
}

// Whether a parameter belongs to a modules_to_save module: some module path
// above it ends with one of the names (PEFT's key.endswith(target_key)).
bool saved_in_full(const std::string& param, const std::vector<std::string>& modules_to_save) {
  for (size_t dot = param.find('.'); dot != std::string::npos; dot = param.find('.', dot + 1)) {
    const std::string module = param.substr(0, dot);
    for (const auto& m : modules_to_save)
      if (ends_with(module, m)) return true;
  }
  return false;
}

// PEFT's get_pattern_key: the first key whose regex matches the path's end.
template <typename V>
const V* pattern_value(const std::map<std::string, V>& patterns, const std::string& path) {
  for (const auto& [key, value] : patterns)
    if (compile_regex("(.*\\.)?(?:" + key + ")", "pattern key").full_match(path)) return &value;
  return nullptr;
}

enum class Kind { linear, conv1d, embedding };

struct Layer {
  std::string path;
  nn::Module* module;
  int64_t in, out;  // an embedding: rows (the vocabulary), width
  Kind kind;
};

// The model's layers LoRA can adapt (Linear, Conv1D, Embedding), by path.
std::vector<Layer> adaptable_layers(PreTrainedModel& model) {
  std::vector<Layer> out;
  for (auto& [path, m] : model.named_modules()) {
    if (auto* l = dynamic_cast<nn::Linear*>(m))
      out.push_back({path, l, l->weight.shape()[1], l->weight.shape()[0], Kind::linear});
    else if (auto* c = dynamic_cast<nn::Conv1D*>(m))
      out.push_back({path, c, c->weight.shape()[0], c->weight.shape()[1], Kind::conv1d});
    else if (auto* e = dynamic_cast<nn::Embedding*>(m))
      out.push_back({path, e, e->weight.shape()[0], e->weight.shape()[1], Kind::embedding});
  }
  return out;
}

// "all-linear": every linear layer but the output head (PEFT excludes the
// output embeddings, and a sequence classifier's head) and no embedding.
std::vector<std::string> all_linear(const std::vector<Layer>& layers, const std::string& task_type) {
  std::vector<std::string> out;
  for (const auto& l : layers) {
    if (l.path == "lm_head" || l.kind == Kind::embedding) continue;
    if (task_type == "SEQ_CLS" && (l.path == "score" || l.path == "classifier")) continue;
    out.push_back(l.path);
  }
  return out;
}

std::string list_paths(const std::vector<Layer>& layers) {
  std::ostringstream os;
  for (size_t i = 0; i < layers.size(); ++i) os << (i ? ", " : "") << layers[i].path;
  return os.str();
}

std::vector<Layer> linear_layers(const std::vector<Layer>& layers) {
  std::vector<Layer> out;
  std::copy_if(layers.begin(), layers.end(), std::back_inserter(out),
               [](const Layer& l) { return l.kind != Kind::embedding; });
  return out;
}

void add_unique(std::vector<std::string>& list, const std::string& name) {
  if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
}

// Fills task type, targets and modules_to_save the way get_peft_model does.
void resolve(LoraConfig& c, const PreTrainedModel& model, const std::vector<Layer>& layers) {
  if (c.task_type.empty()) c.task_type = peft_task_type(model.architecture());
  if (c.task_type == "SEQ_CLS" || c.task_type == "TOKEN_CLS") {
    add_unique(c.modules_to_save, "classifier");
    add_unique(c.modules_to_save, "score");
  } else if (c.task_type == "QUESTION_ANS") {
    add_unique(c.modules_to_save, "qa_outputs");
  }
  if (!c.target_regex && c.target_modules.empty()) {
    c.target_modules = default_lora_target_modules(model.config().model_type);
    KILN_CHECK(!c.target_modules.empty(), "LoRA: no default target_modules for model_type '",
               model.config().model_type, "': name them (for example all-linear); its linear layers are ",
               list_paths(linear_layers(layers)));
  }
  if (!c.target_regex && c.target_modules.size() == 1 && c.target_modules[0] == "all-linear")
    c.target_modules = all_linear(layers, c.task_type);
}

// The compiled target_modules and exclude_modules regular expressions, where
// given as one, and with layers_to_transform the expressions that read a
// path's layer index (layer_index_patterns), each compiled once per model.
struct Patterns {
  std::optional<tokenizers::Regex> target, exclude;
  std::vector<tokenizers::Regex> layers;
};

// PEFT's readers of the layer index for layers_to_transform: the digits of
// the first ".<name>.<digits>." of a path (a dot before <name> required when
// no pattern is given), <name> one of `patterns` when there are some.
std::vector<tokenizers::Regex> layer_index_patterns(const std::vector<std::string>& patterns) {
  std::vector<tokenizers::Regex> res;
  if (patterns.empty()) res.push_back(compile_regex(R"(.*?\.[^.]*\.(\d+)\.)", "layers_pattern"));
  for (const auto& p : patterns)
    res.push_back(compile_regex("(?:.*?\\.)?(?:" + p + ")\\.(\\d+)\\.", "layers_pattern"));
  return res;
}

// The layer index of `path` by the first of `readers` that matches it.
std::optional<int64_t> layer_index(const std::string& path, const std::vector<tokenizers::Regex>& readers) {
  for (const auto& re : readers) {
    const auto groups = re.match_start(path);
    if (!groups) continue;
    const std::string& digits = groups->back();  // the last group: a pattern may hold groups of its own
    if (!digits.empty() && digits.size() <= 18) return std::stoll(digits);
  }
  return std::nullopt;
}

bool is_target(const LoraConfig& c, const std::string& path, const Patterns& re) {
  if (re.exclude ? re.exclude->full_match(path) : matches_name_list(path, c.exclude_modules)) return false;
  if (inside_module_to_save(path, c.modules_to_save)) return false;
  if (re.target) return re.target->full_match(path);
  if (std::find(c.target_modules.begin(), c.target_modules.end(), path) != c.target_modules.end()) return true;
  if (!matches_name_list(path, c.target_modules)) return false;
  if (c.layers_to_transform.empty()) return true;
  const std::optional<int64_t> layer = layer_index(path, re.layers);
  return layer && std::find(c.layers_to_transform.begin(), c.layers_to_transform.end(), *layer) !=
                      c.layers_to_transform.end();
}

std::string module_kind(nn::Module* m) {
  if (dynamic_cast<nn::LayerNorm*>(m) || dynamic_cast<nn::RMSNorm*>(m)) return "a norm layer";
  return "a container";
}

// A target name that matches a module kiln cannot adapt: PEFT refuses those too.
void check_no_other_matches(PreTrainedModel& model, const LoraConfig& c, const Patterns& re) {
  for (auto& [path, m] : model.named_modules()) {
    if (path.empty() || dynamic_cast<nn::Adaptable*>(m) || dynamic_cast<nn::LoraBranch*>(m) ||
        dynamic_cast<nn::Embedding*>(m))
      continue;
    const bool hit = re.target ? re.target->full_match(path) : matches_name_list(path, c.target_modules);
    KILN_CHECK(!hit, "LoRA: target module '", path, "' is ", module_kind(m),
               ": kiln's LoRA adapts Linear, Conv1D and Embedding layers");
  }
}

// A language model whose output head is its input embeddings (no lm_head layer of its own).
bool ties_head(const PreTrainedModel& model, const std::vector<Layer>& layers) {
  const std::string& arch = model.architecture();
  const bool lm = arch.find("CausalLM") != std::string::npos || arch.find("LMHead") != std::string::npos ||
                  arch.find("ConditionalGeneration") != std::string::npos;
  return lm && std::none_of(layers.begin(), layers.end(), [](const Layer& l) { return l.path == "lm_head"; });
}

// "lm_head" named on a language model whose head is its input embeddings
// (tie_word_embeddings): PEFT adapts the head module transformers builds
// around the shared weight; kiln has no such layer, and skipping the name
// would train or load a different model.
void check_tied_head(const PreTrainedModel& model, const LoraConfig& c, const std::vector<Layer>& layers) {
  const bool named = std::find(c.target_modules.begin(), c.target_modules.end(), "lm_head") != c.target_modules.end();
  KILN_CHECK(!named || !ties_head(model, layers), "LoRA: target module 'lm_head' is the output head, which this ",
             model.architecture(), " ties to its input embeddings (tie_word_embeddings): kiln adapts an untied lm_head only");
}

// T5's shared table: transformers' encoder and decoder hold the table itself,
// so PEFT's branch on "shared" never reaches them; kiln's stacks read the
// module, so the two would compute different models.
void check_embedding_targets(const PreTrainedModel& model, const std::vector<Layer>& chosen) {
  const std::string& type = model.config().model_type;
  for (const auto& l : chosen)
    KILN_CHECK(l.kind != Kind::embedding || !((type == "t5" || type == "mt5") && l.path == "shared"),
               "LoRA: target module 'shared' is T5's shared embedding table, which transformers' encoder and decoder "
               "read without PEFT's LoRA wrapper; kiln does not adapt it");
}

// A saved (fully trained) copy of an embedding table the output head shares:
// PEFT trains a copy for the input side only and leaves the head on the
// original table; kiln's table is one tensor, so it cannot split them.
bool word_table(const Layer& l) {
  return l.kind == Kind::embedding && (ends_with(l.path, "embed_tokens") || ends_with(l.path, "wte") ||
                                       ends_with(l.path, "word_embeddings") || l.path == "shared");
}

void check_tied_saved_embedding(const PreTrainedModel& model, const LoraConfig& c, const std::vector<Layer>& layers) {
  if (!ties_head(model, layers)) return;
  for (const auto& l : layers)
    KILN_CHECK(!word_table(l) || !saved_in_full(l.path + ".weight", c.modules_to_save), "LoRA: modules_to_save names '",
               l.path, "', the input embeddings this ", model.architecture(),
               " ties to its output head (tie_word_embeddings): PEFT trains a copy for the input side only, which "
               "kiln's single table cannot; use an untied model, or target the layer with LoRA instead");
}

// The paths of the layers that have a LoRA branch.
std::set<std::string> adapted_layers(const PreTrainedModel& model) {
  std::set<std::string> out;
  for (auto& [name, p] : model.named_parameters())
    for (const std::string suffix : {".lora_A.weight", ".lora_embedding_A"})
      if (ends_with(name, suffix)) out.insert(name.substr(0, name.size() - suffix.size()));
  return out;
}

// Whether parameter `name` is a bias PEFT's `bias` setting trains and saves:
// any ("all"), or one of an adapted layer's own ("lora_only").
bool trained_bias(const std::string& name, const LoraConfig& c, const std::set<std::string>& adapted) {
  if (c.bias == "none" || !(name == "bias" || ends_with(name, ".bias"))) return false;
  return c.bias == "all" || (name != "bias" && adapted.count(name.substr(0, name.size() - 5)));
}

// PEFT's file key of a trained bias: an adapted layer's under its "base_layer".
std::string bias_key(const std::string& name, const std::set<std::string>& adapted) {
  const std::string layer = name == "bias" ? "" : name.substr(0, name.size() - 5);
  return kKeyPrefix + (adapted.count(layer) ? layer + ".base_layer.bias" : name);
}

// PEFT's checks of `bias` and `lora_bias`; `where` names the file or the API.
void check_bias_settings(const LoraConfig& c, const std::string& where) {
  KILN_CHECK(c.bias == "none" || c.bias == "all" || c.bias == "lora_only", where,
             "'bias' must be \"none\", \"all\" or \"lora_only\", got \"", c.bias, "\"");
  KILN_CHECK(!(c.lora_bias && c.use_dora), where,
             "'lora_bias' true is not supported with 'use_dora' true (PEFT refuses it: DoRA's branch has no bias)");
}

// Freezes the base and leaves the branches (attached already), the
// modules_to_save and the biases `bias` names trainable.
void set_trainable(PreTrainedModel& model, const LoraConfig& c) {
  const std::set<std::string> adapted = adapted_layers(model);
  std::vector<Tensor> widen;  // a saved module loaded bf16 (LoadOptions::keep_bf16) trains in f32
  for (auto& [name, p] : model.named_parameters()) {
    const bool train = saved_in_full(name, c.modules_to_save) || name.find("lora_") != std::string::npos ||
                       ends_with(name, ".trainable_tokens_delta") || trained_bias(name, c, adapted);
    if (train && p.dtype() == DType::bf16) widen.push_back(p);
    else if (p.requires_grad() != train) p.requires_grad_(train);
  }
  std::vector<Tensor> wide;
  for (const auto& p : widen) wide.push_back(cast(p, DType::f32));
  nn::materialize(wide);
  for (size_t i = 0; i < widen.size(); ++i) {
    widen[i].set_data(wide[i]);  // frozen, so it takes f32
    widen[i].requires_grad_(true);
  }
}

}  // namespace

std::vector<std::string> default_lora_target_modules(const std::string& model_type) {
  // PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, for the model types kiln builds.
  static const std::map<std::string, std::vector<std::string>> defaults = {
      {"bert", {"query", "value"}},       {"roberta", {"query", "value"}}, {"gpt2", {"c_attn"}},
      {"t5", {"q", "v"}},                 {"mt5", {"q", "v"}},             {"llama", {"q_proj", "v_proj"}},
      {"mistral", {"q_proj", "v_proj"}},  {"mixtral", {"q_proj", "v_proj"}}, {"qwen2", {"q_proj", "v_proj"}},
      {"qwen3", {"q_proj", "v_proj"}},    {"gemma", {"q_proj", "v_proj"}}, {"gemma2", {"q_proj", "v_proj"}},
      {"gemma3_text", {"q_proj", "v_proj"}}, {"distilbert", {"q_lin", "v_lin"}},
      {"deberta-v2", {"query_proj", "value_proj"}},
  };
  auto it = defaults.find(model_type);
  return it == defaults.end() ? std::vector<std::string>{} : it->second;
}

std::string peft_task_type(const std::string& architecture) {
  static const std::pair<const char*, const char*> by_suffix[] = {
      {"ForSequenceClassification", "SEQ_CLS"}, {"ForTokenClassification", "TOKEN_CLS"},
      {"ForQuestionAnswering", "QUESTION_ANS"}, {"ForCausalLM", "CAUSAL_LM"},
      {"LMHeadModel", "CAUSAL_LM"},             {"ForConditionalGeneration", "SEQ_2_SEQ_LM"},
  };
  for (const auto& [suffix, type] : by_suffix)
    if (ends_with(architecture, suffix)) return type;
  if (ends_with(architecture, "Model")) return "FEATURE_EXTRACTION";
  return "";
}

json LoraConfig::to_json() const {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json targets = target_regex ? json(*target_regex) : json(target_modules);
  // PEFT's lora_alpha is an int; a whole alpha is written as one.
  const json alpha = lora_alpha == std::floor(lora_alpha) && std::abs(lora_alpha) < 1e15
                         ? json(static_cast<int64_t>(lora_alpha))
                         : json(lora_alpha);
  json j{{"alpha_pattern", alpha_pattern},
              {"auto_mapping", nullptr},
              {"base_model_name_or_path", or_null(base_model_name_or_path)},
              {"bias", bias},
              {"fan_in_fan_out", fan_in_fan_out},
              {"inference_mode", true},
              {"init_lora_weights", true},
              {"layer_replication", nullptr},
              {"layers_pattern", layers_pattern.empty() ? json(nullptr) : json(layers_pattern)},
              {"layers_to_transform", layers_to_transform.empty() ? json(nullptr) : json(layers_to_transform)},
              {"loftq_config", json::object()},
              {"lora_alpha", alpha},
              {"lora_dropout", lora_dropout},
              {"megatron_config", nullptr},
              {"megatron_core", "megatron.core"},
              {"modules_to_save", modules_to_save.empty() ? json(nullptr) : json(modules_to_save)},
              {"peft_type", "LORA"},
              {"r", r},
              {"rank_pattern", rank_pattern},
              {"revision", nullptr},
              {"target_modules", targets},
              {"task_type", or_null(task_type)},
              {"use_dora", use_dora},
              {"use_rslora", use_rslora}};
  // Only when used: PEFT before 0.14 has no such fields and refuses unknown ones.
  if (lora_bias) j["lora_bias"] = true;
  if (trainable_token_indices.size() == 1 && trainable_token_indices.count(""))
    j["trainable_token_indices"] = trainable_token_indices.at("");
  else if (!trainable_token_indices.empty())
    j["trainable_token_indices"] = trainable_token_indices;
  if (exclude_regex)
    j["exclude_modules"] = *exclude_regex;
  else if (!exclude_modules.empty())
    j["exclude_modules"] = exclude_modules;
  return j;
}

namespace {

std::vector<std::string> string_list(const json& j, const std::string& key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return {};
  KILN_CHECK(j[key].is_array(), file, ": '", key, "' must be a list of module names, got ", j[key].dump());
  std::vector<std::string> out;
  for (const auto& v : j[key]) {
    KILN_CHECK(v.is_string(), file, ": '", key, "' must hold strings, got ", v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

template <typename T>
T number(const json& j, const std::string& key, T fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  KILN_CHECK(j[key].is_number(), file, ": '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<T>();
}

// Initialisations that rewrite the base layer's weight (PiSSA, CorDA, OLoRA,
// LoftQ, LoRA-GA: W minus the adapter's starting product). PEFT repeats them
// on the base whenever it loads such an adapter, so the adapter's weights
// only give its logits on that rewritten base; kiln loads the base as it is.
void check_initialisation(const json& j, const std::string& file) {
  if (!j.contains("init_lora_weights") || !j["init_lora_weights"].is_string()) return;
  const std::string init = j["init_lora_weights"].get<std::string>();
  std::string lower = init;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  const bool rewrites_base = lower.rfind("pissa", 0) == 0 || lower.rfind("corda", 0) == 0 || lower == "olora" ||
                             lower == "loftq" || lower == "lora_ga";
  KILN_CHECK(!rewrites_base, file, ": 'init_lora_weights' = \"", init,
             "\" is not supported: that initialisation rewrites the base model's weights, and PEFT repeats it on the "
             "base when it loads the adapter, which kiln does not; save the adapter with PEFT's save_pretrained(..., "
             "path_initial_model_for_weight_conversion=DIR) to get a plain LoRA adapter for the original base");
}

// Options kiln does not implement: set to anything but their default, an error.
void check_unsupported(const json& j, const std::string& file) {
  auto is_default = [&](const char* key, const json& fallback) {
    return !j.contains(key) || j[key].is_null() || j[key] == fallback;
  };
  const std::pair<const char*, json> off[] = {
      {"use_qalora", false},
      {"layer_replication", nullptr}, {"target_parameters", nullptr},
      {"alora_invocation_tokens", nullptr}, {"megatron_config", nullptr},
      // PEFT's LoRA variants, each a forward (or extra tensors) of its own.
      {"use_bdlora", nullptr}, {"arrow_config", nullptr}, {"kasa_config", nullptr}, {"monteclora_config", nullptr},
      {"velora_config", nullptr},
      // Adapters on both sides of a tied embedding table; kiln adapts the input side only, as PEFT does without it.
      {"ensure_weight_tying", false},
  };
  for (const auto& [key, fallback] : off)
    KILN_CHECK(is_default(key, fallback), file, ": '", key, "' = ", j[key].dump(),
               " is not supported by kiln's LoRA (it needs ", fallback.dump(), ")");
  check_initialisation(j, file);
}

// trainable_token_indices: a list of token ids (the input embeddings') or
// an object of module name → list of token ids.
void read_token_indices(const json& j, const std::string& file, LoraConfig& c) {
  if (!j.contains("trainable_token_indices") || j["trainable_token_indices"].is_null()) return;
  const json& v = j["trainable_token_indices"];
  auto ids = [&](const json& list, const std::string& key) {
    KILN_CHECK(list.is_array() && !list.empty() &&
                   std::all_of(list.begin(), list.end(), [](const json& e) { return e.is_number_integer(); }),
               file, ": '", key, "' must be a non-empty list of token ids, got ", list.dump());
    return list.get<std::vector<int64_t>>();
  };
  KILN_CHECK(v.is_array() || v.is_object(), file,
             ": 'trainable_token_indices' must be a list of token ids or an object of module name to token ids, got ",
             v.dump());
  if (v.is_array()) {
    c.trainable_token_indices[""] = ids(v, "trainable_token_indices");
    return;
  }
  for (const auto& [name, list] : v.items()) {
    KILN_CHECK(!name.empty(), file, ": 'trainable_token_indices' has an empty module name");
    c.trainable_token_indices[name] = ids(list, "trainable_token_indices." + name);
  }
}

// layers_to_transform (an int or a list of them) and layers_pattern (a string
// or a list of them), with PEFT's LoraConfig checks.
void read_layers(const json& j, const std::string& file, LoraConfig& c) {
  auto given = [&](const char* key) {
    return j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty()) &&
           !(j[key].is_string() && j[key].get<std::string>().empty());
  };
  const bool regex_targets = j.contains("target_modules") && j["target_modules"].is_string();  // all-linear too
  if (given("layers_to_transform")) {
    const json& v = j["layers_to_transform"];
    const json list = v.is_array() ? v : json::array({v});
    for (const auto& i : list) {
      KILN_CHECK(i.is_number_integer(), file, ": 'layers_to_transform' must be a layer index or a list of them, got ",
                 v.dump());
      c.layers_to_transform.push_back(i.get<int64_t>());
    }
    KILN_CHECK(!regex_targets, file, ": 'layers_to_transform' cannot be used when 'target_modules' is a string (",
               j["target_modules"].dump(), "), as in PEFT");
  }
  if (given("layers_pattern")) {
    const json& v = j["layers_pattern"];
    KILN_CHECK(v.is_string() || v.is_array(), file, ": 'layers_pattern' must be a string or a list of them, got ",
               v.dump());
    c.layers_pattern =
        v.is_string() ? std::vector<std::string>{v.get<std::string>()} : string_list(j, "layers_pattern", file);
    KILN_CHECK(!regex_targets, file, ": 'layers_pattern' cannot be used when 'target_modules' is a string (",
               j["target_modules"].dump(), "), as in PEFT");
    KILN_CHECK(!c.layers_to_transform.empty(), file,
               ": 'layers_pattern' is given without 'layers_to_transform', which PEFT refuses");
    for (const auto& p : c.layers_pattern) compile_regex(p, "layers_pattern");
  }
}

}  // namespace

LoraConfig LoraConfig::from_json(const json& j, const std::string& file) {
  KILN_CHECK(j.is_object(), file, ": an adapter config must be a JSON object");
  KILN_CHECK(j.contains("peft_type") && j["peft_type"].is_string(), file, ": 'peft_type' is missing");
  const std::string type = j["peft_type"].get<std::string>();
  KILN_CHECK(type == "LORA", file, ": peft_type '", type, "' is not supported: kiln loads LoRA adapters (peft_type \"LORA\")");
  check_unsupported(j, file);
  LoraConfig c;
  KILN_CHECK(!j.contains("r") || j["r"].is_null() || j["r"].is_number_integer(), file,
             ": 'r' must be a whole number, got ", j["r"].dump());
  c.r = number<int64_t>(j, "r", 8, file);
  KILN_CHECK(c.r > 0 && c.r <= kMaxRank, file, ": 'r' must be in [1, ", kMaxRank, "], got ", c.r);
  c.lora_alpha = number<double>(j, "lora_alpha", 8.0, file);
  c.lora_dropout = number<double>(j, "lora_dropout", 0.0, file);
  KILN_CHECK(c.lora_dropout >= 0 && c.lora_dropout < 1, file, ": 'lora_dropout' must be in [0, 1), got ", c.lora_dropout);
  if (j.contains("target_modules") && j["target_modules"].is_string())
    c.target_regex = j["target_modules"].get<std::string>();
  else
    c.target_modules = string_list(j, "target_modules", file);
  if (c.target_regex && *c.target_regex == "all-linear") {
    c.target_modules = {"all-linear"};
    c.target_regex.reset();
  }
  if (j.contains("exclude_modules") && j["exclude_modules"].is_string())
    c.exclude_regex = j["exclude_modules"].get<std::string>();
  else
    c.exclude_modules = string_list(j, "exclude_modules", file);
  c.modules_to_save = string_list(j, "modules_to_save", file);
  read_layers(j, file, c);
  read_token_indices(j, file, c);
  auto boolean = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    KILN_CHECK(j[key].is_boolean(), file, ": '", key, "' must be true or false, got ", j[key].dump());
    return j[key].get<bool>();
  };
  c.use_rslora = boolean("use_rslora");
  c.use_dora = boolean("use_dora");
  c.fan_in_fan_out = boolean("fan_in_fan_out");
  c.lora_bias = boolean("lora_bias");
  if (j.contains("bias") && !j["bias"].is_null()) {
    KILN_CHECK(j["bias"].is_string(), file, ": 'bias' must be \"none\", \"all\" or \"lora_only\", got ",
               j["bias"].dump());
    c.bias = j["bias"].get<std::string>();
  }
  check_bias_settings(c, file + ": ");
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    KILN_CHECK(j[key].is_object(), file, ": '", key, "' must be an object, got ", j[key].dump());
    for (const auto& [k, v] : j[key].items()) {
      KILN_CHECK(v.is_number(), file, ": '", key, "'.'", k, "' must be a number, got ", v.dump());
      KILN_CHECK(std::string(key) != "rank_pattern" || (v.is_number_integer() && v.get<int64_t>() > 0 &&
                                                         v.get<int64_t>() <= kMaxRank),
                 file, ": 'rank_pattern'.'", k, "' must be a whole number in [1, ", kMaxRank, "], got ", v.dump());
      if (std::string(key) == "rank_pattern")
        c.rank_pattern[k] = v.get<int64_t>();
      else
        c.alpha_pattern[k] = v.get<double>();
    }
  }
  if (j.contains("task_type") && j["task_type"].is_string()) c.task_type = j["task_type"].get<std::string>();
  if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  return c;
}

namespace {

// The layers trainable_token_indices names, each with its rows, as PEFT
// resolves them: "" the input embeddings, a name every layer whose path ends
// with it; a head tied to the table follows the table (the same rows named
// for both, or the head not named). Errors name what PEFT would refuse or
// what kiln's single tied table cannot do.
std::vector<std::pair<Layer, std::vector<int64_t>>> token_targets(const PreTrainedModel& model, const LoraConfig& c,
                                                                    const std::vector<Layer>& layers) {
  std::vector<std::pair<Layer, std::vector<int64_t>>> out;
  const bool tied = ties_head(model, layers);
  const std::vector<int64_t>* table_rows = nullptr;
  for (const auto& [name, rows] : c.trainable_token_indices) {
    const std::string what = "LoRA: trainable_token_indices" + (name.empty() ? "" : " '" + name + "'");
    KILN_CHECK(!rows.empty(), what, " lists no token");
    KILN_CHECK(name.empty() || std::find(c.modules_to_save.begin(), c.modules_to_save.end(), name) ==
                                   c.modules_to_save.end(),
               what, ": '", name, "' is in modules_to_save too; train the layer in full or its tokens, not both (as PEFT)");
    if (tied && name == "lm_head") continue;  // checked below, against the table's rows
    size_t found = 0;
    for (const auto& l : layers) {
      const bool hit = name.empty() ? word_table(l) : ends_with(l.path, name);
      if (!hit) continue;
      KILN_CHECK(l.kind == Kind::embedding || l.path == "lm_head" || ends_with(l.path, ".lm_head"), what, ": '", l.path,
                 "' is no embedding table or output head");
      KILN_CHECK(l.kind != Kind::conv1d, what, ": '", l.path, "' is a Conv1D, which trainable tokens cannot take");
      KILN_CHECK(!(l.kind == Kind::embedding && l.path == "shared" &&
                   (model.config().model_type == "t5" || model.config().model_type == "mt5")),
                 what, ": T5's shared table is read by transformers' encoder and decoder without PEFT's wrapper; kiln "
                 "does not adapt it");
      for (size_t k = 0; k < rows.size(); ++k) {
        KILN_CHECK(rows[k] >= 0 && rows[k] < l.in, what, ": token ", rows[k], " is out of range for ", l.path, " (",
                   l.in, " rows)");
        KILN_CHECK(std::find(rows.begin(), rows.begin() + k, rows[k]) == rows.begin() + k, what, ": token ", rows[k],
                   " is listed twice");
      }
      if (word_table(l)) table_rows = &rows;
      out.emplace_back(l, rows);
      ++found;
    }
    KILN_CHECK(found, what, " names no embedding table or output head of the ", model.architecture(), "; its layers are ",
               list_paths(layers));
  }
  auto head = c.trainable_token_indices.find("lm_head");
  KILN_CHECK(!tied || head == c.trainable_token_indices.end() || (table_rows && *table_rows == head->second),
             "LoRA: trainable_token_indices gives 'lm_head' other tokens than the input embeddings this ",
             model.architecture(), " ties it to (tie_word_embeddings): kiln's single table cannot split them");
  return out;
}

// Trained rows on each layer trainable_token_indices names; a layer LoRA adapts too is an error.
void attach_token_adapters(const std::vector<std::pair<Layer, std::vector<int64_t>>>& targets) {
  NoGradGuard no_grad;
  std::vector<Tensor> fresh;
  for (const auto& [l, rows] : targets) {
    if (auto* e = dynamic_cast<nn::Embedding*>(l.module)) {
      KILN_CHECK(!e->lora(), "LoRA: trainable_token_indices names ", l.path,
                 ", which target_modules adapts too: give the table LoRA or trainable tokens, not both");
      e->set_token_adapter(std::make_shared<nn::TrainableTokens>(e->weight, rows, e->padding_idx));
      fresh.push_back(e->token_adapter()->trainable_tokens_delta);
    } else {
      auto* lin = static_cast<nn::Linear*>(l.module);
      KILN_CHECK(!lin->lora(), "LoRA: trainable_token_indices names ", l.path,
                 ", which target_modules adapts too: give the head LoRA or trainable tokens, not both");
      lin->set_token_adapter(std::make_shared<nn::TrainableTokens>(lin->weight, rows));
      fresh.push_back(lin->token_adapter()->trainable_tokens_delta);
    }
  }
  nn::materialize(fresh);
}

// A fresh branch beside layer `l`, with its rank and alpha (rank_pattern, alpha_pattern).
void attach_branch(const Layer& l, const LoraConfig& c, Generator& init_gen, const std::shared_ptr<Generator>& dropout_gen) {
  const int64_t* rank = pattern_value(c.rank_pattern, l.path);
  const double* alpha = pattern_value(c.alpha_pattern, l.path);
  const int64_t r = rank ? *rank : c.r;
  const double a = alpha ? *alpha : c.lora_alpha;
  KILN_CHECK(r > 0, "LoRA: rank_pattern gives ", l.path, " rank ", r, "; it must be positive");
  const double scaling = c.use_rslora ? a / std::sqrt(static_cast<double>(r)) : a / static_cast<double>(r);
  if (l.kind == Kind::embedding) {
    KILN_CHECK(!c.use_dora, "LoRA: use_dora on the embedding table ", l.path,
               " is not supported (kiln's DoRA adapts Linear and Conv1D layers)");
    KILN_CHECK(!c.lora_bias, "LoRA: lora_bias on the embedding table ", l.path,
               " is not supported (PEFT refuses it too: its embedding branch has no bias)");
    auto* e = static_cast<nn::Embedding*>(l.module);
    e->attach_lora(std::make_shared<nn::EmbeddingLoraBranch>(l.in, l.out, r, scaling, init_gen, e->weight.device()));
    return;
  }
  auto* adaptable = dynamic_cast<nn::Adaptable*>(l.module);
  auto branch = std::make_shared<nn::LoraBranch>(l.in, l.out, r, scaling, c.lora_dropout, dropout_gen, init_gen,
                                                adaptable->stored_weight().device(), c.lora_bias);
  if (c.use_dora) {
    NoGradGuard no_grad;
    branch->enable_dora(adaptable->weight_out_in());
    nn::materialize({branch->lora_magnitude_vector});
  }
  adaptable->attach_lora(std::move(branch));
}

}  // namespace

void apply_lora(PreTrainedModel& model, LoraConfig c) {
  KILN_CHECK(!model.lora_config(), "apply_lora: the model has a LoRA adapter already");
  check_bias_settings(c, "LoRA: ");
  KILN_CHECK(c.r > 0 && c.r <= kMaxRank, "LoRA: r must be in [1, ", kMaxRank, "], got ", c.r);
  KILN_CHECK(c.lora_dropout >= 0 && c.lora_dropout < 1, "LoRA: lora_dropout must be in [0, 1), got ", c.lora_dropout);
  KILN_CHECK(c.layers_to_transform.empty() || !c.target_regex,
             "LoRA: layers_to_transform needs target_modules as a list of names, not a regular expression");
  KILN_CHECK(c.layers_pattern.empty() || !c.layers_to_transform.empty(),
             "LoRA: layers_pattern is given without layers_to_transform");
  std::vector<Layer> layers = adaptable_layers(model);
  resolve(c, model, layers);
  Patterns re;
  if (c.target_regex) re.target = compile_regex(*c.target_regex, "target_modules");
  if (c.exclude_regex) re.exclude = compile_regex(*c.exclude_regex, "exclude_modules");
  if (!c.layers_to_transform.empty()) re.layers = layer_index_patterns(c.layers_pattern);
  check_no_other_matches(model, c, re);
  check_tied_head(model, c, layers);
  check_tied_saved_embedding(model, c, layers);
  std::vector<Layer> chosen;
  for (const auto& l : layers)
    if (is_target(c, l.path, re)) chosen.push_back(l);
  if (chosen.empty()) {
    std::ostringstream want;
    if (c.target_regex) want << "'" << *c.target_regex << "'";
    for (size_t i = 0; i < c.target_modules.size(); ++i) want << (i ? ", " : "") << c.target_modules[i];
    throw Error("LoRA: target_modules " + want.str() + " match no Linear, Conv1D or Embedding layer of the " +
                model.architecture() + "; its layers are " + list_paths(layers));
  }
  check_embedding_targets(model, chosen);
  const auto tokens = token_targets(model, c, layers);
  Generator init_gen(c.seed);
  // Non-owning: the model owns its generator and outlives its branches.
  std::shared_ptr<Generator> dropout_gen(std::shared_ptr<Generator>(), &model.dropout_generator());
  std::string unbiased;  // layers lora_bias cannot be merged into
  for (const auto& l : chosen) {
    attach_branch(l, c, init_gen, dropout_gen);
    if (l.kind == Kind::conv1d) c.fan_in_fan_out = true;  // PEFT sets it for Conv1D targets, with a warning
    if (c.lora_bias && !static_cast<nn::Adaptable*>(l.module)->stored_bias().defined())
      unbiased += (unbiased.empty() ? "" : ", ") + l.path;
  }
  if (!unbiased.empty())
    std::fprintf(stderr, "kiln: warning: LoRA: lora_bias on layers without a bias of their own (%s): the adapter "
                 "cannot be merged into them (PEFT warns the same)\n", unbiased.c_str());
  attach_token_adapters(tokens);
  set_trainable(model, c);
  model.set_lora_config(std::make_shared<const LoraConfig>(std::move(c)));
  model.train(model.is_training());  // the new branches follow the model's mode
}

std::vector<std::pair<std::string, Tensor>> adapter_state(const PreTrainedModel& model) {
  const LoraConfig* c = model.lora_config();
  KILN_CHECK(c, "adapter_state: the model has no LoRA adapter (apply_lora first)");
  const std::set<std::string> adapted = adapted_layers(model);
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model.named_parameters())
    if (name.find("lora_A.") != std::string::npos || name.find("lora_B.") != std::string::npos ||
        ends_with(name, ".lora_embedding_A") || ends_with(name, ".lora_embedding_B") ||
        ends_with(name, ".lora_magnitude_vector") || ends_with(name, ".token_adapter.trainable_tokens_delta") ||
        saved_in_full(name, c->modules_to_save))
      out.emplace_back(kKeyPrefix + name, p);
    else if (trained_bias(name, *c, adapted))
      out.emplace_back(bias_key(name, adapted), p);
  return out;
}

bool is_adapter_dir(const fs::path& dir) { return fs::is_regular_file(dir / kConfigFile); }

namespace {

// A word-embedding table or output head weight, by parameter name.
bool vocabulary_table(const std::string& name) {
  for (const char* t : {"embed_tokens.weight", "wte.weight", "word_embeddings.weight", "lm_head.weight"})
    if (name == t || ends_with(name, std::string(".") + t)) return true;
  return name == "shared.weight";
}

// Whether the model's vocabulary is not that of the base its adapter names
// (resize_token_embeddings): PEFT's check, which kiln makes on a local directory.
bool resized_from_base(const PreTrainedModel& model, const LoraConfig& c) {
  if (c.base_model_name_or_path.empty()) return false;
  const fs::path config = fs::path(c.base_model_name_or_path) / "config.json";
  if (!fs::is_regular_file(config)) return false;
  const json j = read_json_file(config);
  return j.is_object() && j.contains("vocab_size") && j["vocab_size"].is_number_integer() &&
         j["vocab_size"].get<int64_t>() != model.config().vocabulary_size();
}

// PEFT's save_embedding_layers="auto": when target_modules names embed_tokens
// or lm_head (a list holding the name; a regular expression that matches such
// a layer), save_pretrained also writes the base weight of each adapted input
// embedding table and output head, under the layer's "base_layer" infix;
// otherwise, when the vocabulary was resized, the input embeddings and an
// untied head, under "token_adapter.base_layer" where they have trainable tokens.
std::vector<std::pair<std::string, Tensor>> saved_embedding_layers(const PreTrainedModel& model, const LoraConfig& c) {
  auto last = [](const std::string& path) { return path.substr(path.rfind('.') + 1); };
  auto named = [&](const char* n) { return std::find(c.target_modules.begin(), c.target_modules.end(), n) != c.target_modules.end(); };
  const std::set<std::string> adapted = adapted_layers(model);
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params.emplace(name, p);
  const bool targeted = c.target_regex ? std::any_of(adapted.begin(), adapted.end(), [&](const std::string& p) {
    return last(p) == "embed_tokens" || last(p) == "lm_head";
  })
                                       : named("embed_tokens") || named("lm_head");
  std::vector<std::pair<std::string, Tensor>> out;
  if (!targeted || !c.trainable_token_indices.empty()) {  // PEFT: trainable tokens are meant to save space
    if (!resized_from_base(model, c)) return out;
    for (const auto& [name, p] : params) {
      if (!vocabulary_table(name)) continue;
      const std::string layer = name.substr(0, name.size() - std::string(".weight").size());
      const bool tokens = params.count(layer + ".token_adapter.trainable_tokens_delta");
      out.emplace_back(kKeyPrefix + layer + (tokens ? ".token_adapter.base_layer" : adapted.count(layer) ? ".base_layer" : "") +
                           ".weight",
                       p);
    }
    return out;
  }
  for (const auto& path : adapted) {
    const std::string name = last(path);
    const bool table = name == "embed_tokens" || name == "wte" || name == "word_embeddings" || name == "lm_head";
    if (table) out.emplace_back(kKeyPrefix + path + ".base_layer.weight", params.at(path + ".weight"));
  }
  return out;
}

}  // namespace

void save_adapter(const PreTrainedModel& model, const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, dir.string(), ": cannot create directory: ", ec.message());
  auto tensors = adapter_state(model);
  for (auto& t : saved_embedding_layers(model, *model.lora_config())) tensors.push_back(std::move(t));
  // Weights first, config last: a directory with a config always has its weights.
  io::save_safetensors(dir / kWeightsFile, tensors, {{"format", "pt"}});
  io::write_json_file_atomic(dir / kConfigFile, model.lora_config()->to_json());
}

LoraConfig read_adapter_config(const fs::path& dir) {
  const fs::path file = dir / kConfigFile;
  KILN_CHECK(fs::exists(file), file.string(), " is missing: ", dir.string(), " is not a PEFT adapter directory");
  return LoraConfig::from_json(read_json_file(file), file.string());
}

namespace {

// A word-embedding table or output head ("...embed_tokens.weight",
// "lm_head.base_layer.weight") of another row count: a resized vocabulary.
std::string resized_vocabulary(const std::string& key, const Shape& file, const Shape& model) {
  const bool table = key.find("embed_tokens.") != std::string::npos || key.find("lm_head.") != std::string::npos ||
                     key.find("wte.") != std::string::npos || key.find("word_embeddings.") != std::string::npos;
  if (!table || file.size() != 2 || model.size() != 2 || file[1] != model[1] || file[0] == model[0]) return "";
  std::ostringstream os;
  os << ": the adapter's table has a vocabulary of " << file[0] << ", the base model's " << model[0]
     << " (the vocabulary was resized for the adapter): load it with from_pretrained_with_adapter (the CLI's "
        "--adapter), which resizes the base, or call resize_for_adapter before load_adapter";
  return os.str();
}

// The file's tensor `key` into p (shape and kind checked; widened or
// narrowed to p's dtype).
void load_into(io::SafetensorsFile& file, const std::string& key, Tensor& p, const std::string& where,
               const char* mismatch) {
  Tensor t = file.load(key, p.device());
  KILN_CHECK(is_floating(t.dtype()), where, ": tensor '", key, "' holds ", dtype_name(t.dtype()),
             " values; an adapter's weights are floating point (F32, BF16 or F16)");
  const std::string resized = resized_vocabulary(key, t.shape(), p.shape());
  KILN_CHECK(t.shape() == p.shape(), where, ": tensor '", key, "' has shape ", to_string(t.shape()),
             ", the base model needs ", to_string(p.shape()), resized.empty() ? std::string(": ") + mismatch : resized);
  p.assign(cast(t, p.dtype()));
}

// The base parameter a tensor of the adapter file names, or "": PEFT saves
// the base weights of a targeted embed_tokens or lm_head
// (save_embedding_layers, on by default when one is targeted) under the
// layer's "base_layer" infix ("token_adapter.base_layer" for a table with
// trainable tokens), or of an embedding it resized without the infix, and
// loads them back into the base.
std::string base_parameter(const std::string& key) {
  if (key.rfind(kKeyPrefix, 0) != 0) return "";
  std::string name = key.substr(std::string(kKeyPrefix).size());
  for (const std::string infix : {".token_adapter.base_layer", ".base_layer"}) {
    const size_t at = name.find(infix + ".");
    if (at == std::string::npos) continue;
    name.erase(at, infix.size());
    break;
  }
  return name;
}

// PEFT's bias "all" also saves a modules_to_save module's biases as its
// wrapper holds them: under "modules_to_save" (the tensor the module's own
// key holds) and under "original_module" (the base's value, used only with
// the adapter disabled).
bool duplicate_of_saved_module(const std::string& key, const std::set<std::string>& expected) {
  if (key.find(".original_module.") != std::string::npos) return true;
  const size_t infix = key.find(".modules_to_save.");
  return infix != std::string::npos &&
         expected.count(key.substr(0, infix) + key.substr(infix + std::string(".modules_to_save").size()));
}

}  // namespace

void load_adapter_weights(PreTrainedModel& model, const fs::path& dir) {
  const fs::path path = dir / kWeightsFile;
  KILN_CHECK(fs::exists(path) || !fs::exists(dir / "adapter_model.bin"), path.string(),
             " is missing; adapter_model.bin, a PyTorch pickle, is there, which kiln does not read: save the adapter "
             "with PEFT's default safe_serialization=True");
  KILN_CHECK(fs::exists(path), path.string(), " is missing (PEFT writes the adapter's weights there)");
  io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const std::string where = path.string();
  std::set<std::string> expected;
  NoGradGuard no_grad;
  for (auto& [key, p] : adapter_state(model)) {
    expected.insert(key);
    KILN_CHECK(file.find(key), where, ": tensor '", key,
               "' is missing: the adapter does not match the base model (it has no weights for this layer)");
    load_into(file, key, p, where, "the adapter was made for another base model");
  }
  std::map<std::string, Tensor> base;
  for (auto& [name, p] : model.named_parameters())
    if (!expected.count(kKeyPrefix + name)) base.emplace(name, p);
  // A head tied to the table: PEFT's state dict repeats the table under the head's name.
  const std::vector<std::string> tied = model.config().ignored_checkpoint_keys();
  const bool tied_head = ties_head(model, adaptable_layers(model));
  for (const auto& e : file.entries()) {
    if (expected.count(e.name) || duplicate_of_saved_module(e.name, expected)) continue;
    const std::string name = base_parameter(e.name);
    // A head tied to the table: PEFT also saves its copy of the table's trained token rows.
    const bool tied_copy = tied_head && (name == "lm_head.weight" || name.starts_with("lm_head.token_adapter."));
    if (tied_copy || std::find(tied.begin(), tied.end(), name) != tied.end()) continue;
    auto it = base.find(name);
    KILN_CHECK(it != base.end(), where, ": tensor '", e.name, "' names no adapted layer or saved module of this ",
               model.architecture(), ": the adapter does not match the base model");
    load_into(file, e.name, it->second, where,
               "PEFT saves a targeted or resized embedding layer this way, so the adapter was made for a base with "
               "another vocabulary");
  }
}

namespace {

// The vocabulary of the tables an adapter file holds (PEFT saves them after
// resize_token_embeddings), when it is not the model's; 0 when it is.
int64_t adapter_vocabulary(const PreTrainedModel& model, const io::SafetensorsFile& file, const std::string& where) {
  int64_t found = -1;
  std::string first;
  for (const auto& e : file.entries()) {
    if (!vocabulary_table(base_parameter(e.name)) || e.shape.size() != 2) continue;
    KILN_CHECK(found < 0 || found == e.shape[0], where, ": tensors '", first, "' and '", e.name,
               "' hold vocabularies of different sizes (", found, " and ", e.shape[0], " rows)");
    found = e.shape[0];
    first = e.name;
  }
  return found <= 0 || found == model.config().vocabulary_size() ? 0 : found;
}

// `base` rebuilt with a vocabulary of `vocab` ids (resize_token_embeddings);
// the resized tables must come from the adapter file, which is checked here,
// before anything is loaded.
std::unique_ptr<PreTrainedModel> with_vocabulary(PreTrainedModel& base, int64_t vocab, const io::SafetensorsFile& file,
                                                 const std::string& where) {
  for (auto& [name, p] : base.named_parameters()) {
    if (!vocabulary_table(name) || p.dim(0) == vocab) continue;
    const std::string layer = name.substr(0, name.rfind('.'));
    const bool saved = file.find(kKeyPrefix + name) || file.find(kKeyPrefix + layer + ".base_layer.weight") ||
                       file.find(kKeyPrefix + layer + ".token_adapter.base_layer.weight");
    KILN_CHECK(saved, where, ": the adapter's tables have a vocabulary of ", vocab, " (the base model's ",
               base.config().vocabulary_size(), "), but it holds no tensor for '", name,
               "', so that layer cannot be resized (PEFT saves the input and output embeddings of a resized model)");
  }
  return resize_token_embeddings(base, vocab);
}

}  // namespace

std::unique_ptr<PreTrainedModel> resize_for_adapter(std::unique_ptr<PreTrainedModel> model, const fs::path& dir) {
  const fs::path path = dir / kWeightsFile;
  if (!fs::exists(path)) return model;  // load_adapter names what is missing
  io::SafetensorsFile file = io::SafetensorsFile::open(path);
  const int64_t vocab = adapter_vocabulary(*model, file, path.string());
  return vocab ? with_vocabulary(*model, vocab, file, path.string()) : std::move(model);
}

void load_adapter(PreTrainedModel& model, const fs::path& dir) {
  LoraConfig c = read_adapter_config(dir);
  try {
    apply_lora(model, c);
  } catch (const Error& e) {
    throw Error((dir / kConfigFile).string() + ": " + e.what());
  }
  load_adapter_weights(model, dir);
}

fs::path adapter_base_dir(const fs::path& adapter_dir) {
  const LoraConfig c = read_adapter_config(adapter_dir);
  const std::string file = (adapter_dir / kConfigFile).string();
  KILN_CHECK(!c.base_model_name_or_path.empty(), file,
             ": 'base_model_name_or_path' is null, so the base model is unknown: pass it with --model BASE --adapter ",
             adapter_dir.string());
  const fs::path named = c.base_model_name_or_path;
  if (fs::is_regular_file(named / "config.json")) return named;
  const fs::path beside = adapter_dir / named;
  if (named.is_relative() && fs::is_regular_file(beside / "config.json")) return beside;
  throw Error(file + ": 'base_model_name_or_path' is '" + c.base_model_name_or_path +
              "', which is no model directory here (kiln reads local directories, not the Hub): pass the base with "
              "--model BASE --adapter " + adapter_dir.string());
}

std::unique_ptr<PreTrainedModel> from_pretrained_with_adapter(const fs::path& model, const fs::path& adapter,
                                                              const LoadOptions& options) {
  fs::path base = model, adapter_dir = adapter;
  if (adapter_dir.empty() && is_adapter_dir(model)) {
    adapter_dir = model;
    base = adapter_base_dir(model);
  }
  auto m = from_pretrained(base, options);
  if (!adapter_dir.empty()) {
    m = resize_for_adapter(std::move(m), adapter_dir);
    load_adapter(*m, adapter_dir);
  }
  return m;
}

void merge_lora(PreTrainedModel& model) {
  KILN_CHECK(model.lora_config(), "merge_lora: the model has no LoRA adapter");
  NoGradGuard no_grad;
  // The adapted layers first: detaching a branch frees it and its modules,
  // which named_modules() lists after their layer.
  std::vector<nn::Adaptable*> adapted;
  std::vector<nn::Embedding*> tables;
  std::vector<std::pair<Tensor, std::shared_ptr<nn::TrainableTokens>>> token_rows;  // weight, its trained rows
  for (auto& [path, m] : model.named_modules()) {
    if (auto* e = dynamic_cast<nn::Embedding*>(m); e && e->token_adapter()) token_rows.emplace_back(e->weight, e->token_adapter());
    if (auto* l = dynamic_cast<nn::Linear*>(m); l && l->token_adapter()) token_rows.emplace_back(l->weight, l->token_adapter());
    if (auto* a = dynamic_cast<nn::Adaptable*>(m); a && a->lora()) {
      KILN_CHECK(!a->lora()->lora_B->bias.defined() || a->stored_bias().defined(), "merge_lora: ", path,
                 " has a lora_bias but no bias of its own to fold it into (PEFT cannot merge it either); use the "
                 "adapter unmerged");
      adapted.push_back(a);
    }
    if (auto* e = dynamic_cast<nn::Embedding*>(m); e && e->lora()) tables.push_back(e);
  }
  // A bf16 base (LoadOptions::keep_bf16) merges into bf16, as PEFT merges into the base's dtype.
  auto fold = [](Tensor& w, const Tensor& d) { w.assign(cast(w + d, w.dtype())); };
  // A table an output head shares (GPT-2's wte) changes the head too, as PEFT's merge does.
  if (!tables.empty() && ties_head(model, adaptable_layers(model)))
    std::fprintf(stderr,
                 "kiln: warning: merging the embedding adapter into the input embeddings this %s ties to its output "
                 "head changes the head as well, so the merged model's logits differ from the adapted model's (PEFT's "
                 "merge_and_unload does the same)\n",
                 model.architecture().c_str());
  for (nn::Embedding* e : tables) {
    fold(e->weight, e->lora()->delta_weight());
    e->detach_lora();
  }
  for (nn::Adaptable* a : adapted) {
    const nn::LoraBranch& b = *a->lora();
    Tensor delta = b.delta_weight();
    if (b.dora()) {  // W' = m / ‖W + ΔW‖ · (W + ΔW), per output row; folded as W' − W
      const Tensor w = cast(a->weight_out_in(), DType::f32);
      delta = unsqueeze(b.lora_magnitude_vector / b.weight_norm(w), 1) * (w + delta) - w;
    }
    Tensor weight = a->stored_weight();  // a handle on the layer's parameter
    fold(weight, a->fan_in_fan_out() ? transpose(delta, 0, 1) : delta);
    if (b.lora_B->bias.defined()) {
      Tensor bias = a->stored_bias();
      fold(bias, b.lora_B->bias * b.scaling);
    }
    a->detach_lora();
  }
  for (auto& [weight, tokens] : token_rows) weight.assign(tokens->merged(weight));
  for (auto& [path, m] : model.named_modules()) {
    if (auto* e = dynamic_cast<nn::Embedding*>(m)) e->set_token_adapter(nullptr);
    if (auto* l = dynamic_cast<nn::Linear*>(m)) l->set_token_adapter(nullptr);
  }
  model.set_lora_config(nullptr);
  for (auto& [name, p] : model.named_parameters())
    if (!p.requires_grad() && p.dtype() == DType::f32) p.requires_grad_(true);  // bf16 ones stay frozen
}

}  // namespace kiln::models
