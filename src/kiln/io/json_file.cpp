#include "kiln/io/json_file.h"

#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"

namespace kiln::io {

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
