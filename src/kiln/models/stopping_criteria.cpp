#include "kiln/models/stopping_criteria.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/models/generation.h"
#include "kiln/tokenizers/byte_level.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::models {

namespace {

// Whether a decoder's JSON (or one nested in it) has this "type".
bool has_decoder_type(const nlohmann::json& j, const std::string& type) {
  if (j.is_object()) {
    if (j.contains("type") && j["type"] == type) return true;
    return std::any_of(j.begin(), j.end(), [&](const auto& v) { return has_decoder_type(v, type); });
  }
  if (j.is_array()) return std::any_of(j.begin(), j.end(), [&](const auto& v) { return has_decoder_type(v, type); });
  return false;
}

// A byte-level token's bytes: each of its characters stands for one (nullopt if one does not).
std::optional<std::string> byte_level_bytes(const std::string& token) {
  std::string out;
  for (size_t i = 0, len = 0; i < token.size(); i += len) {
    const auto byte = tokenizers::byte_level::char_to_byte(tokenizers::utf8::decode(token, i, &len));
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
  }
  return out;
}

// A "<0xNN>" token's byte.
std::optional<std::string> fallback_byte(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return std::nullopt;
  if (!std::isxdigit(static_cast<unsigned char>(token[3])) || !std::isxdigit(static_cast<unsigned char>(token[4])))
    return std::nullopt;
  return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
}

// Whether some token's text can end string s (StopStringCriteria's "end overlap"): s's last byte at position i
// of the text, with the o = min(i + 1, |s|) bytes up to it the last o of s.
bool can_end(const std::string& s, const std::vector<std::optional<std::string>>& texts) {
  for (const auto& t : texts) {
    if (!t) continue;
    for (size_t i = t->find(s.back()); i != std::string::npos; i = t->find(s.back(), i + 1)) {
      const size_t o = std::min(i + 1, s.size());
      if (t->compare(i + 1 - o, o, s, s.size() - o, o) == 0) return true;
    }
  }
  return false;
}

}  // namespace

StopStringMode stop_string_mode(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    const nlohmann::json j = read_json_file(dir / "tokenizer.json");
    const nlohmann::json decoder = j.is_object() && j.contains("decoder") ? j["decoder"] : nlohmann::json();
    if (has_decoder_type(decoder, "ByteFallback")) return StopStringMode::ByteFallback;
    if (has_decoder_type(decoder, "ByteLevel")) return StopStringMode::ByteLevel;
    return StopStringMode::Text;
  }
  const bool byte_level = std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt");
  return byte_level ? StopStringMode::ByteLevel : StopStringMode::Text;
}

std::vector<std::optional<std::string>> stop_string_token_texts(const tokenizers::Tokenizer& tok,
                                                                StopStringMode mode) {
  tokenizers::Tokenizer plain = tok;  // convert_tokens_to_string: the decoder alone, no clean-up of spaces
  plain.clean_up_tokenization_spaces = false;
  const auto base = tok.encode("abcdef", /*add_special_tokens=*/false).ids;
  size_t n = tok.vocab_size(true);
  for (const auto& t : tok.added_vocabulary().tokens()) n = std::max<size_t>(n, t.id + 1);
  std::vector<std::optional<std::string>> texts(n);
  for (size_t id = 0; id < n; ++id) {
    const std::optional<std::string> token = tok.id_to_token(static_cast<uint32_t>(id));
    if (!token) continue;
    if (mode == StopStringMode::ByteLevel) texts[id] = byte_level_bytes(*token);
    if (mode == StopStringMode::ByteFallback) texts[id] = fallback_byte(*token);
    if (texts[id]) continue;
    std::vector<uint32_t> ids(base.begin(), base.end());
    ids.push_back(static_cast<uint32_t>(id));
    const std::string text = plain.decode(ids, /*skip_special_tokens=*/false);
    const size_t at = text.find("abcdef");
    KILN_CHECK(at != std::string::npos, "stop_strings: the tokenizer decodes \"abcdef\" followed by token ", id,
               " ('", *token, "') as '", text, "', without \"abcdef\": cannot tell that token's text");
    texts[id] = text.substr(at + 6);
  }
  return texts;
}

StopStrings::StopStrings(std::vector<std::string> strings, std::vector<std::optional<std::string>> texts,
                         StopStringMode mode)
    : strings_(std::move(strings)), texts_(std::move(texts)) {
  for (const auto& s : strings_) {
    KILN_CHECK(!s.empty(), "stop_strings: an empty string would stop every sequence after its first new token");
    window_ = std::max(window_, mode == StopStringMode::Text ? tokenizers::utf8::count_chars(s) : s.size());
  }
  KILN_CHECK(std::any_of(strings_.begin(), strings_.end(), [&](const auto& s) { return can_end(s, texts_); }),
             "stop_strings: no token of the tokenizer can end any of the stop strings (",
             nlohmann::json(strings_).dump(), "); transformers refuses them too");
}

StopStrings StopStrings::from_tokenizer(std::vector<std::string> strings, const tokenizers::Tokenizer& tok,
                                        const std::filesystem::path& tokenizer_dir) {
  const StopStringMode mode = stop_string_mode(tokenizer_dir);
  return StopStrings(std::move(strings), stop_string_token_texts(tok, mode), mode);
}

bool StopStrings::matches(const std::vector<int64_t>& ids) const {
  // The texts of the last window_ ids, back to one the tokenizer does not have (it matches nothing).
  std::vector<const std::string*> parts;
  for (size_t k = 0; k < std::min(window_, ids.size()); ++k) {
    const int64_t id = ids[ids.size() - 1 - k];
    if (id < 0 || id >= static_cast<int64_t>(texts_.size()) || !texts_[static_cast<size_t>(id)]) break;
    parts.push_back(&*texts_[static_cast<size_t>(id)]);
  }
  if (parts.empty()) return false;
  std::string text;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) text += **it;
  const size_t last_begin = text.size() - parts.front()->size();
  // An occurrence whose last byte lies in the last token: it starts at last_begin + 1 - |s| or later.
  return std::any_of(strings_.begin(), strings_.end(), [&](const std::string& s) {
    return text.find(s, last_begin + 1 >= s.size() ? last_begin + 1 - s.size() : 0) != std::string::npos;
  });
}

StoppingCriteria::StoppingCriteria(const GenerationConfig& g)
    : stop_strings_(g.stop_strings.empty() ? nullptr : g.stop_string_matcher.get()),
      max_time_(g.max_time),
      start_(std::chrono::steady_clock::now()) {}

bool StoppingCriteria::out_of_time() const {
  return max_time_ &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > *max_time_;
}

bool StoppingCriteria::stops(const std::vector<int64_t>& ids, bool out_of_time) const {
  return out_of_time || (stop_strings_ && stop_strings_->matches(ids));
}

bool StoppingCriteria::stops(const std::vector<int64_t>& ids) const { return stops(ids, out_of_time()); }

void check_stopping_criteria(const GenerationConfig& g) {
  KILN_CHECK(!g.max_time || (std::isfinite(*g.max_time) && *g.max_time >= 0),
             "generate: max_time must be a number of seconds >= 0, got ", g.max_time.value_or(0));
  if (g.stop_strings.empty()) return;
  KILN_CHECK(g.stop_string_matcher != nullptr, "generate: stop_strings ", nlohmann::json(g.stop_strings).dump(),
             " need the model's tokenizer to read the tokens' text (transformers' generate() also refuses them "
             "without tokenizer=)");
  KILN_CHECK(g.stop_string_matcher->strings() == g.stop_strings, "generate: stop_strings ",
             nlohmann::json(g.stop_strings).dump(), " differ from those the tokenizer's matcher was built for, ",
             nlohmann::json(g.stop_string_matcher->strings()).dump());
}

}  // namespace kiln::models
