#include "kiln/train/generation_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/train/porter_stemmer.h"

namespace kiln::train {

namespace {

using Ngrams = std::map<std::vector<std::string>, int64_t>;

Ngrams ngrams(const std::vector<std::string>& tokens, size_t n) {
  Ngrams out;
  for (size_t i = 0; i + n <= tokens.size(); ++i)
    ++out[std::vector<std::string>(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                                   tokens.begin() + static_cast<std::ptrdiff_t>(i + n))];
  return out;
}

// rouge_score's fmeasure of precision and recall.
double fmeasure(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

// rouge_score's _score_ngrams: clipped overlap over each side's count.
double rouge_n(const std::vector<std::string>& target, const std::vector<std::string>& prediction, size_t n) {
  const Ngrams t = ngrams(target, n), p = ngrams(prediction, n);
  int64_t overlap = 0, t_count = 0, p_count = 0;
  for (const auto& [g, c] : t) {
    t_count += c;
    if (auto it = p.find(g); it != p.end()) overlap += std::min(c, it->second);
  }
  for (const auto& [g, c] : p) p_count += c;
  return fmeasure(static_cast<double>(overlap) / static_cast<double>(std::max<int64_t>(p_count, 1)),
                  static_cast<double>(overlap) / static_cast<double>(std::max<int64_t>(t_count, 1)));
}

double rouge_l(const std::vector<std::string>& target, const std::vector<std::string>& prediction) {
  if (target.empty() || prediction.empty()) return 0.0;
  std::vector<size_t> prev(prediction.size() + 1, 0), cur(prediction.size() + 1, 0);
  for (const auto& t : target) {
    for (size_t j = 1; j <= prediction.size(); ++j)
      cur[j] = t == prediction[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  const auto lcs = static_cast<double>(prev.back());
  return fmeasure(lcs / static_cast<double>(prediction.size()), lcs / static_cast<double>(target.size()));
}

// rouge_score's lcs_ind: indices into `ref` of one LCS with `can`, backtracked as _backtrack_norec does.
std::vector<size_t> lcs_indices(const std::vector<std::string>& ref, const std::vector<std::string>& can) {
  const size_t R = ref.size(), C = can.size();
  std::vector<std::vector<size_t>> t(R + 1, std::vector<size_t>(C + 1, 0));
  for (size_t i = 1; i <= R; ++i)
    for (size_t j = 1; j <= C; ++j)
      t[i][j] = ref[i - 1] == can[j - 1] ? t[i - 1][j - 1] + 1 : std::max(t[i - 1][j], t[i][j - 1]);
  std::vector<size_t> out;
  for (size_t i = R, j = C; i > 0 && j > 0;) {
    if (ref[i - 1] == can[j - 1]) {
      out.push_back(--i);
      --j;
    } else if (t[i][j - 1] > t[i - 1][j]) {
      --j;
    } else {
      --i;
    }
  }
  return out;
}

// rouge_score's _summary_level_lcs over sentences of tokens.
double rouge_lsum(const std::vector<std::vector<std::string>>& ref, const std::vector<std::vector<std::string>>& can) {
  std::map<std::string, int64_t> ref_counts, can_counts;
  size_t m = 0, n = 0;
  for (const auto& s : ref) {
    m += s.size();
    for (const auto& t : s) ++ref_counts[t];
  }
  for (const auto& s : can) {
    n += s.size();
    for (const auto& t : s) ++can_counts[t];
  }
  if (m == 0 || n == 0) return 0.0;
  int64_t hits = 0;
  for (const auto& r : ref) {
    std::set<size_t> uni;  // the union of r's LCS positions with every candidate sentence, in order
    for (const auto& c : can)
      for (size_t i : lcs_indices(r, c)) uni.insert(i);
    for (size_t i : uni) {
      auto& rc = ref_counts[r[i]];
      auto& cc = can_counts[r[i]];
      if (rc > 0 && cc > 0) {
        ++hits;
        --rc;
        --cc;
      }
    }
  }
  return fmeasure(static_cast<double>(hits) / static_cast<double>(n), static_cast<double>(hits) / static_cast<double>(m));
}

// rouge_score's get_sents for rougeLsum: the non-empty lines, each tokenized.
std::vector<std::vector<std::string>> sentences(const std::string& text, bool use_stemmer) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(rouge_tokens(line, use_stemmer));
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// mteval's punctuation: [\{-\~\[-\` -\&\(-\+\:-\@\/].
bool is_13a_punct(unsigned char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

std::vector<std::string> split_spaces(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::vector<std::string> rouge_tokens(const std::string& text, bool use_stemmer) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : text) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if ((c >= 'a' && c <= 'z') || is_digit(c)) {
      cur += c;
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  if (use_stemmer)
    for (auto& t : out)
      if (t.size() > 3) t = porter_stem(t);
  return out;
}

RougeScores rouge(const std::vector<std::string>& predictions, const std::vector<std::string>& references,
                  bool use_stemmer) {
  KILN_CHECK(predictions.size() == references.size(), "rouge: ", predictions.size(), " predictions for ",
             references.size(), " references");
  RougeScores s;
  if (predictions.empty()) return s;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const auto t = rouge_tokens(references[i], use_stemmer), p = rouge_tokens(predictions[i], use_stemmer);
    s.rouge1 += rouge_n(t, p, 1);
    s.rouge2 += rouge_n(t, p, 2);
    s.rougeL += rouge_l(t, p);
    s.rougeLsum += rouge_lsum(sentences(references[i], use_stemmer), sentences(predictions[i], use_stemmer));
  }
  const auto n = static_cast<double>(predictions.size());
  s.rouge1 /= n;
  s.rouge2 /= n;
  s.rougeL /= n;
  s.rougeLsum /= n;
  return s;
}

std::string tokenize_13a(const std::string& input) {
  std::string line = input;
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  std::replace(line.begin(), line.end(), '\n', ' ');
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";
  std::string a;
  for (char c : line) {
    if (is_13a_punct(static_cast<unsigned char>(c))) a += std::string(" ") + c + " ";
    else a += c;
  }
  // The three two-character rules, each a left-to-right pass of non-overlapping matches as re.sub makes them.
  auto pass = [](const std::string& s, auto matches, auto rewrite) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      if (i + 1 < s.size() && matches(s[i], s[i + 1])) {
        out += rewrite(s[i], s[i + 1]);
        i += 2;
      } else {
        out += s[i++];
      }
    }
    return out;
  };
  const auto period_comma = [](char c) { return c == '.' || c == ','; };
  std::string b = pass(a, [&](char x, char y) { return !is_digit(x) && period_comma(y); },
                       [](char x, char y) { return std::string(1, x) + " " + y + " "; });
  std::string c = pass(b, [&](char x, char y) { return period_comma(x) && !is_digit(y); },
                       [](char x, char y) { return std::string(" ") + x + " " + y; });
  std::string d = pass(c, [](char x, char y) { return is_digit(x) && y == '-'; },
                       [](char x, char y) { return std::string(1, x) + " " + y + " "; });
  std::string out;
  for (const auto& w : split_spaces(d)) out += (out.empty() ? "" : " ") + w;
  return out;
}

double corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references) {
  for (const auto& refs : references)
    KILN_CHECK(refs.size() == hypotheses.size(), "bleu: ", hypotheses.size(), " hypotheses for a reference set of ",
               refs.size());
  constexpr size_t kOrder = 4;
  std::array<double, kOrder> correct{}, total{};
  double sys_len = 0, ref_len = 0;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const auto hyp = split_spaces(tokenize_13a(hypotheses[i]));
    std::vector<std::vector<std::string>> refs;
    for (const auto& set : references) refs.push_back(split_spaces(tokenize_13a(set[i])));
    // The reference length closest to the hypothesis's, the shorter on a tie (sacrebleu).
    int64_t closest = -1, best_diff = -1;
    for (const auto& r : refs) {
      const auto len = static_cast<int64_t>(r.size());
      const int64_t diff = std::llabs(static_cast<int64_t>(hyp.size()) - len);
      if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < closest)) {
        best_diff = diff;
        closest = len;
      }
    }
    sys_len += static_cast<double>(hyp.size());
    ref_len += static_cast<double>(std::max<int64_t>(closest, 0));
    for (size_t n = 1; n <= kOrder; ++n) {
      Ngrams most;  // each n-gram's largest count in any reference
      for (const auto& r : refs)
        for (const auto& [g, c] : ngrams(r, n)) most[g] = std::max(most[g], c);
      for (const auto& [g, c] : ngrams(hyp, n)) {
        total[n - 1] += static_cast<double>(c);
        if (auto it = most.find(g); it != most.end()) correct[n - 1] += static_cast<double>(std::min(c, it->second));
      }
    }
  }
  std::array<double, kOrder> precision{};
  double smooth = 1;
  for (size_t n = 0; n < kOrder; ++n) {
    if (total[n] == 0) break;
    if (correct[n] == 0) {
      smooth *= 2;
      precision[n] = 100.0 / (smooth * total[n]);
    } else {
      precision[n] = 100.0 * correct[n] / total[n];
    }
  }
  const double bp = sys_len < ref_len ? (sys_len > 0 ? std::exp(1 - ref_len / sys_len) : 0.0) : 1.0;
  double log_sum = 0;
  for (double p : precision) log_sum += p > 0 ? std::log(p) : -9999999999.0;
  return bp * std::exp(log_sum / kOrder);
}

}  // namespace kiln::train
