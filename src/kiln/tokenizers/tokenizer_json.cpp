#include "kiln/tokenizers/tokenizer_json.h"

#include <fstream>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/json.h"
#include "kiln/tokenizers/bpe.h"
#include "kiln/tokenizers/unigram.h"
#include "kiln/tokenizers/utf8.h"
#include "kiln/tokenizers/wordlevel.h"
#include "kiln/tokenizers/wordpiece.h"

namespace kiln::tokenizers {

using nlohmann::json;

namespace {

std::string type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& j, const char* key, bool def, const std::string& where) {
  const json* v = field(j, key);
  if (!v) return def;
  KILN_CHECK(v->is_boolean(), where, ".", key, ": expected a boolean, found ", type_name(*v));
  return v->get<bool>();
}

std::optional<bool> get_opt_bool(const json& j, const char* key, const std::string& where) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  KILN_CHECK(v->is_boolean(), where, ".", key, ": expected a boolean, found ", type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> get_opt_string(const json& j, const char* key, const std::string& where) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  KILN_CHECK(v->is_string(), where, ".", key, ": expected a string, found ", type_name(*v));
  return v->get<std::string>();
}

std::string get_string(const json& j, const char* key, const std::string& def,
                       const std::string& where) {
  return get_opt_string(j, key, where).value_or(def);
}

std::string require_string(const json& j, const char* key, const std::string& where) {
  auto s = get_opt_string(j, key, where);
  KILN_CHECK(s, where, ": missing required field '", key, "'");
  return *s;
}

uint64_t get_uint(const json& j, const char* key, uint64_t def, const std::string& where) {
  const json* v = field(j, key);
  if (!v) return def;
  KILN_CHECK(v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0), where,
             ".", key, ": expected a non-negative integer, found ", type_name(*v));
  return v->get<uint64_t>();
}

const json& require(const json& j, const char* key, const std::string& where) {
  const json* v = field(j, key);
  KILN_CHECK(v, where, ": missing required field '", key, "'");
  return *v;
}

char32_t single_char(const std::string& s, const std::string& where) {
  std::u32string u = utf8::to_u32(s);
  KILN_CHECK(u.size() == 1, where, ": expected a single character, found '", s, "'");
  return u[0];
}

std::string type_of(const json& j, const std::string& where) {
  KILN_CHECK(j.is_object(), where, ": expected an object, found ", type_name(j));
  return require_string(j, "type", where);
}

// {"String": "..."} or {"Regex": "..."}
Pattern pattern_from_json(const json& j, const std::string& where) {
  KILN_CHECK(j.is_object(), where, ": expected {\"String\": ...} or {\"Regex\": ...}, found ",
             type_name(j));
  if (auto s = get_opt_string(j, "String", where)) return Pattern::of_string(*s);
  if (auto r = get_opt_string(j, "Regex", where)) return Pattern::of_regex(Regex::from_onig(*r, where));
  throw Error(detail::concat(where, ": expected {\"String\": ...} or {\"Regex\": ...}"));
}

PrependScheme prepend_scheme(const json& j, const std::string& where) {
  if (auto s = get_opt_string(j, "prepend_scheme", where)) {
    if (*s == "always") return PrependScheme::Always;
    if (*s == "first") return PrependScheme::First;
    if (*s == "never") return PrependScheme::Never;
    throw Error(detail::concat(where, ".prepend_scheme: unknown value '", *s,
                               "', expected always, first or never"));
  }
  return get_bool(j, "add_prefix_space", true, where) ? PrependScheme::Always
                                                      : PrependScheme::Never;
}

SpecialToken special_pair(const json& j, const char* key, const std::string& where) {
  const json& v = require(j, key, where);
  KILN_CHECK(v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_number_integer(), where,
             ".", key, ": expected [token, id], found ", json_found(v));
  return {v[0].get<std::string>(), token_id_from_json(v[1], where + "." + key + "[1]")};
}

template <typename T, typename F>
std::vector<T> list_of(const json& j, const char* key, const std::string& where, F make) {
  const json& arr = require(j, key, where);
  KILN_CHECK(arr.is_array(), where, ".", key, ": expected an array, found ", type_name(arr));
  std::vector<T> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    out.push_back(make(arr[i], detail::concat(where, ".", key, "[", i, "]")));
  }
  return out;
}

}  // namespace

uint32_t token_id_from_json(const json& v, const std::string& where) {
  KILN_CHECK(v.is_number_integer(), where, ": expected an integer id, found ", type_name(v));
  const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  KILN_CHECK(!negative && v.get<uint64_t>() < (uint64_t{1} << 24), where, ": id ", excerpt(v.dump()),
             " out of range (expected 0 <= id < 16777216)");
  return static_cast<uint32_t>(v.get<uint64_t>());
}

std::string base64_decode(std::string_view in, const std::string& where) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '=' || c == '\n' || c == '\r') continue;
    int v = val(c);
    KILN_CHECK(v >= 0, where, ": invalid base64 character '", c, "' at offset ", i);
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

NormalizerPtr normalizer_from_json(const json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "BertNormalizer") {
    return std::make_shared<BertNormalizer>(
        get_bool(j, "clean_text", true, where), get_bool(j, "handle_chinese_chars", true, where),
        get_opt_bool(j, "strip_accents", where), get_bool(j, "lowercase", true, where));
  }
  if (type == "NFC") return std::make_shared<UnicodeNormalizer>(unicode::Form::NFC);
  if (type == "NFD") return std::make_shared<UnicodeNormalizer>(unicode::Form::NFD);
  if (type == "NFKC") return std::make_shared<UnicodeNormalizer>(unicode::Form::NFKC);
  if (type == "NFKD") return std::make_shared<UnicodeNormalizer>(unicode::Form::NFKD);
  if (type == "Lowercase") return std::make_shared<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_shared<StripNormalizer>(get_bool(j, "strip_left", true, where),
                                             get_bool(j, "strip_right", true, where));
  }
  if (type == "StripAccents") return std::make_shared<StripAccentsNormalizer>();
  if (type == "Replace") {
    return std::make_shared<ReplaceNormalizer>(
        pattern_from_json(require(j, "pattern", where), where + ".pattern"),
        require_string(j, "content", where));
  }
  if (type == "Prepend") return std::make_shared<PrependNormalizer>(require_string(j, "prepend", where));
  if (type == "Precompiled") {
    std::string blob = base64_decode(require_string(j, "precompiled_charsmap", where),
                                     where + ".precompiled_charsmap");
    if (blob.empty()) return std::make_shared<SequenceNormalizer>(std::vector<NormalizerPtr>{});
    return std::make_shared<PrecompiledNormalizer>(PrecompiledCharsmap(blob, where));
  }
  if (type == "ByteLevel") return std::make_shared<ByteLevelNormalizer>();
  if (type == "Nmt") return std::make_shared<NmtNormalizer>();
  if (type == "Sequence") {
    return std::make_shared<SequenceNormalizer>(
        list_of<NormalizerPtr>(j, "normalizers", where, normalizer_from_json));
  }
  throw Error(detail::concat(where, ": unknown normalizer type '", type,
                             "' (supported: BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, "
                             "Strip, StripAccents, Replace, Prepend, Precompiled, ByteLevel, Nmt, Sequence)"));
}

PreTokenizerPtr pre_tokenizer_from_json(const json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "BertPreTokenizer") return std::make_shared<BertPreTokenizer>();
  if (type == "ByteLevel") {
    return std::make_shared<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", true, where),
                                                   get_bool(j, "use_regex", true, where));
  }
  if (type == "Whitespace") return std::make_shared<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_shared<WhitespaceSplit>();
  if (type == "Metaspace") {
    return std::make_shared<MetaspacePreTokenizer>(
        single_char(get_string(j, "replacement", "\xE2\x96\x81", where), where + ".replacement"),
        prepend_scheme(j, where), get_bool(j, "split", true, where));
  }
  if (type == "Split") {
    return std::make_shared<SplitPreTokenizer>(
        pattern_from_json(require(j, "pattern", where), where + ".pattern"),
        parse_split_behavior(require_string(j, "behavior", where), where + ".behavior"),
        get_bool(j, "invert", false, where));
  }
  if (type == "Punctuation") {
    return std::make_shared<PunctuationPreTokenizer>(
        parse_split_behavior(get_string(j, "behavior", "Isolated", where), where + ".behavior"));
  }
  if (type == "Digits") {
    return std::make_shared<DigitsPreTokenizer>(get_bool(j, "individual_digits", false, where));
  }
  if (type == "CharDelimiterSplit") {
    return std::make_shared<CharDelimiterSplit>(
        single_char(require_string(j, "delimiter", where), where + ".delimiter"));
  }
  if (type == "UnicodeScripts") return std::make_shared<UnicodeScriptsPreTokenizer>();
  if (type == "FixedLength") {
    const uint64_t length = get_uint(j, "length", 5, where);
    // tokenizers panics on 0 (chunks of zero characters)
    KILN_CHECK(length > 0, where, ".length: expected a positive number of characters, found 0");
    return std::make_shared<FixedLengthPreTokenizer>(length);
  }
  if (type == "Sequence") {
    return std::make_shared<SequencePreTokenizer>(
        list_of<PreTokenizerPtr>(j, "pretokenizers", where, pre_tokenizer_from_json));
  }
  throw Error(detail::concat(where, ": unknown pre-tokenizer type '", type,
                             "' (supported: BertPreTokenizer, ByteLevel, Whitespace, "
                             "WhitespaceSplit, Metaspace, Split, Punctuation, Digits, "
                             "CharDelimiterSplit, UnicodeScripts, FixedLength, Sequence)"));
}

static Vocab vocab_object(const json& j, const std::string& where) {
  const json& v = require(j, "vocab", where);
  KILN_CHECK(v.is_object(), where, ".vocab: expected an object of token -> id, found ",
             type_name(v));
  Vocab vocab;
  for (auto it = v.begin(); it != v.end(); ++it) {
    vocab.set(it.key(), token_id_from_json(it.value(), where + ".vocab['" + it.key() + "']"));
  }
  return vocab;
}

ModelPtr model_from_json(const json& j, const std::string& where) {
  KILN_CHECK(j.is_object(), where, ": expected an object, found ", type_name(j));
  std::string type;
  if (auto t = get_opt_string(j, "type", where)) {
    type = *t;
  } else {
    // Older files: infer the model from its fields, as tokenizers does.
    const json* vocab = field(j, "vocab");
    KILN_CHECK(vocab, where, ": model has no 'type' and no 'vocab'");
    if (field(j, "merges")) {
      type = "BPE";
    } else if (vocab->is_array()) {
      type = "Unigram";
    } else if (field(j, "continuing_subword_prefix") || field(j, "max_input_chars_per_word")) {
      type = "WordPiece";
    } else {
      type = "WordLevel";
    }
  }
  if (type == "WordPiece") {
    return std::make_shared<WordPiece>(vocab_object(j, where),
                                       get_string(j, "unk_token", "[UNK]", where),
                                       get_string(j, "continuing_subword_prefix", "##", where),
                                       get_uint(j, "max_input_chars_per_word", 100, where));
  }
  if (type == "WordLevel") {
    return std::make_shared<WordLevel>(vocab_object(j, where),
                                       get_string(j, "unk_token", "<unk>", where));
  }
  if (type == "BPE") {
    BpeOptions o;
    o.unk_token = get_opt_string(j, "unk_token", where);
    o.continuing_subword_prefix = get_opt_string(j, "continuing_subword_prefix", where);
    o.end_of_word_suffix = get_opt_string(j, "end_of_word_suffix", where);
    if (o.continuing_subword_prefix && o.continuing_subword_prefix->empty()) {
      o.continuing_subword_prefix.reset();
    }
    if (o.end_of_word_suffix && o.end_of_word_suffix->empty()) o.end_of_word_suffix.reset();
    o.fuse_unk = get_bool(j, "fuse_unk", false, where);
    o.byte_fallback = get_bool(j, "byte_fallback", false, where);
    o.ignore_merges = get_bool(j, "ignore_merges", false, where);
    if (const json* d = field(j, "dropout")) {
      KILN_CHECK(d->is_number(), where, ".dropout: expected a number, found ", type_name(*d));
      double p = d->get<double>();
      KILN_CHECK(p >= 0.0 && p <= 1.0, where, ".dropout: must be between 0 and 1 (inclusive), found ", p);
      o.dropout = static_cast<float>(p);
    }
    const json& m = require(j, "merges", where);
    KILN_CHECK(m.is_array(), where, ".merges: expected an array, found ", type_name(m));
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      const json& e = m[i];
      if (e.is_string()) {
        const std::string& s = e.get_ref<const std::string&>();
        size_t sp = s.find(' ', 1);
        KILN_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where,
                   ".merges[", i, "]: expected 'left right', found '", s, "'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        KILN_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where,
                   ".merges[", i, "]: expected [left, right], found ", json_found(e));
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      }
    }
    try {
      return std::make_shared<Bpe>(vocab_object(j, where), merges, o);
    } catch (const Error& e) {  // a merge of unknown tokens: name the file and field
      const std::string what = e.what();
      if (what.rfind(where, 0) == 0) throw;
      throw Error(detail::concat(where, ".merges: ", what));
    }
  }
  if (type == "Unigram") {
    const json& v = require(j, "vocab", where);
    KILN_CHECK(v.is_array(), where, ".vocab: expected an array of [piece, score], found ",
               type_name(v));
    std::vector<std::pair<std::string, double>> pieces;
    pieces.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      KILN_CHECK(v[i].is_array() && v[i].size() == 2 && v[i][0].is_string() && v[i][1].is_number(),
                 where, ".vocab[", i, "]: expected [piece, score], found ", json_found(v[i]));
      pieces.emplace_back(v[i][0].get<std::string>(), v[i][1].get<double>());
    }
    std::optional<uint32_t> unk;
    if (field(j, "unk_id")) unk = static_cast<uint32_t>(get_uint(j, "unk_id", 0, where));
    return std::make_shared<Unigram>(std::move(pieces), unk, get_bool(j, "byte_fallback", false, where));
  }
  throw Error(detail::concat(where, ": unknown model type '", type,
                             "' (supported: BPE, WordPiece, WordLevel, Unigram)"));
}

static std::vector<TemplateProcessing::Piece> template_pieces(const json& j, const std::string& where) {
  std::vector<TemplateProcessing::Piece> out;
  if (j.is_string()) {
    // "$A [SEP] $B:1" form.
    std::istringstream in(j.get<std::string>());
    std::string item;
    while (in >> item) {
      uint32_t type_id = 0;
      if (auto colon = item.rfind(':'); colon != std::string::npos && colon > 0) {
        type_id = static_cast<uint32_t>(std::stoul(item.substr(colon + 1)));
        item = item.substr(0, colon);
      }
      if (item[0] == '$') {
        std::string id = item.size() == 1 ? "A" : item.substr(1);
        if (id == "0") id = "A";
        if (id == "1") id = "B";
        out.push_back({true, id, type_id});
      } else {
        out.push_back({false, item, type_id});
      }
    }
    return out;
  }
  KILN_CHECK(j.is_array(), where, ": expected an array of template pieces, found ", type_name(j));
  for (size_t i = 0; i < j.size(); ++i) {
    std::string w = detail::concat(where, "[", i, "]");
    const json& p = j[i];
    if (const json* s = p.is_object() ? field(p, "Sequence") : nullptr) {
      out.push_back({true, require_string(*s, "id", w), static_cast<uint32_t>(get_uint(*s, "type_id", 0, w))});
    } else if (const json* t = p.is_object() ? field(p, "SpecialToken") : nullptr) {
      out.push_back({false, require_string(*t, "id", w), static_cast<uint32_t>(get_uint(*t, "type_id", 0, w))});
    } else {
      throw Error(detail::concat(w, ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, found ", json_found(p)));
    }
  }
  return out;
}

PostProcessorPtr post_processor_from_json(const json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "BertProcessing") {
    return std::make_shared<BertProcessing>(special_pair(j, "sep", where), special_pair(j, "cls", where));
  }
  if (type == "RobertaProcessing") {
    return std::make_shared<RobertaProcessing>(
        special_pair(j, "sep", where), special_pair(j, "cls", where),
        get_bool(j, "trim_offsets", true, where), get_bool(j, "add_prefix_space", true, where));
  }
  if (type == "ByteLevel") {
    return std::make_shared<ByteLevelProcessing>(get_bool(j, "trim_offsets", true, where),
                                                 get_bool(j, "add_prefix_space", true, where));
  }
  if (type == "TemplateProcessing") {
    std::map<std::string, TemplateProcessing::Special> specials;
    if (const json* st = field(j, "special_tokens")) {
      KILN_CHECK(st->is_object(), where, ".special_tokens: expected an object, found ", type_name(*st));
      for (auto it = st->begin(); it != st->end(); ++it) {
        std::string w = where + ".special_tokens['" + it.key() + "']";
        TemplateProcessing::Special s;
        const json& ids = require(it.value(), "ids", w);
        const json& toks = require(it.value(), "tokens", w);
        KILN_CHECK(ids.is_array() && toks.is_array(), w, ": ids and tokens must be arrays");
        for (const auto& id : ids) s.ids.push_back(token_id_from_json(id, w + ".ids"));
        for (const auto& t : toks) {
          KILN_CHECK(t.is_string(), w, ".tokens: expected strings, found ", type_name(t));
          s.tokens.push_back(t.get<std::string>());
        }
        specials[get_string(it.value(), "id", it.key(), w)] = std::move(s);
      }
    }
    return std::make_shared<TemplateProcessing>(template_pieces(require(j, "single", where), where + ".single"),
                                                template_pieces(require(j, "pair", where), where + ".pair"),
                                                std::move(specials));
  }
  if (type == "Sequence") {
    return std::make_shared<SequenceProcessing>(
        list_of<PostProcessorPtr>(j, "processors", where, post_processor_from_json));
  }
  throw Error(detail::concat(where, ": unknown post-processor type '", type,
                             "' (supported: BertProcessing, RobertaProcessing, ByteLevel, "
                             "TemplateProcessing, Sequence)"));
}

DecoderPtr decoder_from_json(const json& j, const std::string& where) {
  std::string type = type_of(j, where);
  if (type == "WordPiece") {
    return std::make_shared<WordPieceDecoder>(get_string(j, "prefix", "##", where),
                                              get_bool(j, "cleanup", true, where));
  }
  if (type == "ByteLevel") return std::make_shared<ByteLevelDecoder>();
  if (type == "Metaspace") {
    return std::make_shared<MetaspaceDecoder>(
        single_char(get_string(j, "replacement", "\xE2\x96\x81", where), where + ".replacement"),
        prepend_scheme(j, where));
  }
  if (type == "BPEDecoder") return std::make_shared<BpeDecoder>(get_string(j, "suffix", "</w>", where));
  if (type == "ByteFallback") return std::make_shared<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_shared<FuseDecoder>();
  if (type == "Strip") {
    return std::make_shared<StripDecoder>(single_char(require_string(j, "content", where), where + ".content"),
                                          get_uint(j, "start", 0, where), get_uint(j, "stop", 0, where));
  }
  if (type == "Replace") {
    const json& p = require(j, "pattern", where);
    auto s = p.is_object() ? get_opt_string(p, "String", where + ".pattern") : std::nullopt;
    KILN_CHECK(s, where, ".pattern: only {\"String\": ...} patterns are supported in decoders");
    return std::make_shared<ReplaceDecoder>(*s, require_string(j, "content", where));
  }
  if (type == "CTC") {
    return std::make_shared<CtcDecoder>(get_string(j, "pad_token", "<pad>", where),
                                        get_string(j, "word_delimiter_token", "|", where),
                                        get_bool(j, "cleanup", true, where));
  }
  if (type == "Sequence") {
    return std::make_shared<SequenceDecoder>(list_of<DecoderPtr>(j, "decoders", where, decoder_from_json));
  }
  throw Error(detail::concat(where, ": unknown decoder type '", type,
                             "' (supported: WordPiece, ByteLevel, Metaspace, BPEDecoder, "
                             "ByteFallback, Fuse, Strip, Replace, CTC, Sequence)"));
}

static Direction direction(const json& j, const std::string& where) {
  std::string d = get_string(j, "direction", "Right", where);
  if (d == "Right" || d == "right") return Direction::Right;
  if (d == "Left" || d == "left") return Direction::Left;
  throw Error(detail::concat(where, ".direction: unknown value '", d, "', expected Left or Right"));
}

Tokenizer tokenizer_from_json(const json& j, const std::string& where) {
  KILN_CHECK(j.is_object(), where, ": expected a JSON object at the top level, found ", type_name(j));
  Tokenizer t;
  t.set_model(model_from_json(require(j, "model", where), where + ": model"));
  if (const json* n = field(j, "normalizer")) t.set_normalizer(normalizer_from_json(*n, where + ": normalizer"));
  if (const json* p = field(j, "pre_tokenizer")) t.set_pre_tokenizer(pre_tokenizer_from_json(*p, where + ": pre_tokenizer"));
  if (const json* p = field(j, "post_processor")) t.set_post_processor(post_processor_from_json(*p, where + ": post_processor"));
  if (const json* d = field(j, "decoder")) t.set_decoder(decoder_from_json(*d, where + ": decoder"));
  if (const json* a = field(j, "added_tokens")) {
    KILN_CHECK(a->is_array(), where, ": added_tokens: expected an array, found ", type_name(*a));
    std::vector<AddedToken> tokens;
    for (size_t i = 0; i < a->size(); ++i) {
      std::string w = detail::concat(where, ": added_tokens[", i, "]");
      const json& e = (*a)[i];
      KILN_CHECK(e.is_object(), w, ": expected an object, found ", type_name(e));
      AddedToken tok;
      tok.content = require_string(e, "content", w);
      const json& id = require(e, "id", w);
      tok.id = token_id_from_json(id, w + ".id");
      tok.single_word = get_bool(e, "single_word", false, w);
      tok.lstrip = get_bool(e, "lstrip", false, w);
      tok.rstrip = get_bool(e, "rstrip", false, w);
      tok.special = get_bool(e, "special", false, w);
      tok.normalized = get_bool(e, "normalized", !tok.special, w);
      tokens.push_back(std::move(tok));
    }
    t.add_tokens(tokens);
  }
  if (const json* tr = field(j, "truncation")) {
    std::string w = where + ": truncation";
    TruncationParams p;
    p.max_length = get_uint(*tr, "max_length", 512, w);
    std::string s = get_string(*tr, "strategy", "LongestFirst", w);
    if (s == "LongestFirst") p.strategy = TruncationStrategy::LongestFirst;
    else if (s == "OnlyFirst") p.strategy = TruncationStrategy::OnlyFirst;
    else if (s == "OnlySecond") p.strategy = TruncationStrategy::OnlySecond;
    else throw Error(detail::concat(w, ".strategy: unknown value '", s, "'"));
    p.direction = direction(*tr, w);
    p.stride = get_uint(*tr, "stride", 0, w);
    t.set_truncation(p);
  }
  if (const json* pd = field(j, "padding")) {
    std::string w = where + ": padding";
    PaddingParams p;
    if (const json* s = field(*pd, "strategy"); s && s->is_object()) {
      p.length = get_uint(*s, "Fixed", 0, w + ".strategy");
    }
    if (field(*pd, "pad_to_multiple_of")) p.pad_to_multiple_of = get_uint(*pd, "pad_to_multiple_of", 0, w);
    p.pad_id = static_cast<uint32_t>(get_uint(*pd, "pad_id", 0, w));
    p.pad_type_id = static_cast<uint32_t>(get_uint(*pd, "pad_type_id", 0, w));
    p.pad_token = get_string(*pd, "pad_token", "[PAD]", w);
    p.direction = direction(*pd, w);
    t.set_padding(p);
  }
  return t;
}

Tokenizer Tokenizer::from_json_string(std::string_view text, const std::string& where) {
  const json j = parse_json(text, where);
  try {
    return tokenizer_from_json(j, where);
  } catch (const json::exception& e) {
    throw Error(detail::concat(where, ": unexpected JSON value: ", e.what()));
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json_string(read_file(path), path);
}

}  // namespace kiln::tokenizers
