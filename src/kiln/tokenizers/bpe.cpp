#include "kiln/tokenizers/bpe.h"

#include <cstdio>
#include <queue>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

Bpe::Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         BpeOptions options)
    : vocab_(std::move(vocab)), opt_(std::move(options)), cache_(new Shard[kShards]) {
  KILN_CHECK(!opt_.dropout || (*opt_.dropout >= 0.0f && *opt_.dropout <= 1.0f),
             "BPE: dropout must be between 0 and 1 (inclusive), found ", *opt_.dropout);
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

void Bpe::seed_dropout(uint64_t seed) const {
  dropout_seed_ = seed;
  dropout_words_ = 0;
}

void Bpe::split_word(std::string_view w, std::vector<Symbol>& symbols) const {
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
}

void Bpe::merge_word(std::string_view w, std::vector<Symbol>& symbols) const {
  split_word(w, symbols);
  // A long word (a 50 MB line without a space) through the scan below is quadratic: the queue of
  // merge_with_dropout, with no dropout, makes the same merges (lowest rank, then leftmost) in n log n.
  constexpr size_t kScanMax = 256;
  if (symbols.size() > kScanMax) {
    merge_with_dropout(symbols, 0.0f, 0);
    return;
  }
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

static uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Bpe::merge_with_dropout(std::vector<Symbol>& symbols, float dropout, uint64_t draw) const {
  uint64_t state = dropout_seed_.load() ^ (draw * 0xD1B54A32D192ED03ull);
  splitmix64(state);
  // A uniform float in [0, 1) with 24 random bits, like rand's gen::<f32>().
  auto skip = [&] { return float(splitmix64(state) >> 40) * 0x1p-24f < dropout; };

  // Queue entries: a merge of the symbol at pos with the one after it. The
  // queue pops the lowest rank, then the leftmost position.
  struct Entry {
    uint32_t rank;
    size_t pos;
    uint32_t merged;
  };
  auto later = [](const Entry& a, const Entry& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
  const size_t n = symbols.size();
  std::vector<size_t> prev(n), next(n);  // n: none
  std::vector<bool> gone(n, false);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? n : i - 1;
    next[i] = i + 1;
  }
  auto push = [&](size_t left, size_t right) {
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  std::vector<Entry> skipped;
  while (!queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    if (skip()) {
      skipped.push_back(top);
      continue;
    }
    for (const Entry& e : skipped) queue.push(e);
    skipped.clear();
    // Stale entries: the symbol was merged into its left neighbour, it is
    // now last, or its pair has changed since the entry was queued.
    if (gone[top.pos] || next[top.pos] >= n) continue;
    size_t right = next[top.pos];
    auto it = merges_.find(pair_key(symbols[top.pos].id, symbols[right].id));
    if (it == merges_.end() || it->second.second != top.merged) continue;
    symbols[top.pos].id = top.merged;
    symbols[top.pos].end = symbols[right].end;
    gone[right] = true;
    next[top.pos] = next[right];
    if (next[right] < n) prev[next[right]] = top.pos;
    if (prev[top.pos] < n) push(prev[top.pos], top.pos);
    if (next[top.pos] < n) push(top.pos, next[top.pos]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!gone[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

std::vector<Token> Bpe::tokenize(std::string_view word) const {
  std::vector<Token> out;
  if (word.empty()) return out;
  if (opt_.dropout && *opt_.dropout > 0.0f) {
    // As tokenizers: no cache and no ignore_merges shortcut under dropout.
    std::vector<Symbol> symbols;
    split_word(word, symbols);
    merge_with_dropout(symbols, *opt_.dropout, dropout_words_.fetch_add(1));
    out.reserve(symbols.size());
    for (const Symbol& s : symbols) {
      const std::string* t = vocab_.token(s.id);
      out.push_back(Token{s.id, t ? *t : std::string(), {s.start, s.end}});
    }
    return out;
  }
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
