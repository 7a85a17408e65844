// kiln tokenize --tokenizer DIR --input FILE --output FILE.jsonl [--no_special_tokens]
// One input line -> one JSON line {"ids": [...], "tokens": [...]}. The work is
// kiln::tokenizers::tokenize_file; this file only parses flags.
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenize_file.h"
#include "kiln/tokenizers/tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln tokenize --tokenizer DIR --input FILE --output FILE.jsonl [--no_special_tokens]";

int run_tokenize(const std::vector<std::string>& args) {
  std::string tokenizer, input, output;
  kiln::tokenizers::TokenizeFileOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (flag == "--no_special_tokens") {
      KILN_CHECK(!inline_value, "tokenize: --no_special_tokens takes no value\n", kUsage);
      options.add_special_tokens = false;
      continue;
    }
    std::string* target = flag == "--tokenizer" ? &tokenizer
                           : flag == "--input"  ? &input
                           : flag == "--output" ? &output
                                                : nullptr;
    KILN_CHECK(target, "tokenize: unknown flag '", args[i], "'\n", kUsage);
    if (!inline_value) {
      KILN_CHECK(i + 1 < args.size(), "tokenize: flag ", flag, " needs a value\n", kUsage);
      value = args[++i];
    }
    *target = value;
  }
  KILN_CHECK(!tokenizer.empty(), "tokenize: missing --tokenizer DIR\n", kUsage);
  KILN_CHECK(!input.empty(), "tokenize: missing --input FILE\n", kUsage);
  KILN_CHECK(!output.empty(), "tokenize: missing --output FILE.jsonl\n", kUsage);
  auto tok = kiln::tokenizers::Tokenizer::from_pretrained(tokenizer);
  size_t n = kiln::tokenizers::tokenize_file(tok, input, output, options);
  std::fprintf(stderr, "kiln tokenize: %zu lines -> %s\n", n, output.c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(tokenize, "encode text with a Hugging Face tokenizer (one JSON line per input line)",
             run_tokenize);
