#pragma once
// Extractive question answering after the model: run_qa's
// postprocess_qa_predictions (each example's best answer span over all the
// windows of its context) and the metrics of evaluate's "squad" (SQuAD 1.1)
// and "squad_v2" (SQuAD 2.0, with unanswerable questions).
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/data/features.h"

namespace kiln::train {

// run_qa's DataTrainingArguments for post-processing.
struct QaOptions {
  int64_t n_best_size = 20;        // the best start and end logits tried per window, and answers kept per example
  int64_t max_answer_length = 30;  // in tokens
  bool version_2_with_negative = false;  // SQuAD 2.0: an example may have no answer
  // An example's answer is "" when its null score beats the best span by more than this.
  double null_score_diff_threshold = 0;
};

// One candidate answer of an example (the n-best list).
struct QaCandidate {
  std::string text;
  float start_logit = 0, end_logit = 0, score = 0;
  double probability = 0;  // softmax of the scores over the example's candidates
  std::pair<int64_t, int64_t> offsets{0, 0};  // characters of the context ((0, 0): the null answer)
};

// Per example, in the examples' order.
struct QaPredictions {
  std::vector<std::string> ids;
  std::vector<std::string> answers;             // "" = no answer (version 2)
  std::vector<std::vector<QaCandidate>> nbest;  // best first
  // The answer's candidate in nbest (the null one for a version 2 ""), or -1
  // for HF's "empty" placeholder (nothing fit) or an answer without one.
  std::vector<int64_t> chosen;
  std::vector<float> null_score_diff;           // version 2: null score - best span's score
};

// start_logits / end_logits: one row per row of `features` (made by
// data::tokenize_qa), at least as long as the row's tokens. A candidate is a
// span of context tokens from one of a window's n_best_size best start
// logits to one of its best end logits, at most max_answer_length tokens;
// its score is the sum of the two logits. The null answer (version 2) is the
// lowest [CLS] score over the example's windows. Ties keep HF's order.
QaPredictions postprocess_qa_predictions(const data::Features& features,
                                         const std::vector<std::vector<float>>& start_logits,
                                         const std::vector<std::vector<float>>& end_logits, const QaOptions& options);

// SQuAD's normalize_answer: lower case, ASCII punctuation removed, the
// words "a", "an" and "the" removed, whitespace runs made single spaces.
std::string normalize_answer(std::string_view s);

// evaluate's "squad": exact_match and f1 (percentages, mean over examples
// of the best score against any of the example's gold answers). Every
// example needs a gold answer (an error names the first that has none).
std::map<std::string, double> squad_metrics(const std::vector<std::string>& ids,
                                            const std::vector<std::string>& predictions,
                                            const std::vector<std::vector<std::string>>& golds);
// evaluate's "squad_v2" with no-answer probability 0 for every prediction (as
// run_qa passes it): exact, f1, total, HasAns_exact/f1/total, NoAns_*,
// best_exact, best_exact_thresh, best_f1, best_f1_thresh. No gold answers
// (or only blank ones): the right prediction is "".
std::map<std::string, double> squad_v2_metrics(const std::vector<std::string>& predictions,
                                               const std::vector<std::vector<std::string>>& golds);

// The metrics above for `p` against the examples' gold answers: squad, or
// squad_v2 with options.version_2_with_negative.
std::map<std::string, double> qa_metrics(const QaPredictions& p, const data::Dataset& examples,
                                         const QaOptions& options);

// run_qa's files, atomically, into dir: <prefix>_predictions.json (id ->
// answer), <prefix>_nbest_predictions.json (id -> candidates: start_logit,
// end_logit, text, probability) and, for version 2, <prefix>_null_odds.json.
void write_qa_predictions(const QaPredictions& p, const std::filesystem::path& dir, const std::string& prefix,
                          const QaOptions& options);

}  // namespace kiln::train
