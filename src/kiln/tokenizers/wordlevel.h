#pragma once
// WordLevel: every word is one vocabulary entry or the unk token.
#include "kiln/tokenizers/model.h"
#include "kiln/tokenizers/vocab.h"

namespace kiln::tokenizers {

class WordLevel : public Model {
 public:
  WordLevel(Vocab vocab, std::string unk_token)
      : vocab_(std::move(vocab)), unk_token_(std::move(unk_token)) {}
  std::vector<Token> tokenize(std::string_view word) const override;
  std::optional<uint32_t> token_to_id(std::string_view t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(uint32_t id) const override {
    if (const std::string* t = vocab_.token(id)) return *t;
    return std::nullopt;
  }
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  std::string unk_token_;
};

}  // namespace kiln::tokenizers
