#pragma once
// Batch-tokenizes a text file into JSON lines: one input line becomes
// {"ids": [...], "tokens": [...]}. The logic behind `kiln tokenize`.
#include <cstddef>
#include <iosfwd>
#include <string>

#include "kiln/tokenizers/tokenizer.h"

namespace kiln::tokenizers {

struct TokenizeFileOptions {
  bool add_special_tokens = true;
  size_t batch_lines = 4096;  // lines encoded together (in parallel)
};

// Reads `in` line by line (a trailing '\r' is dropped), writes JSONL to out.
// Throws kiln::Error naming `input_name` and the 1-based line on invalid UTF-8.
// Returns the number of lines written.
size_t tokenize_stream(const Tokenizer& tok, std::istream& in, std::ostream& out,
                       const std::string& input_name, const TokenizeFileOptions& options = {});
size_t tokenize_file(const Tokenizer& tok, const std::string& input_path,
                     const std::string& output_path, const TokenizeFileOptions& options = {});

}  // namespace kiln::tokenizers
