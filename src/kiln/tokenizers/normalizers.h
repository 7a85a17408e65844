#pragma once
// Normalizers: edit a NormalizedString in place (tokenizers' `normalizers`).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tokenizers/normalized_string.h"
#include "kiln/tokenizers/pattern.h"
#include "kiln/tokenizers/precompiled_charsmap.h"

namespace kiln::tokenizers {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
};

using NormalizerPtr = std::shared_ptr<const Normalizer>;

class BertNormalizer : public Normalizer {
 public:
  // strip_accents unset: follows lowercase (as in BERT).
  BertNormalizer(bool clean_text, bool handle_chinese_chars, std::optional<bool> strip_accents,
                 bool lowercase);
  void normalize(NormalizedString& s) const override;

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Form form) : form_(form) {}
  void normalize(NormalizedString& s) const override { s.normalize(form_); }

 private:
  unicode::Form form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override { s.lowercase(); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedString& s) const override { s.strip(left_, right_); }

 private:
  bool left_, right_;
};

// Removes combining marks (general category M).
class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(NormalizedString& s) const override { s.replace(pattern_, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(NormalizedString& s) const override { s.prepend(prepend_); }

 private:
  std::string prepend_;
};

// SentencePiece's precompiled charsmap, applied grapheme by grapheme.
class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {}
  void normalize(NormalizedString& s) const override;

 private:
  PrecompiledCharsmap map_;
};

// Every byte becomes its GPT-2 byte-level character (byte_level.h).
class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

// tokenizers' Nmt: drops ASCII control characters (and U+008F, U+009F) and
// turns other whitespace-like code points (tab, newlines, zero-width spaces,
// U+2581, BOM, U+FFFD, ...) into a space.
class NmtNormalizer : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<NormalizerPtr> parts) : parts_(std::move(parts)) {}
  void normalize(NormalizedString& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }

 private:
  std::vector<NormalizerPtr> parts_;
};

}  // namespace kiln::tokenizers
