#pragma once
// transformers' stopping criteria beyond EOS and max_length:
// StopStringCriteria (stop_strings) and MaxTimeCriteria (max_time), as its
// generate() applies them after every new token (to each row of greedy
// decoding and sampling, to each beam-search candidate).
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tokenizers/tokenizer.h"

namespace kiln::models {

struct GenerationConfig;

// How StopStringCriteria reads a token's text: `ByteLevel` (a byte-level BPE,
// GPT-2's: every character of a token is a byte), `ByteFallback` (a "<0xNN>"
// token is that byte, Llama's) or `Text` (the decoded text of each token).
enum class StopStringMode { Text, ByteLevel, ByteFallback };

// The mode transformers picks from the tokenizer's decoder: tokenizer.json's
// "decoder" holding a ByteFallback (else a ByteLevel) decoder anywhere, a
// vocab.json + merges.txt tokenizer byte-level, any other Text.
StopStringMode stop_string_mode(const std::filesystem::path& tokenizer_dir);

// StopStringCriteria.clean_tokenizer_vocab: by id, the text each token
// yields (bytes in the byte modes), or nullopt for an id the tokenizer does
// not have. Other tokens are decoded after the tokens of "abcdef" and taken
// after it, so that a leading space stays.
std::vector<std::optional<std::string>> stop_string_token_texts(const tokenizers::Tokenizer& tok,
                                                                StopStringMode mode);

// StopStringCriteria: a sequence stops when one of the strings ends inside
// the text of its last token (it may begin in earlier tokens, or inside the
// last, as "stop" in "st" "opera"), the last len(longest string) tokens
// considered (characters in Text mode, bytes in the byte modes). The strings
// are matched as written; nothing is trimmed from the output.
class StopStrings {
 public:
  // An empty string, or strings no token can end, are errors (transformers
  // refuses the latter too).
  StopStrings(std::vector<std::string> strings, std::vector<std::optional<std::string>> token_texts,
              StopStringMode mode);
  // From the tokenizer in `tokenizer_dir` (as the CLI loaded it).
  static StopStrings from_tokenizer(std::vector<std::string> strings, const tokenizers::Tokenizer& tok,
                                    const std::filesystem::path& tokenizer_dir);

  const std::vector<std::string>& strings() const { return strings_; }
  // Whether `ids` (a row's ids so far: a decoder-only model's prompt and
  // output, an encoder-decoder's decoder input) ends a stop string.
  bool matches(const std::vector<int64_t>& ids) const;

 private:
  std::vector<std::string> strings_;
  std::vector<std::optional<std::string>> texts_;
  size_t window_ = 0;  // tokens considered: the longest string's length
};

// The criteria of one generate() call: its clock starts when it is made.
class StoppingCriteria {
 public:
  explicit StoppingCriteria(const GenerationConfig& g);
  // MaxTimeCriteria: more than max_time seconds since the call started
  // (every row stops; each has at least one new token).
  bool out_of_time() const;
  // max_time or a stop string, for a row's ids after its new token.
  bool stops(const std::vector<int64_t>& ids) const;
  bool stops(const std::vector<int64_t>& ids, bool out_of_time) const;

 private:
  const StopStrings* stop_strings_ = nullptr;
  std::optional<double> max_time_;
  std::chrono::steady_clock::time_point start_;
};

// generate()'s checks of stop_strings and max_time: a stop-string matcher
// for exactly g.stop_strings when any are set, max_time >= 0.
void check_stopping_criteria(const GenerationConfig& g);

}  // namespace kiln::models
