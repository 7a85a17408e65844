#include "lora_flags.h"

#include <cstdio>
#include <sstream>

#include "flags.h"
#include "kiln/core/error.h"

namespace kiln::cli {

namespace fs = std::filesystem;

const std::vector<std::string> kLoraFlags = {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
                                             "lora_modules_to_save", "lora_train_bias",
                                             "trainable_token_indices"};
const std::vector<std::string> kLoraSwitches = {"use_peft", "use_rslora", "use_dora", "lora_bias"};

namespace {

std::vector<std::string> comma_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    KILN_CHECK(b != std::string::npos, "train: --", flag, " '", text, "' has an empty name; give names separated by commas");
    out.push_back(item.substr(b, e - b + 1));
  }
  KILN_CHECK(!out.empty(), "train: --", flag, " needs at least one module name");
  return out;
}

}  // namespace

std::optional<models::LoraConfig> lora_from_flags(const std::map<std::string, std::string>& f, uint64_t seed) {
  auto on = [&](const char* name) {
    auto it = f.find(name);
    return it != f.end() && it->second == "true";
  };
  if (!on("use_peft")) {
    for (const auto& name : kLoraFlags)
      if (f.count(name)) std::fprintf(stderr, "kiln train: warning: --%s is read only with --use_peft\n", name.c_str());
    for (const char* name : {"use_rslora", "use_dora", "lora_bias"})
      if (on(name)) std::fprintf(stderr, "kiln train: warning: --%s is read only with --use_peft\n", name);
    return std::nullopt;
  }
  models::LoraConfig c;  // TRL's ModelConfig defaults
  c.r = 16;
  c.lora_alpha = 32;
  c.lora_dropout = 0.05;
  c.seed = seed;
  if (f.count("lora_r")) c.r = integer_value("train", "lora_r", f.at("lora_r"), 1);
  if (f.count("lora_alpha")) c.lora_alpha = number_value("train", "lora_alpha", f.at("lora_alpha"), 0);
  if (f.count("lora_dropout")) c.lora_dropout = number_value("train", "lora_dropout", f.at("lora_dropout"), 0, 0.999999);
  if (f.count("lora_target_modules")) c.target_modules = comma_list("lora_target_modules", f.at("lora_target_modules"));
  if (f.count("lora_modules_to_save"))
    c.modules_to_save = comma_list("lora_modules_to_save", f.at("lora_modules_to_save"));
  c.use_rslora = on("use_rslora");
  c.use_dora = on("use_dora");
  c.lora_bias = on("lora_bias");
  if (f.count("trainable_token_indices"))
    for (const auto& id : comma_list("trainable_token_indices", f.at("trainable_token_indices")))
      c.trainable_token_indices[""].push_back(integer_value("train", "trainable_token_indices", id, 0));
  if (f.count("lora_train_bias")) {
    c.bias = f.at("lora_train_bias");
    KILN_CHECK(c.bias == "none" || c.bias == "all" || c.bias == "lora_only", "train: --lora_train_bias must be none, all "
               "or lora_only (PEFT's bias), got '", c.bias, "'");
  }
  return c;
}

fs::path tokenizer_dir_for(const fs::path& model, const fs::path& adapter) {
  const fs::path adapter_dir = !adapter.empty() ? adapter : models::is_adapter_dir(model) ? model : fs::path();
  if (adapter_dir.empty()) return model;
  for (const char* f : {"tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model"})
    if (fs::exists(adapter_dir / f)) return adapter_dir;
  return adapter.empty() ? models::adapter_base_dir(model) : model;
}

}  // namespace kiln::cli
