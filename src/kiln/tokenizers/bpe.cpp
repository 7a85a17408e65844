#include "kiln/tokenizers/bpe.h"

#include <cstdio>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         BpeOptions options)
    : vocab_(std::move(vocab)), opt_(std::move(options)), cache_(new Shard[kShards]) {
  size_t prefix_len = opt_.continuing_subword_prefix ? opt_.continuing_subword_prefix->size() : 0;
  merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.id(a);
    auto ib = vocab_.id(b);
    KILN_CHECK(ia && ib, "BPE: merge ", rank, " '", a, " ", b, "': token '", ia ? b : a,
               "' is not in the vocabulary");
    std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    auto im = vocab_.id(merged);
    KILN_CHECK(im, "BPE: merge ", rank, " '", a, " ", b, "': merged token '", merged,
               "' is not in the vocabulary");
    merges_.emplace(pair_key(*ia, *ib), std::make_pair(static_cast<uint32_t>(rank), *im));
  }
}

std::optional<std::string> Bpe::id_to_token(uint32_t id) const {
  if (const std::string* t = vocab_.token(id)) return *t;
  return std::nullopt;
}

void Bpe::merge_word(std::string_view w, std::vector<Symbol>& symbols) const {
  symbols.clear();
  std::optional<Symbol> unk;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    size_t n = utf8::seq_len(static_cast<unsigned char>(w[i]));
    bool first = i == 0, last = i + n >= w.size();
    s.assign(w.substr(i, n));
    if (!first && opt_.continuing_subword_prefix) s = *opt_.continuing_subword_prefix + s;
    if (last && opt_.end_of_word_suffix) s += *opt_.end_of_word_suffix;
    size_t start = i;
    i += n;
    if (auto id = vocab_.id(s)) {
      if (unk) {
        symbols.push_back(*unk);
        unk.reset();
      }
      symbols.push_back({*id, start, start + n});
      continue;
    }
    if (opt_.byte_fallback) {
      std::vector<uint32_t> ids;
      char buf[8];
      for (unsigned char b : s) {
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        auto id = vocab_.id(buf);
        if (!id) break;
        ids.push_back(*id);
      }
      if (ids.size() == s.size()) {
        if (unk) {
          symbols.push_back(*unk);
          unk.reset();
        }
        // tokenizers gives each byte token a one-byte length from the start.
        size_t pos = start;
        for (uint32_t id : ids) {
          symbols.push_back({id, pos, pos + 1});
          ++pos;
        }
        continue;
      }
    }
    if (opt_.unk_token) {
      auto unk_id = vocab_.id(*opt_.unk_token);
      KILN_CHECK(unk_id, "BPE: unk token '", *opt_.unk_token, "' is not in the vocabulary");
      if (unk && opt_.fuse_unk) {
        unk->end = start + n;
      } else {
        if (unk) symbols.push_back(*unk);
        unk = Symbol{*unk_id, start, start + n};
      }
    }
    // Without an unk token, an unknown character is dropped (as tokenizers does).
  }
  if (unk) symbols.push_back(*unk);

  // Merge the lowest-ranked pair, leftmost first, until none applies.
  while (symbols.size() > 1) {
    uint32_t best_rank = UINT32_MAX, best_id = 0;
    size_t best = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      auto it = merges_.find(pair_key(symbols[k].id, symbols[k + 1].id));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_id = it->second.second;
        best = k;
      }
    }
    if (best_rank == UINT32_MAX) break;
    symbols[best].id = best_id;
    symbols[best].end = symbols[best + 1].end;
    symbols.erase(symbols.begin() + best + 1);
  }
}

std::vector<Token> Bpe::tokenize(std::string_view word) const {
  std::vector<Token> out;
  if (word.empty()) return out;
  if (opt_.ignore_merges) {
    if (auto id = vocab_.id(word)) {
      out.push_back(Token{*id, std::string(word), {0, word.size()}});
      return out;
    }
  }
  std::vector<Symbol> symbols;
  constexpr size_t kMaxCached = 256;
  Shard* shard = nullptr;
  bool hit = false;
  if (word.size() < kMaxCached) {
    shard = &cache_[std::hash<std::string_view>{}(word) % kShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->map.find(std::string(word));
    if (it != shard->map.end()) {
      symbols = it->second;
      hit = true;
    }
  }
  if (!hit) {
    merge_word(word, symbols);
    if (shard) {
      std::lock_guard<std::mutex> lock(shard->mu);
      if (shard->map.size() < 10000 / kShards * 4) shard->map.emplace(std::string(word), symbols);
    }
  }
  out.reserve(symbols.size());
  for (const Symbol& s : symbols) {
    const std::string* t = vocab_.token(s.id);
    out.push_back(Token{s.id, t ? *t : std::string(), {s.start, s.end}});
  }
  return out;
}

}  // namespace kiln::tokenizers
