#pragma once
// Post-processors add the model's special tokens around the encoded
// sequence(s) and set type ids (tokenizers' `processors`).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tokenizers/encoding.h"

namespace kiln::tokenizers {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Number of special tokens process() adds to a single text or a pair.
  virtual size_t added_tokens(bool is_pair) const = 0;
  // encodings: one (single) or two (pair); returns the pieces to concatenate.
  virtual std::vector<Encoding> process(std::vector<Encoding> encodings,
                                        bool add_special_tokens) const = 0;
};

using PostProcessorPtr = std::shared_ptr<const PostProcessor>;

// Concatenates the pieces a post-processor returns (Encoding::merge_with
// from an empty encoding, which combines their overflowing pieces).
Encoding merge_encodings(std::vector<Encoding> encodings);

using SpecialToken = std::pair<std::string, uint32_t>;  // (token, id)

// [CLS] A [SEP] (B [SEP]); B's part has type id 1.
class BertProcessing : public PostProcessor {
 public:
  BertProcessing(SpecialToken sep, SpecialToken cls) : sep_(std::move(sep)), cls_(std::move(cls)) {}
  size_t added_tokens(bool is_pair) const override { return is_pair ? 3 : 2; }
  std::vector<Encoding> process(std::vector<Encoding> e, bool add) const override;

 private:
  SpecialToken sep_, cls_;
};

// <s> A </s> (</s> B </s>); all type ids 0; optional offset trimming.
class RobertaProcessing : public PostProcessor {
 public:
  RobertaProcessing(SpecialToken sep, SpecialToken cls, bool trim_offsets, bool add_prefix_space)
      : sep_(std::move(sep)), cls_(std::move(cls)), trim_(trim_offsets), prefix_(add_prefix_space) {}
  size_t added_tokens(bool is_pair) const override { return is_pair ? 4 : 2; }
  std::vector<Encoding> process(std::vector<Encoding> e, bool add) const override;

 private:
  SpecialToken sep_, cls_;
  bool trim_, prefix_;
};

// Only trims the spaces byte-level tokens carry from their offsets.
class ByteLevelProcessing : public PostProcessor {
 public:
  ByteLevelProcessing(bool trim_offsets, bool add_prefix_space)
      : trim_(trim_offsets), prefix_(add_prefix_space) {}
  size_t added_tokens(bool) const override { return 0; }
  std::vector<Encoding> process(std::vector<Encoding> e, bool add) const override;

 private:
  bool trim_, prefix_;
};

// "$A:0 [SEP]:0 $B:1 ..." templates.
class TemplateProcessing : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    std::string id;  // "A"/"B" for sequences, the special token's name otherwise
    uint32_t type_id;
  };
  struct Special {
    std::vector<uint32_t> ids;
    std::vector<std::string> tokens;
  };
  // Throws kiln::Error when a template names an unknown special token.
  TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair,
                     std::map<std::string, Special> special_tokens);
  size_t added_tokens(bool is_pair) const override;
  std::vector<Encoding> process(std::vector<Encoding> e, bool add) const override;

 private:
  std::vector<Piece> single_, pair_;
  std::map<std::string, Special> special_;
};

class SequenceProcessing : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<PostProcessorPtr> parts) : parts_(std::move(parts)) {}
  size_t added_tokens(bool is_pair) const override;
  std::vector<Encoding> process(std::vector<Encoding> e, bool add) const override;

 private:
  std::vector<PostProcessorPtr> parts_;
};

// Moves offsets past the leading/trailing spaces byte-level tokens carry.
void trim_byte_level_offsets(Encoding& e, bool add_prefix_space);

}  // namespace kiln::tokenizers
