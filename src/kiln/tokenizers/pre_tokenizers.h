#pragma once
// Pre-tokenizers: cut normalized text into words (tokenizers' `pre_tokenizers`).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tokenizers/pattern.h"
#include "kiln/tokenizers/pre_tokenized_string.h"

namespace kiln::tokenizers {

class PreTokenizer;
using PreTokenizerPtr = std::shared_ptr<const PreTokenizer>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& s) const = 0;
  // This pre-tokenizer with its byte-level parts adding a leading space (what
  // transformers' add_prefix_space=True rebuilds), or null when nothing changes.
  virtual PreTokenizerPtr with_prefix_space() const { return nullptr; }
};

// Whitespace removed, then every punctuation character isolated.
class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
};

// Splits on whitespace, dropping it.
class WhitespaceSplit : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
};

// Keeps runs of word characters and runs of other non-space characters
// (the regex \w+|[^\w\s]+ with Rust's Unicode \w).
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  WhitespacePreTokenizer();
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  Pattern pattern_;
};

// GPT-2 byte-level: optional leading space, the GPT-2 regex, then every byte
// becomes its printable stand-in character.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(PreTokenizedString& s) const override;
  PreTokenizerPtr with_prefix_space() const override {
    return add_prefix_space_ ? nullptr : std::make_shared<ByteLevelPreTokenizer>(true, use_regex_);
  }

 private:
  bool add_prefix_space_, use_regex_;
  Pattern pattern_;
};

enum class PrependScheme { Always, First, Never };

// Spaces become the replacement character (default U+2581), which is
// prepended and starts every word (SentencePiece style).
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split);
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  char32_t replacement_;
  std::string rep_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert);
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  SplitBehavior behavior_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual_digits) : individual_(individual_digits) {}
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  bool individual_;
};

class CharDelimiterSplit : public PreTokenizer {
 public:
  explicit CharDelimiterSplit(char32_t delimiter) : delimiter_(delimiter) {}
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  char32_t delimiter_;
};

// Splits where the script changes (unicode::tokenizers_script); characters
// without a script (spaces, unassigned) never split and stay with the text
// before them, or are dropped when nothing with a script comes before them.
class UnicodeScriptsPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& s) const override;
};

// Cuts every word into pieces of `length` characters (the last one shorter).
class FixedLengthPreTokenizer : public PreTokenizer {
 public:
  explicit FixedLengthPreTokenizer(size_t length) : length_(length) {}
  void pre_tokenize(PreTokenizedString& s) const override;

 private:
  size_t length_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<PreTokenizerPtr> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(PreTokenizedString& s) const override {
    for (const auto& p : parts_) p->pre_tokenize(s);
  }
  PreTokenizerPtr with_prefix_space() const override {
    std::vector<PreTokenizerPtr> parts = parts_;
    bool changed = false;
    for (auto& p : parts)
      if (auto q = p->with_prefix_space()) {
        p = std::move(q);
        changed = true;
      }
    return changed ? std::make_shared<SequencePreTokenizer>(std::move(parts)) : nullptr;
  }

 private:
  std::vector<PreTokenizerPtr> parts_;
};

}  // namespace kiln::tokenizers
