#pragma once
// Reading and writing config.json fields: typed reads whose errors name the
// file and key, and the fields every PretrainedConfig shares.
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/models/config.h"

namespace kiln::models::config_json {

using nlohmann::json;

// Reads j[key] into out when present and not null; a wrong type is an error
// naming src and the key.
template <typename T>
void read(const json& j, const char* key, T& out, const std::string& src) {
  out = json_value<T>(j, key, out, src);
}

template <typename T>
void read_opt(const json& j, const char* key, std::optional<T>& out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  T v{};
  read(j, key, v, src);
  out = v;
}

// model_type, architectures, id2label (or num_labels), problem_type, pad_token_id.
void read_common(const json& j, PretrainedConfig& c, const std::string& src);
// Keys outside `known` (and the common ones) go to c.extra.
void keep_unknown(const json& j, PretrainedConfig& c, const std::vector<std::string>& known);
// The common fields, over c.extra.
json write_common(const PretrainedConfig& c);
// problem_type and id2label consistency.
void validate_common(const PretrainedConfig& c, const std::string& src);

}  // namespace kiln::models::config_json
