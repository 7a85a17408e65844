// kiln tokenize --tokenizer DIR --input FILE --output FILE.jsonl [--no_special_tokens]
// One input line -> one JSON line {"ids": [...], "tokens": [...]}. The work is
// kiln::tokenizers::tokenize_file; this file only parses flags.
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenize_file.h"
#include "kiln/tokenizers/tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln tokenize --tokenizer DIR --input FILE --output FILE.jsonl [--no_special_tokens]";

int run_tokenize(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("tokenize",
                         {{"tokenizer", true, true}, {"input", true, true}, {"output", true, true},
                          {"no_special_tokens", false, false}},
                         kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  kiln::tokenizers::TokenizeFileOptions options;
  options.add_special_tokens = !flags.has("no_special_tokens");
  std::string tokenizer = flags.get("tokenizer"), input = flags.get("input"), output = flags.get("output");
  auto tok = kiln::tokenizers::Tokenizer::from_pretrained(tokenizer);
  size_t n = kiln::tokenizers::tokenize_file(tok, input, output, options);
  std::fprintf(stderr, "kiln tokenize: %zu lines -> %s\n", n, output.c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(tokenize, "encode text with a Hugging Face tokenizer (one JSON line per input line)",
             run_tokenize);
