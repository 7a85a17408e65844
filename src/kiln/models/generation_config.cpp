#include "kiln/models/generation_config.h"

#include <string>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::models {

namespace {

// The beam-search settings transformers' GenerationConfig reads, in its order.
constexpr const char* kBeamKeys[] = {"num_beams",          "length_penalty",      "early_stopping",
                                     "num_return_sequences", "repetition_penalty", "no_repeat_ngram_size"};

void apply_key(const nlohmann::json& j, const std::string& key, const std::string& file, GenerationConfig& g) {
  const nlohmann::json& v = j[key];
  auto need = [&](bool ok, const char* what) {
    KILN_CHECK(ok, file, ": \"", key, "\" must be ", what, ", found ", json_found(v));
  };
  if (key == "early_stopping") {
    need(v.is_boolean() || v.is_string(), "true, false or \"never\"");
    g.early_stopping = parse_early_stopping(v.is_boolean() ? (v.get<bool>() ? "true" : "false") : v.get<std::string>());
  } else if (key == "length_penalty" || key == "repetition_penalty") {
    need(v.is_number(), "a number");
    (key == "length_penalty" ? g.length_penalty : g.repetition_penalty) = v.get<double>();
  } else {
    need(v.is_number_integer(), "an integer");
    int64_t& field = key == "num_beams" ? g.num_beams
                     : key == "num_return_sequences" ? g.num_return_sequences
                                                     : g.no_repeat_ngram_size;
    field = v.get<int64_t>();
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
  for (const char* key : kBeamKeys)
    if (j.contains(key) && !j[key].is_null()) apply_key(j, key, file.string(), g);
}

}  // namespace kiln::models
