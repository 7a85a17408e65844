#pragma once
// Reading JSON: the one parser entry for every JSON text kiln reads
// (config.json, tokenizer files, data rows, args files, command inputs).
// Errors name the source and the line/column; nesting deeper than
// kMaxJsonDepth is refused before parsing (copying, printing or freeing a
// value nested tens of thousands deep recurses off the stack).
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"

namespace kiln {

// Deeper than any file kiln reads needs (tokenizer.json nests ~8 levels).
inline constexpr int kMaxJsonDepth = 256;

// `source` names the text in errors, with the line and column:
// "config.json:3:14: invalid JSON: syntax error while parsing object ...".
// `first_line` is the line `text` starts on in its file (JSON lines).
nlohmann::json parse_json(std::string_view text, std::string_view source, size_t first_line = 1);
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view source, size_t first_line = 1);
// read_file + parse_json, the path as the source.
nlohmann::json read_json_file(const std::filesystem::path& path);
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path);

// A value for an error message: its type and at most ~60 characters of it,
// "number 7", "string \"abc\"", "array [[[[[[[[[[…".
std::string json_found(const nlohmann::json& value);
std::string json_found(const nlohmann::ordered_json& value);

namespace detail {
// obj[key] as T, or nullopt when absent or null; see json_value.
template <class T, class Json>
std::optional<T> json_field(const Json& obj, std::string_view key, std::string_view where) {
  KILN_CHECK(obj.is_object(), where, ": expected a JSON object, got ", json_found(obj));
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const Json& v = *it;
  auto wrong = [&](const char* expected) {
    return Error(concat(where, ": '", key, "' must be ", expected, ", got ", json_found(v)));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw wrong("true or false");
    return v.template get<bool>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!v.is_number_integer()) throw wrong("an integer");
    if (v.is_number_unsigned() && v.template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw wrong("an integer below 2^63");
    return v.template get<int64_t>();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!v.is_number_unsigned()) throw wrong("an integer >= 0");
    return v.template get<uint64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number()) throw wrong("a number");
    return v.template get<double>();
  } else {
    static_assert(std::is_same_v<T, std::string>, "json_value reads bool, int64_t, uint64_t, double or std::string");
    if (!v.is_string()) throw wrong("a string");
    return v.template get<std::string>();
  }
}
}  // namespace detail

// obj[key] as T (bool, int64_t, uint64_t, double or std::string), or
// `fallback` when the key is absent or null. A wrong type or an integer out
// of T's range is an error naming `where` and the key:
// "config.json: 'n_layers' must be an integer, got string \"six\"".
template <class T, class Json>
T json_value(const Json& obj, std::string_view key, T fallback, std::string_view where) {
  return detail::json_field<T>(obj, key, where).value_or(std::move(fallback));
}
// The same for a key that must be there: "rng_state.json: no 'data_epoch'".
template <class T, class Json>
T json_value(const Json& obj, std::string_view key, std::string_view where) {
  std::optional<T> v = detail::json_field<T>(obj, key, where);
  KILN_CHECK(v, where, ": no '", key, "'");
  return *v;
}

// "LINE:COLUMN" of a 1-based byte position in `text`, as reported by
// nlohmann::json::parse_error::byte; `text` starts on line `first_line`.
std::string json_error_position(std::string_view text, size_t byte, size_t first_line = 1);
// nlohmann's parse_error message without its "[json.exception...] parse
// error at line L, column C: " prefix, cut to a short excerpt.
std::string json_error_reason(const char* what);

}  // namespace kiln
