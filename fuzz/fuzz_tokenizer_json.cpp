// Fuzz target: tokenizer.json (Tokenizer::from_json_string: the model,
// normalizer, pre-tokenizer, post-processor, decoder, added tokens,
// truncation and padding). Input: the file's text. A tokenizer that loads
// then encodes a fixed sentence and a pair and decodes the ids, so every
// component the file built runs once.
#include <cstdint>
#include <cstddef>
#include <optional>
#include <string_view>

#include "fuzz_util.h"
#include "kiln/tokenizers/tokenizer.h"

namespace {

// Words, punctuation, digits, accents (NFD-sensitive), CJK, an emoji, runs
// of spaces, and the special tokens of the common models.
constexpr std::string_view kText =
    "Hello, world! The naïve café's 42 ÉCOLES -- 東京で  test\tok \xF0\x9F\x98\x80 [CLS] <s> <mask> [UNK]";
constexpr std::string_view kPair = "A second  sentence.\n";

// The longest padding the target lets a file ask for: a tokenizer.json may
// say "pad every encoding to 10^12 tokens", which any tokenizer (HF's
// included) would try to allocate.
constexpr size_t kMaxPadding = 4096;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::tokenizers::Tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::fuzz::attempt([&] {
    Tokenizer t = Tokenizer::from_json_string(text, "tokenizer.json");
    if (const auto& p = t.padding();
        p && (p->length.value_or(0) > kMaxPadding || p->pad_to_multiple_of.value_or(0) > kMaxPadding))
      t.set_padding(std::nullopt);
    const auto single = t.encode(kText);
    const auto pair = t.encode_pair(kText, kPair);
    t.decode(single.ids, true);
    t.decode(pair.ids, false);
  });
  return 0;
}
