#pragma once
// A token produced by a model or an added-token match: its id, its string
// and its byte range inside the piece of normalized text it came from.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace kiln::tokenizers {

struct Token {
  uint32_t id = 0;
  std::string value;
  std::pair<size_t, size_t> offsets;
};

}  // namespace kiln::tokenizers
