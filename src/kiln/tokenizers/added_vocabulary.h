#pragma once
// Added tokens ([CLS], <|endoftext|>, <extra_id_0>, user tokens) are found in
// the text before the model runs: tokens with normalized=false are matched in
// the raw text, the others in the normalized text. Matching is leftmost-
// longest; single_word / lstrip / rstrip behave as in tokenizers.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/tokenizers/normalizers.h"
#include "kiln/tokenizers/pre_tokenized_string.h"

namespace kiln::tokenizers {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  // Adds or replaces (same content) a token. Call rebuild() afterwards.
  void add(AddedToken token);
  // Recomputes the match tables; normalized tokens are matched by their
  // content passed through `normalizer` (may be null).
  void rebuild(const Normalizer* normalizer);
  // tokenizers' encode_special_tokens (transformers' split_special_tokens):
  // special tokens are not matched, their text is tokenized as any other.
  // Call rebuild() afterwards.
  void set_encode_special_tokens(bool on) { encode_special_tokens_ = on; }

  // The text as splits: added tokens already tokenized, the rest normalized.
  PreTokenizedString extract_and_normalize(const Normalizer* normalizer, std::string text) const;

  std::optional<uint32_t> token_to_id(std::string_view content) const;
  const AddedToken* by_id(uint32_t id) const;
  bool is_special(uint32_t id) const;
  // The text decode() shows for an added token: tokenizers keeps normalized
  // tokens in their normalized form.
  const std::string& decoded_form(uint32_t id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct MatchSet {
    std::vector<std::pair<std::string, size_t>> patterns;  // (text, token index)
    std::unordered_map<unsigned char, std::vector<size_t>> by_first;  // longest first
  };
  void split_with(const MatchSet& set, NormalizedString&& n, std::vector<Split>& out) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> decoded_;  // parallel to tokens_
  std::unordered_map<uint32_t, size_t> by_id_;
  MatchSet raw_, normalized_;
  bool encode_special_tokens_ = false;
};

}  // namespace kiln::tokenizers
