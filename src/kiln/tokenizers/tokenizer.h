#pragma once
// kiln::tokenizers::Tokenizer: the Hugging Face tokenization pipeline
//   added tokens -> normalizer -> pre-tokenizer -> model -> post-processor
// plus truncation, padding, batch encoding (OpenMP, all cores) and decoding.
// Load one with from_file (tokenizer.json) or from_pretrained (a model
// directory: tokenizer.json, or the legacy vocab.txt / vocab.json+merges.txt /
// spiece.model chosen with tokenizer_config.json).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/tokenizers/added_vocabulary.h"
#include "kiln/tokenizers/decoders.h"
#include "kiln/tokenizers/encoding.h"
#include "kiln/tokenizers/model.h"
#include "kiln/tokenizers/normalizers.h"
#include "kiln/tokenizers/post_processors.h"
#include "kiln/tokenizers/pre_tokenizers.h"

namespace kiln::tokenizers {

// A named special token (transformers' tokenizer.bos_token and bos_token_id).
struct NamedSpecialToken {
  std::string content;
  uint32_t id = 0;
};

enum class TruncationStrategy { LongestFirst, OnlyFirst, OnlySecond };

struct TruncationParams {
  size_t max_length = 512;
  TruncationStrategy strategy = TruncationStrategy::LongestFirst;
  Direction direction = Direction::Right;
  // What is cut off becomes Encoding::overflowing: windows of the kept
  // length, each repeating the last `stride` tokens of the previous one.
  size_t stride = 0;
  // tokenizers 0.23.1's truncation early exit (its PR #1990, which the
  // goldens pin): a sequence is tokenized only until max_length tokens
  // exist, so what lies beyond never reaches `overflowing` (its open issue
  // #2091). false: every split is tokenized, as tokenizers 0.22 and earlier
  // (transformers 4.40's) do -- what run_qa's windows need.
  bool early_exit = true;
};

struct PaddingParams {
  // nullopt: pad a batch to its longest encoding; otherwise to this length.
  std::optional<size_t> length;
  std::optional<size_t> pad_to_multiple_of;
  uint32_t pad_id = 0;
  uint32_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
  Direction direction = Direction::Right;
};

class Tokenizer {
 public:
  Tokenizer() = default;
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // `where` names the source in error messages.
  static Tokenizer from_json_string(std::string_view json, const std::string& where);
  static Tokenizer from_pretrained(const std::string& directory);

  void set_normalizer(NormalizerPtr n);
  void set_pre_tokenizer(PreTokenizerPtr p) { pre_tokenizer_ = std::move(p); }
  // Byte-level pre-tokenizers add a leading space to every word, as a
  // transformers tokenizer loaded with add_prefix_space=True (what run_ner
  // does for RoBERTa and GPT-2 to encode pre-split words). Others: unchanged.
  void set_add_prefix_space() {
    if (pre_tokenizer_)
      if (auto p = pre_tokenizer_->with_prefix_space()) pre_tokenizer_ = std::move(p);
  }
  void set_model(ModelPtr m) { model_ = std::move(m); }
  void set_post_processor(PostProcessorPtr p) { post_processor_ = std::move(p); }
  void set_decoder(DecoderPtr d) { decoder_ = std::move(d); }
  void add_tokens(const std::vector<AddedToken>& tokens);
  // transformers' split_special_tokens: special tokens in the text are
  // tokenized as text, not matched.
  void set_encode_special_tokens(bool on);
  void set_truncation(std::optional<TruncationParams> t) { truncation_ = std::move(t); }
  void set_padding(std::optional<PaddingParams> p) { padding_ = std::move(p); }

  const Model& model() const;
  const std::optional<TruncationParams>& truncation() const { return truncation_; }
  const std::optional<PaddingParams>& padding() const { return padding_; }
  const AddedVocabulary& added_vocabulary() const { return added_; }
  // From tokenizer_config.json when loaded with from_pretrained.
  std::optional<size_t> model_max_length;
  // transformers' clean_up_tokenization_spaces, which from_pretrained reads
  // from tokenizer_config.json and turns off for BPE models as transformers 5
  // does (unless the config sets
  // clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output):
  // decode() then drops the space before . ? ! , and English contractions.
  bool clean_up_tokenization_spaces = false;
  // from_pretrained: "bos_token", "eos_token", "unk_token", "sep_token",
  // "pad_token", "cls_token", "mask_token" as transformers 5's AutoTokenizer
  // resolves them (tokenizer_config.json, special_tokens_map.json, the
  // class's defaults); a name transformers leaves unset (GPT-2's pad) is
  // absent.
  std::map<std::string, NamedSpecialToken> special_tokens;
  // transformers' tokenizer(text, text_pair) encodes an empty text_pair as no
  // pair at all; from_pretrained sets this so encode_pair does the same.
  // Batches keep empty pairs, as transformers' batch call does.
  bool empty_pair_is_single = false;

  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  Encoding encode_pair(std::string_view text, std::string_view pair,
                       bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch_pairs(
      const std::vector<std::pair<std::string, std::string>>& pairs,
      bool add_special_tokens = true) const;

  // Pre-split input (tokenizers' is_pretokenized): every word goes through
  // the whole pipeline (added tokens, normalizer, pre-tokenizer, model) on
  // its own; the tokens of words[i] have word id i and offsets relative to
  // words[i]. Under truncation each word is stopped early on its own (an
  // assumption: HF's Node binding cannot encode pre-split input to check).
  Encoding encode_words(const std::vector<std::string>& words,
                        bool add_special_tokens = true) const;
  Encoding encode_words_pair(const std::vector<std::string>& words,
                             const std::vector<std::string>& pair,
                             bool add_special_tokens = true) const;
  std::vector<Encoding> encode_batch_words(const std::vector<std::vector<std::string>>& batch,
                                           bool add_special_tokens = true) const;

  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = true) const;
  std::vector<std::string> decode_batch(const std::vector<std::vector<uint32_t>>& ids,
                                        bool skip_special_tokens = true) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(uint32_t id) const;
  size_t vocab_size(bool with_added_tokens = true) const;

 private:
  // stop_early: under truncation, stop tokenizing past max_length tokens.
  Encoding encode_sequence(std::string_view text, uint32_t type_id, bool stop_early) const;
  // text and pair as a pair, even when pair is empty.
  Encoding encode_two(std::string_view text, std::string_view pair, bool add_special_tokens) const;
  Encoding encode_word_sequence(const std::vector<std::string>& words, uint32_t type_id,
                                bool stop_early) const;
  Encoding post_process(Encoding a, std::optional<Encoding> b, bool add_special_tokens) const;
  // tokenizers' decode (the decoder on the tokens), without transformers' clean-up.
  std::string decode_tokens(const std::vector<uint32_t>& ids, bool skip_special_tokens) const;
  void pad_batch(std::vector<Encoding>& encodings) const;
  // length rounded up to padding's pad_to_multiple_of.
  size_t padded_length(size_t length) const;

  NormalizerPtr normalizer_;
  PreTokenizerPtr pre_tokenizer_;
  ModelPtr model_;
  PostProcessorPtr post_processor_;
  DecoderPtr decoder_;
  AddedVocabulary added_;
  std::optional<TruncationParams> truncation_;
  std::optional<PaddingParams> padding_;
};

}  // namespace kiln::tokenizers
