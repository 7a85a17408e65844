#include "kiln/tokenizers/decoders.h"

#include "kiln/tokenizers/byte_level.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

std::string Decoder::decode(std::vector<std::string> tokens) const {
  std::string out;
  for (const auto& t : decode_chain(std::move(tokens))) out += t;
  return out;
}

// Rust's str::replace: an empty `from` matches before every character and
// at the end.
static void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) {
    if (to.empty()) return;
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t n = utf8::seq_len(static_cast<unsigned char>(s[i]));
      out.append(to);
      out.append(s, i, n);
      i += n;
    }
    out.append(to);
    s = std::move(out);
    return;
  }
  std::string out;
  size_t pos = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// BERT's detokenization clean-up of spaces before punctuation and contractions.
static void cleanup(std::string& s) {
  static const std::pair<std::string_view, std::string_view> rules[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},       {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
      {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : rules) replace_all(s, from, to);
}

std::vector<std::string> WordPieceDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    if (i != 0) {
      if (t.rfind(prefix_, 0) == 0) {
        t.erase(0, prefix_.size());
      } else {
        t.insert(t.begin(), ' ');
      }
    }
    if (cleanup_) cleanup(t);
  }
  return tokens;
}

std::vector<std::string> ByteLevelDecoder::decode_chain(std::vector<std::string> tokens) const {
  std::string bytes;
  for (const auto& t : tokens) {
    for (size_t i = 0; i < t.size();) {
      size_t n;
      char32_t c = utf8::decode(t, i, &n);
      if (auto b = byte_level::char_to_byte(c)) {
        bytes.push_back(static_cast<char>(*b));
      } else {
        bytes.append(t, i, n);
      }
      i += n;
    }
  }
  return {utf8::lossy(bytes)};
}

std::vector<std::string> MetaspaceDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string out;
    const std::string& t = tokens[i];
    for (size_t k = 0; k < t.size();) {
      size_t n;
      char32_t c = utf8::decode(t, k, &n);
      if (c == replacement_) {
        if (!(i == 0 && scheme_ != PrependScheme::Never)) out.push_back(' ');
      } else {
        out.append(t, k, n);
      }
      k += n;
    }
    tokens[i] = std::move(out);
  }
  return tokens;
}

std::vector<std::string> BpeDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }
  return tokens;
}

// The byte of a "<0xXX>" token.
static std::optional<unsigned char> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

std::vector<std::string> ByteFallbackDecoder::decode_chain(std::vector<std::string> tokens) const {
  std::vector<std::string> out;
  std::string pending;
  size_t pending_count = 0;
  auto flush = [&]() {
    if (pending_count == 0) return;
    if (!utf8::find_invalid(pending)) {
      out.push_back(pending);
    } else {
      for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");
    }
    pending.clear();
    pending_count = 0;
  };
  for (auto& t : tokens) {
    if (auto b = byte_token(t)) {
      pending.push_back(static_cast<char>(*b));
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::vector<std::string> FuseDecoder::decode_chain(std::vector<std::string> tokens) const {
  std::string all;
  for (const auto& t : tokens) all += t;
  return {all};
}

std::vector<std::string> StripDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (auto& t : tokens) {
    std::u32string cs = utf8::to_u32(t);
    size_t begin = 0, end = cs.size();
    for (size_t k = 0; k < start_ && begin < end && cs[begin] == content_; ++k) ++begin;
    for (size_t k = 0; k < stop_ && end > begin && cs[end - 1] == content_; ++k) --end;
    t = utf8::from_u32(std::u32string_view(cs).substr(begin, end - begin));
  }
  return tokens;
}

std::vector<std::string> ReplaceDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (auto& t : tokens) replace_all(t, pattern_, content_);
  return tokens;
}

std::vector<std::string> SequenceDecoder::decode_chain(std::vector<std::string> tokens) const {
  for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
  return tokens;
}

std::vector<std::string> CtcDecoder::decode_chain(std::vector<std::string> tokens) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && tokens[i] == tokens[i - 1]) continue;
    std::string t = tokens[i];
    replace_all(t, pad_, "");
    if (cleanup_) {
      cleanup(t);
      replace_all(t, delimiter_, " ");
    }
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kiln::tokenizers
