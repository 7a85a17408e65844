// Fuzz target: config.json (AutoConfig: models::config_from_json for every
// model_type). Input: the file's text. A config that is accepted must also
// read back from what to_json() writes for it (save_pretrained's file).
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "fuzz_util.h"
#include "kiln/core/json.h"
#include "kiln/models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<kiln::models::PretrainedConfig> config;
  if (!kiln::fuzz::attempt([&] {
        config = kiln::models::config_from_json(kiln::parse_json(text, "config.json"), "config.json");
      }))
    return 0;
  try {
    kiln::models::config_from_json(config->to_json(), "written config.json");
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "an accepted config does not read back: %s\n", e.what());
    std::abort();
  }
  return 0;
}
