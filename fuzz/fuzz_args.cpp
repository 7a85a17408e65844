// Fuzz target: training arguments. Input: an args file (kiln train
// --args_file, HF's TrainingArguments JSON: TrainingArguments::from_json),
// or, when it starts with "--", a command line, one argument a line
// (TrainingArguments::parse, which also reads what an args file becomes).
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "kiln/core/json.h"
#include "kiln/train/training_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::train::TrainingArguments;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::fuzz::attempt([&] {
    if (text.rfind("--", 0) != 0) {
      TrainingArguments::from_json(kiln::parse_json(text, "args.json"), "args.json");
      return;
    }
    std::vector<std::string> args;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = std::min(text.find('\n', pos), text.size());
      args.emplace_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
    // A few of kiln train's own flags (tools/cmd_train.cpp), which parse passes through.
    std::map<std::string, std::string> rest;
    TrainingArguments::parse(args, &rest, {"train_file", "max_seq_length"}, {"pad_to_max_length"});
  });
  return 0;
}
