#include "kiln/tokenizers/tokenize_file.h"

#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

static void flush(const Tokenizer& tok, std::vector<std::string>& lines, std::ostream& out,
                  const TokenizeFileOptions& options) {
  std::vector<Encoding> enc = tok.encode_batch(lines, options.add_special_tokens);
  for (const Encoding& e : enc) {
    nlohmann::json j;
    j["ids"] = e.ids;
    j["tokens"] = e.tokens;
    out << j.dump() << '\n';
  }
  lines.clear();
}

size_t tokenize_stream(const Tokenizer& tok, std::istream& in, std::ostream& out,
                       const std::string& input_name, const TokenizeFileOptions& options) {
  std::vector<std::string> lines;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (auto bad = utf8::find_invalid(line)) {
      throw Error(detail::concat(input_name, ":", n, ": invalid UTF-8 at byte ", *bad + 1,
                                 " of the line"));
    }
    lines.push_back(std::move(line));
    if (lines.size() >= options.batch_lines) flush(tok, lines, out, options);
  }
  if (!lines.empty()) flush(tok, lines, out, options);
  KILN_CHECK(out.good(), input_name, ": writing the output failed");
  return n;
}

size_t tokenize_file(const Tokenizer& tok, const std::string& input_path,
                     const std::string& output_path, const TokenizeFileOptions& options) {
  check_regular_file(input_path);  // a FIFO would block the open
  std::ifstream in(input_path, std::ios::binary);
  KILN_CHECK(in, input_path, ": cannot open input file");
  std::ofstream out(output_path, std::ios::binary);
  KILN_CHECK(out, output_path, ": cannot open output file for writing");
  return tokenize_stream(tok, in, out, input_path, options);
}

}  // namespace kiln::tokenizers
