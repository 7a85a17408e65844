#pragma once
// Decoders turn tokens back into text (tokenizers' `decoders`). Each works on
// the list of token strings (decode_chain) so they compose in a Sequence; the
// final text is the concatenation.
#include <memory>
#include <string>
#include <vector>

#include "kiln/tokenizers/pre_tokenizers.h"

namespace kiln::tokenizers {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
  std::string decode(std::vector<std::string> tokens) const;
};

using DecoderPtr = std::shared_ptr<const Decoder>;

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  std::string prefix_;
  bool cleanup_;
};

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, PrependScheme scheme)
      : replacement_(replacement), scheme_(scheme) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

// Replaces the end-of-word suffix by a space (none after the last token).
class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  std::string suffix_;
};

// Runs of <0xXX> tokens become the bytes they stand for (U+FFFD per byte
// when they are not valid UTF-8).
class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;
};

// Joins every token into one.
class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;
};

// Removes up to `start` leading and `stop` trailing `content` characters
// from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  char32_t content_;
  size_t start_, stop_;
};

// Literal replacement in every token.
class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  std::string pattern_, content_;
};

// Connectionist temporal classification output: repeated tokens collapse
// into one, pad_token is removed from every token and, with cleanup, BERT's
// clean-up of spaces before punctuation is applied and the word delimiter
// becomes a space; tokens left empty are dropped.
class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad_token, std::string word_delimiter_token, bool cleanup)
      : pad_(std::move(pad_token)), delimiter_(std::move(word_delimiter_token)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<DecoderPtr> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override;

 private:
  std::vector<DecoderPtr> parts_;
};

}  // namespace kiln::tokenizers
