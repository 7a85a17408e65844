#include "kiln/core/json.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/core/file.h"

namespace kiln {

namespace {

constexpr size_t kExcerpt = 60;

// Throws when `text` nests deeper than kMaxJsonDepth, naming where.
void check_depth(std::string_view text, std::string_view source, size_t first_line) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw Error(detail::concat(source, ":", json_error_position(text, i + 1, first_line), ": invalid JSON: nests deeper than ",
                                   kMaxJsonDepth, " levels"));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

template <class Json>
Json parse(std::string_view text, std::string_view source, size_t first_line) {
  check_depth(text, source, first_line);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(detail::concat(source, ":", json_error_position(text, e.byte, first_line), ": invalid JSON: ",
                               json_error_reason(e.what())));
  } catch (const nlohmann::json::exception& e) {  // out_of_range 406: a number past double's range ("1e400")
    throw Error(detail::concat(source, ": invalid JSON: ", json_error_reason(e.what())));
  }
}

template <class Json>
std::string found(const Json& v) {
  const std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return std::string(v.type_name()) + " " + excerpt(text, kExcerpt);
}

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view source, size_t first_line) {
  return parse<nlohmann::json>(text, source, first_line);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view source, size_t first_line) {
  return parse<nlohmann::ordered_json>(text, source, first_line);
}

nlohmann::json read_json_file(const std::filesystem::path& path) { return parse_json(read_file(path), path.string()); }

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path) {
  return parse_ordered_json(read_file(path), path.string());
}

std::string json_found(const nlohmann::json& value) { return found(value); }
std::string json_found(const nlohmann::ordered_json& value) { return found(value); }

std::string json_error_position(std::string_view text, size_t byte, size_t first_line) {
  // parse_error::byte is 1-based and points just past the offending character.
  size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = first_line, line_start = 0;
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
    if (auto colon = w.find(": ", column); colon != std::string_view::npos) w = w.substr(colon + 2);
  } else if (auto bracket = w.find("] "); bracket != std::string_view::npos) {
    w = w.substr(bracket + 2);
  }
  // nlohmann quotes the token it read ("last read: '...'"), which for an
  // unterminated string is the rest of the file.
  return excerpt(w, 3 * kExcerpt);
}

}  // namespace kiln
