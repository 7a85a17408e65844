#include "kiln/tokenizers/normalizers.h"

#include "kiln/tokenizers/byte_level.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

BertNormalizer::BertNormalizer(bool clean_text, bool handle_chinese_chars,
                               std::optional<bool> strip_accents, bool lowercase)
    : clean_text_(clean_text),
      chinese_(handle_chinese_chars),
      strip_accents_(strip_accents.value_or(lowercase)),
      lowercase_(lowercase) {}

static bool bert_whitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || unicode::is_whitespace(c);
}

static bool bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  return unicode::is_other(c);
}

// Every character replaced by f(character), one for one: alignments unchanged.
template <typename F>
static void map_chars(NormalizedString& s, F f) {
  std::vector<NormalizedString::Change> changes;
  const std::string& t = s.get();
  for (size_t i = 0; i < t.size();) {
    size_t n;
    changes.emplace_back(f(utf8::decode(t, i, &n)), 0);
    i += n;
  }
  s.transform(changes, 0);
}

void BertNormalizer::normalize(NormalizedString& s) const {
  const std::string& text = s.get();
  bool ascii = true;
  for (char c : text) ascii &= (c & 0x80) == 0;
  if (clean_text_) {
    bool dirty = false;
    for (size_t i = 0; i < text.size() && !dirty;) {
      size_t n;
      char32_t c = utf8::decode(text, i, &n);
      dirty = c == 0 || c == 0xFFFD || bert_control(c) || (c != ' ' && bert_whitespace(c));
      i += n;
    }
    if (dirty) {
      s.filter([](char32_t c) { return !(c == 0 || c == 0xFFFD || bert_control(c)); });
      map_chars(s, [](char32_t c) { return bert_whitespace(c) ? U' ' : c; });
    }
  }
  if (chinese_ && !ascii) {
    const std::string& t = s.get();
    bool any = false;
    std::vector<NormalizedString::Change> changes;
    for (size_t i = 0; i < t.size();) {
      size_t n;
      char32_t c = utf8::decode(t, i, &n);
      if (unicode::is_chinese_char(c)) {
        any = true;
        changes.emplace_back(U' ', 0);
        changes.emplace_back(c, 1);
        changes.emplace_back(U' ', 1);
      } else {
        changes.emplace_back(c, 0);
      }
      i += n;
    }
    if (any) s.transform(changes, 0);
  }
  if (strip_accents_ && !ascii) {
    s.normalize(unicode::Form::NFD);
    s.filter([](char32_t c) { return !unicode::is_mark_nonspacing(c); });
  }
  if (lowercase_) s.lowercase();
}

void NmtNormalizer::normalize(NormalizedString& s) const {
  s.filter([](char32_t c) {
    return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
             c == 0x8F || c == 0x9F);
  });
  map_chars(s, [](char32_t c) -> char32_t {
    const bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                       (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
                       c == 0xFEFF || c == 0xFFFD;
    return space ? U' ' : c;
  });
}

void StripAccentsNormalizer::normalize(NormalizedString& s) const {
  s.filter([](char32_t c) { return !unicode::is_mark(c); });
}

// Appends (c, change) pairs replacing old_part by new_part, the way
// tokenizers' precompiled normalizer records them.
static void replace_part(std::vector<NormalizedString::Change>& out, std::string_view old_part,
                         std::string_view new_part) {
  long old_count = static_cast<long>(utf8::count_chars(old_part));
  std::u32string repl = utf8::to_u32(new_part);
  long diff = static_cast<long>(repl.size()) - old_count;
  for (char32_t c : repl) out.emplace_back(c, 0);
  if (diff > 0) {
    for (long k = 0; k < diff && k < static_cast<long>(out.size()); ++k) {
      out[out.size() - 1 - k].second = 1;
    }
  } else if (diff < 0 && !out.empty()) {
    out.back().second += static_cast<int>(diff);
  }
}

void PrecompiledNormalizer::normalize(NormalizedString& s) const {
  const std::string text = s.get();
  std::vector<NormalizedString::Change> changes;
  changes.reserve(text.size());
  bool modified = false;
  for (auto [gs, ge] : unicode::graphemes(text)) {
    std::string_view g = std::string_view(text).substr(gs, ge - gs);
    if (g.size() < 6) {
      if (auto norm = map_.transform(g)) {
        modified = true;
        replace_part(changes, g, *norm);
        continue;
      }
    }
    for (size_t i = 0; i < g.size();) {
      size_t n;
      char32_t c = utf8::decode(g, i, &n);
      std::string_view part = g.substr(i, n);
      if (auto norm = map_.transform(part)) {
        modified = true;
        replace_part(changes, part, *norm);
      } else {
        changes.emplace_back(c, 0);
      }
      i += n;
    }
  }
  if (modified) s.transform(changes, 0);
}

void ByteLevelNormalizer::normalize(NormalizedString& s) const { byte_level::to_byte_chars(s); }

}  // namespace kiln::tokenizers
