#include "kiln/tokenizers/pre_tokenized_string.h"

namespace kiln::tokenizers {

PreTokenizedString::PreTokenizedString(std::string original) : original_(std::move(original)) {
  splits_.push_back(Split{NormalizedString(original_, 0), std::nullopt});
}

void PreTokenizedString::split(const SplitFn& fn) {
  std::vector<Split> out;
  out.reserve(splits_.size() * 2);
  std::vector<Split> pieces;
  for (size_t i = 0; i < splits_.size(); ++i) {
    Split& s = splits_[i];
    if (s.tokens) {
      out.push_back(std::move(s));
      continue;
    }
    pieces.clear();
    fn(i, std::move(s.normalized), pieces);
    for (auto& p : pieces) {
      if (!p.normalized.empty()) out.push_back(std::move(p));
    }
  }
  splits_ = std::move(out);
}

void PreTokenizedString::split_normalized(
    const std::function<std::vector<NormalizedString>(NormalizedString&&)>& fn) {
  split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
    for (auto& piece : fn(std::move(n))) out.push_back(Split{std::move(piece), std::nullopt});
  });
}

void PreTokenizedString::normalize(const std::function<void(NormalizedString&)>& fn) {
  for (auto& s : splits_) {
    if (!s.tokens) fn(s.normalized);
  }
}

}  // namespace kiln::tokenizers
