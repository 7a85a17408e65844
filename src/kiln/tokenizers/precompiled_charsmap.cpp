#include "kiln/tokenizers/precompiled_charsmap.h"

#include <cstring>

#include "kiln/core/error.h"

namespace kiln::tokenizers {

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& where) {
  KILN_CHECK(blob.size() >= 4, where, ": precompiled_charsmap has ", blob.size(),
             " bytes, expected at least 4");
  uint32_t trie_bytes = 0;
  for (int k = 3; k >= 0; --k) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[k]);
  KILN_CHECK(trie_bytes % 4 == 0 && 4 + size_t(trie_bytes) <= blob.size(), where,
             ": precompiled_charsmap trie size ", trie_bytes, " does not fit the ", blob.size(),
             "-byte blob");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob.data()) + 4 + 4 * i;
    units_[i] = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  }
  pool_.assign(blob.substr(4 + trie_bytes));
}

// darts-clone unit layout.
static inline bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }
static inline uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static inline uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  if (units_.empty()) return std::nullopt;
  size_t pos = 0;
  pos ^= offset(units_[0]);
  for (unsigned char c : chunk) {
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;
    uint32_t u = units_[pos];
    if (label(u) != c) return std::nullopt;
    pos ^= offset(u);
    if (pos >= units_.size()) return std::nullopt;
    if (has_leaf(u)) {
      uint32_t v = value(units_[pos]);
      if (v >= pool_.size()) return std::nullopt;
      size_t end = pool_.find('\0', v);
      if (end == std::string::npos) end = pool_.size();
      return std::string_view(pool_).substr(v, end - v);
    }
  }
  return std::nullopt;
}

}  // namespace kiln::tokenizers
