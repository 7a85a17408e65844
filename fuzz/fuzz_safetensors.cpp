// Fuzz target: a safetensors file's header -- the 8-byte length, the JSON
// header and every tensor's dtype, shape and data_offsets against the data
// section (io::parse_safetensors_header, what SafetensorsFile::open checks
// before it hands out any tensor). Input: a whole .safetensors file.
#include <cstdint>
#include <cstddef>

#include "fuzz_util.h"
#include "kiln/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::attempt([&] { kiln::io::parse_safetensors_header({data, size}, "model.safetensors"); });
  return 0;
}
