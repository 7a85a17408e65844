#pragma once
// kiln::Error: the one exception type for bad input and failed operations.
// Messages name what was expected and what was found, and where (file, key,
// op): "model.safetensors: tensor 'w' has shape [64,32], expected [64,64]".
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Names for a message, comma-separated: "a, b, c".
inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// What a message quotes of a value that may be a whole file or hold any
// bytes: at most about `max` bytes of `text`, cut at a character and marked
// with "…"; bytes that are not UTF-8, and control characters, as \xNN.
std::string excerpt(std::string_view text, size_t max = 60);

}  // namespace kiln

// KILN_CHECK(cond, parts...): throws kiln::Error with the streamed parts when
// cond is false. For validating user input, not for internal invariants.
#define KILN_CHECK(cond, ...)                                        \
  do {                                                               \
    if (!(cond)) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)

// KILN_ASSERT: internal invariant; a failure is a kiln bug.
#define KILN_ASSERT(cond)                                                        \
  do {                                                                           \
    if (!(cond))                                                                 \
      throw ::kiln::Error(::kiln::detail::concat("internal error: ", #cond,     \
                                                 " failed at ", __FILE__, ":", __LINE__)); \
  } while (0)
