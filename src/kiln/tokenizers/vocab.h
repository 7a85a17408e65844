#pragma once
// Token string <-> id maps shared by the models (lookups by string_view
// without allocating).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::tokenizers {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  // Adds or overwrites token -> id; ids may leave gaps.
  void set(const std::string& token, uint32_t id);
  std::optional<uint32_t> id(std::string_view token) const {
    auto it = map_.find(token);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(uint32_t id) const {
    return id < tokens_.size() && has_[id] ? &tokens_[id] : nullptr;
  }
  size_t size() const { return map_.size(); }
  const std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>& map() const {
    return map_;
  }

 private:
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> map_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_;
};

}  // namespace kiln::tokenizers
