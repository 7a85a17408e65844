// Fuzz target: the legacy tokenizer files of a model directory
// (Tokenizer::from_pretrained without tokenizer.json): vocab.txt (BERT
// WordPiece), vocab.json + merges.txt (GPT-2/RoBERTa byte-level BPE), and
// tokenizer_config.json. from_pretrained reads a directory, so the input's
// files are written to a scratch directory first. Input: the files, each
// after a line "=== NAME" (other names and text before the first are
// ignored):
//   === tokenizer_config.json
//   {"do_lower_case": false}
//   === vocab.txt
//   [PAD]
//   ...
// A tokenizer that loads encodes and decodes a fixed sentence.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "kiln/tokenizers/tokenizer.h"

namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 4> kFiles = {"tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt"};
constexpr std::string_view kText = "Hello, world! The naïve CAFÉ's 42 東京 \xF0\x9F\x98\x80 [CLS] <s> <mask>";

// A directory of this process's own, removed at exit.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string pattern = (base / "kiln-fuzz-tokenizer-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) std::abort();
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Writes the input's files into `dir` (and removes the previous input's).
void write_files(std::string_view input, const fs::path& dir) {
  for (auto name : kFiles) fs::remove(dir / name);
  constexpr std::string_view kMarker = "=== ";
  size_t pos = input.rfind(kMarker, 0) == 0 ? 0 : input.find("\n" + std::string(kMarker));
  while (pos != std::string_view::npos) {
    if (input[pos] == '\n') ++pos;
    const size_t name_end = std::min(input.find('\n', pos), input.size());
    const std::string_view name = input.substr(pos + kMarker.size(), name_end - pos - kMarker.size());
    const size_t body = std::min(name_end + 1, input.size());
    const size_t next = input.find("\n" + std::string(kMarker), body);
    const std::string_view content = input.substr(body, next == std::string_view::npos ? next : next - body);
    for (auto known : kFiles)
      if (name == known) std::ofstream(dir / known, std::ios::binary).write(content.data(), content.size());
    pos = next;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ScratchDir scratch;
  write_files({reinterpret_cast<const char*>(data), size}, scratch.path);
  kiln::fuzz::attempt([&] {
    auto t = kiln::tokenizers::Tokenizer::from_pretrained(scratch.path.string());
    t.decode(t.encode(kText).ids, true);
  });
  return 0;
}
