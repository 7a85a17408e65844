// Fuzz target: dataset files (data::parse_dataset, what load_dataset reads):
// CSV, TSV, JSON Lines, JSON and text rows, as run_glue, run_ner (words),
// run_qa (question answering) and run_swag (multiple choice) read them.
// Input: a first line naming the file and the options, then the file's
// bytes:
//   train.csv                 (the extension picks the format)
//   train.jsonl words         (split_into_words)
//   train.json qa             (question_answering)
//   train.csv choice          (multiple_choice)
//   train.tsv text=premise pair=hypothesis label=   (columns; "label=": unlabeled)
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "kiln/data/dataset.h"

namespace {

// The first line's words after the file name set the options.
kiln::data::DatasetOptions options_of(std::string_view line, std::string* source) {
  kiln::data::DatasetOptions o;
  size_t pos = 0;
  bool first = true;
  while (pos < line.size()) {
    const size_t end = std::min(line.find(' ', pos), line.size());
    const std::string_view word = line.substr(pos, end - pos);
    pos = end + 1;
    if (first) {
      *source = std::string(word);
      first = false;
    } else if (word == "words") {
      o.split_into_words = true;
    } else if (word == "qa") {
      o.question_answering = true;
    } else if (word == "choice") {
      o.multiple_choice = true;
    } else if (word.rfind("text=", 0) == 0) {
      o.text_column = std::string(word.substr(5));
    } else if (word.rfind("pair=", 0) == 0) {
      o.text_pair_column = std::string(word.substr(5));
    } else if (word.rfind("label=", 0) == 0) {
      o.label_column = std::string(word.substr(6));
    }
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return 0;
  std::string source;
  const auto options = options_of(input.substr(0, newline), &source);
  kiln::fuzz::attempt([&] { kiln::data::parse_dataset(input.substr(newline + 1), source, options); });
  return 0;
}
