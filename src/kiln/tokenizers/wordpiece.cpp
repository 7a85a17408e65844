#include "kiln/tokenizers/wordpiece.h"

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

WordPiece::WordPiece(Vocab vocab, std::string unk_token, std::string continuing_subword_prefix,
                     size_t max_input_chars_per_word)
    : vocab_(std::move(vocab)),
      unk_token_(std::move(unk_token)),
      prefix_(std::move(continuing_subword_prefix)),
      max_chars_(max_input_chars_per_word) {}

std::optional<std::string> WordPiece::id_to_token(uint32_t id) const {
  if (const std::string* t = vocab_.token(id)) return *t;
  return std::nullopt;
}

Token WordPiece::unk(std::string_view word) const {
  auto id = vocab_.id(unk_token_);
  KILN_CHECK(id.has_value(), "WordPiece: unk token '", unk_token_, "' is not in the vocabulary");
  return Token{*id, unk_token_, {0, word.size()}};
}

std::vector<Token> WordPiece::tokenize(std::string_view word) const {
  std::vector<Token> out;
  if (utf8::count_chars(word) > max_chars_) {
    out.push_back(unk(word));
    return out;
  }
  std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = word.size();
    bool found = false;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate = prefix_;
      candidate.append(word.substr(start, end - start));
      if (auto id = vocab_.id(candidate)) {
        out.push_back(Token{*id, candidate, {start, end}});
        found = true;
        break;
      }
      // Drop the last character.
      do {
        --end;
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!found) {
      out.clear();
      out.push_back(unk(word));
      return out;
    }
    start = end;
  }
  return out;
}

}  // namespace kiln::tokenizers
