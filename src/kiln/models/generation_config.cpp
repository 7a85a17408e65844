#include "kiln/models/generation_config.h"

#include <algorithm>
#include <string>
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
                                 "eos_token_id"};
// Those an older config.json carries, which default_generation_config copies.
constexpr const char* kBeamKeys[] = {"num_beams",          "length_penalty",      "early_stopping",
                                     "num_return_sequences", "repetition_penalty", "no_repeat_ngram_size"};

void apply_key(const nlohmann::json& j, const std::string& key, const std::string& file, GenerationConfig& g) {
  const nlohmann::json& v = j[key];
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
    const bool ids = v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_number_integer(); });
    need(v.is_number_integer() || (ids && !v.empty()), "a token id or a list of them");
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
  } else if (key == "length_penalty") {
    g.length_penalty = number();
  } else if (key == "repetition_penalty") {
    g.repetition_penalty = number();
  } else {
    int64_t& field = key == "num_beams"              ? g.num_beams
                     : key == "top_k"                ? g.top_k
                     : key == "num_return_sequences" ? g.num_return_sequences
                                                     : g.no_repeat_ngram_size;
    field = integer();
  }
}

}  // namespace

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
}

}  // namespace kiln::models
