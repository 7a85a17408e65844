#pragma once
// A tokenization model turns one pre-tokenized word into tokens.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tokenizers/token.h"

namespace kiln::tokenizers {

class Model {
 public:
  virtual ~Model() = default;
  // Token offsets are byte ranges inside `word`.
  virtual std::vector<Token> tokenize(std::string_view word) const = 0;
  virtual std::optional<uint32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(uint32_t id) const = 0;
  virtual size_t vocab_size() const = 0;
};

using ModelPtr = std::shared_ptr<const Model>;

}  // namespace kiln::tokenizers
