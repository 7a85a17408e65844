#include "kiln/tokenizers/post_processors.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

Encoding merge_encodings(std::vector<Encoding> encodings) {
  if (encodings.empty()) return {};
  // An empty encoding merged with e is e, pieces and all.
  Encoding out = std::move(encodings[0]);
  for (size_t i = 1; i < encodings.size(); ++i) out.merge_with(encodings[i]);
  return out;
}

static void push_special(Encoding& e, const SpecialToken& t, uint32_t type_id) {
  e.push(t.second, type_id, t.first, {0, 0}, true, std::nullopt, std::nullopt);
}

// [open] seq [close] with every type id = type_id.
static Encoding wrap_one(const Encoding& seq, const SpecialToken* open, const SpecialToken& close,
                         uint32_t type_id, uint32_t sequence) {
  Encoding out;
  if (open) push_special(out, *open, type_id);
  Encoding body = seq;
  body.set_type_ids(type_id);
  body.set_sequence_id(sequence);
  out.append(body);
  push_special(out, close, type_id);
  return out;
}

// wrap_one on seq and on each of its overflowing pieces (whose own pieces
// are dropped, as tokenizers' Bert/Roberta processors do).
static Encoding wrap(const Encoding& seq, const SpecialToken* open, const SpecialToken& close,
                     uint32_t type_id, uint32_t sequence) {
  Encoding out = wrap_one(seq, open, close, type_id, sequence);
  for (const Encoding& piece : seq.overflowing) {
    out.overflowing.push_back(wrap_one(piece, open, close, type_id, sequence));
  }
  return out;
}

// Byte-level offset trimming of an encoding and its overflowing pieces.
static void trim_with_pieces(Encoding& e, bool add_prefix_space) {
  trim_byte_level_offsets(e, add_prefix_space);
  for (Encoding& piece : e.overflowing) trim_byte_level_offsets(piece, add_prefix_space);
}

std::vector<Encoding> BertProcessing::process(std::vector<Encoding> e, bool add) const {
  if (!add) return e;
  std::vector<Encoding> out;
  out.push_back(wrap(e[0], &cls_, sep_, 0, 0));
  if (e.size() > 1) out.push_back(wrap(e[1], nullptr, sep_, 1, 1));
  return out;
}

void trim_byte_level_offsets(Encoding& e, bool add_prefix_space) {
  for (size_t i = 0; i < e.size(); ++i) {
    std::u32string t = utf8::to_u32(e.tokens[i]);
    auto is_space = [](char32_t c) { return c == 0x120 || unicode::is_whitespace(c); };
    size_t lead = 0, trail = 0;
    while (lead < t.size() && is_space(t[lead])) ++lead;
    while (trail < t.size() && is_space(t[t.size() - 1 - trail])) ++trail;
    auto& [start, end] = e.offsets[i];
    if (lead == 0 && trail == 0) continue;
    if (lead > 0) {
      bool first = i == 0 || start == 0;
      if (first && add_prefix_space && lead == 1) lead = 0;
      start = std::min(start + lead, end);
    }
    if (trail > 0 && end >= trail) end = std::max(end - trail, start);
  }
}

std::vector<Encoding> RobertaProcessing::process(std::vector<Encoding> e, bool add) const {
  if (trim_) {
    for (auto& enc : e) trim_with_pieces(enc, prefix_);
  }
  for (auto& enc : e) enc.set_type_ids(0);
  if (!add) return e;
  std::vector<Encoding> out;
  out.push_back(wrap(e[0], &cls_, sep_, 0, 0));
  if (e.size() > 1) out.push_back(wrap(e[1], &sep_, sep_, 0, 1));
  return out;
}

std::vector<Encoding> ByteLevelProcessing::process(std::vector<Encoding> e, bool) const {
  if (trim_) {
    for (auto& enc : e) trim_with_pieces(enc, prefix_);
  }
  for (size_t i = 0; i < e.size(); ++i) e[i].set_sequence_id(static_cast<uint32_t>(i));
  return e;
}

TemplateProcessing::TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair,
                                       std::map<std::string, Special> special_tokens)
    : single_(std::move(single)), pair_(std::move(pair)), special_(std::move(special_tokens)) {
  for (const auto* tmpl : {&single_, &pair_}) {
    for (const Piece& p : *tmpl) {
      if (p.is_sequence) {
        KILN_CHECK(p.id == "A" || p.id == "B", "TemplateProcessing: sequence id '", p.id,
                   "', expected A or B");
      } else {
        auto it = special_.find(p.id);
        KILN_CHECK(it != special_.end(), "TemplateProcessing: template uses special token '",
                   p.id, "' missing from special_tokens");
        KILN_CHECK(it->second.ids.size() == it->second.tokens.size(),
                   "TemplateProcessing: special token '", p.id, "' has ", it->second.ids.size(),
                   " ids but ", it->second.tokens.size(), " tokens");
      }
    }
  }
}

size_t TemplateProcessing::added_tokens(bool is_pair) const {
  size_t n = 0;
  for (const Piece& p : is_pair ? pair_ : single_) {
    if (!p.is_sequence) n += special_.at(p.id).ids.size();
  }
  return n;
}

std::vector<Encoding> TemplateProcessing::process(std::vector<Encoding> e, bool add) const {
  const auto& tmpl = e.size() > 1 ? pair_ : single_;
  std::vector<Encoding> out;
  for (const Piece& p : tmpl) {
    if (p.is_sequence) {
      size_t i = p.id == "A" ? 0 : 1;
      KILN_CHECK(i < e.size(), "TemplateProcessing: template needs sequence B for a single input");
      // As tokenizers: only the encoding itself takes the template's type
      // id; its overflowing pieces keep the one they were encoded with (but
      // take the sequence id).
      Encoding enc = e[i];
      enc.set_type_ids(p.type_id);
      enc.set_sequence_id(static_cast<uint32_t>(i));
      out.push_back(std::move(enc));
    } else if (add) {
      const Special& s = special_.at(p.id);
      Encoding enc;
      for (size_t k = 0; k < s.ids.size(); ++k) {
        enc.push(s.ids[k], p.type_id, s.tokens[k], {0, 0}, true, std::nullopt, std::nullopt);
      }
      out.push_back(std::move(enc));
    }
  }
  return out;
}

size_t SequenceProcessing::added_tokens(bool is_pair) const {
  size_t n = 0;
  for (const auto& p : parts_) n += p->added_tokens(is_pair);
  return n;
}

std::vector<Encoding> SequenceProcessing::process(std::vector<Encoding> e, bool add) const {
  for (const auto& p : parts_) e = p->process(std::move(e), add);
  return e;
}

}  // namespace kiln::tokenizers
