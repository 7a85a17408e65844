#pragma once
// transformers 5's AutoTokenizer does not run tokenizer.json as written: it
// picks a tokenizer class (tokenizer_config.json's `tokenizer_class`, else
// config.json's `model_type`), and the model-specific classes (LlamaTokenizer,
// GemmaTokenizer, Qwen2Tokenizer, GPT2Tokenizer, RobertaTokenizer,
// BertTokenizer, T5Tokenizer, DebertaV2Tokenizer, XLMRobertaTokenizer) rebuild
// the model options, normalizer, pre-tokenizer and decoder from the class and
// tokenizer_config.json's flags, keeping only the file's vocabulary, merges,
// post-processor (which BERT, DeBERTa-v2, T5, XLM-R and RoBERTa replace with
// their own) and added tokens. Every class then adds the special tokens the
// file lacks: its named ones (bos, eos, unk, sep, pad, cls, mask: the config's
// value, else the class default), the config's extra and model-specific ones,
// T5's sentinels. Tokenizer::from_pretrained applies this to tokenizer.json
// before building the pipeline; from_file does not.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kiln::tokenizers {

// The class AutoTokenizer.from_pretrained(dir) instantiates, as transformers
// 5.25 chooses it. "TokenizersBackend" is the generic class that runs
// tokenizer.json as written. `cfg` is tokenizer_config.json (or {}),
// `tokenizer_json` the file's text.
std::string auto_tokenizer_class(const std::filesystem::path& dir, const nlohmann::json& cfg,
                                 const std::string& tokenizer_json);

// Rewrites tokenizer.json `tj` (read from `tj_where`) as `cls` rebuilds it
// from `cfg` (tokenizer_config.json, whose path is `cfg_where`; its key order
// decides the order of model-specific tokens) and `special_map`
// (special_tokens_map.json, or {}), and applies fix_mistral_regex where
// transformers does. A class kiln has no rules for is run as written, with a
// once-only warning naming the file, key and class.
void apply_tokenizer_class(const std::string& cls, nlohmann::json& tj, const nlohmann::json& cfg,
                           const nlohmann::json& special_map, const std::string& cfg_where,
                           const std::string& tj_where);

// The class's named special tokens as transformers resolves them, in its
// order (bos, eos, unk, sep, pad, cls, mask): tokenizer_config.json's value
// (null: none), else special_tokens_map.json's, else the class default. Each
// is {"content", "lstrip", "rstrip", "single_word", "normalized", "special"}.
std::vector<std::pair<std::string, nlohmann::json>> named_special_tokens(const std::string& cls,
                                                                         const nlohmann::json& cfg,
                                                                         const nlohmann::json& special_map,
                                                                         const std::string& cfg_where);

}  // namespace kiln::tokenizers
