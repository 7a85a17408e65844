#include "kiln/tokenizers/byte_level.h"

#include "kiln/tokenizers/normalized_string.h"
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

void to_byte_chars(NormalizedString& n) {
  const std::string& t = n.get();
  if (t.empty()) return;
  std::vector<NormalizedString::Change> changes;
  changes.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    size_t len = utf8::seq_len(static_cast<unsigned char>(t[i]));
    for (size_t k = 0; k < len && i + k < t.size(); ++k) {
      changes.emplace_back(byte_to_char(static_cast<unsigned char>(t[i + k])), k > 0 ? 1 : 0);
    }
    i += len;
  }
  n.transform(changes, 0);
}

}  // namespace kiln::tokenizers::byte_level
