#include "kiln/tokenizers/byte_level.h"

#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::byte_level {

namespace {
struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> to_utf8;
  Tables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? char32_t(b) : next++;
      to_utf8[b] = utf8::encode(to_char[b]);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

const std::string& byte_to_utf8(unsigned char b) { return tables().to_utf8[b]; }

std::optional<unsigned char> char_to_byte(char32_t c) {
  if (c < 256) {
    bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    if (printable) return static_cast<unsigned char>(c);
    return std::nullopt;
  }
  if (c >= 256 && c < 256 + 68) {
    for (int b = 0; b < 256; ++b) {
      if (tables().to_char[b] == c) return static_cast<unsigned char>(b);
    }
  }
  return std::nullopt;
}

}  // namespace kiln::tokenizers::byte_level
