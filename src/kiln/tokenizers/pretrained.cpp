// Tokenizer::from_pretrained: a Hugging Face model directory, as transformers
// 5's AutoTokenizer loads it. tokenizer.json wins when present, rebuilt as the
// tokenizer class transformers picks rebuilds it (transformers_classes.h);
// otherwise the legacy files are converted into the same
// pipeline transformers' convert_slow_tokenizer builds:
//   vocab.txt               -> BERT WordPiece
//   vocab.json + merges.txt -> GPT-2 / RoBERTa byte-level BPE
//   spiece.model            -> T5-style SentencePiece Unigram (libsentencepiece
//                              reads the model; the normalization charsmap
//                              comes from its serialized proto)
// tokenizer_config.json supplies do_lower_case, model_max_length and the
// special tokens.
#include <sentencepiece_processor.h>

#include <filesystem>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/json.h"
#include "kiln/tokenizers/bpe.h"
#include "kiln/tokenizers/tokenizer.h"
#include "kiln/tokenizers/tokenizer_json.h"
#include "kiln/tokenizers/transformers_classes.h"
#include "kiln/tokenizers/unigram.h"
#include "kiln/tokenizers/wordpiece.h"

namespace kiln::tokenizers {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A special token in tokenizer_config.json: "tok" or {"content": "tok", ...}.
std::optional<AddedToken> config_token(const json& cfg, const char* key, const std::string& def,
                                       const std::string& where) {
  AddedToken t;
  t.special = true;
  t.normalized = false;
  auto it = cfg.find(key);
  if (it == cfg.end()) {
    if (def.empty()) return std::nullopt;
    t.content = def;
    return t;
  }
  if (it->is_null()) return std::nullopt;
  if (it->is_string()) {
    t.content = it->get<std::string>();
  } else if (it->is_object() && it->contains("content")) {
    t.content = (*it)["content"].get<std::string>();
    t.lstrip = it->value("lstrip", false);
    t.rstrip = it->value("rstrip", false);
    t.single_word = it->value("single_word", false);
    t.normalized = it->value("normalized", false);
  } else {
    throw Error(detail::concat(where, ": ", key, ": expected a string or {\"content\": ...}, found ",
                               it->dump()));
  }
  return t;
}

// Adds the special tokens that exist in the model's vocabulary.
void add_specials(Tokenizer& t, std::vector<std::optional<AddedToken>> specials) {
  std::vector<AddedToken> tokens;
  for (auto& s : specials) {
    if (!s) continue;
    if (auto id = t.model().token_to_id(s->content)) {
      s->id = *id;
      tokens.push_back(*s);
    }
  }
  t.add_tokens(tokens);
}

Tokenizer load_wordpiece(const fs::path& dir, const json& cfg, const std::string& where) {
  fs::path vocab_path = dir / "vocab.txt";
  std::istringstream in(read_file(vocab_path));
  Vocab vocab;
  std::string line;
  uint32_t id = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.set(line, id++);
  }
  KILN_CHECK(id > 0, vocab_path.string(), ": empty vocabulary");
  bool lower = json_value(cfg, "do_lower_case", true, where);
  std::optional<bool> strip_accents;
  if (cfg.contains("strip_accents") && cfg["strip_accents"].is_boolean()) {
    strip_accents = cfg["strip_accents"].get<bool>();
  }
  auto unk = config_token(cfg, "unk_token", "[UNK]", where);
  auto sep = config_token(cfg, "sep_token", "[SEP]", where);
  auto pad = config_token(cfg, "pad_token", "[PAD]", where);
  auto cls = config_token(cfg, "cls_token", "[CLS]", where);
  auto mask = config_token(cfg, "mask_token", "[MASK]", where);
  Tokenizer t;
  t.set_model(std::make_shared<WordPiece>(std::move(vocab), unk ? unk->content : "[UNK]", "##", 100));
  t.set_normalizer(std::make_shared<BertNormalizer>(
      true, json_value(cfg, "tokenize_chinese_chars", true, where), strip_accents, lower));
  t.set_pre_tokenizer(std::make_shared<BertPreTokenizer>());
  KILN_CHECK(sep && cls, where, ": BERT needs sep_token and cls_token");
  auto sep_id = t.model().token_to_id(sep->content);
  auto cls_id = t.model().token_to_id(cls->content);
  KILN_CHECK(sep_id && cls_id, vocab_path.string(), ": special tokens '", sep->content, "' and '",
             cls->content, "' must be in the vocabulary");
  t.set_post_processor(std::make_shared<BertProcessing>(SpecialToken{sep->content, *sep_id},
                                                        SpecialToken{cls->content, *cls_id}));
  t.set_decoder(std::make_shared<WordPieceDecoder>("##", true));
  add_specials(t, {pad, unk, cls, sep, mask});
  return t;
}

Tokenizer load_byte_level_bpe(const fs::path& dir, const json& cfg, const std::string& where) {
  fs::path vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
  json vj = read_json_file(vocab_path);
  KILN_CHECK(vj.is_object(), vocab_path.string(), ": expected an object of token -> id");
  Vocab vocab;
  for (auto it = vj.begin(); it != vj.end(); ++it) {
    vocab.set(it.key(), token_id_from_json(it.value(), vocab_path.string() + ": token '" + it.key() + "'"));
  }
  std::istringstream in(read_file(merges_path));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    size_t sp = line.find(' ');
    KILN_CHECK(sp != std::string::npos && sp > 0 && line.find(' ', sp + 1) == std::string::npos,
               merges_path.string(), ":", lineno, ": expected 'left right', found '", line, "'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  bool roberta = vocab.id("<s>") && vocab.id("</s>");
  bool prefix = json_value(cfg, "add_prefix_space", false, where);
  Tokenizer t;
  t.set_model(std::make_shared<Bpe>(std::move(vocab), merges, BpeOptions{}));
  t.set_pre_tokenizer(std::make_shared<ByteLevelPreTokenizer>(prefix, true));
  t.set_decoder(std::make_shared<ByteLevelDecoder>());
  if (roberta) {
    auto bos = config_token(cfg, "bos_token", "<s>", where);
    auto eos = config_token(cfg, "eos_token", "</s>", where);
    auto sep = config_token(cfg, "sep_token", "</s>", where);
    auto cls = config_token(cfg, "cls_token", "<s>", where);
    auto unk = config_token(cfg, "unk_token", "<unk>", where);
    auto pad = config_token(cfg, "pad_token", "<pad>", where);
    auto mask = config_token(cfg, "mask_token", "<mask>", where);
    if (mask && !cfg.contains("mask_token")) mask->lstrip = true;
    KILN_CHECK(sep && cls, where, ": RoBERTa needs sep_token and cls_token");
    auto sep_id = t.model().token_to_id(sep->content);
    auto cls_id = t.model().token_to_id(cls->content);
    KILN_CHECK(sep_id && cls_id, vocab_path.string(), ": special tokens '", sep->content, "' and '",
               cls->content, "' must be in the vocabulary");
    t.set_post_processor(std::make_shared<RobertaProcessing>(SpecialToken{sep->content, *sep_id},
                                                             SpecialToken{cls->content, *cls_id}, true, prefix));
    add_specials(t, {bos, pad, eos, unk, mask});
  } else {
    // GPT-2's tokenizer.json: no special tokens around the text, and
    // <|endoftext|> is matched after normalization.
    auto eos = config_token(cfg, "eos_token", "<|endoftext|>", where);
    if (eos) eos->normalized = true;
    t.set_post_processor(std::make_shared<ByteLevelProcessing>(false, true));
    add_specials(t, {eos});
  }
  return t;
}

// Minimal protobuf reading: just what is needed from sentencepiece.ModelProto.
struct ProtoReader {
  std::string_view data;
  size_t pos = 0;
  std::string where;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      KILN_CHECK(pos < data.size(), where, ": truncated protobuf");
      auto b = static_cast<unsigned char>(data[pos++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw Error(where + ": bad protobuf varint");
  }
  // Calls fn(field, wire_type, bytes-or-empty, varint) for each field.
  template <typename Fn>
  void each(Fn fn) {
    while (pos < data.size()) {
      uint64_t key = varint();
      uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
      if (wire == 0) {
        fn(field, wire, std::string_view(), varint());
      } else if (wire == 2) {
        uint64_t len = varint();
        KILN_CHECK(pos + len <= data.size(), where, ": truncated protobuf field ", field);
        fn(field, wire, data.substr(pos, len), 0);
        pos += len;
      } else if (wire == 5) {
        pos += 4;
      } else if (wire == 1) {
        pos += 8;
      } else {
        throw Error(detail::concat(where, ": unsupported protobuf wire type ", wire));
      }
    }
  }
};

Tokenizer load_sentencepiece(const fs::path& dir, const json& cfg, const std::string& where) {
  fs::path model_path = dir / "spiece.model";
  check_regular_file(model_path);  // SentencePiece opens it itself, and would block on a FIFO
  sentencepiece::SentencePieceProcessor sp;
  auto status = sp.Load(model_path.string());
  KILN_CHECK(status.ok(), model_path.string(), ": cannot load SentencePiece model: ",
             status.ToString());
  std::string proto = sp.serialized_model_proto();
  std::string charsmap;
  int model_type = 1;
  ProtoReader top{proto, 0, model_path.string()};
  top.each([&](uint32_t field, uint32_t wire, std::string_view bytes, uint64_t) {
    if (field == 3 && wire == 2) {  // normalizer_spec
      ProtoReader ns{bytes, 0, model_path.string()};
      ns.each([&](uint32_t f, uint32_t w, std::string_view b, uint64_t) {
        if (f == 2 && w == 2) charsmap.assign(b);
      });
    } else if (field == 2 && wire == 2) {  // trainer_spec
      ProtoReader ts{bytes, 0, model_path.string()};
      ts.each([&](uint32_t f, uint32_t w, std::string_view, uint64_t v) {
        if (f == 3 && w == 0) model_type = static_cast<int>(v);
      });
    }
  });
  KILN_CHECK(model_type == 1, model_path.string(), ": SentencePiece model type ", model_type,
             " is not supported, expected 1 (UNIGRAM)");
  std::vector<std::pair<std::string, double>> pieces;
  std::optional<uint32_t> unk;
  bool byte_fallback = false;
  std::vector<AddedToken> specials;
  int n = sp.GetPieceSize();
  for (int i = 0; i < n; ++i) {
    pieces.emplace_back(sp.IdToPiece(i), sp.GetScore(i));
    if (sp.IsUnknown(i)) unk = static_cast<uint32_t>(i);
    if (sp.IsByte(i)) byte_fallback = true;
    if (sp.IsControl(i) || sp.IsUnknown(i)) {
      AddedToken t;
      t.content = sp.IdToPiece(i);
      t.id = static_cast<uint32_t>(i);
      t.special = true;
      t.normalized = false;
      specials.push_back(t);
    }
  }
  // T5 appends <extra_id_0..N-1> sentinels after the pieces, in reverse order.
  const int64_t extra = json_value<int64_t>(cfg, "extra_ids", 0, where);
  KILN_CHECK(extra >= 0 && extra <= (int64_t{1} << 20), where, ": 'extra_ids' must be in [0, 2^20], got ", extra);
  auto extra_ids = static_cast<size_t>(extra);
  if (!cfg.contains("extra_ids") && fs::exists(dir / "config.json")) {
    json mc = read_json_file(dir / "config.json");
    std::string archs = mc.contains("architectures") ? mc["architectures"].dump() : "";
    if (json_value<std::string>(mc, "model_type", "", (dir / "config.json").string()) == "t5" || archs.find("T5") != std::string::npos) {
      extra_ids = 100;
    }
  }
  for (size_t i = 0; i < extra_ids; ++i) {
    AddedToken t;
    t.content = "<extra_id_" + std::to_string(extra_ids - 1 - i) + ">";
    t.id = static_cast<uint32_t>(n + i);
    t.special = true;
    t.normalized = false;
    pieces.emplace_back(t.content, 0.0);
    specials.push_back(t);
  }
  Tokenizer t;
  t.set_model(std::make_shared<Unigram>(std::move(pieces), unk, byte_fallback));
  if (!charsmap.empty()) {
    t.set_normalizer(std::make_shared<PrecompiledNormalizer>(
        PrecompiledCharsmap(charsmap, model_path.string() + ": precompiled_charsmap")));
  }
  t.set_pre_tokenizer(std::make_shared<SequencePreTokenizer>(std::vector<PreTokenizerPtr>{
      std::make_shared<WhitespaceSplit>(),
      std::make_shared<MetaspacePreTokenizer>(U'\u2581', PrependScheme::Always, true)}));
  t.set_decoder(std::make_shared<MetaspaceDecoder>(U'\u2581', PrependScheme::Always));
  auto eos = config_token(cfg, "eos_token", "</s>", where);
  if (eos) {
    if (auto eos_id = t.model().token_to_id(eos->content)) {
      using P = TemplateProcessing::Piece;
      std::map<std::string, TemplateProcessing::Special> st{{eos->content, {{*eos_id}, {eos->content}}}};
      t.set_post_processor(std::make_shared<TemplateProcessing>(
          std::vector<P>{{true, "A", 0}, {false, eos->content, 0}},
          std::vector<P>{{true, "A", 0}, {false, eos->content, 0}, {true, "B", 0}, {false, eos->content, 0}},
          std::move(st)));
    }
  }
  t.add_tokens(specials);
  return t;
}

}  // namespace

Tokenizer Tokenizer::from_pretrained(const std::string& directory) {
  fs::path dir(directory);
  KILN_CHECK(fs::is_directory(dir), directory, ": not a directory");
  json cfg = json::object();
  fs::path cfg_path = dir / "tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    cfg = read_json_file(cfg_path);
    KILN_CHECK(cfg.is_object(), cfg_path.string(), ": expected a JSON object");
  }
  std::string where = cfg_path.string();
  json special_map = json::object();
  if (fs::exists(dir / "special_tokens_map.json")) {
    special_map = read_json_file(dir / "special_tokens_map.json");
    KILN_CHECK(special_map.is_object(), (dir / "special_tokens_map.json").string(), ": expected a JSON object");
  }
  Tokenizer t;
  std::string cls;
  try {
    if (fs::exists(dir / "tokenizer.json")) {
      const fs::path path = dir / "tokenizer.json";
      const std::string text = read_file(path);
      cls = auto_tokenizer_class(dir, cfg, text);
      json tj = parse_json(text, path.string());
      apply_tokenizer_class(cls, tj, cfg, special_map, where, path.string());
      t = tokenizer_from_json(tj, path.string());
    } else if (fs::exists(dir / "vocab.txt")) {
      t = load_wordpiece(dir, cfg, where);
      cls = "BertTokenizer";
    } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
      t = load_byte_level_bpe(dir, cfg, where);
      cls = t.token_to_id("<s>") && t.token_to_id("</s>") ? "RobertaTokenizer" : "GPT2Tokenizer";
    } else if (fs::exists(dir / "spiece.model")) {
      t = load_sentencepiece(dir, cfg, where);
      cls = "T5Tokenizer";
    } else {
      throw Error(detail::concat(directory, ": no tokenizer files found (expected tokenizer.json, "
                                            "vocab.txt, vocab.json + merges.txt or spiece.model)"));
    }
  } catch (const json::exception& e) {
    throw Error(detail::concat(directory, ": unexpected JSON value: ", e.what()));
  }
  if (cfg.contains("model_max_length") && cfg["model_max_length"].is_number()) {
    double m = cfg["model_max_length"].get<double>();
    if (m > 0 && m < 1e12) t.model_max_length = static_cast<size_t>(m);
  }
  t.empty_pair_is_single = true;
  if (json_value(cfg, "split_special_tokens", false, where)) t.set_encode_special_tokens(true);
  for (const auto& [key, token] : named_special_tokens(cls, cfg, special_map, where)) {
    const std::string content = token["content"].get<std::string>();
    if (auto id = t.token_to_id(content)) t.special_tokens[key] = {content, *id};
  }
  const bool bpe = dynamic_cast<const Bpe*>(&t.model()) != nullptr;
  t.clean_up_tokenization_spaces =
      json_value(cfg, "clean_up_tokenization_spaces", false, where) &&
      (!bpe || json_value(cfg, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                          false, where));
  return t;
}

}  // namespace kiln::tokenizers
