#pragma once
// Python's str semantics on UTF-8 text, for the Jinja interpreter: lengths,
// indices and slices count code points, whitespace is what str.isspace()
// accepts, case mappings are Unicode's full mappings (ICU, as Python's
// str.upper/lower/title), and repr/float formatting print what Python's
// repr() prints. Inputs are valid UTF-8 (the interpreter checks templates and
// JSON input once).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tokenizers::pystr {

// str.isspace() of one code point: Unicode White_Space plus the ASCII
// separators 0x1C-0x1F (bidi classes B, S, WS and category Zs).
bool is_space(char32_t c);

size_t length(std::string_view s);  // code points

// str.strip / lstrip / rstrip; `chars` absent strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left = true,
                  bool right = true);
// str.split(sep, maxsplit) and str.rsplit; sep absent splits on whitespace
// runs and drops empty pieces. maxsplit < 0: no limit. sep must be non-empty.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit = -1);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit = -1);
// str.splitlines: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
std::vector<std::string> splitlines(std::string_view s, bool keepends = false);
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count = -1);
// Code-point index of the first / last occurrence of sub in s[start:end]
// (Python's index arithmetic, negative allowed), -1 when absent.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start = {},
             std::optional<int64_t> end = {}, bool reverse = false);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize(): first titlecased, rest lowered
std::string swapcase(std::string_view s);

// The str.isX() predicates (false for the empty string, like Python).
bool islower(std::string_view s);
bool isupper(std::string_view s);
bool isalpha(std::string_view s);
bool isdigit(std::string_view s);
bool isdecimal(std::string_view s);
bool isnumeric(std::string_view s);
bool isalnum(std::string_view s);
bool isspace(std::string_view s);
bool istitle(std::string_view s);
// Unicode \w of Python's re: alphanumeric (isalnum) or '_'.
bool is_word_char(char32_t c);

// repr() of a str: quoted with ' (or " when the text has ' and no "), with
// Python's escapes for backslash, the quote, \t \n \r and unprintable code
// points (\xhh, \uhhhh, \Uhhhhhhhh).
std::string repr(std::string_view s);

// repr() / str() of a float: the shortest digits that round-trip, fixed
// notation for 1e-4 <= |x| < 1e16 with at least one fractional digit
// ("2.0"), otherwise "1e+16" / "1.5e-05"; "inf", "-inf", "nan".
std::string float_repr(double x);

// Python's slice.indices(): clamps start/stop for a sequence of length n and
// the given step (non-zero); returns the selected indices in order.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step);

}  // namespace kiln::tokenizers::pystr
