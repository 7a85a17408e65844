#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/tokenizers/regex.h"

#include <pcre2.h>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), compiled_(std::make_shared<Compiled>()) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(detail::concat(where, ": invalid regex '", pattern, "' at offset ", err_off, ": ",
                               reinterpret_cast<const char*>(msg)));
  }
  // JIT is an optimisation only; matching falls back to the interpreter.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex Regex::from_onig(const std::string& pattern, const std::string& where) {
  static const std::string word = R"(\p{L}\p{M}\p{Nd}\p{Pc})";
  static const std::string space = R"(\s\x{85})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      if (e == 'w') {
        out += in_class ? word : "[" + word + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + word + "]";
      } else if (e == 's') {
        out += in_class ? space : "[" + space + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + space + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return Regex(out, where);
}

namespace {
// Match data is per thread: batch encoding runs the same regex concurrently.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(32, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};
}  // namespace

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchData md;
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(compiled_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md.data,
                         nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    KILN_CHECK(rc >= 0, "regex '", pattern_, "': matching failed with PCRE2 error ", rc);
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    size_t start = ov[0], end = ov[1];
    out.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= s.size()) break;
      pos = end + utf8::seq_len(static_cast<unsigned char>(s[end]));
    }
  }
}

namespace {
// The match of `code` anchored at the start of `s` (and at its end with
// `whole`) into `md`: true, or false for none; PCRE2's errors throw.
bool anchored_match(pcre2_code* code, const std::string& pattern, std::string_view s, bool whole,
                    pcre2_match_data* md) {
  const uint32_t options = PCRE2_ANCHORED | (whole ? PCRE2_ENDANCHORED : 0u);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, options, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(detail::concat("regex '", pattern, "': matching '", std::string(s), "' failed: ",
                               reinterpret_cast<const char*>(msg)));
  }
  return true;
}
}  // namespace

bool Regex::full_match(std::string_view s) const {
  thread_local MatchData md;
  return anchored_match(compiled_->code, pattern_, s, true, md.data);
}

std::optional<std::vector<std::string>> Regex::match_start(std::string_view s) const {
  // Room for every group of the pattern.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  if (!anchored_match(compiled_->code, pattern_, s, false, md.get())) return std::nullopt;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  const uint32_t pairs = pcre2_get_ovector_count(md.get());
  uint32_t groups = 0;
  pcre2_pattern_info(compiled_->code, PCRE2_INFO_CAPTURECOUNT, &groups);
  std::vector<std::string> out;
  for (uint32_t g = 0; g <= groups; ++g) {
    const bool set = g < pairs && ov[2 * g] != PCRE2_UNSET;
    out.push_back(set ? std::string(s.substr(ov[2 * g], ov[2 * g + 1] - ov[2 * g])) : std::string());
  }
  return out;
}

}  // namespace kiln::tokenizers
