#pragma once
// Character properties and normalization forms, with the semantics the Rust
// tokenizers library relies on (Rust's char methods, unicode_categories,
// unicode-normalization). Backed by ICU (see CMakeLists.txt for why).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::tokenizers::unicode {

// Rust char::is_whitespace: the White_Space property.
bool is_whitespace(char32_t c);
// Rust char::is_alphanumeric: Alphabetic or Numeric (Nd, Nl, No).
bool is_alphanumeric(char32_t c);
// Rust char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t c);
// General category P* (any punctuation).
bool is_punctuation(char32_t c);
// ASCII punctuation or Unicode 8.0's P* (BERT's and Punctuation's
// definition, from tokenizers' Unicode 8.0 table).
bool is_bert_punctuation(char32_t c);
// General category Cc, Cf, Co or Cs in Unicode 8.0: unicode_categories'
// is_other, which BERT's clean_text uses. Unassigned code points (Cn, e.g.
// U+FFFE) are not included: Hugging Face keeps them.
bool is_other(char32_t c);
// General category Mn in Unicode 8.0 (BERT's strip_accents).
bool is_mark_nonspacing(char32_t c);
// General category M* (Mn, Mc, Me) in Unicode 9.0 (the StripAccents
// normalizer).
bool is_mark(char32_t c);
// The CJK blocks BERT surrounds with spaces.
bool is_chinese_char(char32_t c);

// The script tokenizers' UnicodeScripts pre-tokenizer gives c (its
// fixed_script), as an ICU UScriptCode, or kAnyScript for characters that
// join whatever script is around them: ' ', and code points unassigned in
// Unicode 9.0 (the version of tokenizers' script table; ICU's newer data
// is cut back with the Age property, and the four code points whose script
// changed since are given their 9.0 value). Hiragana, Katakana and U+30FC
// count as Han.
constexpr int kAnyScript = -1;
int tokenizers_script(char32_t c);

// Full lowercase mapping of one character without context (Rust
// char::to_lowercase): appends one or more code points to out.
void lowercase(char32_t c, std::u32string& out);

enum class Form { NFC, NFD, NFKC, NFKD };

// One output character of a normalization, the index of the input
// character it came from, and its NormalizedString::Change as
// unicode-normalization-alignments (what tokenizers uses) computes it: 0 for
// the first character of a decomposition, +1 for the others, carried along
// by canonical reordering; a composition adds the absorbed character's
// change minus one. Applied in output order, these give tokenizers'
// alignments, which follow positions, not sources, where marks move.
struct Tagged {
  char32_t c;
  uint32_t src;
  int change = 0;
};

// True when s is already in the given form (fast pre-check).
bool is_normalized(std::string_view s, Form form);
// Normalizes chars, tagging every output character with its source index.
std::vector<Tagged> normalize(const std::u32string& chars, Form form);

// Byte ranges of the extended grapheme clusters of valid UTF-8 text.
std::vector<std::pair<size_t, size_t>> graphemes(std::string_view s);

}  // namespace kiln::tokenizers::unicode
