#include "kiln/train/question_answering.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::train {

namespace {

namespace utf8 = tokenizers::utf8;
namespace unicode = tokenizers::unicode;

// The indices of the n largest values, largest first: numpy's
// argsort(x)[-1:-n-1:-1], whose ties come out later index first for rows
// short enough for its insertion sort (a stable sort, reversed).
std::vector<size_t> top_indices(const std::vector<float>& x, size_t length, size_t n) {
  std::vector<size_t> order(std::min(length, x.size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::reverse(order.begin(), order.end());
  if (order.size() > n) order.resize(n);
  return order;
}

// Python's str.isspace, which str.split() splits at.
bool python_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's string.punctuation.
bool ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// normalize_answer(s).split()
std::vector<std::u32string> answer_tokens(std::string_view s) {
  std::u32string lower;
  for (char32_t c : utf8::to_u32(s)) unicode::lowercase(c, lower);
  std::u32string kept;
  for (char32_t c : lower)
    if (!ascii_punctuation(c)) kept += c;
  // re.sub(r"\b(a|an|the)\b", " ", text): a maximal run of word characters that is one of the articles.
  auto word = [](char32_t c) { return c == U'_' || unicode::is_alphanumeric(c); };
  std::u32string text;
  for (size_t i = 0; i < kept.size();) {
    if (!word(kept[i])) {
      text += kept[i++];
      continue;
    }
    size_t j = i;
    while (j < kept.size() && word(kept[j])) ++j;
    const std::u32string run = kept.substr(i, j - i);
    text += run == U"a" || run == U"an" || run == U"the" ? U" " : run;
    i = j;
  }
  std::vector<std::u32string> tokens;
  std::u32string current;
  for (char32_t c : text) {
    if (python_space(c)) {
      if (!current.empty()) tokens.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) tokens.push_back(std::move(current));
  return tokens;
}

// The token-overlap F1 of SQuAD's scripts; `empty_matches`: squad_v2's rule
// that two answers without tokens match (score 1) and one without does not.
double token_f1(const std::vector<std::u32string>& pred, const std::vector<std::u32string>& gold, bool empty_matches) {
  if (empty_matches && (pred.empty() || gold.empty())) return pred == gold ? 1 : 0;
  std::map<std::u32string, int64_t> counts;
  for (const auto& t : gold) ++counts[t];
  int64_t same = 0;
  for (const auto& t : pred) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0;
  const double precision = static_cast<double>(same) / static_cast<double>(pred.size());
  const double recall = static_cast<double>(same) / static_cast<double>(gold.size());
  return 2 * precision * recall / (precision + recall);
}

}  // namespace

std::string normalize_answer(std::string_view s) {
  std::u32string out;
  for (const auto& t : answer_tokens(s)) out += (out.empty() ? U"" : U" ") + t;
  return utf8::from_u32(out);
}

QaPredictions postprocess_qa_predictions(const data::Features& features,
                                         const std::vector<std::vector<float>>& start_logits,
                                         const std::vector<std::vector<float>>& end_logits,
                                         const QaOptions& o) {
  KILN_CHECK(features.examples && features.example_index.size() == features.size() &&
                 features.context_offsets.size() == features.size(),
             "postprocess_qa_predictions: the features were not made by tokenize_qa");
  KILN_CHECK(start_logits.size() == features.size() && end_logits.size() == features.size(),
             "postprocess_qa_predictions: ", features.size(), " features but ", start_logits.size(), " start and ",
             end_logits.size(), " end logit rows");
  KILN_CHECK(o.n_best_size > 0 && o.max_answer_length > 0, "postprocess_qa_predictions: n_best_size (",
             o.n_best_size, ") and max_answer_length (", o.max_answer_length, ") must be positive");
  const data::Dataset& examples = *features.examples;
  std::vector<std::vector<size_t>> windows(examples.rows.size());
  for (size_t f = 0; f < features.size(); ++f) {
    const int64_t e = features.example_index[f];
    KILN_CHECK(e >= 0 && static_cast<size_t>(e) < windows.size(), "postprocess_qa_predictions: feature ", f,
               " names example ", e, " of ", windows.size());
    windows[static_cast<size_t>(e)].push_back(f);
  }
  const auto n_best = static_cast<size_t>(o.n_best_size);
  QaPredictions p;
  for (size_t e = 0; e < examples.rows.size(); ++e) {
    std::vector<QaCandidate> candidates;
    std::optional<QaCandidate> null;  // the lowest [CLS] score over the windows
    for (size_t f : windows[e]) {
      const auto& offsets = features.context_offsets[f];
      const std::vector<float>& s = start_logits[f];
      const std::vector<float>& t = end_logits[f];
      const size_t length = offsets.size();
      KILN_CHECK(s.size() >= length && t.size() >= length, "postprocess_qa_predictions: feature ", f, " has ",
                 length, " tokens but ", s.size(), " start and ", t.size(), " end logits");
      if (length == 0) continue;
      const float null_score = s[0] + t[0];
      if (!null || null->score > null_score) {
        null = QaCandidate{};
        null->start_logit = s[0];
        null->end_logit = t[0];
        null->score = null_score;
      }
      for (size_t a : top_indices(s, length, n_best))
        for (size_t b : top_indices(t, length, n_best)) {
          if (offsets[a].first < 0 || offsets[b].first < 0) continue;  // not in the context
          if (b < a || static_cast<int64_t>(b - a + 1) > o.max_answer_length) continue;
          QaCandidate c;
          c.offsets = {offsets[a].first, offsets[b].second};
          c.start_logit = s[a];
          c.end_logit = t[b];
          c.score = s[a] + t[b];
          candidates.push_back(std::move(c));
        }
    }
    if (o.version_2_with_negative && null) candidates.push_back(*null);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const QaCandidate& a, const QaCandidate& b) { return a.score > b.score; });
    if (candidates.size() > n_best) candidates.resize(n_best);
    auto is_null = [](const QaCandidate& c) { return c.offsets == std::pair<int64_t, int64_t>{0, 0}; };
    if (o.version_2_with_negative && null && std::none_of(candidates.begin(), candidates.end(), is_null))
      candidates.push_back(*null);
    const std::string& context = examples.rows[e].text_pair;
    for (auto& c : candidates)
      c.text = std::string(utf8::slice_chars(context, static_cast<size_t>(c.offsets.first),
                                             static_cast<size_t>(c.offsets.second)));
    const bool placeholder = candidates.empty() || (candidates.size() == 1 && candidates[0].text.empty());
    if (placeholder) {
      QaCandidate empty;  // HF's placeholder when nothing fits
      empty.text = "empty";
      candidates.insert(candidates.begin(), empty);
    }
    float top = candidates[0].score;
    for (const auto& c : candidates) top = std::max(top, c.score);
    double sum = 0;
    for (auto& c : candidates) sum += c.probability = std::exp(static_cast<double>(c.score - top));
    for (auto& c : candidates) c.probability /= sum;
    p.ids.push_back(examples.rows[e].id);
    auto index = [&](auto it) { return it == candidates.end() ? int64_t{-1} : it - candidates.begin(); };
    const int64_t null_at = index(std::find_if(candidates.begin(), candidates.end(), [&](const QaCandidate& c) {
      return c.text.empty() && is_null(c);
    }));
    if (!o.version_2_with_negative) {
      p.answers.push_back(candidates[0].text);
      p.chosen.push_back(placeholder ? -1 : 0);
    } else {
      auto best = std::find_if(candidates.begin(), candidates.end(), [](const QaCandidate& c) { return !c.text.empty(); });
      if (best == candidates.end()) {  // only empty spans (zero-width tokens): no answer
        p.null_score_diff.push_back(0);
        p.answers.emplace_back();
        p.chosen.push_back(null_at);
      } else {
        const float diff = (null ? null->score : 0.f) - best->start_logit - best->end_logit;
        const bool none = diff > o.null_score_diff_threshold;
        p.null_score_diff.push_back(diff);
        p.answers.push_back(none ? "" : best->text);
        p.chosen.push_back(none ? null_at : placeholder ? -1 : index(best));
      }
    }
    p.nbest.push_back(std::move(candidates));
  }
  return p;
}

std::map<std::string, double> squad_metrics(const std::vector<std::string>& ids,
                                            const std::vector<std::string>& predictions,
                                            const std::vector<std::vector<std::string>>& golds) {
  KILN_CHECK(predictions.size() == golds.size() && ids.size() == golds.size(), "squad_metrics: ", predictions.size(),
             " predictions, ", golds.size(), " gold answer lists and ", ids.size(), " ids");
  KILN_CHECK(!golds.empty(), "squad_metrics: no examples");
  double exact = 0, f1 = 0;
  for (size_t i = 0; i < golds.size(); ++i) {
    KILN_CHECK(!golds[i].empty(), "squad_metrics: example '", ids[i],
               "' has no answer (SQuAD 2.0 data: pass --version_2_with_negative)");
    const auto pred = answer_tokens(predictions[i]);
    double best_exact = 0, best_f1 = 0;
    for (const auto& g : golds[i]) {
      const auto gold = answer_tokens(g);
      best_exact = std::max(best_exact, pred == gold ? 1.0 : 0.0);
      best_f1 = std::max(best_f1, token_f1(pred, gold, false));
    }
    exact += best_exact;
    f1 += best_f1;
  }
  const auto n = static_cast<double>(golds.size());
  return {{"exact_match", 100 * exact / n}, {"f1", 100 * f1 / n}};
}

std::map<std::string, double> squad_v2_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds) {
  KILN_CHECK(predictions.size() == golds.size(), "squad_v2_metrics: ", predictions.size(), " predictions but ",
             golds.size(), " gold answer lists");
  KILN_CHECK(!golds.empty(), "squad_v2_metrics: no examples");
  std::vector<double> exact, f1;
  std::vector<bool> has_answer;
  for (size_t i = 0; i < golds.size(); ++i) {
    has_answer.push_back(!golds[i].empty());  // make_qid_to_has_ans: any answer text, blank or not
    std::vector<std::vector<std::u32string>> gold;
    for (const auto& g : golds[i])
      if (auto t = answer_tokens(g); !t.empty()) gold.push_back(std::move(t));
    if (gold.empty()) gold.emplace_back();
    const auto pred = answer_tokens(predictions[i]);
    double e = 0, f = 0;
    for (const auto& g : gold) {
      e = std::max(e, pred == g ? 1.0 : 0.0);
      f = std::max(f, token_f1(pred, g, true));
    }
    exact.push_back(e);
    f1.push_back(f);
  }
  std::map<std::string, double> m;
  auto add = [&](const std::string& prefix, bool with, bool has) {
    double e = 0, f = 0, n = 0;
    for (size_t i = 0; i < golds.size(); ++i)
      if (!with || has_answer[i] == has) {
        e += exact[i];
        f += f1[i];
        ++n;
      }
    if (n == 0) return;
    m[prefix + "exact"] = 100 * e / n;
    m[prefix + "f1"] = 100 * f / n;
    m[prefix + "total"] = n;
  };
  add("", false, false);
  add("HasAns_", true, true);
  add("NoAns_", true, false);
  // find_all_best_thresh with every no-answer probability 0: the best running score over the examples in order.
  auto best = [&](const std::vector<double>& scores, const std::string& name) {
    double current = 0;
    for (bool h : has_answer) current += h ? 0 : 1;
    double top = current;
    for (size_t i = 0; i < scores.size(); ++i) {
      current += has_answer[i] ? scores[i] : predictions[i].empty() ? 0 : -1;
      top = std::max(top, current);
    }
    m["best_" + name] = 100 * top / static_cast<double>(scores.size());
    m["best_" + name + "_thresh"] = 0;
  };
  best(exact, "exact");
  best(f1, "f1");
  return m;
}

std::map<std::string, double> qa_metrics(const QaPredictions& p, const data::Dataset& examples, const QaOptions& o) {
  KILN_CHECK(p.answers.size() == examples.rows.size(), "qa_metrics: ", p.answers.size(), " predictions for ",
             examples.rows.size(), " examples");
  std::vector<std::vector<std::string>> golds;
  for (const auto& r : examples.rows) golds.push_back(r.answer_texts);
  return o.version_2_with_negative ? squad_v2_metrics(p.answers, golds) : squad_metrics(p.ids, p.answers, golds);
}

void write_qa_predictions(const QaPredictions& p, const std::filesystem::path& dir, const std::string& prefix,
                          const QaOptions& o) {
  nlohmann::ordered_json answers = nlohmann::ordered_json::object(), nbest = nlohmann::ordered_json::object(),
                         odds = nlohmann::ordered_json::object();
  for (size_t e = 0; e < p.ids.size(); ++e) {
    answers[p.ids[e]] = p.answers[e];
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& c : p.nbest[e])
      list.push_back({{"start_logit", static_cast<double>(c.start_logit)},
                      {"end_logit", static_cast<double>(c.end_logit)},
                      {"text", c.text},
                      {"probability", c.probability}});
    nbest[p.ids[e]] = std::move(list);
    if (o.version_2_with_negative) odds[p.ids[e]] = static_cast<double>(p.null_score_diff[e]);
  }
  // As run_qa writes them: the examples' order, json.dumps(indent=4) (non-ASCII escaped), a final newline.
  auto write = [&](const char* name, const nlohmann::ordered_json& j) {
    write_file_atomic(dir / (prefix + name), j.dump(4, ' ', true) + "\n");
  };
  write("_predictions.json", answers);
  write("_nbest_predictions.json", nbest);
  if (o.version_2_with_negative) write("_null_odds.json", odds);
}

}  // namespace kiln::train
