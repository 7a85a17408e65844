#include "kiln/tokenizers/pre_tokenizers.h"

#include <algorithm>

#include "kiln/tokenizers/byte_level.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

static void split_all(PreTokenizedString& s, const Pattern& p, SplitBehavior b) {
  s.split_normalized([&](NormalizedString&& n) { return n.split(p, b); });
}

void BertPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  static const Pattern ws = Pattern::of_predicate(unicode::is_whitespace);
  static const Pattern punct = Pattern::of_predicate(unicode::is_bert_punctuation);
  split_all(s, ws, SplitBehavior::Removed);
  split_all(s, punct, SplitBehavior::Isolated);
}

void WhitespaceSplit::pre_tokenize(PreTokenizedString& s) const {
  static const Pattern ws = Pattern::of_predicate(unicode::is_whitespace);
  split_all(s, ws, SplitBehavior::Removed);
}

// Rust regex's Unicode \w: Alphabetic, M, Nd, Pc and Join_Control.
#define KILN_RUST_WORD R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})"

WhitespacePreTokenizer::WhitespacePreTokenizer()
    : pattern_(Pattern::of_regex(Regex("[" KILN_RUST_WORD "]+|[^" KILN_RUST_WORD KILN_REGEX_WHITE_SPACE "]+",
                                       "Whitespace pre-tokenizer"))
                   .inverted()) {}

void WhitespacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_all(s, pattern_, SplitBehavior::Removed);
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
    : add_prefix_space_(add_prefix_space),
      use_regex_(use_regex),
      pattern_(Pattern::of_regex(
          Regex(std::string(byte_level::kGpt2Pattern), "ByteLevel pre-tokenizer"))) {}

void ByteLevelPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([&](NormalizedString&& n) {
    if (add_prefix_space_ && n.get().rfind(' ', 0) != 0) n.prepend(" ");
    if (use_regex_) return n.split(pattern_, SplitBehavior::Isolated);
    std::vector<NormalizedString> one;
    one.push_back(std::move(n));
    return one;
  });
  s.normalize(byte_level::to_byte_chars);
}

MetaspacePreTokenizer::MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme,
                                             bool split)
    : replacement_(replacement), rep_utf8_(utf8::encode(replacement)), scheme_(scheme), split_(split) {}

void MetaspacePreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  const Pattern space = Pattern::of_char(U' ');
  const Pattern rep = Pattern::of_char(replacement_);
  s.split_normalized([&](NormalizedString&& n) {
    n.replace(space, rep_utf8_);
    bool starts = n.get().rfind(rep_utf8_, 0) == 0;
    if (scheme_ == PrependScheme::Always && !starts) n.prepend(rep_utf8_);
    if (scheme_ == PrependScheme::First && !starts && n.original_start() == 0) n.prepend(rep_utf8_);
    if (split_) return n.split(rep, SplitBehavior::MergedWithNext);
    std::vector<NormalizedString> one;
    one.push_back(std::move(n));
    return one;
  });
}

SplitPreTokenizer::SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
    : pattern_(invert ? pattern.inverted() : std::move(pattern)), behavior_(behavior) {}

void SplitPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  split_all(s, pattern_, behavior_);
}

void PunctuationPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  static const Pattern punct = Pattern::of_predicate(unicode::is_bert_punctuation);
  split_all(s, punct, behavior_);
}

void DigitsPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  static const Pattern digits = Pattern::of_predicate(unicode::is_numeric);
  split_all(s, digits, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
}

void UnicodeScriptsPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([](NormalizedString&& n) {
    // As tokenizers: a piece starts at every character whose script differs
    // from the last one seen, the first character with a script included;
    // scriptless characters before it are dropped.
    const std::string& t = n.get();
    std::vector<size_t> cuts;
    int last = unicode::kAnyScript;
    for (size_t i = 0; i < t.size();) {
      size_t len;
      char32_t c = utf8::decode(t, i, &len);
      int script = unicode::tokenizers_script(c);
      if (script != unicode::kAnyScript) {
        if (script != last) cuts.push_back(i);
        last = script;
      }
      i += len;
    }
    cuts.push_back(t.size());
    std::vector<NormalizedString> out;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) out.push_back(n.slice(cuts[k], cuts[k + 1]));
    return out;
  });
}

void FixedLengthPreTokenizer::pre_tokenize(PreTokenizedString& s) const {
  s.split_normalized([&](NormalizedString&& n) {
    const std::string& t = n.get();
    std::vector<NormalizedString> out;
    for (size_t start = 0; start < t.size();) {
      size_t end = start;
      for (size_t k = 0; k < length_ && end < t.size(); ++k) {
        end += utf8::seq_len(static_cast<unsigned char>(t[end]));
      }
      end = std::min(end, t.size());
      out.push_back(n.slice(start, end));
      start = end;
    }
    return out;
  });
}

void CharDelimiterSplit::pre_tokenize(PreTokenizedString& s) const {
  split_all(s, Pattern::of_char(delimiter_), SplitBehavior::Removed);
}

}  // namespace kiln::tokenizers
