#pragma once
// Reading and writing config.json fields: typed reads whose errors name the
// file and key, and the fields every PretrainedConfig shares.
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/models/config.h"

namespace kiln::models::config_json {

using nlohmann::json;

// Reads j[key] into out when present and not null; a wrong type is an error.
template <typename T>
void read(const json& j, const char* key, T& out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if constexpr (std::is_same_v<T, int64_t>) {
    KILN_CHECK(it->is_number_integer(), src, ": '", key, "' must be an integer, got ", it->type_name(), " ", it->dump());
    out = it->get<int64_t>();
  } else if constexpr (std::is_same_v<T, double>) {
    KILN_CHECK(it->is_number(), src, ": '", key, "' must be a number, got ", it->type_name(), " ", it->dump());
    out = it->get<double>();
  } else if constexpr (std::is_same_v<T, bool>) {
    KILN_CHECK(it->is_boolean(), src, ": '", key, "' must be true or false, got ", it->type_name(), " ", it->dump());
    out = it->get<bool>();
  } else {
    static_assert(std::is_same_v<T, std::string>);
    KILN_CHECK(it->is_string(), src, ": '", key, "' must be a string, got ", it->type_name(), " ", it->dump());
    out = it->get<std::string>();
  }
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
