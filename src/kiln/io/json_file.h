#pragma once
// JSON files (config.json, trainer_state.json, index files), written
// atomically. Reading is core/json.h's read_json_file.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kiln/core/json.h"

namespace kiln::io {

// j.dump(indent) plus a final newline, via write_file_atomic. indent < 0
// writes one line.
void write_json_file_atomic(const std::filesystem::path& path, const nlohmann::json& j, int indent = 2);

}  // namespace kiln::io
