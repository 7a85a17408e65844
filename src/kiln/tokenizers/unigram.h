#pragma once
// Unigram language model: the segmentation of a word maximising the sum of
// piece log-probabilities (Viterbi). Characters no piece covers become unk
// with score min_score - 10; consecutive unks fuse.
#include <utility>

#include "kiln/tokenizers/model.h"
#include "kiln/tokenizers/vocab.h"

namespace kiln::tokenizers {

class Unigram : public Model {
 public:
  Unigram(std::vector<std::pair<std::string, double>> pieces, std::optional<uint32_t> unk_id,
          bool byte_fallback);
  std::vector<Token> tokenize(std::string_view word) const override;
  std::optional<uint32_t> token_to_id(std::string_view t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(uint32_t id) const override;
  size_t vocab_size() const override { return pieces_.size(); }

 private:
  std::vector<std::string> encode(std::string_view s) const;

  std::vector<std::pair<std::string, double>> pieces_;
  Vocab vocab_;
  std::optional<uint32_t> unk_id_;
  bool byte_fallback_;
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
};

}  // namespace kiln::tokenizers
