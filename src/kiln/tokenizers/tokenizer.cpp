#include "kiln/tokenizers/tokenizer.h"

#include <algorithm>
#include <exception>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

void Tokenizer::set_normalizer(NormalizerPtr n) {
  normalizer_ = std::move(n);
  added_.rebuild(normalizer_.get());
}

void Tokenizer::add_tokens(const std::vector<AddedToken>& tokens) {
  for (const auto& t : tokens) added_.add(t);
  added_.rebuild(normalizer_.get());
}

void Tokenizer::set_encode_special_tokens(bool on) {
  added_.set_encode_special_tokens(on);
  added_.rebuild(normalizer_.get());
}

const Model& Tokenizer::model() const {
  KILN_CHECK(model_, "Tokenizer: no model set");
  return *model_;
}

static void check_utf8(std::string_view text) {
  if (auto bad = utf8::find_invalid(text)) {
    throw Error(detail::concat("tokenizer: input text is not valid UTF-8 (byte 0x", std::hex,
                               int(static_cast<unsigned char>(text[*bad])), std::dec,
                               " at offset ", *bad, ")"));
  }
}

Encoding Tokenizer::encode_sequence(std::string_view text, uint32_t type_id,
                                    bool stop_early) const {
  const Model& m = model();
  PreTokenizedString pre = added_.extract_and_normalize(normalizer_.get(), std::string(text));
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pre);
  std::vector<Split>& splits = pre.splits();
  if (!truncation_ || !truncation_->early_exit || !stop_early) {
    for (Split& s : splits) {
      if (!s.tokens) s.tokens = m.tokenize(s.normalized.get());
    }
  } else {
    // tokenizers 0.23 stops early under truncation: it tokenizes the splits
    // from the kept end (the start for Right, the end for Left) and, as soon
    // as a split the model tokenized brings the count of tokens so far
    // (added tokens included) to max_length, drops every split beyond it.
    // Whole splits are kept, so a sequence can stay longer than max_length;
    // dropped splits make no overflowing pieces and do not count as words.
    // This also decides LongestFirst between two long sequences. (Under
    // OnlySecond the first text of a pair is not stopped early.)
    const size_t limit = truncation_->max_length;
    const bool right = truncation_->direction == Direction::Right;
    size_t count = 0;
    for (size_t k = 0; k < splits.size(); ++k) {
      size_t i = right ? k : splits.size() - 1 - k;
      Split& s = splits[i];
      bool by_model = !s.tokens;
      if (by_model) s.tokens = m.tokenize(s.normalized.get());
      count += s.tokens->size();
      if (by_model && count >= limit) {
        if (right) {
          splits.erase(splits.begin() + static_cast<long>(i) + 1, splits.end());
        } else {
          splits.erase(splits.begin(), splits.begin() + static_cast<long>(i));
        }
        break;
      }
    }
  }
  // Byte offsets -> character offsets in the original text.
  const std::string& original = pre.original();
  std::vector<uint32_t> char_at(original.size() + 1);
  uint32_t chars = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    if ((static_cast<unsigned char>(original[i]) & 0xC0) != 0x80 && i > 0) ++chars;
    char_at[i] = chars;
  }
  char_at[original.size()] = static_cast<uint32_t>(utf8::count_chars(original));
  // As tokenizers' BytesToCharOffsetConverter: an end inside a character
  // maps to that character's index.
  auto to_chars = [&](std::pair<size_t, size_t> b) -> std::pair<size_t, size_t> {
    if (b.first > original.size() || b.second > original.size()) return b;
    size_t end = b.second < original.size() ? char_at[b.second]
                 : b.second == 0             ? 0
                                             : char_at[b.second - 1] + 1;
    return {char_at[b.first], end};
  };

  Encoding e;
  uint32_t word = 0;
  for (const Split& s : pre.splits()) {
    for (const Token& t : *s.tokens) {
      auto range = s.normalized.original_range(t.offsets.first, t.offsets.second);
      e.push(t.id, type_id, t.value, to_chars(range), false, word, std::nullopt);
    }
    ++word;
  }
  return e;
}

// tokenizers' truncate_encodings.
static void truncate_pair(Encoding& a, std::optional<Encoding>& b, const TruncationParams& p) {
  if (p.max_length == 0) {  // whatever the strategy, everything overflows
    a.truncate(0, p.stride, p.direction);
    if (b) b->truncate(0, p.stride, p.direction);
    return;
  }
  size_t total = a.size() + (b ? b->size() : 0);
  if (total <= p.max_length) return;
  size_t to_remove = total - p.max_length;
  switch (p.strategy) {
    case TruncationStrategy::LongestFirst: {
      if (!b) {
        a.truncate(p.max_length, p.stride, p.direction);
        return;
      }
      // The shorter sequence keeps its length when the longer one can take
      // the whole cut (the longer then gets the rest of the budget).
      // Otherwise the budget is halved: the shorter gets max_length / 2, the
      // longer the other half (one more when max_length is odd); with equal
      // lengths the first counts as the shorter.
      bool first_longer = a.size() > b->size();
      size_t shorter = std::min(a.size(), b->size());
      size_t longer = shorter > p.max_length ? shorter
                                             : std::max(shorter, p.max_length - shorter);
      if (shorter + longer > p.max_length) {
        shorter = p.max_length / 2;
        longer = shorter + p.max_length % 2;
      }
      a.truncate(first_longer ? longer : shorter, p.stride, p.direction);
      b->truncate(first_longer ? shorter : longer, p.stride, p.direction);
      return;
    }
    case TruncationStrategy::OnlyFirst:
    case TruncationStrategy::OnlySecond: {
      KILN_CHECK(p.strategy == TruncationStrategy::OnlyFirst || b,
                 "Truncation error: Second sequence not provided (strategy OnlySecond)");
      Encoding* target = p.strategy == TruncationStrategy::OnlyFirst ? &a : &*b;
      KILN_CHECK(target->size() > to_remove,
                 "Truncation error: Sequence to truncate too short to respect the provided "
                 "max_length");
      target->truncate(target->size() - to_remove, p.stride, p.direction);
      return;
    }
  }
}

Encoding Tokenizer::post_process(Encoding a, std::optional<Encoding> b, bool add) const {
  if (truncation_) {
    TruncationParams p = *truncation_;
    // tokenizers refuses such a stride when truncation is set.
    size_t single_added = post_processor_ ? post_processor_->added_tokens(false) : 0;
    KILN_CHECK(p.max_length < single_added || p.stride <= p.max_length - single_added,
               "Truncation error: stride ", p.stride, " is larger than max_length ", p.max_length,
               " less the ", single_added, " special tokens of a single text");
    size_t added = add && post_processor_ ? post_processor_->added_tokens(b.has_value()) : 0;
    KILN_CHECK(p.max_length >= added, "Truncation error: max_length ", p.max_length,
               " is smaller than the ", added, " special tokens added");
    p.max_length -= added;
    truncate_pair(a, b, p);
  }
  std::vector<Encoding> parts;
  parts.push_back(std::move(a));
  if (b) parts.push_back(std::move(*b));
  Encoding out;
  if (post_processor_) {
    out = merge_encodings(post_processor_->process(std::move(parts), add));
  } else if (parts.size() == 1) {
    out = std::move(parts[0]);
  } else {
    for (size_t i = 0; i < parts.size(); ++i) parts[i].set_sequence_id(static_cast<uint32_t>(i));
    out = merge_encodings(std::move(parts));
  }
  if (padding_) {
    // As tokenizers' pad_encodings on this one encoding: batch-longest pads
    // to its own length, which only lengthens its overflowing pieces.
    out.pad(padded_length(padding_->length.value_or(out.size())), padding_->pad_id,
            padding_->pad_type_id, padding_->pad_token, padding_->direction);
  }
  return out;
}

size_t Tokenizer::padded_length(size_t length) const {
  if (padding_ && padding_->pad_to_multiple_of && *padding_->pad_to_multiple_of > 0) {
    size_t m = *padding_->pad_to_multiple_of;
    if (length % m) length += m - length % m;
  }
  return length;
}

Encoding Tokenizer::encode(std::string_view text, bool add) const {
  check_utf8(text);
  return post_process(encode_sequence(text, 0, true), std::nullopt, add);
}

Encoding Tokenizer::encode_pair(std::string_view text, std::string_view pair, bool add) const {
  if (empty_pair_is_single && pair.empty()) return encode(text, add);
  return encode_two(text, pair, add);
}

Encoding Tokenizer::encode_two(std::string_view text, std::string_view pair, bool add) const {
  check_utf8(text);
  check_utf8(pair);
  bool stop_first = !truncation_ || truncation_->strategy != TruncationStrategy::OnlySecond;
  return post_process(encode_sequence(text, 0, stop_first), encode_sequence(pair, 1, true), add);
}

Encoding Tokenizer::encode_word_sequence(const std::vector<std::string>& words, uint32_t type_id,
                                         bool stop_early) const {
  Encoding out;
  for (size_t i = 0; i < words.size(); ++i) {
    try {
      check_utf8(words[i]);
    } catch (const Error& e) {
      throw Error(detail::concat("word ", i, ": ", e.what()));
    }
    Encoding e = encode_sequence(words[i], type_id, stop_early);
    e.word_ids.assign(e.size(), static_cast<uint32_t>(i));
    out.append(e);
  }
  return out;
}

Encoding Tokenizer::encode_words(const std::vector<std::string>& words, bool add) const {
  return post_process(encode_word_sequence(words, 0, true), std::nullopt, add);
}

Encoding Tokenizer::encode_words_pair(const std::vector<std::string>& words,
                                      const std::vector<std::string>& pair, bool add) const {
  bool stop_first = !truncation_ || truncation_->strategy != TruncationStrategy::OnlySecond;
  return post_process(encode_word_sequence(words, 0, stop_first),
                      encode_word_sequence(pair, 1, true), add);
}

void Tokenizer::pad_batch(std::vector<Encoding>& encodings) const {
  if (!padding_ || padding_->length) return;  // fixed length: done per encoding
  size_t target = 0;
  for (const auto& e : encodings) target = std::max(target, e.size());
  target = padded_length(target);
  for (auto& e : encodings) {
    e.pad(target, padding_->pad_id, padding_->pad_type_id, padding_->pad_token,
          padding_->direction);
  }
}

// Runs fn(i) for i in [0, n) on all cores; the first exception is rethrown.
template <typename Fn>
static void parallel_for(size_t n, Fn fn) {
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 4)
  for (long i = 0; i < static_cast<long>(n); ++i) {
    try {
      fn(static_cast<size_t>(i));
    } catch (...) {
#pragma omp critical
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                              bool add) const {
  std::vector<Encoding> out(texts.size());
  parallel_for(texts.size(), [&](size_t i) {
    try {
      out[i] = encode(texts[i], add);
    } catch (const Error& e) {
      throw Error(detail::concat("batch item ", i, ": ", e.what()));
    }
  });
  pad_batch(out);
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch_pairs(
    const std::vector<std::pair<std::string, std::string>>& pairs, bool add) const {
  std::vector<Encoding> out(pairs.size());
  parallel_for(pairs.size(), [&](size_t i) {
    try {
      out[i] = encode_two(pairs[i].first, pairs[i].second, add);
    } catch (const Error& e) {
      throw Error(detail::concat("batch item ", i, ": ", e.what()));
    }
  });
  pad_batch(out);
  return out;
}

std::vector<Encoding> Tokenizer::encode_batch_words(
    const std::vector<std::vector<std::string>>& batch, bool add) const {
  std::vector<Encoding> out(batch.size());
  parallel_for(batch.size(), [&](size_t i) {
    try {
      out[i] = encode_words(batch[i], add);
    } catch (const Error& e) {
      throw Error(detail::concat("batch item ", i, ": ", e.what()));
    }
  });
  pad_batch(out);
  return out;
}

// transformers' PreTrainedTokenizerBase.clean_up_tokenization, on the whole
// decoded text.
static std::string clean_up_tokenization(std::string text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"},   {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(text, pos, hit - pos).append(to);
    }
    text = std::move(out.append(text, pos, std::string::npos));
  }
  return text;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special) const {
  std::string text = decode_tokens(ids, skip_special);
  return clean_up_tokenization_spaces ? clean_up_tokenization(std::move(text)) : text;
}

std::string Tokenizer::decode_tokens(const std::vector<uint32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    if (const AddedToken* t = added_.by_id(id)) {
      if (skip_special && t->special) continue;
      tokens.push_back(added_.decoded_form(id));
    } else if (auto s = model().id_to_token(id)) {
      tokens.push_back(std::move(*s));
    }
  }
  if (decoder_) return decoder_->decode(std::move(tokens));
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::vector<std::string> Tokenizer::decode_batch(const std::vector<std::vector<uint32_t>>& ids,
                                                 bool skip_special) const {
  std::vector<std::string> out(ids.size());
  parallel_for(ids.size(), [&](size_t i) { out[i] = decode(ids[i], skip_special); });
  return out;
}

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return id;
  return model().token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
  if (const AddedToken* t = added_.by_id(id)) return t->content;
  return model().id_to_token(id);
}

size_t Tokenizer::vocab_size(bool with_added) const {
  size_t n = model().vocab_size();
  if (with_added) {
    for (const auto& t : added_.tokens()) {
      if (!model().id_to_token(t.id)) ++n;
    }
  }
  return n;
}

}  // namespace kiln::tokenizers
