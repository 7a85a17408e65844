#include "kiln/tokenizers/added_vocabulary.h"

#include <algorithm>

#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

void AddedVocabulary::add(AddedToken token) {
  for (auto& t : tokens_) {
    if (t.content == token.content) {
      t = std::move(token);
      return;
    }
  }
  tokens_.push_back(std::move(token));
}

void AddedVocabulary::rebuild(const Normalizer* normalizer) {
  by_id_.clear();
  raw_ = MatchSet{};
  normalized_ = MatchSet{};
  decoded_.assign(tokens_.size(), std::string());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_[t.id] = i;
    decoded_[i] = t.content;
    if (t.content.empty()) continue;
    if (t.normalized) {
      NormalizedString n(t.content, 0);
      if (normalizer) normalizer->normalize(n);
      decoded_[i] = n.get();
    }
    if (encode_special_tokens_ && t.special) continue;
    if (!t.normalized) {
      raw_.patterns.emplace_back(t.content, i);
    } else if (!decoded_[i].empty()) {
      normalized_.patterns.emplace_back(decoded_[i], i);
    }
  }
  for (MatchSet* set : {&raw_, &normalized_}) {
    for (size_t p = 0; p < set->patterns.size(); ++p) {
      set->by_first[static_cast<unsigned char>(set->patterns[p].first[0])].push_back(p);
    }
    for (auto& [_, list] : set->by_first) {
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return set->patterns[a].first.size() > set->patterns[b].first.size();
      });
    }
  }
}

std::optional<uint32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  for (const auto& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return std::nullopt;
}

const AddedToken* AddedVocabulary::by_id(uint32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const std::string& AddedVocabulary::decoded_form(uint32_t id) const {
  return decoded_.at(by_id_.at(id));
}

bool AddedVocabulary::is_special(uint32_t id) const {
  const AddedToken* t = by_id(id);
  return t && t->special;
}

static char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t n;
  return utf8::decode(s, i, &n);
}

static bool is_word_char(char32_t c) { return c == '_' || unicode::is_alphanumeric(c); }

void AddedVocabulary::split_with(const MatchSet& set, NormalizedString&& n,
                                 std::vector<Split>& out) const {
  const std::string& s = n.get();
  // tokenizers slices every piece out of the normalized text, matched or
  // not, so a piece starts where its first normalized character came from
  // (after a Strip normalizer that is past the start of the input, which
  // decides Metaspace's prepend_scheme "first").
  if (set.patterns.empty() || s.empty()) {
    n.narrow_to_alignment();
    out.push_back(Split{std::move(n), std::nullopt});
    return;
  }
  size_t start_offset = 0;
  bool any = false;
  for (size_t pos = 0; pos < s.size();) {
    auto it = set.by_first.find(static_cast<unsigned char>(s[pos]));
    const std::pair<std::string, size_t>* hit = nullptr;
    if (it != set.by_first.end()) {
      for (size_t p : it->second) {
        const auto& pat = set.patterns[p];
        if (s.compare(pos, pat.first.size(), pat.first) == 0) {
          hit = &pat;
          break;
        }
      }
    }
    if (!hit) {
      pos += utf8::seq_len(static_cast<unsigned char>(s[pos]));
      continue;
    }
    const AddedToken& tok = tokens_[hit->second];
    size_t start = pos, stop = pos + hit->first.size();
    pos = stop;
    if (tok.single_word) {
      bool start_space = start == 0 || !is_word_char(last_char(std::string_view(s).substr(0, start)));
      size_t n_len;
      bool stop_space = stop == s.size() || !is_word_char(utf8::decode(s, stop, &n_len));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t k = new_start - 1;
        while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t len;
        if (!unicode::is_whitespace(utf8::decode(s, k, &len))) break;
        new_start = k;
      }
      start = std::max(new_start, start_offset);
    }
    // The next match is looked for right after this one, inside the spaces
    // rstrip takes too: tokenizers' matches come from one pass over the text
    // before any stripping, so a whitespace added token there still splits.
    if (tok.rstrip) {
      while (stop < s.size()) {
        size_t len;
        if (!unicode::is_whitespace(utf8::decode(s, stop, &len))) break;
        stop += len;
      }
    }
    any = true;
    if (start_offset < start) out.push_back(Split{n.slice(start_offset, start), std::nullopt});
    // The token's value is the matched text (with any stripped spaces).
    NormalizedString piece = n.slice(start, stop);
    Token token{tok.id, piece.get(), {0, piece.get().size()}};
    out.push_back(Split{std::move(piece), std::vector<Token>{std::move(token)}});
    start_offset = stop;
  }
  if (!any) {
    n.narrow_to_alignment();
    out.push_back(Split{std::move(n), std::nullopt});
    return;
  }
  if (start_offset < s.size()) out.push_back(Split{n.slice(start_offset, s.size()), std::nullopt});
}

PreTokenizedString AddedVocabulary::extract_and_normalize(const Normalizer* normalizer,
                                                          std::string text) const {
  PreTokenizedString pre(std::move(text));
  pre.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
    split_with(raw_, std::move(n), out);
  });
  pre.split([&](size_t, NormalizedString&& n, std::vector<Split>& out) {
    if (normalizer) normalizer->normalize(n);
    split_with(normalized_, std::move(n), out);
  });
  return pre;
}

}  // namespace kiln::tokenizers
