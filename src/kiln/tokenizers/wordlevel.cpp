#include "kiln/tokenizers/wordlevel.h"

#include "kiln/core/error.h"

namespace kiln::tokenizers {

std::vector<Token> WordLevel::tokenize(std::string_view word) const {
  if (auto id = vocab_.id(word)) return {Token{*id, std::string(word), {0, word.size()}}};
  auto unk = vocab_.id(unk_token_);
  KILN_CHECK(unk, "WordLevel: unk token '", unk_token_, "' is not in the vocabulary");
  return {Token{*unk, unk_token_, {0, word.size()}}};
}

}  // namespace kiln::tokenizers
