#pragma once
// UTF-8 helpers. Text inside the tokenizer pipeline is always valid UTF-8
// (checked once at the entry points), so decode() does not re-validate.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::tokenizers::utf8 {

// Byte length of the sequence that starts with lead byte b (1 for a
// continuation byte, so loops always advance).
inline size_t seq_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point starting at s[i]; *len receives its byte length.
inline char32_t decode(std::string_view s, size_t i, size_t* len) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = seq_len(b);
  if (i + n > s.size()) n = 1;
  *len = n;
  if (n == 1) return b;
  char32_t cp = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

inline size_t encoded_len(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

void append(std::string& out, char32_t cp);
std::string encode(char32_t cp);
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
size_t count_chars(std::string_view s);
// The bytes of code points [begin, end) of s (Python's s[begin:end]); what of
// the range lies past the end of s is left out.
std::string_view slice_chars(std::string_view s, size_t begin, size_t end);

// Byte offset of the first invalid UTF-8 sequence, or nullopt when s is valid.
std::optional<size_t> find_invalid(std::string_view s);

// Decodes bytes that may be invalid UTF-8 the way Rust's
// String::from_utf8_lossy does: each maximal invalid subpart becomes U+FFFD.
std::string lossy(std::string_view bytes);

}  // namespace kiln::tokenizers::utf8
