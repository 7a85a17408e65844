#include "kiln/tokenizers/unigram.h"

#include <cstdio>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

Unigram::Unigram(std::vector<std::pair<std::string, double>> pieces, std::optional<uint32_t> unk_id,
                 bool byte_fallback)
    : pieces_(std::move(pieces)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
  KILN_CHECK(!unk_id_ || *unk_id_ < pieces_.size(), "Unigram: unk_id ", *unk_id_,
             " is out of range for a vocabulary of ", pieces_.size(), " pieces");
  min_score_ = std::numeric_limits<double>::infinity();
  for (uint32_t id = 0; id < pieces_.size(); ++id) {
    // The first occurrence of a duplicated piece wins, as in tokenizers.
    if (!vocab_.id(pieces_[id].first)) vocab_.set(pieces_[id].first, id);
    min_score_ = std::min(min_score_, pieces_[id].second);
    max_piece_bytes_ = std::max(max_piece_bytes_, pieces_[id].first.size());
  }
}

std::optional<std::string> Unigram::id_to_token(uint32_t id) const {
  if (id < pieces_.size()) return pieces_[id].first;
  return std::nullopt;
}

std::vector<std::string> Unigram::encode(std::string_view s) const {
  constexpr double kUnkPenalty = 10.0;
  const double unk_score = min_score_ - kUnkPenalty;
  struct Node {
    long start = -1;  // -1: unreached
    uint32_t id = 0;
    double score = 0;
  };
  std::vector<Node> best(s.size() + 1);
  best[0].start = 0;
  for (size_t pos = 0; pos < s.size();) {
    double base = best[pos].score;
    size_t mblen = utf8::seq_len(static_cast<unsigned char>(s[pos]));
    bool single = false;
    size_t max_len = std::min(max_piece_bytes_, s.size() - pos);
    for (size_t len = 1; len <= max_len; ++len) {
      auto id = vocab_.id(s.substr(pos, len));
      if (!id) continue;
      Node& target = best[pos + len];
      double cand = base + pieces_[*id].second;
      if (target.start < 0 || cand > target.score) {
        target = Node{static_cast<long>(pos), *id, cand};
      }
      if (len == mblen) single = true;
    }
    if (!single) {
      KILN_CHECK(unk_id_, "Unigram: text needs an unknown token but the model has no unk_id");
      Node& target = best[pos + mblen];
      double cand = base + unk_score;
      if (target.start < 0 || cand > target.score) {
        target = Node{static_cast<long>(pos), *unk_id_, cand};
      }
    }
    pos += mblen;
  }
  // Backtrack; runs of unk pieces fuse into one, the bytes [unk_begin, unk_end) of s (kept as bounds:
  // prepending each piece to a string was quadratic in a long run of unknown characters).
  std::vector<std::string> rev;
  size_t unk_begin = 0, unk_end = 0;  // empty: no run
  for (size_t end = s.size(); end > 0;) {
    const Node& n = best[end];
    size_t start = static_cast<size_t>(n.start);
    if (unk_id_ && n.id == *unk_id_) {
      if (unk_begin == unk_end) unk_end = end;
      unk_begin = start;
    } else {
      if (unk_begin != unk_end) rev.emplace_back(s.substr(unk_begin, unk_end - unk_begin));
      unk_begin = unk_end = 0;
      rev.emplace_back(s.substr(start, end - start));
    }
    end = start;
  }
  if (unk_begin != unk_end) rev.emplace_back(s.substr(unk_begin, unk_end - unk_begin));
  return {rev.rbegin(), rev.rend()};
}

std::vector<Token> Unigram::tokenize(std::string_view word) const {
  std::vector<Token> out;
  if (word.empty()) return out;
  size_t offset = 0;
  for (std::string& piece : encode(word)) {
    size_t len = piece.size();
    auto id = vocab_.id(piece);
    if (!id) {
      if (byte_fallback_) {
        std::vector<Token> bytes;
        char buf[8];
        for (unsigned char b : piece) {
          std::snprintf(buf, sizeof buf, "<0x%02X>", b);
          auto bid = vocab_.id(buf);
          if (!bid) break;
          bytes.push_back(Token{*bid, buf, {offset, offset + len}});
        }
        if (bytes.size() == piece.size()) {
          for (auto& t : bytes) out.push_back(std::move(t));
          offset += len;
          continue;
        }
      }
      KILN_CHECK(unk_id_, "Unigram: text needs an unknown token but the model has no unk_id");
      id = unk_id_;
    }
    out.push_back(Token{*id, std::move(piece), {offset, offset + len}});
    offset += len;
  }
  return out;
}

}  // namespace kiln::tokenizers
