#pragma once
// JSON files (config.json, trainer_state.json, index files): read with errors
// that point at the file, line and column; written atomically.
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kiln::io {

// Errors name the file and the line/column of a parse error:
// "config.json:3:14: invalid JSON: syntax error while parsing object ...".
nlohmann::json read_json_file(const std::filesystem::path& path);

// j.dump(indent) plus a final newline, via write_file_atomic. indent < 0
// writes one line.
void write_json_file_atomic(const std::filesystem::path& path, const nlohmann::json& j, int indent = 2);

// "LINE:COLUMN" of a 1-based byte position in `text`, as reported by
// nlohmann::json::parse_error::byte (shared with the safetensors header parser).
std::string json_error_position(std::string_view text, size_t byte);
// nlohmann's parse_error message without its "[json.exception...] parse
// error at line L, column C: " prefix.
std::string json_error_reason(const char* what);

}  // namespace kiln::io
