#pragma once
// GPT-2's reversible byte <-> character table: printable Latin-1 bytes stand
// for themselves, the other 68 bytes map to U+0100.. in byte order, so every
// byte string becomes printable text a BPE vocabulary can hold.
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/tokenizers/regex.h"

namespace kiln::tokenizers {
class NormalizedString;
}

namespace kiln::tokenizers::byte_level {

// Replaces every byte of n by its character (a multi-byte character becomes
// several, all aligned to it): the ByteLevel normalizer, and the last step
// of the ByteLevel pre-tokenizer.
void to_byte_chars(NormalizedString& n);

// The character byte b stands for.
char32_t byte_to_char(unsigned char b);
// The UTF-8 encoding of byte_to_char(b) (precomputed).
const std::string& byte_to_utf8(unsigned char b);
// The byte character c stands for, if it is one of the 256.
std::optional<unsigned char> char_to_byte(char32_t c);

// The GPT-2 pre-tokenization regex in PCRE2 syntax, with Onig's \s (what
// tokenizers uses) spelled out.
#define KILN_S_ KILN_REGEX_WHITE_SPACE
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" KILN_S_ R"(\p{L}\p{N}]+|[)" KILN_S_ R"(]+(?![^)" KILN_S_
    R"(])|[)" KILN_S_ "]+";
#undef KILN_S_

}  // namespace kiln::tokenizers::byte_level
