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

  size_t size() const { return ids.size(); }
  void push(uint32_t id, uint32_t type_id, std::string token, std::pair<size_t, size_t> offset,
            bool special, std::optional<uint32_t> word, std::optional<uint32_t> sequence);
  void append(const Encoding& other);
  void set_type_ids(uint32_t type_id);
  void set_sequence_id(uint32_t sequence);
  // Keeps max_length tokens (the first ones for Right, the last for Left).
  void truncate(size_t max_length, Direction direction);
  // Pads up to target_length; no-op when already that long.
  void pad(size_t target_length, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
           Direction direction);
};

}  // namespace kiln::tokenizers
