#include "kiln/models/generation_config.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::models {

namespace {

// The decoding settings transformers' GenerationConfig reads that kiln
// implements, in its order. Other keys (pad/bos ids, cache settings, custom
// entries) are left to the model config, as the token ids come from there.
constexpr const char* kKeys[] = {"max_length",        "max_new_tokens",      "do_sample",
                                 "num_beams",         "temperature",         "top_k",
                                 "top_p",             "repetition_penalty",  "length_penalty",
                                 "no_repeat_ngram_size", "num_return_sequences", "early_stopping",
                                 "eos_token_id",      "min_length",          "min_new_tokens",
                                 "min_p",             "typical_p",           "epsilon_cutoff",
                                 "eta_cutoff",        "suppress_tokens",     "begin_suppress_tokens",
                                 "bad_words_ids",     "forced_bos_token_id", "forced_eos_token_id",
                                 "sequence_bias",     "exponential_decay_length_penalty",
                                 "renormalize_logits", "remove_invalid_values", "stop_strings",
                                 "max_time",          "encoder_repetition_penalty", "encoder_no_repeat_ngram_size",
                                 "guidance_scale",    "top_h"};
// Settings transformers 5.25's generate() applies and kiln does not build,
// each with the value that changes nothing (null: only null or empty is
// neutral): the watermark's greenlists (seeded through torch's generator)
// and token healing (the prompt re-tokenized). Any other value is named in a
// warning rather than dropped unsaid.
const std::pair<const char*, nlohmann::json> kUnapplied[] = {{"watermarking_config", nullptr}, {"token_healing", false}};

bool neutral(const nlohmann::json& v, const nlohmann::json& unset) {
  if (v.is_null() || ((v.is_array() || v.is_object() || v.is_string()) && v.empty())) return true;
  if (v.is_number() && unset.is_number()) return v.get<double>() == unset.get<double>();
  return v == unset;
}

// The settings of `j` (read from `file`) kiln does not apply, once per file.
void warn_unapplied(const nlohmann::json& j, const std::string& file) {
  std::string named;
  for (const auto& [key, unset] : kUnapplied)
    if (j.contains(key) && !neutral(j[key], unset)) named += std::string(named.empty() ? "" : ", ") + key + " " + j[key].dump();
  if (named.empty()) return;
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(file).second) return;
  std::fprintf(stderr, "kiln: warning: %s: %s not applied (transformers' generate() applies them; kiln does not "
               "build them): continuations may differ from transformers'\n", file.c_str(), named.c_str());
}

// The settings of the decoding methods transformers moved to the Hub (GenerationConfig::HubMethods); diversity_penalty
// only shapes group beam search, which num_beam_groups asks for.
void read_hub_methods(const nlohmann::json& j, const std::string& file, GenerationConfig& g) {
  auto set = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  for (const char* key : {"force_words_ids", "constraints"})
    if (set(key)) g.hub_methods.constrained = key;
  if (set("penalty_alpha")) {
    KILN_CHECK(j["penalty_alpha"].is_number(), file, ": \"penalty_alpha\" must be a number, found ",
               json_found(j["penalty_alpha"]));
    g.hub_methods.penalty_alpha = j["penalty_alpha"].get<double>();
  }
  if (set("num_beam_groups")) {
    KILN_CHECK(j["num_beam_groups"].is_number_integer(), file, ": \"num_beam_groups\" must be an integer, found ",
               json_found(j["num_beam_groups"]));
    g.hub_methods.num_beam_groups = j["num_beam_groups"].get<int64_t>();
  }
  g.hub_methods.dola_layers = set("dola_layers");
}

// Those an older config.json carries, which default_generation_config copies.
constexpr const char* kBeamKeys[] = {"num_beams",          "length_penalty",      "early_stopping",
                                     "num_return_sequences", "repetition_penalty", "no_repeat_ngram_size"};

bool is_ids(const nlohmann::json& v) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_number_integer(); });
}

// The logits processors' and warpers' settings (logits_processors.h); false for another key. An empty list is
// no setting (transformers would refuse an empty bad_words_ids or sequence_bias; nothing is what it asks for).
bool apply_processor_key(const std::string& key, const nlohmann::json& v, const std::string& file,
                         GenerationConfig& g) {
  auto need = [&](bool ok, const char* what) {
    KILN_CHECK(ok, file, ": \"", key, "\" must be ", what, ", found ", json_found(v));
  };
  auto ids = [&]() {
    need(is_ids(v), "a list of token ids");
    return v.get<std::vector<int64_t>>();
  };
  auto flag = [&]() {
    need(v.is_boolean(), "true or false");
    return v.get<bool>();
  };
  if (key == "top_h") {
    need(v.is_number(), "a number");
    g.top_h = v.get<double>();
  } else if (key == "typical_p" || key == "epsilon_cutoff" || key == "eta_cutoff") {
    need(v.is_number(), "a number");
    (key == "typical_p" ? g.typical_p : key == "epsilon_cutoff" ? g.epsilon_cutoff : g.eta_cutoff) = v.get<double>();
  } else if (key == "suppress_tokens" || key == "begin_suppress_tokens") {
    (key == "suppress_tokens" ? g.suppress_tokens : g.begin_suppress_tokens) = ids();
  } else if (key == "bad_words_ids") {
    need(v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return is_ids(e) && !e.empty(); }),
         "a list of token-id lists, none empty (e.g. [[5], [7, 8]])");
    g.bad_words_ids = v.get<std::vector<std::vector<int64_t>>>();
  } else if (key == "forced_bos_token_id") {
    need(v.is_number_integer(), "a token id");
    g.forced_bos_token_id = v.get<int64_t>();
  } else if (key == "forced_eos_token_id") {
    need(v.is_number_integer() || is_ids(v), "a token id or a list of them");
    g.forced_eos_token_ids = v.is_array() ? v.get<std::vector<int64_t>>() : std::vector<int64_t>{v.get<int64_t>()};
  } else if (key == "sequence_bias") {
    const bool pairs = v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) {
      return e.is_array() && e.size() == 2 && is_ids(e[0]) && !e[0].empty() && e[1].is_number();
    });
    need(pairs, "a list of [[token ids], bias] pairs (e.g. [[[5], -2.0], [[7, 8], 1.5]])");
    g.sequence_bias.clear();
    for (const auto& e : v) g.sequence_bias.emplace_back(e[0].get<std::vector<int64_t>>(), e[1].get<double>());
  } else if (key == "exponential_decay_length_penalty") {
    need(v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number(),
         "[start_index, decay_factor] (an integer and a number)");
    g.exponential_decay_length_penalty = std::make_pair(v[0].get<int64_t>(), v[1].get<double>());
  } else if (key == "stop_strings") {
    const bool strings = v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_string(); });
    need(v.is_string() || strings, "a string or a list of strings");
    g.stop_strings = v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
  } else if (key == "max_time") {
    need(v.is_number(), "a number of seconds");
    g.max_time = v.get<double>();
  } else if (key == "encoder_repetition_penalty" || key == "guidance_scale") {
    need(v.is_number(), "a number");
    (key == "guidance_scale" ? g.guidance_scale : g.encoder_repetition_penalty) = v.get<double>();
  } else if (key == "encoder_no_repeat_ngram_size") {
    need(v.is_number_integer(), "an integer");
    g.encoder_no_repeat_ngram_size = v.get<int64_t>();
  } else if (key == "renormalize_logits") {
    g.renormalize_logits = flag();
  } else if (key == "remove_invalid_values") {
    g.remove_invalid_values = flag();
  } else {
    return false;
  }
  return true;
}

void apply_key(const nlohmann::json& j, const std::string& key, const std::string& file, GenerationConfig& g) {
  const nlohmann::json& v = j[key];
  if (apply_processor_key(key, v, file, g)) return;
  auto need = [&](bool ok, const char* what) {
    KILN_CHECK(ok, file, ": \"", key, "\" must be ", what, ", found ", json_found(v));
  };
  auto integer = [&]() {
    need(v.is_number_integer(), "an integer");
    return v.get<int64_t>();
  };
  auto number = [&]() {
    need(v.is_number(), "a number");
    return v.get<double>();
  };
  if (key == "early_stopping") {
    need(v.is_boolean() || v.is_string(), "true, false or \"never\"");
    g.early_stopping = parse_early_stopping(v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.get<std::string>());
  } else if (key == "do_sample") {
    need(v.is_boolean(), "true or false");
    g.do_sample = v.get<bool>();
  } else if (key == "eos_token_id") {
    need(v.is_number_integer() || (is_ids(v) && !v.empty()), "a token id or a list of them");
    g.eos_token_ids = v.is_array() ? v.get<std::vector<int64_t>>() : std::vector<int64_t>{v.get<int64_t>()};
  } else if (key == "max_new_tokens") {
    g.max_new_tokens = integer();
    g.max_length.reset();  // max_new_tokens wins, as in transformers
  } else if (key == "max_length") {
    if (!j.contains("max_new_tokens") || j["max_new_tokens"].is_null()) g.max_length = integer();
  } else if (key == "temperature") {
    g.temperature = number();
  } else if (key == "top_p") {
    g.top_p = number();
  } else if (key == "min_p") {
    g.min_p = number();
  } else if (key == "length_penalty") {
    g.length_penalty = number();
  } else if (key == "repetition_penalty") {
    g.repetition_penalty = number();
  } else if (key == "min_length") {
    g.min_length = integer();
  } else {
    int64_t& field = key == "num_beams"              ? g.num_beams
                     : key == "top_k"                ? g.top_k
                     : key == "num_return_sequences" ? g.num_return_sequences
                     : key == "min_new_tokens"       ? g.min_new_tokens
                                                     : g.no_repeat_ngram_size;
    field = integer();
  }
}

}  // namespace

void apply_generation_setting(const std::string& key, const nlohmann::json& value, const std::string& source,
                              GenerationConfig& g) {
  KILN_CHECK(apply_processor_key(key, value, source, g), source, ": \"", key, "\" is not a logits processor setting");
}

bool generates_text(const std::string& arch) {
  return arch.ends_with("ForCausalLM") || arch == "GPT2LMHeadModel" || arch.ends_with("ForConditionalGeneration");
}

nlohmann::ordered_json default_generation_config(const PreTrainedModel& model) {
  if (!generates_text(model.architecture())) return nullptr;
  const nlohmann::json c = model.config().to_json();
  nlohmann::ordered_json g = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "decoder_start_token_id", "eos_token_id", "pad_token_id"})
    if (c.contains(key) && !c[key].is_null()) g[key] = c[key];
  for (const char* key : kBeamKeys)
    if (c.contains(key) && !c[key].is_null()) g[key] = c[key];
  if (c.contains("transformers_version")) g["transformers_version"] = c["transformers_version"];
  return g;
}

void apply_generation_config(const std::filesystem::path& dir, GenerationConfig& g) {
  if (dir.empty()) return;  // a model built from a preset has no directory (and the working directory is not it)
  std::filesystem::path file = dir / "generation_config.json";
  if (!std::filesystem::exists(file)) file = dir / "config.json";
  if (!std::filesystem::exists(file)) return;
  const nlohmann::json j = read_json_file(file);
  KILN_CHECK(j.is_object(), file.string(), ": expected a JSON object, found ", json_found(j));
  for (const char* key : kKeys)
    if (j.contains(key) && !j[key].is_null()) apply_key(j, key, file.string(), g);
  read_hub_methods(j, file.string(), g);
  warn_unapplied(j, file.string());
}

}  // namespace kiln::models
