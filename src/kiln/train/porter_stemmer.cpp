#include "kiln/train/porter_stemmer.h"

#include <functional>
#include <map>
#include <vector>

namespace kiln::train {

namespace {

using Condition = std::function<bool(const std::string&)>;
struct Rule {
  std::string suffix, replacement;
  Condition condition;  // on the stem left without the suffix; empty: always
};

bool is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

bool ends_with(const std::string& w, const std::string& s) {
  return w.size() >= s.size() && w.compare(w.size() - s.size(), s.size(), s) == 0;
}

std::string without(const std::string& w, size_t n) { return w.substr(0, w.size() - n); }

// NLTK's _is_consonant: a 'y' after a run of 'y's is a consonant when the letter before the run is a
// vowel, flipping with each 'y' of the run.
bool is_consonant(const std::string& w, size_t i) {
  if (is_vowel(w[i])) return false;
  if (w[i] != 'y') return true;
  bool negate = false;
  while (i > 0 && w[i] == 'y') {
    negate = !negate;
    --i;
  }
  return !is_vowel(w[i]) != negate;
}

// NLTK's _consonant_flags: 'y' is a consonant first or after a vowel.
std::vector<bool> consonant_flags(const std::string& w) {
  std::vector<bool> flags;
  for (size_t i = 0; i < w.size(); ++i)
    flags.push_back(is_vowel(w[i]) ? false : w[i] == 'y' ? (i == 0 ? true : !flags[i - 1]) : true);
  return flags;
}

// m in [C](VC)^m[V]: the number of vowel-consonant transitions.
int measure(const std::string& stem) {
  const auto f = consonant_flags(stem);
  int m = 0;
  for (size_t i = 0; i + 1 < f.size(); ++i) m += !f[i] && f[i + 1];
  return m;
}

bool contains_vowel(const std::string& stem) {
  for (bool c : consonant_flags(stem))
    if (!c) return true;
  return false;
}

bool ends_double_consonant(const std::string& w) {
  return w.size() >= 2 && w.back() == w[w.size() - 2] && is_consonant(w, w.size() - 1);
}

// Consonant-vowel-consonant, the last not w, x or y; or (NLTK) a two-letter vowel-consonant word.
bool ends_cvc(const std::string& w) {
  const size_t n = w.size();
  if (n >= 3 && is_consonant(w, n - 3) && !is_consonant(w, n - 2) && is_consonant(w, n - 1) && w.back() != 'w' &&
      w.back() != 'x' && w.back() != 'y')
    return true;
  return n == 2 && !is_consonant(w, 0) && is_consonant(w, 1);
}

bool positive_measure(const std::string& stem) { return measure(stem) > 0; }
bool measure_gt_1(const std::string& stem) { return measure(stem) > 1; }

// The first rule whose suffix ends the word decides: applied when its condition holds, else the word stays.
std::string apply_rules(const std::string& w, const std::vector<Rule>& rules) {
  for (const Rule& r : rules) {
    if (r.suffix == "*d" && ends_double_consonant(w)) {
      const std::string stem = without(w, 2);
      return !r.condition || r.condition(stem) ? stem + r.replacement : w;
    }
    if (ends_with(w, r.suffix)) {
      const std::string stem = without(w, r.suffix.size());
      return !r.condition || r.condition(stem) ? stem + r.replacement : w;
    }
  }
  return w;
}

std::string step1a(const std::string& w) {
  if (ends_with(w, "ies") && w.size() == 4) return without(w, 3) + "ie";
  return apply_rules(w, {{"sses", "ss", {}}, {"ies", "i", {}}, {"ss", "ss", {}}, {"s", "", {}}});
}

std::string step1b(const std::string& w) {
  if (ends_with(w, "ied")) return without(w, 3) + (w.size() == 4 ? "ie" : "i");
  if (ends_with(w, "eed")) {
    const std::string stem = without(w, 3);
    return measure(stem) > 0 ? stem + "ee" : w;
  }
  std::string s;
  bool found = false;
  for (const char* suffix : {"ed", "ing"})
    if (ends_with(w, suffix)) {
      s = without(w, std::string(suffix).size());
      if (contains_vowel(s)) {
        found = true;
        break;
      }
    }
  if (!found) return w;
  const char last = s.back();
  return apply_rules(s, {{"at", "ate", {}},
                         {"bl", "ble", {}},
                         {"iz", "ize", {}},
                         {"*d", std::string(1, last), [last](const std::string&) { return last != 'l' && last != 's' && last != 'z'; }},
                         {"", "e", [](const std::string& stem) { return measure(stem) == 1 && ends_cvc(stem); }}});
}

std::string step1c(const std::string& w) {
  return apply_rules(w, {{"y", "i", [](const std::string& stem) {
                            return stem.size() > 1 && is_consonant(stem, stem.size() - 1);
                          }}});
}

std::string step2(const std::string& w) {
  if (ends_with(w, "alli") && positive_measure(without(w, 4))) return step2(without(w, 4) + "al");
  const Condition pm = positive_measure;
  return apply_rules(w, {{"ational", "ate", pm}, {"tional", "tion", pm}, {"enci", "ence", pm},  {"anci", "ance", pm},
                         {"izer", "ize", pm},    {"bli", "ble", pm},    {"alli", "al", pm},     {"entli", "ent", pm},
                         {"eli", "e", pm},       {"ousli", "ous", pm},  {"ization", "ize", pm}, {"ation", "ate", pm},
                         {"ator", "ate", pm},    {"alism", "al", pm},   {"iveness", "ive", pm}, {"fulness", "ful", pm},
                         {"ousness", "ous", pm}, {"aliti", "al", pm},   {"iviti", "ive", pm},   {"biliti", "ble", pm},
                         {"fulli", "ful", pm},
                         {"logi", "log", [&w](const std::string&) { return positive_measure(without(w, 3)); }}});
}

std::string step3(const std::string& w) {
  const Condition pm = positive_measure;
  return apply_rules(w, {{"icate", "ic", pm}, {"ative", "", pm}, {"alize", "al", pm}, {"iciti", "ic", pm},
                         {"ical", "ic", pm},  {"ful", "", pm},   {"ness", "", pm}});
}

std::string step4(const std::string& w) {
  const Condition gt1 = measure_gt_1;
  return apply_rules(w, {{"al", "", gt1},   {"ance", "", gt1}, {"ence", "", gt1}, {"er", "", gt1},   {"ic", "", gt1},
                         {"able", "", gt1}, {"ible", "", gt1}, {"ant", "", gt1},  {"ement", "", gt1}, {"ment", "", gt1},
                         {"ent", "", gt1},
                         {"ion", "", [](const std::string& stem) {
                            return measure(stem) > 1 && (stem.back() == 's' || stem.back() == 't');
                          }},
                         {"ou", "", gt1},   {"ism", "", gt1},  {"ate", "", gt1},  {"iti", "", gt1},  {"ous", "", gt1},
                         {"ive", "", gt1},  {"ize", "", gt1}});
}

std::string step5a(const std::string& w) {
  if (!ends_with(w, "e")) return w;
  const std::string stem = without(w, 1);
  const int m = measure(stem);
  return m > 1 || (m == 1 && !ends_cvc(stem)) ? stem : w;
}

std::string step5b(const std::string& w) {
  return apply_rules(w, {{"ll", "l", [&w](const std::string&) { return measure(without(w, 1)) > 1; }}});
}

}  // namespace

std::string porter_stem(const std::string& word) {
  // NLTK_EXTENSIONS' irregular forms.
  static const std::map<std::string, std::string> pool = {
      {"sky", "sky"},         {"skies", "sky"},       {"dying", "die"},     {"lying", "lie"},     {"tying", "tie"},
      {"news", "news"},       {"innings", "inning"},  {"inning", "inning"}, {"outings", "outing"}, {"outing", "outing"},
      {"cannings", "canning"}, {"canning", "canning"}, {"howe", "howe"},     {"proceed", "proceed"}, {"exceed", "exceed"},
      {"succeed", "succeed"}};
  if (auto it = pool.find(word); it != pool.end()) return it->second;
  if (word.size() <= 2) return word;
  return step5b(step5a(step4(step3(step2(step1c(step1b(step1a(word))))))));
}

}  // namespace kiln::train
