#pragma once
// The input text cut into pieces (splits). Added-token matches arrive already
// tokenized; the others are normalized, pre-tokenized and handed to the model.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tokenizers/normalized_string.h"
#include "kiln/tokenizers/token.h"

namespace kiln::tokenizers {

struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;
};

class PreTokenizedString {
 public:
  explicit PreTokenizedString(std::string original);

  const std::string& original() const { return original_; }
  std::vector<Split>& splits() { return splits_; }
  const std::vector<Split>& splits() const { return splits_; }

  // Replaces every untokenized split by the pieces fn returns (empty pieces
  // dropped). fn(index, piece, out).
  using SplitFn = std::function<void(size_t, NormalizedString&&, std::vector<Split>&)>;
  void split(const SplitFn& fn);
  // Same for functions returning plain normalized pieces.
  void split_normalized(
      const std::function<std::vector<NormalizedString>(NormalizedString&&)>& fn);
  // Applies fn to every untokenized split in place.
  void normalize(const std::function<void(NormalizedString&)>& fn);

 private:
  std::string original_;
  std::vector<Split> splits_;
};

}  // namespace kiln::tokenizers
