#include "kiln/data/labels.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "kiln/core/error.h"

namespace kiln::data {

bool is_integer_label(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i >= s.size() || s.size() - i > 18) return false;  // fits int64
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool parse_number_label(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  if (out) *out = v;
  return true;
}

namespace {
// Distinct labels in Python's sorted() order: byte order (std::set's), or
// numeric when every one is an integer (an int column).
std::vector<std::string> sorted_labels(const std::set<std::string>& distinct) {
  std::vector<std::string> labels(distinct.begin(), distinct.end());
  if (std::all_of(labels.begin(), labels.end(), is_integer_label))
    std::stable_sort(labels.begin(), labels.end(),
                     [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return labels;
}
}  // namespace

LabelMap LabelMap::from_dataset(const Dataset& train) {
  KILN_CHECK(train.has_labels && !train.rows.empty(), train.source,
             ": no labels (a training set needs a label column)");
  std::set<std::string> distinct;
  for (const auto& r : train.rows) distinct.insert(r.label);
  LabelMap m;
  const bool all_int = std::all_of(distinct.begin(), distinct.end(), is_integer_label);
  const bool all_number =
      std::all_of(distinct.begin(), distinct.end(), [](const std::string& l) { return parse_number_label(l, nullptr); });
  if (!all_int && all_number) {
    m.is_regression = true;
    return m;
  }
  m.labels = sorted_labels(distinct);
  return m;
}

LabelMap LabelMap::from_word_labels(const Dataset& train) {
  KILN_CHECK(train.has_labels && !train.rows.empty(), train.source,
             ": no tags (token classification needs a list of tags per row, e.g. 'ner_tags')");
  std::set<std::string> distinct;
  for (const auto& r : train.rows) distinct.insert(r.word_labels.begin(), r.word_labels.end());
  LabelMap m;
  m.labels = sorted_labels(distinct);
  return m;
}

LabelMap LabelMap::from_labels(std::vector<std::string> labels) {
  std::set<std::string> seen;
  for (const auto& l : labels) KILN_CHECK(seen.insert(l).second, "id2label: label '", l, "' appears twice");
  LabelMap m;
  m.labels = std::move(labels);
  return m;
}

bool has_named_labels(const std::map<int64_t, std::string>& id2label) {
  return std::any_of(id2label.begin(), id2label.end(),
                     [](const auto& kv) { return kv.second != "LABEL_" + std::to_string(kv.first); });
}

std::optional<LabelMap> LabelMap::in_model_order(const std::map<int64_t, std::string>& id2label) const {
  if (is_regression || id2label.size() != labels.size() || !has_named_labels(id2label)) return std::nullopt;
  std::vector<std::string> ordered;
  for (size_t i = 0; i < labels.size(); ++i) {
    auto it = id2label.find(static_cast<int64_t>(i));
    if (it == id2label.end()) return std::nullopt;  // ids not 0..n-1
    ordered.push_back(it->second);
  }
  const std::set<std::string> mine(labels.begin(), labels.end()), theirs(ordered.begin(), ordered.end());
  if (mine != theirs || theirs.size() != ordered.size()) return std::nullopt;
  return from_labels(std::move(ordered));
}

int64_t LabelMap::id(const std::string& label, const std::string& where) const {
  KILN_CHECK(!is_regression, where, ": regression labels have no class id (label '", label, "')");
  auto it = std::find(labels.begin(), labels.end(), label);
  if (it != labels.end()) return it - labels.begin();
  std::string known;
  for (const auto& l : labels) known += (known.empty() ? "'" : ", '") + l + "'";
  throw Error(detail::concat(where, ": label '", label, "' was not seen in training (known labels: ", known, ")"));
}

}  // namespace kiln::data
