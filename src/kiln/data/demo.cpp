#include "kiln/data/demo.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_set>

#include "kiln/core/error.h"
#include "kiln/data/collator.h"
#include "kiln/core/atomic_file.h"

namespace kiln::data::demo {

namespace fs = std::filesystem;

namespace {

// Word lists. Polarity: +1 positive, -1 negative.
const std::vector<std::string> kProducts = {
    "blender", "toaster", "laptop",  "phone",   "headset",    "camera",  "kettle",  "vacuum",
    "keyboard", "monitor", "backpack", "jacket", "tent",       "drill",   "speaker", "watch",
    "printer", "router",  "mattress", "chair",  "lamp",       "microwave", "charger", "tablet",
    "mouse",   "fan",     "heater",   "suitcase", "stroller", "grill"};
const std::vector<std::string> kAspects = {
    "battery", "screen", "sound",  "price",   "design",  "motor",   "handle",   "lid",
    "customer service", "delivery", "manual", "fabric", "zipper", "display", "cable", "button",
    "strap",   "fit",    "finish", "packaging", "build quality", "warranty"};
const std::vector<std::string> kPositive = {"great",    "excellent", "good",        "amazing",   "reliable",
                                            "sturdy",   "fantastic", "solid",       "impressive", "comfortable",
                                            "quiet",    "wonderful", "superb",      "perfect",   "lovely",
                                            "nice"};
const std::vector<std::string> kNegative = {"bad",      "terrible", "awful",     "poor",       "flimsy",
                                            "noisy",    "disappointing", "cheap", "useless",   "horrible",
                                            "weak",     "unreliable", "mediocre", "fragile",   "annoying",
                                            "lousy"};
const std::vector<std::string> kIntensifiers = {"very", "really", "extremely", "quite",
                                                "incredibly", "pretty", "truly", "remarkably"};
const std::vector<std::string> kLikeVerbs = {"love", "like", "enjoy", "adore"};
const std::vector<std::string> kHateVerbs = {"hate", "dislike", "regret buying", "despise"};

struct Rng {
  uint64_t state;
  uint64_t next() { return splitmix64(state++); }
  size_t below(size_t n) { return static_cast<size_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  bool chance(double p) { return unit_double(next()) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
};

struct Clause {
  std::string text;
  int polarity;
};

std::string subject(Rng& r) {
  if (r.chance(0.55)) return "the " + r.pick(kAspects);
  static const std::vector<std::string> det = {"this", "the", "my new", "this new"};
  return r.pick(det) + " " + r.pick(kProducts);
}

// "the battery is not very good": adjective polarity, flipped by a negation.
Clause adjective_clause(Rng& r) {
  std::string subj = subject(r);
  static const std::vector<std::string> copula = {"is", "was", "feels", "seems"};
  static const std::vector<std::string> negated = {"is not", "isn't", "was not", "wasn't", "is never",
                                                   "does not feel", "doesn't seem"};
  bool neg = r.chance(0.4);
  int pol = r.chance(0.5) ? 1 : -1;
  std::string adj = pol > 0 ? r.pick(kPositive) : r.pick(kNegative);
  std::string verb = neg ? r.pick(negated) : r.pick(copula);
  std::string intens = r.chance(0.4) ? r.pick(kIntensifiers) + " " : "";
  return {subj + " " + verb + " " + intens + adj, neg ? -pol : pol};
}

// "i would never recommend this blender", "i would buy this kettle again".
Clause recommend_clause(Rng& r) {
  std::string product = r.pick(kProducts);
  static const std::vector<std::string> yes = {"would", "would definitely", "would happily", "would absolutely",
                                               "will"};
  static const std::vector<std::string> no = {"would never", "would not", "wouldn't", "will never", "can't",
                                              "cannot"};
  bool neg = r.chance(0.5);
  std::string aux = neg ? r.pick(no) : r.pick(yes);
  std::string tail = r.chance(0.5) ? "recommend this " + product + (r.chance(0.3) ? " to a friend" : "")
                                   : "buy this " + product + " again";
  return {"i " + aux + " " + tail, neg ? -1 : 1};
}

// "i don't hate the design": a verb's polarity, flipped by a negation.
Clause feeling_clause(Rng& r) {
  int pol = r.chance(0.5) ? 1 : -1;
  bool neg = r.chance(0.35);
  std::string verb = pol > 0 ? r.pick(kLikeVerbs) : r.pick(kHateVerbs);
  static const std::vector<std::string> negs = {"don't", "do not", "never"};
  std::string object = r.chance(0.5) ? "the " + r.pick(kAspects) : "this " + r.pick(kProducts);
  std::string adverb = !neg && r.chance(0.25) ? (r.chance(0.5) ? "really " : "absolutely ") : "";
  return {"i " + (neg ? r.pick(negs) + " " : std::string()) + adverb + verb + " " + object, neg ? -pol : pol};
}

// Fixed phrases whose words each mislead: "could not be better" is positive,
// "could be better" negative; "no complaints" positive.
Clause idiom_clause(Rng& r) {
  std::string subj = subject(r);
  switch (r.below(5)) {
    case 0: return {subj + " could not be better", 1};
    case 1: return {subj + " could be better", -1};
    case 2: return {subj + " could not be worse", -1};
    case 3: return {"i have no complaints about " + subj, 1};
    default: return {"i have " + std::string(r.chance(0.5) ? "many" : "serious") + " complaints about " + subj, -1};
  }
}

Clause clause(Rng& r) {
  double u = unit_double(r.next());
  if (u < 0.45) return adjective_clause(r);
  if (u < 0.65) return recommend_clause(r);
  if (u < 0.85) return feeling_clause(r);
  return idiom_clause(r);
}

Clause clause_with(Rng& r, int polarity) {
  for (;;) {
    Clause c = clause(r);
    if (c.polarity == polarity) return c;
  }
}

// A review of the wanted polarity: one clause, or two where the second decides.
std::string review(Rng& r, int polarity) {
  double u = unit_double(r.next());
  std::string s;
  if (u < 0.4) {
    s = clause_with(r, polarity).text;
  } else if (u < 0.65) {
    Clause a = clause_with(r, -polarity), b = clause_with(r, polarity);
    s = a.text + (r.chance(0.5) ? ", but " : " but ") + (r.chance(0.3) ? "overall " : "") + b.text;
  } else if (u < 0.8) {
    Clause a = clause_with(r, -polarity), b = clause_with(r, polarity);
    s = std::string(r.chance(0.5) ? "although " : "even though ") + a.text + ", " + b.text;
  } else {
    Clause a = clause_with(r, polarity), b = clause_with(r, polarity);
    s = a.text + (r.chance(0.5) ? " and " : ", and ") + b.text;
  }
  static const std::vector<std::string> ends = {"", "", ".", ".", "!"};
  return s + r.pick(ends);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string to_csv(const std::vector<Review>& rows) {
  std::string out = "sentence,label\n";
  for (const auto& r : rows) out += csv_field(r.sentence) + "," + r.label + "\n";
  return out;
}

bool is_punct(unsigned char c) { return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126); }

}  // namespace

std::vector<Review> generate_reviews(size_t count, uint64_t seed) {
  Rng r{mix_seed(seed, 0x64656D6Full)};
  std::vector<Review> out;
  std::unordered_set<std::string> seen;  // without end punctuation: "x" and "x!" are one review
  size_t attempts = 0;
  while (out.size() < count) {
    KILN_CHECK(++attempts < 100 * count + 1000, "demo: cannot generate ", count, " distinct reviews");
    int polarity = out.size() % 2 == 0 ? 1 : -1;
    std::string s = review(r, polarity);
    std::string key = s;
    while (!key.empty() && (key.back() == '.' || key.back() == '!')) key.pop_back();
    if (!seen.insert(key).second) continue;
    out.push_back({std::move(s), polarity > 0 ? "positive" : "negative"});
  }
  return out;
}

std::vector<std::string> build_vocab(const std::vector<std::string>& texts) {
  std::set<std::string> words;
  for (const auto& t : texts) {
    std::string w;
    for (char ch : t) {
      auto c = static_cast<unsigned char>(ch);
      if (std::isspace(c) || is_punct(c)) {
        if (!w.empty()) words.insert(w);
        w.clear();
        if (is_punct(c)) words.insert(std::string(1, ch));
      } else {
        w += static_cast<char>(std::tolower(c));
      }
    }
    if (!w.empty()) words.insert(w);
  }
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  vocab.insert(vocab.end(), words.begin(), words.end());
  std::string chars = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (int c = 33; c < 127; ++c)
    if (is_punct(static_cast<unsigned char>(c))) chars += static_cast<char>(c);
  for (char c : chars)
    if (!words.count(std::string(1, c))) vocab.emplace_back(1, c);
  for (char c : chars) vocab.push_back("##" + std::string(1, c));
  return vocab;
}

void write_demo_dataset(const fs::path& dir, uint64_t seed) {
  constexpr size_t kTrain = 3000, kValidation = 600, kTest = 10;
  std::vector<Review> all = generate_reviews(kTrain + kValidation + kTest, seed);
  // Alternating labels: every even-sized prefix is balanced; shuffle within each split.
  std::vector<Review> train(all.begin(), all.begin() + kTrain);
  std::vector<Review> validation(all.begin() + kTrain, all.begin() + kTrain + kValidation);
  std::vector<Review> test(all.begin() + kTrain + kValidation, all.end());
  Rng r{mix_seed(seed, 0x73706C6974ull)};
  for (auto* split : {&train, &validation, &test})
    for (size_t i = split->size(); i > 1; --i) std::swap((*split)[i - 1], (*split)[r.below(i)]);

  std::vector<std::string> texts;
  for (const auto& x : all) texts.push_back(x.sentence);
  // Every listed word, so that new reviews written from the lists are covered too.
  for (const auto* list : {&kProducts, &kAspects, &kPositive, &kNegative, &kIntensifiers, &kLikeVerbs, &kHateVerbs})
    texts.insert(texts.end(), list->begin(), list->end());
  std::string vocab;
  for (const auto& w : build_vocab(texts)) vocab += w + "\n";

  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, dir.string(), ": cannot create directory: ", ec.message());
  write_file_atomic(dir / "train.csv", to_csv(train));
  write_file_atomic(dir / "validation.csv", to_csv(validation));
  std::string lines;
  for (const auto& x : test) lines += x.sentence + "\n";
  write_file_atomic(dir / "test.txt", lines);
  write_file_atomic(dir / "vocab.txt", vocab);
  write_file_atomic(dir / "tokenizer_config.json",
                        "{\"do_lower_case\": true, \"model_max_length\": 64, \"tokenizer_class\": \"BertTokenizer\"}\n");
}

}  // namespace kiln::data::demo
