#include "kiln/tokenizers/unicode.h"

#include <unicode/brkiter.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uscript.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include <algorithm>
#include <memory>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::unicode {

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

// Assigned in Unicode `major`.0 or before (ICU's age 0.0 is unassigned).
static bool assigned_by(char32_t c, uint8_t major) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  return !(age[0] == 0 && age[1] == 0) && age[0] <= major;
}

int tokenizers_script(char32_t c) {
  if (c == 0x30FC) return USCRIPT_HAN;
  if (c == ' ') return kAnyScript;
  if (!assigned_by(c, 9)) return kAnyScript;
  UErrorCode status = U_ZERO_ERROR;
  UScriptCode script = uscript_getScript(static_cast<UChar32>(c), &status);
  if (U_FAILURE(status) || script == USCRIPT_UNKNOWN) return kAnyScript;
  if (script == USCRIPT_HIRAGANA || script == USCRIPT_KATAKANA) return USCRIPT_HAN;
  // Code points of Unicode 9.0 whose Script value changed later (checked
  // exhaustively against tokenizers, tests/tokenizers/components_test.cpp).
  switch (c) {
    case 0x0589:  // ARMENIAN FULL STOP, now Armenian
    case 0x061C:  // ARABIC LETTER MARK, now Arabic
      return USCRIPT_COMMON;
    case 0x0953:  // DEVANAGARI GRAVE ACCENT, now Inherited
    case 0x0954:  // DEVANAGARI ACUTE ACCENT, now Inherited
      return USCRIPT_DEVANAGARI;
    default:
      return script;
  }
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_alphanumeric(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || is_numeric(c);
}

bool is_punctuation(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  }
  // tokenizers' table is Unicode 8.0's (the unicode_categories crate): later
  // punctuation is not punctuation there, and two code points were
  // punctuation then (checked over every code point against tokenizers).
  if (c == 0x166D || c == 0x111C9) return true;  // now So and Mn
  return is_punctuation(c) && assigned_by(c, 8);
}

bool is_other(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return assigned_by(c, 8);  // unicode_categories' Unicode 8.0 table
    default:
      return false;
  }
}

// The categories below are those of the Unicode versions of tokenizers'
// tables, checked over every code point against tokenizers: newer code
// points are not marks there, and a few changed category since.
bool is_mark_nonspacing(char32_t c) {
  switch (c) {
    case 0x1734:  // Mn in 8.0, now Mc
      return true;
    case 0x1885:  // Lo in 8.0, now Mn
    case 0x1886:
    case 0xA9BD:  // Mc in 8.0
    case 0x111C9:  // Po in 8.0
      return false;
    default:
      return c >= 0x300 && u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK && assigned_by(c, 8);
  }
}

bool is_mark(char32_t c) {
  if (c < 0x300) return false;
  if (c == 0x1CF2 || c == 0x1CF3) return true;  // Mc in 9.0, now Lo
  if (c == 0x111C9) return false;                // Po in 9.0, now Mn
  int8_t t = u_charType(static_cast<UChar32>(c));
  return (t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK) && assigned_by(c, 9);
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  // U+0130 is the only character whose unconditional full lowercase mapping
  // (SpecialCasing.txt) differs from the simple one; Rust applies it.
  if (c == 0x130) {
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  out.push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))));
}

static const icu::Normalizer2& instance(Form form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case Form::NFC: n = icu::Normalizer2::getNFCInstance(err); break;
    case Form::NFD: n = icu::Normalizer2::getNFDInstance(err); break;
    case Form::NFKC: n = icu::Normalizer2::getNFKCInstance(err); break;
    case Form::NFKD: n = icu::Normalizer2::getNFKDInstance(err); break;
  }
  KILN_CHECK(U_SUCCESS(err) && n, "tokenizers: ICU normalizer unavailable: ", u_errorName(err));
  return *n;
}

bool is_normalized(std::string_view s, Form form) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
  if (ascii) return true;
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), s.size()));
  bool yes = instance(form).isNormalized(u, err);
  return U_SUCCESS(err) && yes;
}

std::vector<Tagged> normalize(const std::u32string& chars, Form form) {
  bool compose = form == Form::NFC || form == Form::NFKC;
  const icu::Normalizer2& decomp = instance(form == Form::NFC || form == Form::NFD ? Form::NFD
                                                                                    : Form::NFKD);
  const icu::Normalizer2& nfc = instance(Form::NFC);
  std::vector<Tagged> out;
  out.reserve(chars.size());
  // 1. Full decomposition, character by character.
  for (uint32_t i = 0; i < chars.size(); ++i) {
    char32_t c = chars[i];
    icu::UnicodeString d;
    if (c >= 0xA0 && decomp.getDecomposition(static_cast<UChar32>(c), d)) {
      for (int32_t k = 0; k < d.length();) {
        UChar32 dc = d.char32At(k);
        out.push_back({static_cast<char32_t>(dc), i, k == 0 ? 0 : 1});
        k += U16_LENGTH(dc);
      }
    } else {
      out.push_back({c, i, 0});
    }
  }
  // 2. Canonical ordering: stable sort of each run of non-starters by ccc.
  auto ccc = [](char32_t c) { return c < 0x300 ? 0 : u_getCombiningClass(static_cast<UChar32>(c)); };
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i].c) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j].c) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j,
                     [&](const Tagged& a, const Tagged& b) { return ccc(a.c) < ccc(b.c); });
    i = j;
  }
  if (!compose) return out;
  // 3. Canonical composition (UAX #15): a character combines with the last
  // starter when it is not blocked by a mark of the same or higher class.
  std::vector<Tagged> res;
  res.reserve(out.size());
  long starter = -1;
  int last_ccc = -1;
  for (const Tagged& t : out) {
    int cc = ccc(t.c);
    if (starter >= 0 && (last_ccc < cc || (last_ccc == 0 && res.size() == size_t(starter) + 1))) {
      UChar32 comp = nfc.composePair(static_cast<UChar32>(res[starter].c), static_cast<UChar32>(t.c));
      if (comp >= 0) {
        res[starter].c = static_cast<char32_t>(comp);
        res[starter].change += t.change - 1;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<long>(res.size());
      last_ccc = 0;
    } else {
      last_ccc = cc;
    }
    res.push_back(t);
  }
  return res;
}

std::vector<std::pair<size_t, size_t>> graphemes(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  if (s.empty()) return out;
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::BreakIterator> it(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err));
  KILN_CHECK(U_SUCCESS(err), "tokenizers: ICU grapheme iterator unavailable: ", u_errorName(err));
  UText* text = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &err);
  KILN_CHECK(U_SUCCESS(err), "tokenizers: ICU utext_openUTF8 failed: ", u_errorName(err));
  it->setText(text, err);
  // With UTF-8 UText, break positions are native (byte) indices.
  int32_t prev = it->first();
  for (int32_t pos = it->next(); pos != icu::BreakIterator::DONE; pos = it->next()) {
    out.emplace_back(static_cast<size_t>(prev), static_cast<size_t>(pos));
    prev = pos;
  }
  utext_close(text);
  return out;
}

}  // namespace kiln::tokenizers::unicode
