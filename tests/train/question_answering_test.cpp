// run_qa's post-processing (windows' logits -> one answer per example) and the
// squad / squad_v2 metrics, on hand-made windows and hand-worked scores.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"
#include "kiln/tokenizers/utf8.h"
#include "kiln/train/question_answering.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

using namespace kiln;
using kiln::testing::TempDir;

namespace {

using Span = std::pair<int64_t, int64_t>;
const Span kNone{-1, -1};

// Example 0: "the cat sat on the mat" in two windows; example 1: "a dog" in one; example 2 has no window.
// Each window: [CLS] question [SEP] context tokens [SEP].
data::Features windows() {
  auto ds = std::make_shared<data::Dataset>();
  ds->rows = {{"q", "the cat sat on the mat", ""}, {"q", "a dog", ""}, {"q", "x", ""}};
  ds->rows[0].id = "e0";
  ds->rows[1].id = "e1";
  ds->rows[2].id = "e2";
  data::Features f;
  f.examples = ds;
  f.example_index = {0, 0, 1};
  f.context_offsets = {{kNone, kNone, kNone, {0, 3}, {4, 7}, {8, 11}, kNone},
                       {kNone, kNone, kNone, {8, 11}, {12, 14}, {15, 18}, {19, 22}, kNone},
                       {kNone, kNone, kNone, {0, 1}, {2, 5}, kNone}};
  for (const auto& o : f.context_offsets) f.input_ids.emplace_back(o.size(), 7);
  return f;
}
const std::vector<std::vector<float>> kStart = {{1, 0, 0, 2, 0.5f, 0, 0}, {0.5f, 0, 0, 0, 0, 3, 0, 0}, {5, 0, 0, 1, 0, 0}};
const std::vector<std::vector<float>> kEnd = {{1, 0, 0, 0, 2.5f, 0, 0}, {0.5f, 0, 0, 0, 0, 0, 2, 0}, {5, 0, 0, 0, 1, 0}};

}  // namespace

TEST(QaPostprocess, TheBestSpanOverAllWindowsWithinTheLimits) {
  const data::Features f = windows();
  train::QaOptions o;
  train::QaPredictions p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  EXPECT_EQ(p.ids, (std::vector<std::string>{"e0", "e1", "e2"}));
  // e0: "the mat" (window 1, 3 + 2) beats "the cat" (window 0, 2 + 2.5); e2 has no window: HF's "empty".
  EXPECT_EQ(p.answers, (std::vector<std::string>{"the mat", "a dog", "empty"}));
  EXPECT_EQ(p.chosen, (std::vector<int64_t>{0, 0, -1}));  // the best candidate; none for the placeholder
  const auto& best = p.nbest[0];
  ASSERT_GE(best.size(), 2u);
  EXPECT_EQ(best[0].text, "the mat");
  EXPECT_EQ(best[0].score, 5.0f);
  EXPECT_EQ(best[0].offsets, (Span{15, 22}));
  EXPECT_EQ(best[1].text, "the cat");
  double sum = 0;
  for (const auto& c : best) sum += c.probability;
  EXPECT_NEAR(sum, 1, 1e-12);
  EXPECT_NEAR(best[0].probability / best[1].probability, std::exp(0.5), 1e-9);
  for (const auto& c : best) EXPECT_LE(c.offsets.first, c.offsets.second);  // never an end before its start
  EXPECT_TRUE(p.null_score_diff.empty());

  // One-token answers: "cat" (window 0: 0.5 + 2.5) and "the" (window 1: 3 + 0) tie at 3; the first found wins,
  // as Python's stable sort keeps it.
  o.max_answer_length = 1;
  p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  EXPECT_EQ(p.answers[0], "cat");
  EXPECT_EQ(p.nbest[0][1].text, "the");
  for (const auto& c : p.nbest[0]) EXPECT_EQ(c.text.find(' '), std::string::npos) << c.text;
  // n_best_size 1: the best start and the best end of each window only (window 1: "the mat"; window 0:
  // start "the", end "cat"), and one candidate kept.
  o = {};
  o.n_best_size = 1;
  p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  ASSERT_EQ(p.nbest[0].size(), 1u);
  EXPECT_EQ(p.nbest[0][0].text, "the mat");
  EXPECT_EQ(p.nbest[0][0].probability, 1.0);
}

TEST(QaPostprocess, Version2AnswersNothingWhenTheNullScoreWins) {
  const data::Features f = windows();
  train::QaOptions o;
  o.version_2_with_negative = true;
  train::QaPredictions p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  // e0: the null score is the lowest [CLS] score over its windows (0.5 + 0.5 = 1 < 1 + 1): 1 - 5 = -4 -> "the mat".
  // e1: the null score 10 beats "a dog" (2) by 8 -> "". e2 (no window) keeps HF's "empty" placeholder.
  EXPECT_EQ(p.answers, (std::vector<std::string>{"the mat", "", "empty"}));
  EXPECT_EQ(p.null_score_diff[0], -4.0f);
  EXPECT_EQ(p.null_score_diff[1], 8.0f);
  EXPECT_EQ(p.chosen, (std::vector<int64_t>{0, 0, -1}));  // e1's answer is the null candidate, first in its list
  // The null answer is a candidate ("" at offsets (0, 0)) and comes first for e1.
  EXPECT_EQ(p.nbest[1][0].text, "");
  EXPECT_EQ(p.nbest[1][0].score, 10.0f);
  EXPECT_EQ(p.nbest[1][1].text, "a dog");
  bool has_null = false;
  for (const auto& c : p.nbest[0]) has_null = has_null || (c.text.empty() && c.score == 1.0f);
  EXPECT_TRUE(has_null);
  o.null_score_diff_threshold = 8.5;
  p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  EXPECT_EQ(p.answers[1], "a dog");
  EXPECT_EQ(p.nbest[1][static_cast<size_t>(p.chosen[1])].text, "a dog");
}

TEST(QaPostprocess, MismatchedInputsAreErrors) {
  const data::Features f = windows();
  EXPECT_THROW(train::postprocess_qa_predictions(f, {kStart[0]}, kEnd, {}), Error);
  auto short_rows = kStart;
  short_rows[1].resize(3);
  EXPECT_THROW(train::postprocess_qa_predictions(f, short_rows, kEnd, {}), Error);
  data::Features plain;
  plain.input_ids = {{1, 2}};
  EXPECT_THROW(train::postprocess_qa_predictions(plain, {{0, 0}}, {{0, 0}}, {}), Error);
}

TEST(QaPostprocess, FilesAreRunQasJson) {
  const data::Features f = windows();
  train::QaOptions o;
  o.version_2_with_negative = true;
  const train::QaPredictions p = train::postprocess_qa_predictions(f, kStart, kEnd, o);
  TempDir d;
  train::write_qa_predictions(p, d.path(), "eval", o);
  EXPECT_EQ(d.listing(), (std::vector<std::string>{"eval_nbest_predictions.json", "eval_null_odds.json",
                                                   "eval_predictions.json"}));
  std::ifstream in(d.path() / "eval_predictions.json");
  std::stringstream text;
  text << in.rdbuf();
  // json.dumps(indent=4) in the examples' order, and a final newline.
  EXPECT_EQ(text.str(), "{\n    \"e0\": \"the mat\",\n    \"e1\": \"\",\n    \"e2\": \"empty\"\n}\n");
  const auto nbest = nlohmann::json::parse(std::ifstream(d.path() / "eval_nbest_predictions.json"));
  EXPECT_EQ(nbest["e0"][0]["text"], "the mat");
  EXPECT_EQ(nbest["e0"][0]["start_logit"], 3.0);
  EXPECT_EQ(nbest["e0"][0]["end_logit"], 2.0);
  EXPECT_TRUE(nbest["e0"][0].contains("probability"));
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(d.path() / "eval_null_odds.json"))["e1"], 8.0);
}

TEST(SquadMetrics, NormalizationAndTokenOverlap) {
  EXPECT_EQ(train::normalize_answer("The  Cat, sat!"), "cat sat");
  EXPECT_EQ(train::normalize_answer("An apple a day"), "apple day");
  EXPECT_EQ(train::normalize_answer("theater the-end a_b"), "theater theend ab");  // punctuation ('_' too) goes first
  EXPECT_EQ(train::normalize_answer("ÉTÉ\u00a0À l'Été"), "été à lété");                // Unicode case and spaces
  EXPECT_EQ(train::normalize_answer(" . "), "");
  // "the cat sat" vs "a cat sat down": 2 shared of 2 and 3 tokens: F1 0.8; the best gold answer counts.
  auto m = train::squad_metrics({"a", "b"}, {"the cat sat", "Denver Broncos"},
                                {{"a cat sat down", "dog"}, {"The Denver Broncos!", "x"}});
  EXPECT_DOUBLE_EQ(m.at("exact_match"), 50.0);
  EXPECT_DOUBLE_EQ(m.at("f1"), 90.0);
  m = train::squad_metrics({"a"}, {"cat cat"}, {{"cat"}});  // shared tokens count once each
  EXPECT_NEAR(m.at("f1"), 100 * 2 * 0.5 / 1.5, 1e-12);
  try {
    train::squad_metrics({"a", "q9"}, {"x", "y"}, {{"x"}, {}});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("example 'q9' has no answer (SQuAD 2.0 data: pass --version_2_with_negative)"),
              std::string::npos)
        << e.what();
  }
}

TEST(SquadMetrics, Version2ScoresAnswerableAndUnanswerableApart) {
  // e0: unanswerable, "" (right); e1: "cat" (right); e2: unanswerable, "x" (wrong); e3: "" for "dog" (wrong).
  const auto m = train::squad_v2_metrics({"", "cat", "x", ""}, {{}, {"cat"}, {}, {"dog"}});
  EXPECT_DOUBLE_EQ(m.at("exact"), 50.0);
  EXPECT_DOUBLE_EQ(m.at("f1"), 50.0);
  EXPECT_DOUBLE_EQ(m.at("total"), 4.0);
  EXPECT_DOUBLE_EQ(m.at("HasAns_exact"), 50.0);
  EXPECT_DOUBLE_EQ(m.at("HasAns_total"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("NoAns_exact"), 50.0);
  EXPECT_DOUBLE_EQ(m.at("NoAns_f1"), 50.0);
  // find_best_thresh with every no-answer probability 0: start at 2 (the unanswerable count), +0, +1 (best: 3),
  // -1, +0 -> 3 of 4.
  EXPECT_DOUBLE_EQ(m.at("best_exact"), 75.0);
  EXPECT_DOUBLE_EQ(m.at("best_f1"), 75.0);
  EXPECT_DOUBLE_EQ(m.at("best_exact_thresh"), 0.0);
  // Partial overlap, and blank gold answers count as none.
  const auto p = train::squad_v2_metrics({"big cat", "a"}, {{"cat"}, {" ", "the"}});
  EXPECT_NEAR(p.at("f1"), 100 * (2.0 / 3 + 1) / 2, 1e-12);  // "a" normalizes to "", as the blank gold answers
  EXPECT_EQ(p.count("NoAns_total"), 0u);  // both have answer texts, blank or not
}

// Preprocessing and post-processing together with bert-base-uncased's real tokenizer on the tokenizer corpus
// (accents, symbols, URLs, code, tabs) as one long context: every answer -- a random run of words starting and
// ending with an ASCII letter or digit -- lies whole in at least one window, the windows that hold it label its
// tokens, and logits that point at those tokens give back exactly the answer's text.
TEST(QaPostprocess, RealTokenizerWindowsRoundTripAnswers) {
  const std::string dir = std::string(KILN_SHARED_DIR) + "/tokenizers/bert-base-uncased";
  SKIP_WITHOUT_SHARED(dir);
  const auto tok = tokenizers::Tokenizer::from_pretrained(dir);
  std::string context = read_file(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/corpus.txt");
  const std::u32string chars = tokenizers::utf8::to_u32(context);
  // Words: maximal runs of non-space code points, with their code point ranges.
  std::vector<std::pair<size_t, size_t>> words;
  for (size_t i = 0; i < chars.size();) {
    if (chars[i] == U' ' || chars[i] == U'\n' || chars[i] == U'\t' || chars[i] == U'\r') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && !(chars[j] == U' ' || chars[j] == U'\n' || chars[j] == U'\t' || chars[j] == U'\r')) ++j;
    words.emplace_back(i, j);
    i = j;
  }
  auto clean = [&](char32_t c) { return c < 128 && std::isalnum(static_cast<int>(c)); };
  std::vector<size_t> starts;  // words that start and end with an ASCII letter or digit
  for (size_t w = 0; w < words.size(); ++w)
    if (clean(chars[words[w].first]) && clean(chars[words[w].second - 1])) starts.push_back(w);
  ASSERT_GT(starts.size(), 200u);
  auto ds = std::make_shared<data::Dataset>();
  ds->source = "corpus";
  ds->has_labels = true;
  std::mt19937 rng(7);
  for (int e = 0; e < 60; ++e) {
    const size_t a = starts[rng() % starts.size()];
    size_t b = a;
    for (size_t k = 0; k < rng() % 4; ++k)  // up to three more words, ending on a clean one
      if (b + 1 < words.size() && clean(chars[words[b + 1].second - 1])) ++b;
    data::Example x{"what is here?", context, ""};
    x.id = "e" + std::to_string(e);
    x.answer_starts = {static_cast<int64_t>(words[a].first)};
    x.answer_texts = {tokenizers::utf8::from_u32(chars.substr(words[a].first, words[b].second - words[a].first))};
    ds->rows.push_back(std::move(x));
  }
  for (const auto& [max_length, stride] : std::vector<std::pair<int64_t, int64_t>>{{128, 32}, {64, 16}}) {
    SCOPED_TRACE(max_length);
    const data::Features f = data::tokenize_qa(ds, tok, max_length, stride);
    std::vector<std::vector<float>> s, t;
    std::vector<int> holding(ds->rows.size(), 0);
    for (size_t w = 0; w < f.size(); ++w) {
      ASSERT_LE(static_cast<int64_t>(f.input_ids[w].size()), max_length);
      s.emplace_back(f.input_ids[w].size(), 0.f);
      t.emplace_back(f.input_ids[w].size(), 0.f);
      const auto& row = ds->rows[static_cast<size_t>(f.example_index[w])];
      const int64_t from = row.answer_starts[0],
                    to = from + static_cast<int64_t>(tokenizers::utf8::count_chars(row.answer_texts[0]));
      int64_t lo = -1, hi = -1;  // the window's context span
      for (const auto& o : f.context_offsets[w])
        if (o.first >= 0) {
          if (lo < 0) lo = o.first;
          hi = o.second;
        }
      const bool whole = lo <= from && hi >= to;
      if (!whole) {
        EXPECT_EQ(f.start_positions[w], 0);
        continue;
      }
      ++holding[static_cast<size_t>(f.example_index[w])];
      const auto start = static_cast<size_t>(f.start_positions[w]), end = static_cast<size_t>(f.end_positions[w]);
      ASSERT_LE(start, end);
      EXPECT_EQ(tokenizers::utf8::slice_chars(context, static_cast<size_t>(f.context_offsets[w][start].first),
                                              static_cast<size_t>(f.context_offsets[w][end].second)),
                row.answer_texts[0]);
      s.back()[start] = 10;
      t.back()[end] = 10;
    }
    for (size_t e = 0; e < holding.size(); ++e) EXPECT_GT(holding[e], 0) << ds->rows[e].answer_texts[0];
    train::QaOptions o;
    o.max_answer_length = max_length;
    const train::QaPredictions p = train::postprocess_qa_predictions(f, s, t, o);
    for (size_t e = 0; e < ds->rows.size(); ++e) EXPECT_EQ(p.answers[e], ds->rows[e].answer_texts[0]);
    EXPECT_DOUBLE_EQ(train::qa_metrics(p, *ds, o).at("exact_match"), 100.0);
  }
}
