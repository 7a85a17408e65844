#pragma once
// The result of encoding one text (or pair): ids and their parallel arrays,
// named as in Hugging Face (input_ids = ids).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::tokenizers {

enum class Direction { Left, Right };

struct Encoding {
  std::vector<uint32_t> ids;
  std::vector<uint32_t> type_ids;
  std::vector<std::string> tokens;
  // Character (code point) offsets into the text the token came from;
  // (0, 0) for added special tokens and padding.
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<uint32_t> special_tokens_mask;
  std::vector<uint32_t> attention_mask;
  std::vector<std::optional<uint32_t>> word_ids;
  std::vector<std::optional<uint32_t>> sequence_ids;
  // What truncation cut off, as Hugging Face's Encoding.overflowing: the
  // windows truncate() makes, then, once the post-processor has run, every
  // combination merge_with() makes of the pieces of both texts (special
  // tokens included). Pieces can have pieces of their own. Their
  // sequence_ids follow kiln's per-token rule (HF derives them from ranges
  // that merging leaves inconsistent), the other fields are HF's.
  std::vector<Encoding> overflowing;

  size_t size() const { return ids.size(); }
  void push(uint32_t id, uint32_t type_id, std::string token, std::pair<size_t, size_t> offset,
            bool special, std::optional<uint32_t> word, std::optional<uint32_t> sequence);
  // Concatenates the tokens of other (overflowing pieces untouched).
  void append(const Encoding& other);
  // Encoding::merge_with of tokenizers: appends pair and replaces the
  // overflowing pieces by every combination: each of ours + pair, each of
  // ours + each of pair's, this encoding (with its pieces) + each of pair's.
  void merge_with(const Encoding& pair);
  void set_type_ids(uint32_t type_id);
  // Every token's sequence id, the overflowing pieces' too (as HF's
  // template test shows a pair's pieces in sequence 1; run_qa reads them).
  void set_sequence_id(uint32_t sequence);
  // Encoding::truncate of tokenizers: keeps the first (Right) or last (Left)
  // window of max_length tokens and makes the rest overflowing pieces,
  // windows of max_length tokens that overlap the previous one by stride
  // (earlier pieces are dropped). max_length 0 moves everything into one
  // piece. Throws when stride >= max_length and there is something to cut.
  void truncate(size_t max_length, size_t stride, Direction direction);
  // Pads the overflowing pieces, then this encoding, up to target_length;
  // no-op on whatever is already that long.
  void pad(size_t target_length, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
           Direction direction);
};

}  // namespace kiln::tokenizers
