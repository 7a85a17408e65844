// What transformers 5.25's model-specific tokenizer classes do to a
// tokenizer.json when AutoTokenizer loads a directory (their __init__ in
// transformers/models/*/tokenization_*.py, and TokenizersBackend's
// convert_to_native_format and __init__), as rewrites of the file's JSON.
#include "kiln/tokenizers/transformers_classes.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::tokenizers {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kGeneric = "TokenizersBackend";
const char* const kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string without_fast(std::string c) {
  if (c.size() > 4 && c.compare(c.size() - 4, 4, "Fast") == 0) c.resize(c.size() - 4);
  return c;
}

bool is_generic(const std::string& c) {
  static const std::set<std::string> generic{"TokenizersBackend", "PreTrainedTokenizer", "PythonBackend",
                                             "MistralCommonBackend"};
  return generic.count(without_fast(c)) > 0;
}

// transformers' TOKENIZER_MAPPING_NAMES for the model types whose class kiln
// rebuilds, plus the common ones that load tokenizer.json as written (the
// Mistral family maps to MistralCommonBackend, which without mistral_common
// is TokenizersBackend) or name a class kiln has no rules for.
std::string registered_class(const std::string& model_type) {
  static const std::map<std::string, std::string> table = {
      {"gemma", "GemmaTokenizer"}, {"gemma2", "GemmaTokenizer"}, {"gemma3", "GemmaTokenizer"},
      {"gemma3_text", "GemmaTokenizer"}, {"gemma3n", "GemmaTokenizer"}, {"gemma3n_text", "GemmaTokenizer"},
      {"recurrent_gemma", "GemmaTokenizer"}, {"t5gemma", "GemmaTokenizer"},
      {"qwen2", "Qwen2Tokenizer"}, {"qwen2_moe", "Qwen2Tokenizer"}, {"qwen2_vl", "Qwen2Tokenizer"},
      {"qwen2_5_vl", "Qwen2Tokenizer"}, {"qwen3", "Qwen2Tokenizer"}, {"qwen3_moe", "Qwen2Tokenizer"},
      {"qwen3_next", "Qwen2Tokenizer"}, {"qwen3_vl", "Qwen2Tokenizer"},
      {"gpt2", "GPT2Tokenizer"}, {"gpt_neo", "GPT2Tokenizer"}, {"gptj", "GPT2Tokenizer"}, {"opt", "GPT2Tokenizer"},
      {"phi", "GPT2Tokenizer"}, {"codegen", "GPT2Tokenizer"}, {"starcoder2", "GPT2Tokenizer"},
      {"roberta", "RobertaTokenizer"}, {"bart", "RobertaTokenizer"}, {"longformer", "RobertaTokenizer"},
      {"roberta-prelayernorm", "RobertaTokenizer"}, {"data2vec-text", "RobertaTokenizer"},
      {"bert", "BertTokenizer"}, {"distilbert", "BertTokenizer"}, {"electra", "BertTokenizer"},
      {"megatron-bert", "BertTokenizer"}, {"squeezebert", "BertTokenizer"}, {"nomic_bert", "BertTokenizer"},
      {"t5", "T5Tokenizer"}, {"mt5", "T5Tokenizer"}, {"switch_transformers", "T5Tokenizer"},
      {"deberta-v2", "DebertaV2Tokenizer"}, {"xlm-roberta", "XLMRobertaTokenizer"}, {"xmod", "XLMRobertaTokenizer"},
      {"mistral", kGeneric}, {"mixtral", kGeneric}, {"ministral", kGeneric}, {"mistral3", kGeneric},
      {"phi3", kGeneric}, {"phimoe", kGeneric}, {"granite", kGeneric}, {"olmo2", kGeneric},
      {"modernbert", kGeneric},
      {"gpt_neox", "GPTNeoXTokenizer"}, {"olmo", "GPTNeoXTokenizer"}, {"albert", "AlbertTokenizer"},
      {"whisper", "WhisperTokenizer"}, {"code_llama", "CodeLlamaTokenizer"}, {"mbart", "MBartTokenizer"},
      {"deberta", "DebertaTokenizer"}, {"bloom", ""}, {"falcon", ""}, {"llama", ""}};
  auto it = table.find(model_type);
  return it == table.end() ? "" : it->second;
}

// Names transformers resolves to one of the classes kiln rebuilds.
std::string canonical_class(const std::string& name) {
  static const std::map<std::string, std::string> aliases = {
      {"ElectraTokenizer", "BertTokenizer"}, {"MobileBertTokenizer", "BertTokenizer"},
      {"LayoutLMTokenizer", "BertTokenizer"}, {"SqueezeBertTokenizer", "BertTokenizer"},
      {"LxmertTokenizer", "BertTokenizer"}, {"DistilBertTokenizer", "BertTokenizer"},
      {"DPRContextEncoderTokenizer", "BertTokenizer"}, {"DPRQuestionEncoderTokenizer", "BertTokenizer"},
      {"DPRReaderTokenizer", "BertTokenizer"}, {"BartTokenizer", "RobertaTokenizer"},
      {"LongformerTokenizer", "RobertaTokenizer"}, {"Phi3Tokenizer", "LlamaTokenizer"}};
  auto it = aliases.find(name);
  return it == aliases.end() ? name : it->second;
}

// MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: their Hub tokenizer_class is
// overridden by the registered one.
bool hub_class_is_wrong(const std::string& model_type) {
  static const std::set<std::string> types{"phi3", "phi3_v", "phimoe", "qwen2", "qwen3_5", "qwen3_5_moe",
                                           "modernbert", "internlm2", "internlm3", "jamba", "llava", "nemotron"};
  return types.count(model_type) > 0;
}

// A special token from the config as transformers' AddedToken: a string, or
// {"content", "lstrip", ...}; null is none.
std::optional<json> added_token(const json& v, const std::string& where, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  json t = {{"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}};
  if (v.is_string()) {
    t["content"] = v;
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    t["content"] = v["content"];
    for (const char* f : {"single_word", "lstrip", "rstrip", "normalized"}) {
      t[f] = json_value(v, f, false, where + ": '" + key + "'");
    }
  } else {
    throw Error(detail::concat(where, ": '", key, "': expected a string or {\"content\": ...}, found ",
                               json_found(v)));
  }
  return t;
}

// The class's defaults for its named special tokens (nullptr: none).
// The post-processor a class sets after its __init__ (File: the file's).
enum class Post { File, Bert, DebertaV2, T5, XlmRoberta, Roberta };

struct ClassRule {
  const char* model_type;  // the model tokenizer.json must hold: "BPE", "Unigram", "WordPiece"
  std::map<std::string, const char*> defaults;
  // nullptr: a subclass without its own __init__ (ConvBertTokenizer), which
  // keeps the file's pipeline and only brings its base class's defaults.
  void (*rebuild)(json& tj, const json& cfg, const std::string& where);
  Post post = Post::File;
};

json metaspace(const std::string& scheme, bool split) {
  return {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
}

json replace(const std::string& from, const std::string& to, bool regex = false) {
  return {{"type", "Replace"}, {"pattern", {{regex ? "Regex" : "String", from}}}, {"content", to}};
}

json byte_level(bool add_prefix_space, bool use_regex = true) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// A BPE model rebuilt from the file's vocab and merges with the class's options.
void set_bpe(json& model, std::optional<std::string> unk, bool fuse_unk, bool byte_fallback) {
  model["dropout"] = nullptr;
  model["unk_token"] = unk ? json(*unk) : json(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = fuse_unk;
  model["byte_fallback"] = byte_fallback;
  model["ignore_merges"] = false;
}

std::string cfg_string(const json& cfg, const char* key, const std::string& def, const std::string& where) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return def;
  if (it->is_object() && it->contains("content")) return json_value<std::string>(*it, "content", where);
  return json_value<std::string>(cfg, key, where);
}

// The file's precompiled charsmap, which SentencePiece-based classes keep.
std::optional<json> precompiled(const json& tj) {
  const json* n = tj.contains("normalizer") ? &tj["normalizer"] : nullptr;
  if (!n || !n->is_object()) return std::nullopt;
  std::vector<const json*> list{n};
  if (n->value("type", "") == "Sequence" && n->contains("normalizers") && (*n)["normalizers"].is_array()) {
    list.clear();
    for (const json& e : (*n)["normalizers"]) list.push_back(&e);
  }
  for (const json* e : list) {
    if (e->is_object() && e->value("type", "") == "Precompiled" && e->contains("precompiled_charsmap")) return *e;
  }
  return std::nullopt;
}

void rebuild_llama(json& tj, const json& cfg, const std::string& where) {
  const bool prefix = json_value(cfg, "add_prefix_space", true, where);
  const bool legacy = json_value(cfg, "legacy", false, where);
  set_bpe(tj["model"], std::nullopt, true, true);
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = metaspace(prefix ? (legacy ? "always" : "first") : "never", false);
  json dec = json::array({replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
}

void rebuild_gemma(json& tj, const json& cfg, const std::string& where) {
  set_bpe(tj["model"], cfg_string(cfg, "unk_token", "<unk>", where), true, true);
  tj["normalizer"] = replace(" ", kSpace);
  tj["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"},
                         {"invert", false}};
  tj["decoder"] = {{"type", "Sequence"},
                   {"decoders", json::array({replace(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
}

void rebuild_qwen2(json& tj, const json& cfg, const std::string& where) {
  static const char* const pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  set_bpe(tj["model"], std::nullopt, false, false);
  tj["normalizer"] = {{"type", "NFC"}};
  tj["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                    byte_level(json_value(cfg, "add_prefix_space", false, where), false)})}};
  tj["decoder"] = byte_level(true);
}

// GPT2Tokenizer and RobertaTokenizer: byte-level BPE, no normalizer.
void rebuild_byte_level(json& tj, const json& cfg, const std::string& where) {
  set_bpe(tj["model"], std::nullopt, false, false);
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = byte_level(json_value(cfg, "add_prefix_space", false, where));
  tj["decoder"] = byte_level(true);
}

void rebuild_bert(json& tj, const json& cfg, const std::string& where) {
  json& m = tj["model"];
  m["unk_token"] = cfg_string(cfg, "unk_token", "[UNK]", where);
  m["continuing_subword_prefix"] = "##";
  m["max_input_chars_per_word"] = 100;
  json strip = nullptr;
  if (auto s = detail::json_field<bool>(cfg, "strip_accents", where)) strip = *s;
  tj["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", true},
                      {"handle_chinese_chars", json_value(cfg, "tokenize_chinese_chars", true, where)},
                      {"strip_accents", strip}, {"lowercase", json_value(cfg, "do_lower_case", true, where)}};
  tj["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  tj["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
}

// The Unigram unk id: transformers' T5 and XLM-R classes fix it (2 and 3);
// DeBERTa-v2 looks the unk token up among the pieces scored 0.
void set_unigram(json& model, uint32_t unk_id, const std::string& where) {
  const size_t pieces = model.contains("vocab") ? model["vocab"].size() : 0;
  KILN_CHECK(unk_id < pieces, where, ": the tokenizer class's unk_id ", unk_id,
             " is past the end of tokenizer.json's vocabulary of ", pieces, " pieces");
  model["unk_id"] = unk_id;
  model["byte_fallback"] = false;
}

void rebuild_t5(json& tj, const json&, const std::string& where) {
  set_unigram(tj["model"], 2, where);
  auto charsmap = precompiled(tj);
  tj["normalizer"] = charsmap ? *charsmap : json(nullptr);
  tj["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}}, metaspace("always", true)})}};
  tj["decoder"] = metaspace("always", true);
}

void rebuild_xlm_roberta(json& tj, const json& cfg, const std::string& where) {
  set_unigram(tj["model"], 3, where);
  const std::string scheme = json_value(cfg, "add_prefix_space", true, where) ? "always" : "never";
  auto charsmap = precompiled(tj);
  tj["normalizer"] = charsmap ? *charsmap : json(nullptr);
  tj["pre_tokenizer"] = {{"type", "Sequence"},
                         {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}}, metaspace(scheme, true)})}};
  tj["decoder"] = metaspace(scheme, true);
}

void rebuild_deberta_v2(json& tj, const json& cfg, const std::string& where) {
  const std::string unk = cfg_string(cfg, "unk_token", "[UNK]", where);
  uint32_t unk_id = 1;
  const json& vocab = tj["model"]["vocab"];
  for (size_t i = 0; i < vocab.size(); ++i) {
    if (vocab[i].is_array() && vocab[i].size() == 2 && vocab[i][0] == unk && vocab[i][1] == 0.0) {
      unk_id = static_cast<uint32_t>(i);
      break;
    }
  }
  set_unigram(tj["model"], unk_id, where);
  json norm = json::array();
  if (json_value(cfg, "do_lower_case", false, where)) norm.push_back({{"type", "Lowercase"}});
  const json strip_right = {{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}};
  if (auto charsmap = precompiled(tj)) {
    norm.insert(norm.end(), {*charsmap, strip_right, replace(" {2,}", " ", true)});
  } else {
    norm.insert(norm.end(), {replace(R"(\s{2,}|[\n\r\t])", " ", true), {{"type", "NFC"}}, strip_right});
  }
  tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
  const std::string scheme = json_value(cfg, "add_prefix_space", true, where) ? "always" : "first";
  json pre = json::array();
  if (json_value(cfg, "split_by_punct", false, where)) pre.push_back({{"type", "Punctuation"}, {"behavior", "Isolated"}});
  pre.push_back(metaspace(scheme, true));
  tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
  tj["decoder"] = metaspace(scheme, true);
}

const std::map<std::string, ClassRule>& rules() {
  // RoBERTa's and XLM-R's defaults, and BERT's (ConvBERT's too).
  static const std::map<std::string, const char*> roberta_specials = {
      {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"sep_token", "</s>"}, {"cls_token", "<s>"},
      {"unk_token", "<unk>"}, {"pad_token", "<pad>"}, {"mask_token", "<mask>"}};
  static const std::map<std::string, const char*> bert_specials = {
      {"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"},
      {"mask_token", "[MASK]"}};
  static const std::map<std::string, ClassRule> table = {
      {"LlamaTokenizer", {"BPE", {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"}}, rebuild_llama}},
      {"GemmaTokenizer",
       {"BPE",
        {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"},
         {"mask_token", "<mask>"}},
        rebuild_gemma}},
      {"Qwen2Tokenizer",
       {"BPE", {{"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"}},
        rebuild_qwen2}},
      {"GPT2Tokenizer",
       {"BPE", {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"}},
        rebuild_byte_level}},
      {"RobertaTokenizer",
       {"BPE",
        roberta_specials,
        rebuild_byte_level, Post::Roberta}},
      {"BertTokenizer",
       {"WordPiece",
        bert_specials,
        rebuild_bert, Post::Bert}},
      {"T5Tokenizer", {"Unigram", {{"eos_token", "</s>"}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}}, rebuild_t5,
        Post::T5}},
      {"XLMRobertaTokenizer",
       {"Unigram",
        roberta_specials,
        rebuild_xlm_roberta, Post::XlmRoberta}},
      {"DebertaV2Tokenizer",
       {"Unigram",
        {{"bos_token", "[CLS]"}, {"eos_token", "[SEP]"}, {"unk_token", "[UNK]"}, {"sep_token", "[SEP]"},
         {"pad_token", "[PAD]"}, {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}},
        rebuild_deberta_v2, Post::DebertaV2}},
      {"ConvBertTokenizer",
       {"WordPiece",
        bert_specials,
        nullptr}},
  };
  return table;
}

std::string model_type_of(const json& model) {
  if (model.contains("type") && model["type"].is_string()) return model["type"].get<std::string>();
  if (model.contains("merges")) return "BPE";
  if (model.contains("vocab") && model["vocab"].is_array()) return "Unigram";
  return model.contains("continuing_subword_prefix") || model.contains("max_input_chars_per_word") ? "WordPiece"
                                                                                                    : "WordLevel";
}

// The model vocabulary's id of `content`.
std::optional<uint32_t> model_id(const json& tj, const std::string& content) {
  const json& model = tj["model"];
  if (!model.contains("vocab")) return std::nullopt;
  const json& vocab = model["vocab"];
  if (vocab.is_object()) {
    if (auto it = vocab.find(content); it != vocab.end() && it->is_number_unsigned()) return it->get<uint32_t>();
  } else if (vocab.is_array()) {
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i].is_array() && !vocab[i].empty() && vocab[i][0] == content) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

// The id of `content` once the added tokens are in: an added token's, else the model's.
std::optional<uint32_t> token_id(const json& tj, const std::string& content) {
  for (const json& a : tj["added_tokens"])
    if (a.value("content", "") == content && a.contains("id") && a["id"].is_number_unsigned()) return a["id"].get<uint32_t>();
  return model_id(tj, content);
}

// tokenizers' AddedVocabulary id for a token the model may lack: its model
// id, else one past the largest of the model's size and the added ids.
uint32_t next_added_id(const json& tj, const std::string& content) {
  if (auto id = model_id(tj, content)) return *id;
  const size_t model_size = tj["model"].contains("vocab") ? tj["model"]["vocab"].size() : 0;
  std::optional<uint64_t> max_added;
  for (const json& a : tj["added_tokens"])
    if (a.contains("id") && a["id"].is_number_unsigned())
      max_added = std::max(max_added.value_or(0), a["id"].get<uint64_t>());
  if (!max_added) return static_cast<uint32_t>(model_size);
  return static_cast<uint32_t>(*max_added >= model_size || model_size == 0 ? *max_added + 1 : model_size);
}

// Adds `token` unless an added token has its content already.
void add_if_missing(json& tj, json token) {
  for (const json& a : tj["added_tokens"])
    if (a.value("content", "") == token["content"]) return;
  token["id"] = next_added_id(tj, token["content"].get<std::string>());
  tj["added_tokens"].push_back(std::move(token));
}

// The config's extra special tokens (extra_special_tokens, or the older
// additional_special_tokens; special_tokens_map.json's when the config has
// neither): a list, or an object of name -> token; null when none.
const json* extra_special_tokens(const json& cfg, const json& special_map) {
  for (const json* src : {&cfg, &special_map})
    for (const char* key : {"extra_special_tokens", "additional_special_tokens"})
      if (src->contains(key) && ((*src)[key].is_array() || (*src)[key].is_object())) return &(*src)[key];
  return nullptr;
}

// transformers 5's model-specific special tokens, in the config file's order:
// its other keys ending in "_token" whose value is a string (Gemma 3's
// "image_token", ...), then an object-valued extra_special_tokens.
std::vector<std::pair<std::string, json>> model_specific_tokens(const std::string& cfg_path, const json* extra) {
  static const std::set<std::string> named{"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};
  std::vector<std::pair<std::string, json>> out;
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  if (fs::exists(cfg_path)) cfg = read_ordered_json_file(cfg_path);
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& k = it.key();
    if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0 && !named.count(k) && it->is_string())
      out.emplace_back(k, it->get<std::string>());
  }
  if (!extra || !extra->is_object()) return out;
  auto ordered = cfg.find("extra_special_tokens");
  if (ordered != cfg.end() && ordered->is_object()) {
    for (auto it = ordered->begin(); it != ordered->end(); ++it)
      out.emplace_back("extra_special_tokens", json::parse(it->dump()));
  } else {
    for (auto it = extra->begin(); it != extra->end(); ++it) out.emplace_back("extra_special_tokens", *it);
  }
  return out;
}

// T5's <extra_id_N> sentinels, which T5Tokenizer appends to the extra special
// tokens unless the list has some already.
void add_t5_sentinels(json& tj, const json& cfg, const json* extra, const std::string& where) {
  if (extra)
    for (const json& t : *extra)
      if ((t.is_string() ? t.get<std::string>() : t.value("content", "")).find("<extra_id_") != std::string::npos) return;
  const int64_t extra_ids = json_value<int64_t>(cfg, "extra_ids", 100, where);
  KILN_CHECK(extra_ids >= 0 && extra_ids <= (int64_t{1} << 20), where, ": 'extra_ids' must be in [0, 2^20], got ",
             extra_ids);
  for (int64_t i = 0; i < extra_ids; ++i)
    add_if_missing(tj, *added_token("<extra_id_" + std::to_string(i) + ">", where, "extra_ids"));
}

}  // namespace

std::vector<std::pair<std::string, nlohmann::json>> named_special_tokens(const std::string& cls, const json& cfg,
                                                                         const json& special_map,
                                                                         const std::string& where) {
  std::vector<std::pair<std::string, json>> out;
  auto rule = rules().find(cls);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::optional<json> token;
    if (cfg.contains(key)) {
      token = added_token(cfg[key], where, key);
    } else if (special_map.contains(key)) {
      token = added_token(special_map[key], where, key);
    } else if (rule != rules().end()) {
      if (auto d = rule->second.defaults.find(key); d != rule->second.defaults.end())
        token = added_token(d->second, where, key);
    }
    if (token) out.emplace_back(key, *token);
  }
  return out;
}

namespace {

// tokenizer_config.json's added_tokens_decoder ({"id": {"content", ...}}),
// in id order. A class that rebuilds the tokenizer starts from these alone
// (the file's added tokens only when the config has none); the generic class
// adds those the file lacks.
void apply_added_tokens_decoder(json& tj, const json& cfg, bool rebuilt, const std::string& where) {
  auto it = cfg.find("added_tokens_decoder");
  if (it == cfg.end() || it->is_null()) return;
  const std::string w = where + ": 'added_tokens_decoder'";
  KILN_CHECK(it->is_object(), w, ": expected an object of id -> token, found ", json_found(*it));
  std::vector<std::pair<uint64_t, json>> tokens;
  for (auto e = it->begin(); e != it->end(); ++e) {
    char* end = nullptr;
    const uint64_t id = std::strtoull(e.key().c_str(), &end, 10);
    KILN_CHECK(!e.key().empty() && *end == '\0', w, ": key '", e.key(), "' is not a token id");
    const json& v = e.value();
    KILN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), w, "['", e.key(),
               "']: expected {\"content\": ...}, found ", json_found(v));
    const bool special = json_value(v, "special", false, w);
    json t = {{"content", v["content"]}, {"special", special}};
    for (const char* f : {"single_word", "lstrip", "rstrip"}) t[f] = json_value(v, f, false, w);
    t["normalized"] = json_value(v, "normalized", !special, w);
    tokens.emplace_back(id, std::move(t));
  }
  std::sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (rebuilt) tj["added_tokens"] = json::array();
  for (auto& [id, t] : tokens) add_if_missing(tj, std::move(t));
}

// The named special tokens, the extra special tokens and T5's sentinels that
// the file lacks, added as the class's __init__ adds them.
void add_special_tokens(const std::string& cls, json& tj, const json& cfg, const json& special_map,
                        const std::string& where) {
  for (auto& [key, token] : named_special_tokens(cls, cfg, special_map, where)) add_if_missing(tj, token);
  const json* extra = extra_special_tokens(cfg, special_map);
  for (const auto& [key, t] : model_specific_tokens(where, extra))
    if (auto token = added_token(t, where, key)) add_if_missing(tj, *token);
  if (extra && extra->is_array())
    for (const json& t : *extra)
      if (auto token = added_token(t, where, "extra_special_tokens")) add_if_missing(tj, *token);
  if (cls == "T5Tokenizer") add_t5_sentinels(tj, cfg, extra, where);
}

// A TemplateProcessing: "$A" and "$B" are the sequences, any other piece a
// special token; each piece with its type id.
using Pieces = std::vector<std::pair<std::string, int>>;
json template_processing(const Pieces& single, const Pieces& pair,
                         const std::vector<std::pair<std::string, uint32_t>>& specials) {
  auto pieces = [](const Pieces& list) {
    json out = json::array();
    for (const auto& [p, type] : list) {
      if (p == "$A" || p == "$B") {
        out.push_back({{"Sequence", {{"id", p.substr(1)}, {"type_id", type}}}});
      } else {
        out.push_back({{"SpecialToken", {{"id", p}, {"type_id", type}}}});
      }
    }
    return out;
  };
  json tokens = json::object();
  for (const auto& [t, id] : specials) tokens[t] = {{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
  return {{"type", "TemplateProcessing"}, {"single", pieces(single)}, {"pair", pieces(pair)}, {"special_tokens", tokens}};
}

// The post-processor BERT, DeBERTa-v2, T5, XLM-R and RoBERTa set after their
// __init__, over the file's, from their named special tokens.
json class_post_processor(Post post, const std::string& cls, const json& tj, const json& cfg, const json& special_map,
                          const std::string& where) {
  std::map<std::string, std::string> named;
  for (const auto& [key, token] : named_special_tokens(cls, cfg, special_map, where))
    named[key] = token["content"].get<std::string>();
  auto content = [&](const char* key) { return named.count(key) ? named[key] : std::string("None"); };
  auto id = [&](const char* key, std::optional<uint32_t> fallback = std::nullopt) {
    auto i = token_id(tj, content(key));
    if (!i) i = fallback;
    KILN_CHECK(i, where, ": ", cls, " needs the id of its ", key, " '", content(key), "', which is in no vocabulary");
    return *i;
  };
  if (post == Post::Bert || post == Post::DebertaV2) {
    const bool bert = post == Post::Bert;
    const std::string c = content("cls_token"), s = content("sep_token");
    return template_processing({{c, 0}, {"$A", 0}, {s, 0}}, {{c, 0}, {"$A", 0}, {s, 0}, {"$B", 1}, {s, 1}},
                               {{c, id("cls_token", bert ? 2u : 0u)}, {s, id("sep_token", bert ? 3u : 0u)}});
  }
  if (post == Post::T5) {
    return template_processing({{"$A", 0}, {"</s>", 0}}, {{"$A", 0}, {"</s>", 0}, {"$B", 0}, {"</s>", 0}},
                               {{"</s>", id("eos_token")}});
  }
  if (post == Post::XlmRoberta) {
    const std::string b = content("bos_token"), e = content("eos_token");
    return template_processing({{b, 0}, {"$A", 0}, {e, 0}}, {{b, 0}, {"$A", 0}, {e, 0}, {e, 0}, {"$B", 0}, {e, 0}},
                               {{b, id("bos_token")}, {e, id("eos_token")}});
  }
  return {{"type", "RobertaProcessing"},
          {"sep", {content("sep_token"), id("sep_token")}},
          {"cls", {content("cls_token"), id("cls_token")}},
          {"trim_offsets", json_value(cfg, "trim_offsets", true, where)},
          {"add_prefix_space", json_value(cfg, "add_prefix_space", false, where)}};
}

// tokenizers' vocabulary size with the added tokens.
size_t vocab_size(const json& tj) {
  size_t n = tj["model"].contains("vocab") ? tj["model"]["vocab"].size() : 0;
  for (const json& a : tj["added_tokens"])
    if (a.contains("id") && a["id"].is_number_unsigned()) n = std::max<size_t>(n, a["id"].get<size_t>() + 1);
  return n;
}

// transformers' _patch_mistral_regex for a local directory: a tokenizer of
// over 100000 tokens whose config.json is a Mistral model saved before
// transformers 5 (or names no model type) gets Mistral's corrected split
// regex when tokenizer_config.json sets fix_mistral_regex.
void fix_mistral_regex(json& tj, const fs::path& dir, const json& cfg, const std::string& where) {
  if (!json_value(cfg, "fix_mistral_regex", false, where) || vocab_size(tj) <= 100000) return;
  if (!tj.contains("pre_tokenizer") || tj["pre_tokenizer"].is_null() || !fs::exists(dir / "config.json")) return;
  const json mc = read_json_file(dir / "config.json");
  if (!mc.is_object()) return;
  const std::string version = mc.value("transformers_version", "");
  if (!version.empty() && std::atoi(version.c_str()) >= 5) return;
  static const std::set<std::string> mistral{"mistral", "mistral3", "voxtral", "ministral", "pixtral"};
  if (mc.contains("model_type") && mc["model_type"].is_string() && !mistral.count(mc["model_type"].get<std::string>()))
    return;
  static const char* const pattern =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json split = {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  json& pre = tj["pre_tokenizer"];
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      !pre["pretokenizers"].empty()) {
    pre["pretokenizers"][0] = split;
  } else {
    // Metaspace(split=False) loses spaces after a Split; transformers swaps it for ByteLevel.
    json current = pre.value("type", "") == "Metaspace" ? byte_level(false, false) : pre;
    pre = {{"type", "Sequence"}, {"pretokenizers", json::array({split, current})}};
  }
}

// AutoTokenizer.from_pretrained's choice of class, by name.
std::string resolve_class(const fs::path& dir, const json& cfg, const std::string& tokenizer_json) {
  const std::string cfg_where = (dir / "tokenizer_config.json").string();
  std::string model_type, config_class;
  if (fs::exists(dir / "config.json")) {
    const json mc = read_json_file(dir / "config.json");
    if (mc.is_object()) {
      model_type = json_value<std::string>(mc, "model_type", "", (dir / "config.json").string());
      config_class = json_value<std::string>(mc, "tokenizer_class", "", (dir / "config.json").string());
    }
  }
  std::string hub = json_value<std::string>(cfg, "tokenizer_class", "", cfg_where);
  if (hub.empty()) hub = config_class;
  const std::string registered = registered_class(model_type);
  // A Llama class over a byte-level tokenizer.json (Llama 3's repos): the file as written.
  if (!hub.empty() && without_fast(hub) == "LlamaTokenizer" && registered != kGeneric &&
      !hub_class_is_wrong(model_type) && tokenizer_json.find("\"ByteLevel\"") != std::string::npos)
    return kGeneric;
  if (!hub.empty() && !registered.empty() && without_fast(registered) != without_fast(hub)) {
    if (is_generic(registered)) return kGeneric;
    const std::string chosen = hub_class_is_wrong(model_type) ? registered : hub;
    return is_generic(chosen) ? kGeneric : without_fast(chosen);
  }
  if (!hub.empty()) return is_generic(hub) ? kGeneric : without_fast(hub);
  return registered.empty() || is_generic(registered) ? kGeneric : without_fast(registered);
}

}  // namespace

std::string auto_tokenizer_class(const fs::path& dir, const json& cfg, const std::string& tokenizer_json) {
  return canonical_class(resolve_class(dir, cfg, tokenizer_json));
}

void apply_tokenizer_class(const std::string& cls, json& tj, const json& cfg, const json& special_map,
                           const std::string& cfg_where, const std::string& tj_where) {
  auto rule = rules().find(cls);
  if (cls != kGeneric && rule == rules().end()) {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(cls).second)
      std::fprintf(stderr,
                   "kiln: warning: %s: tokenizer class '%s' (tokenizer_config.json 'tokenizer_class' or config.json "
                   "'model_type') is not one kiln rebuilds; running tokenizer.json as written, which can give other "
                   "ids than transformers' AutoTokenizer\n",
                   cfg_where.c_str(), cls.c_str());
  }
  KILN_CHECK(tj.is_object() && tj.contains("model") && tj["model"].is_object(), tj_where, ": no 'model' object");
  if (!tj.contains("added_tokens") || !tj["added_tokens"].is_array()) tj["added_tokens"] = json::array();
  const bool rebuilt = rule != rules().end() && rule->second.rebuild;
  apply_added_tokens_decoder(tj, cfg, rebuilt, cfg_where);
  if (rebuilt) {
    const std::string found = model_type_of(tj["model"]);
    KILN_CHECK(found == rule->second.model_type, tj_where, ": model.type: ", cls, " (chosen by ", cfg_where,
               ") needs a ", rule->second.model_type, " model, found ", found);
    rule->second.rebuild(tj, cfg, cfg_where);
    // A class rebuilding the tokenizer without a post-processor in the file
    // uses a bare template ("$A:0", "$A:0 $B:1").
    if (!tj.contains("post_processor") || tj["post_processor"].is_null())
      tj["post_processor"] = template_processing({{"$A", 0}}, {{"$A", 0}, {"$B", 1}}, {});
  }
  add_special_tokens(cls, tj, cfg, special_map, cfg_where);
  if (rebuilt && rule->second.post != Post::File)
    tj["post_processor"] = class_post_processor(rule->second.post, cls, tj, cfg, special_map, cfg_where);
  fix_mistral_regex(tj, fs::path(cfg_where).parent_path(), cfg, cfg_where);
}

}  // namespace kiln::tokenizers
