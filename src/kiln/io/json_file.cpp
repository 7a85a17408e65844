#include "kiln/io/json_file.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"

namespace kiln::io {

std::string json_error_position(std::string_view text, size_t byte) {
  // parse_error::byte is 1-based and points just past the offending character.
  size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" + std::to_string(end - line_start + 1);
}

std::string json_error_reason(const char* what) {
  std::string_view w(what);
  if (auto column = w.find("column "); column != std::string_view::npos) {
    if (auto colon = w.find(": ", column); colon != std::string_view::npos) return std::string(w.substr(colon + 2));
  }
  if (auto bracket = w.find("] "); bracket != std::string_view::npos) return std::string(w.substr(bracket + 2));
  return std::string(w);
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(detail::concat(path.string(), ":", json_error_position(text, e.byte),
                               ": invalid JSON: ", json_error_reason(e.what())));
  }
}

void write_json_file_atomic(const std::filesystem::path& path, const nlohmann::json& j, int indent) {
  std::string text;
  try {
    text = j.dump(indent);
  } catch (const nlohmann::json::exception& e) {
    // Invalid UTF-8 in a string value.
    throw Error(detail::concat(path.string(), ": cannot write JSON: ", e.what()));
  }
  text += '\n';
  write_file_atomic(path, text);
}

}  // namespace kiln::io
