#pragma once
// Byte-pair encoding: a word starts as characters (or bytes via <0xXX>
// fallback tokens) and the lowest-ranked mergeable adjacent pair is merged
// until none is left (leftmost first on equal rank).
//
// BPE dropout (tokenizer.json model.dropout, as tokenizers): each merge
// taken from the queue is skipped with probability dropout; skipped merges
// come back once another merge is made, and the word is done when every
// remaining merge has been skipped in a row. 0 is plain BPE, 1 leaves the
// word as characters (or bytes). The draws come from one deterministic
// stream per model (tokenizers uses an unseeded thread RNG), restarted by
// seed_dropout(); in batch encoding the order texts draw in follows the
// threads' scheduling.
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kiln/tokenizers/model.h"
#include "kiln/tokenizers/vocab.h"

namespace kiln::tokenizers {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::optional<float> dropout;  // in [0, 1]
};

class Bpe : public Model {
 public:
  // merges: pairs of token strings in rank order. Throws kiln::Error naming
  // the merge when a part or the merged token is missing from the vocabulary.
  Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      BpeOptions options);
  std::vector<Token> tokenize(std::string_view word) const override;
  std::optional<uint32_t> token_to_id(std::string_view t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(uint32_t id) const override;
  size_t vocab_size() const override { return vocab_.size(); }
  const BpeOptions& options() const { return opt_; }
  // Restarts the dropout draws from seed (0 at construction).
  void seed_dropout(uint64_t seed) const;

 private:
  struct Symbol {
    uint32_t id;
    size_t start, end;  // bytes in the word
  };
  // The word as characters / unk / byte-fallback tokens, before merging.
  void split_word(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_word(std::string_view word, std::vector<Symbol>& symbols) const;
  // tokenizers' merge queue with dropout; draws from the stream at `draw`.
  void merge_with_dropout(std::vector<Symbol>& symbols, float dropout, uint64_t draw) const;

  Vocab vocab_;
  BpeOptions opt_;
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;

  // Cache of short words (results do not depend on it), sharded so batch
  // encoding threads rarely contend.
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<Symbol>> map;
  };
  static constexpr size_t kShards = 64;
  mutable std::unique_ptr<Shard[]> cache_;
  mutable std::atomic<uint64_t> dropout_seed_{0}, dropout_words_{0};
};

}  // namespace kiln::tokenizers
