#include "kiln/train/seqeval.h"

#include <array>
#include <set>

#include "kiln/core/error.h"

namespace kiln::train {
namespace {

// conlleval's chunk boundaries between the previous tag and this one.
bool end_of_chunk(char prev_tag, char tag, const std::string& prev_type, const std::string& type) {
  if (prev_tag == 'E' || prev_tag == 'S') return true;
  if ((prev_tag == 'B' || prev_tag == 'I') && (tag == 'B' || tag == 'S' || tag == 'O')) return true;
  return prev_tag != 'O' && prev_tag != '.' && prev_type != type;
}

bool start_of_chunk(char prev_tag, char tag, const std::string& prev_type, const std::string& type) {
  if (tag == 'B' || tag == 'S') return true;
  if ((prev_tag == 'E' || prev_tag == 'S' || prev_tag == 'O') && (tag == 'E' || tag == 'I')) return true;
  return tag != 'O' && tag != '.' && prev_type != type;
}

// Precision, recall and F1 of [hits, predicted, reference] counts (0 for a zero denominator).
EntityScores scores(const std::array<int64_t, 3>& c) {
  EntityScores s;
  s.precision = c[1] > 0 ? static_cast<double>(c[0]) / static_cast<double>(c[1]) : 0.0;
  s.recall = c[2] > 0 ? static_cast<double>(c[0]) / static_cast<double>(c[2]) : 0.0;
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  s.number = c[2];
  return s;
}

}  // namespace

std::vector<std::tuple<std::string, int64_t, int64_t>> get_entities(const std::vector<std::string>& tags) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> chunks;
  char prev_tag = 'O';
  std::string prev_type;
  int64_t begin = 0;
  const auto n = static_cast<int64_t>(tags.size());
  for (int64_t i = 0; i <= n; ++i) {  // one "O" past the end closes the last chunk
    const std::string chunk = i < n ? tags[static_cast<size_t>(i)] : "O";
    const char tag = chunk.empty() ? 'O' : chunk[0];
    // The type: what follows the first '-' after the prefix letter ("B-PER" -> "PER"), "_" when none.
    std::string rest = chunk.size() > 1 ? chunk.substr(1) : "";
    const size_t dash = rest.find('-');
    std::string type = dash == std::string::npos ? rest : rest.substr(dash + 1);
    if (type.empty()) type = "_";
    if (end_of_chunk(prev_tag, tag, prev_type, type)) chunks.emplace_back(prev_type, begin, i - 1);
    if (start_of_chunk(prev_tag, tag, prev_type, type)) begin = i;
    prev_tag = tag;
    prev_type = type;
  }
  return chunks;
}

SeqevalScores seqeval(const std::vector<std::vector<std::string>>& references,
                      const std::vector<std::vector<std::string>>& predictions) {
  KILN_CHECK(references.size() == predictions.size(), "seqeval: ", references.size(), " reference sentences but ",
             predictions.size(), " predicted");
  // Sentences joined with an "O" after each, as seqeval flattens nested lists.
  std::vector<std::string> gold, pred;
  int64_t tokens = 0, correct = 0;
  for (size_t s = 0; s < references.size(); ++s) {
    KILN_CHECK(references[s].size() == predictions[s].size(), "seqeval: sentence ", s, " has ",
               references[s].size(), " reference tags but ", predictions[s].size(), " predicted");
    for (size_t k = 0; k < references[s].size(); ++k) {
      correct += references[s][k] == predictions[s][k];
      ++tokens;
    }
    gold.insert(gold.end(), references[s].begin(), references[s].end());
    gold.emplace_back("O");
    pred.insert(pred.end(), predictions[s].begin(), predictions[s].end());
    pred.emplace_back("O");
  }
  using Entities = std::set<std::tuple<std::string, int64_t, int64_t>>;
  const auto g = get_entities(gold), p = get_entities(pred);
  const Entities truth(g.begin(), g.end()), found(p.begin(), p.end());
  // Per type: [hits, predicted, reference].
  std::map<std::string, std::array<int64_t, 3>> counts;
  for (const auto& e : found) {
    auto& c = counts[std::get<0>(e)];
    c[0] += truth.count(e);
    ++c[1];
  }
  for (const auto& e : truth) ++counts[std::get<0>(e)][2];
  SeqevalScores out;
  std::array<int64_t, 3> all{};
  for (const auto& [type, c] : counts) {
    out.types[type] = scores(c);
    for (size_t k = 0; k < 3; ++k) all[k] += c[k];
  }
  const EntityScores micro = scores(all);
  out.precision = micro.precision;
  out.recall = micro.recall;
  out.f1 = micro.f1;
  out.accuracy = tokens > 0 ? static_cast<double>(correct) / tokens : 0.0;
  return out;
}

}  // namespace kiln::train
