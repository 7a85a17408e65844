#pragma once
// WordPiece: greedy longest-match-first over the vocabulary; pieces after the
// first carry the continuing-subword prefix ("##"). A word with any
// unmatchable part, or longer than max_input_chars_per_word, is one unk.
#include "kiln/tokenizers/model.h"
#include "kiln/tokenizers/vocab.h"

namespace kiln::tokenizers {

class WordPiece : public Model {
 public:
  WordPiece(Vocab vocab, std::string unk_token, std::string continuing_subword_prefix,
            size_t max_input_chars_per_word);
  std::vector<Token> tokenize(std::string_view word) const override;
  std::optional<uint32_t> token_to_id(std::string_view t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(uint32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }

 private:
  Token unk(std::string_view word) const;
  Vocab vocab_;
  std::string unk_token_;
  std::string prefix_;
  size_t max_chars_;
};

}  // namespace kiln::tokenizers
