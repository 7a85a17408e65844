#pragma once
// SentencePiece's precompiled normalization map ("precompiled_charsmap"):
//   u32 little-endian trie size in bytes | darts-clone double-array trie
//   (u32 units) | NUL-separated replacement strings.
// A trie value is the offset of the replacement string in the pool.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tokenizers {

class PrecompiledCharsmap {
 public:
  // Throws kiln::Error (naming `where`) when the blob is truncated.
  PrecompiledCharsmap(std::string_view blob, const std::string& where);

  // The replacement for the shortest key that prefixes `chunk`, if any
  // (this is what spm_precompiled does, and tokenizers with it).
  std::optional<std::string_view> transform(std::string_view chunk) const;

 private:
  std::vector<uint32_t> units_;
  std::string pool_;
};

}  // namespace kiln::tokenizers
