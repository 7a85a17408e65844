#include "train_common.h"

#include <cstdio>

#include "kiln/core/error.h"

namespace kiln::cli {

namespace fs = std::filesystem;

TokenizerBundle load_tokenizer(const fs::path& dir) {
  KILN_CHECK(fs::is_directory(dir), "tokenizer: '", dir.string(), "' is not a directory");
  TokenizerBundle b{tokenizers::Tokenizer::from_pretrained(dir.string()), dir, {}, 0, -1, {}};
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                        "merges.txt", "spiece.model", "chat_template.jinja"})
    if (fs::exists(dir / f)) b.files.push_back(dir / f);
  auto id = [&](std::initializer_list<const char*> names) -> int64_t {
    for (const char* n : names)
      if (auto i = b.tokenizer.token_to_id(n)) return *i;
    return -1;
  };
  // transformers' tokenizer.pad_token_id where the directory names one.
  const auto& named = b.tokenizer.special_tokens;
  auto pad = named.find("pad_token");
  b.pad_id = pad != named.end() ? int64_t{pad->second.id} : std::max<int64_t>(0, id({"[PAD]", "<pad>"}));
  b.mask_id = id({"[MASK]", "<mask>"});
  for (const char* n : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>"})
    if (auto i = b.tokenizer.token_to_id(n)) b.special_ids.push_back(*i);
  return b;
}

models::TokenizerIds tokenizer_ids(const TokenizerBundle& tok) {
  models::TokenizerIds ids{static_cast<int64_t>(tok.tokenizer.vocab_size()), tok.pad_id, std::nullopt};
  for (const char* end : {"</s>", "[SEP]"})
    if (auto id = tok.tokenizer.token_to_id(end)) {
      ids.eos_id = *id;
      break;
    }
  return ids;
}

int64_t sequence_length(std::optional<int64_t> asked, const models::PretrainedConfig& config, const char* command,
                        int64_t fallback) {
  const int64_t want = asked.value_or(fallback);
  const std::optional<int64_t> limit = config.max_positions();
  if (!limit || want <= *limit) return want;
  if (asked)
    std::fprintf(stderr,
                 "kiln %s: warning: --max_seq_length %lld is larger than the model's %lld positions; using %lld\n",
                 command, static_cast<long long>(want), static_cast<long long>(*limit),
                 static_cast<long long>(*limit));
  return *limit;
}

int64_t padding_id(const TokenizerBundle& tok, const models::PretrainedConfig& config) {
  return config.batch_pad_id().value_or(tok.pad_id);
}

std::string saved_source_prefix(const models::PretrainedConfig& config) {
  const nlohmann::json* p = &config.extra;
  for (const char* key : {"task_specific_params", "summarization", "prefix"}) {
    if (!p->is_object() || !p->contains(key)) return "";
    p = &(*p)[key];
  }
  return p->is_string() ? p->get<std::string>() : "";
}

void save_source_prefix(models::PretrainedConfig& config, const std::string& prefix) {
  nlohmann::json& params = config.extra["task_specific_params"];
  if (!params.is_object()) params = nlohmann::json::object();
  if (!params["summarization"].is_object()) params["summarization"] = nlohmann::json::object();
  params["summarization"]["prefix"] = prefix;
}

data::DatasetOptions dataset_options(const std::map<std::string, std::string>& flags) {
  data::DatasetOptions o;
  if (auto it = flags.find("text_column"); it != flags.end()) o.text_column = it->second;
  if (auto it = flags.find("text_pair_column"); it != flags.end()) o.text_pair_column = it->second;
  if (auto it = flags.find("label_column"); it != flags.end()) o.label_column = it->second;
  return o;
}

}  // namespace kiln::cli
