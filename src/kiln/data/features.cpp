#include "kiln/data/features.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::data {

namespace {
std::vector<int64_t> widen(const std::vector<uint32_t>& v) { return {v.begin(), v.end()}; }

// A copy of tok with its own settings, whatever the caller's are: no padding,
// truncation to max_length (none when max_length <= 0), longest-first unless
// told otherwise.
tokenizers::Tokenizer truncating(
    const tokenizers::Tokenizer& tok, int64_t max_length,
    tokenizers::TruncationStrategy strategy = tokenizers::TruncationStrategy::LongestFirst, size_t stride = 0,
    bool early_exit = true) {
  tokenizers::Tokenizer t = tok;
  t.set_padding(std::nullopt);
  if (max_length > 0)
    t.set_truncation(tokenizers::TruncationParams{static_cast<size_t>(max_length), strategy,
                                                  tokenizers::Direction::Right, stride, early_exit});
  else
    t.set_truncation(std::nullopt);
  return t;
}
// encode()'s encodings, its error prefixed with the data set's file ("tokenizing<what>: ...").
template <typename Encode>
std::vector<tokenizers::Encoding> encoded(const Dataset& ds, const char* what, Encode&& encode) {
  try {
    return encode();
  } catch (const Error& e) {
    throw Error(detail::concat(ds.source, ": tokenizing", what, ": ", e.what()));
  }
}
}  // namespace

Features Features::head(size_t n) const {
  auto cut = [n](auto v) {
    if (v.size() > n) v.resize(n);
    return v;
  };
  Features f;
  f.input_ids = cut(input_ids);
  f.token_type_ids = cut(token_type_ids);
  f.labels = cut(labels);
  f.float_labels = cut(float_labels);
  f.target_ids = cut(target_ids);
  f.token_labels = cut(token_labels);
  f.word_ids = cut(word_ids);
  f.start_positions = cut(start_positions);
  f.end_positions = cut(end_positions);
  f.example_index = cut(example_index);
  f.context_offsets = cut(context_offsets);
  f.choice_lengths = cut(choice_lengths);
  f.seq_lengths = cut(seq_lengths);
  f.examples = examples;
  return f;
}

Features tokenize_dataset(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                          const LabelMap* labels) {
  tokenizers::Tokenizer t = truncating(tok, max_length);

  bool pairs = false;
  for (const auto& r : ds.rows) pairs = pairs || !r.text_pair.empty();
  const std::vector<tokenizers::Encoding> enc = encoded(ds, "", [&] {
    if (pairs) {
      std::vector<std::pair<std::string, std::string>> texts;
      texts.reserve(ds.rows.size());
      for (const auto& r : ds.rows) texts.emplace_back(r.text, r.text_pair);
      return t.encode_batch_pairs(texts, true);
    }
    std::vector<std::string> texts;
    texts.reserve(ds.rows.size());
    for (const auto& r : ds.rows) texts.push_back(r.text);
    return t.encode_batch(texts, true);
  });

  Features f;
  f.input_ids.reserve(enc.size());
  f.token_type_ids.reserve(enc.size());
  for (const auto& e : enc) {
    f.input_ids.push_back(widen(e.ids));
    f.token_type_ids.push_back(widen(e.type_ids));
  }
  if (labels && ds.has_labels) {
    if (labels->is_regression) {
      f.float_labels.reserve(ds.rows.size());
      for (size_t r = 0; r < ds.rows.size(); ++r) {
        double v = 0;
        KILN_CHECK(parse_number_label(ds.rows[r].label, &v), ds.source, " row ", r + 1, ": label '",
                   ds.rows[r].label, "' is not a number (the task is regression)");
        f.float_labels.push_back(static_cast<float>(v));
      }
    } else {
      std::unordered_map<std::string, int64_t> ids;
      for (size_t k = 0; k < labels->labels.size(); ++k) ids.emplace(labels->labels[k], static_cast<int64_t>(k));
      f.labels.reserve(ds.rows.size());
      for (size_t r = 0; r < ds.rows.size(); ++r) {
        auto it = ids.find(ds.rows[r].label);
        f.labels.push_back(it != ids.end() ? it->second
                                           : labels->id(ds.rows[r].label, detail::concat(ds.source, " row ", r + 1)));
      }
    }
  }
  return f;
}

Features tokenize_words(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                        const LabelMap* labels, bool label_all_tokens) {
  tokenizers::Tokenizer t = truncating(tok, max_length);
  t.set_add_prefix_space();  // byte-level BPE (RoBERTa): each word with its leading space, as run_ner loads it
  std::vector<std::vector<std::string>> batch;
  batch.reserve(ds.rows.size());
  for (const auto& r : ds.rows) batch.push_back(r.words);
  const std::vector<tokenizers::Encoding> enc = encoded(ds, "", [&] { return t.encode_batch_words(batch, true); });
  // Tag ids, and HF's b_to_i_label: B-X's id -> I-X's id when I-X is a label.
  std::unordered_map<std::string, int64_t> ids;
  std::vector<int64_t> b_to_i;
  const bool tagged = labels && ds.has_labels;
  if (tagged) {
    for (size_t k = 0; k < labels->labels.size(); ++k) ids.emplace(labels->labels[k], static_cast<int64_t>(k));
    for (size_t k = 0; k < labels->labels.size(); ++k) {
      const std::string& l = labels->labels[k];
      auto inside = l.rfind("B-", 0) == 0 ? ids.find("I-" + l.substr(2)) : ids.end();
      b_to_i.push_back(inside != ids.end() ? inside->second : static_cast<int64_t>(k));
    }
  }
  Features f;
  for (size_t r = 0; r < enc.size(); ++r) {
    const tokenizers::Encoding& e = enc[r];
    f.input_ids.push_back(widen(e.ids));
    f.token_type_ids.push_back(widen(e.type_ids));
    std::vector<int64_t> words(e.ids.size(), -1), tags;
    for (size_t k = 0; k < e.ids.size(); ++k)
      if (k < e.word_ids.size() && e.word_ids[k]) words[k] = *e.word_ids[k];  // specials have none
    if (tagged) {
      const Example& row = ds.rows[r];
      int64_t previous = -1;
      for (int64_t w : words) {
        if (w < 0) {
          tags.push_back(-100);
        } else {
          auto it = ids.find(row.word_labels[static_cast<size_t>(w)]);
          const int64_t id = it != ids.end() ? it->second
                                             : labels->id(row.word_labels[static_cast<size_t>(w)],
                                                          detail::concat(ds.source, " row ", r + 1));
          tags.push_back(w != previous ? id : label_all_tokens ? b_to_i[static_cast<size_t>(id)] : -100);
        }
        previous = w;
      }
      f.token_labels.push_back(std::move(tags));
    }
    f.word_ids.push_back(std::move(words));
  }
  return f;
}

std::vector<int64_t> per_word(const std::vector<int64_t>& token_values, const std::vector<int64_t>& word_ids) {
  std::vector<int64_t> out;
  int64_t previous = -1;
  for (size_t k = 0; k < std::min(token_values.size(), word_ids.size()); ++k) {
    if (word_ids[k] >= 0 && word_ids[k] != previous) out.push_back(token_values[k]);
    previous = word_ids[k];
  }
  return out;
}

Features tokenize_qa(std::shared_ptr<const Dataset> ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                     int64_t doc_stride) {
  KILN_CHECK(ds, "tokenize_qa: no dataset");
  KILN_CHECK(doc_stride >= 0 && doc_stride < max_length, ds->source, ": doc_stride ", doc_stride,
             " must be at least 0 and below max_seq_length ", max_length);
  // Every window of the context: without tokenizers 0.23's early exit, which would drop all but the first.
  const tokenizers::Tokenizer t = truncating(tok, max_length, tokenizers::TruncationStrategy::OnlySecond,
                                             static_cast<size_t>(doc_stride), /*early_exit=*/false);
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(ds->rows.size());
  for (const auto& r : ds->rows) {  // run_qa strips the questions' leading whitespace
    const size_t from = r.text.find_first_not_of(" \t\n\r\f\v");
    pairs.emplace_back(from == std::string::npos ? "" : r.text.substr(from), r.text_pair);
  }
  const std::vector<tokenizers::Encoding> enc =
      encoded(*ds, " (question, context)", [&] { return t.encode_batch_pairs(pairs, true); });
  Features f;
  f.examples = ds;
  for (size_t r = 0; r < enc.size(); ++r) {
    std::vector<const tokenizers::Encoding*> windows = {&enc[r]};
    for (const auto& w : enc[r].overflowing) windows.push_back(&w);
    const Example& row = ds->rows[r];
    // The first answer's characters [from, to) in the context (none: every window is labelled [CLS]).
    const bool answered = ds->has_labels && !row.answer_starts.empty();
    const int64_t from = answered ? row.answer_starts[0] : 0,
                  to = answered ? from + static_cast<int64_t>(tokenizers::utf8::count_chars(row.answer_texts[0])) : 0;
    for (const tokenizers::Encoding* w : windows) {
      const size_t n = w->ids.size();
      std::vector<std::pair<int64_t, int64_t>> offsets(n, {-1, -1});
      int64_t first = -1, last = -1, cls = -1;  // the context's first and last token; the first special
      for (size_t k = 0; k < n; ++k) {
        if (cls < 0 && k < w->special_tokens_mask.size() && w->special_tokens_mask[k]) cls = static_cast<int64_t>(k);
        if (k < w->sequence_ids.size() && w->sequence_ids[k] == 1u) {
          offsets[k] = {static_cast<int64_t>(w->offsets[k].first), static_cast<int64_t>(w->offsets[k].second)};
          if (first < 0) first = static_cast<int64_t>(k);
          last = static_cast<int64_t>(k);
        }
      }
      if (cls < 0) cls = 0;
      f.input_ids.push_back(widen(w->ids));
      f.token_type_ids.push_back(widen(w->type_ids));
      f.example_index.push_back(static_cast<int64_t>(r));
      if (ds->has_labels) {
        int64_t start = cls, end = cls;
        if (answered && first >= 0 && offsets[first].first <= from && offsets[last].second >= to) {
          int64_t s = first, e = last;  // the whole answer is in the window
          while (s <= last && offsets[s].first <= from) ++s;
          while (e >= first && offsets[e].second >= to) --e;
          start = s - 1;
          end = e + 1;
        }
        f.start_positions.push_back(start);
        f.end_positions.push_back(end);
      }
      f.context_offsets.push_back(std::move(offsets));
    }
  }
  return f;
}

Features tokenize_choices(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length) {
  KILN_CHECK(!ds.rows.empty() && ds.rows[0].choices.size() >= 2, ds.source, ": multiple choice needs rows with ",
             "at least two choices");
  const size_t C = ds.rows[0].choices.size();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t r = 0; r < ds.rows.size(); ++r) {
    const Example& row = ds.rows[r];
    KILN_CHECK(row.choices.size() == C, ds.source, " row ", r + 1, ": ", row.choices.size(), " choices, expected ", C);
    for (const auto& ending : row.choices) pairs.emplace_back(row.text, row.text_pair + " " + ending);
  }
  const std::vector<tokenizers::Encoding> enc =
      encoded(ds, " (context, choice)", [&] { return truncating(tok, max_length).encode_batch_pairs(pairs, true); });
  Features f;
  for (size_t r = 0; r < ds.rows.size(); ++r) {
    std::vector<int64_t> ids, types, lengths;
    for (size_t k = 0; k < C; ++k) {
      const tokenizers::Encoding& e = enc[r * C + k];
      ids.insert(ids.end(), e.ids.begin(), e.ids.end());
      types.insert(types.end(), e.type_ids.begin(), e.type_ids.end());
      lengths.push_back(static_cast<int64_t>(e.ids.size()));
    }
    f.input_ids.push_back(std::move(ids));
    f.token_type_ids.push_back(std::move(types));
    f.choice_lengths.push_back(std::move(lengths));
    if (ds.has_labels) {
      const std::string& label = ds.rows[r].label;
      int64_t k = -1;
      const auto [end, ec] = std::from_chars(label.data(), label.data() + label.size(), k);
      KILN_CHECK(ec == std::errc() && end == label.data() + label.size() && k >= 0 && k < static_cast<int64_t>(C),
                 ds.source, " row ", r + 1, ": label '", label, "' is not the index of a choice (0 to ", C - 1, ")");
      f.labels.push_back(k);
    }
  }
  return f;
}

Features group_texts(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t block_size,
                     bool add_special_tokens) {
  KILN_CHECK(block_size > 0, "group_texts: block_size must be positive, got ", block_size);
  tokenizers::Tokenizer t = tok;
  t.set_padding(std::nullopt);
  t.set_truncation(std::nullopt);

  // The tokenizer's specials around one sequence: those before the first
  // ordinary token and those after the last.
  std::vector<int64_t> prefix, suffix;
  if (add_special_tokens) {
    tokenizers::Encoding probe = t.encode("a", true);
    size_t first = probe.size(), last = 0;
    for (size_t k = 0; k < probe.size(); ++k)
      if (!probe.special_tokens_mask[k]) {
        first = std::min(first, k);
        last = k + 1;
      }
    if (first == probe.size()) first = last = probe.size();  // "a" became specials only: treat all as prefix
    for (size_t k = 0; k < first; ++k) prefix.push_back(probe.ids[k]);
    for (size_t k = last; k < probe.size(); ++k) suffix.push_back(probe.ids[k]);
  }
  int64_t body = block_size - static_cast<int64_t>(prefix.size() + suffix.size());
  KILN_CHECK(body > 0, "group_texts: block_size ", block_size, " leaves no room beside the ",
             prefix.size() + suffix.size(), " special tokens");

  std::vector<std::string> texts;
  texts.reserve(ds.rows.size());
  for (const auto& r : ds.rows) texts.push_back(r.text);
  const std::vector<tokenizers::Encoding> enc = encoded(ds, "", [&] { return t.encode_batch(texts, false); });
  std::vector<int64_t> all;
  for (const auto& e : enc) all.insert(all.end(), e.ids.begin(), e.ids.end());
  KILN_CHECK(!all.empty(), ds.source, ": group_texts: the dataset has no tokens");

  auto n = static_cast<int64_t>(all.size());
  int64_t blocks = n >= body ? n / body : 1;
  Features f;
  for (int64_t b = 0; b < blocks; ++b) {
    std::vector<int64_t> ids = prefix;
    auto from = all.begin() + b * body;
    ids.insert(ids.end(), from, from + std::min(body, n - b * body));
    ids.insert(ids.end(), suffix.begin(), suffix.end());
    f.token_type_ids.emplace_back(ids.size(), 0);
    f.input_ids.push_back(std::move(ids));
  }
  return f;
}

Features tokenize_seq2seq(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_source_length,
                          int64_t max_target_length, const std::string& source_prefix) {
  auto encode = [&](const std::vector<std::string>& texts, int64_t max_length, const char* what) {
    return encoded(ds, what, [&] { return truncating(tok, max_length).encode_batch(texts, true); });
  };
  std::vector<std::string> sources, targets;
  for (size_t r = 0; r < ds.rows.size(); ++r) {
    KILN_CHECK(!ds.rows[r].text_pair.empty(), ds.source, ": row ", r + 1, " has no target text");
    sources.push_back(source_prefix + ds.rows[r].text);
    targets.push_back(ds.rows[r].text_pair);
  }
  Features f;
  for (const auto& e : encode(sources, max_source_length, " the sources")) {
    f.input_ids.push_back(widen(e.ids));
    f.token_type_ids.push_back(std::vector<int64_t>(e.ids.size(), 0));
  }
  for (const auto& e : encode(targets, max_target_length, " the targets")) f.target_ids.push_back(widen(e.ids));
  return f;
}

}  // namespace kiln::data
