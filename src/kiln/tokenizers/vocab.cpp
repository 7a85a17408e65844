#include "kiln/tokenizers/vocab.h"

namespace kiln::tokenizers {

void Vocab::set(const std::string& token, uint32_t id) {
  map_[token] = id;
  if (id >= tokens_.size()) {
    tokens_.resize(id + 1);
    has_.resize(id + 1, false);
  }
  tokens_[id] = token;
  has_[id] = true;
}

}  // namespace kiln::tokenizers
