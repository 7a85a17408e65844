#pragma once
// Jinja's lexer with the settings Hugging Face renders chat templates with:
// trim_blocks (the first newline after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs before a block or comment tag at the start
// of a line are dropped), keep_trailing_newline off (one final newline of the
// template is dropped), "\r\n" and "\r" read as "\n", and the `-` / `+`
// whitespace controls. Data between tags comes out already trimmed.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tokenizers::jinja {

// The template text the tokens point into, and its name for messages.
struct Source {
  std::string name;
  std::string text;  // newlines normalized, as the lexer sees it
  // "name:line:column" of a byte offset (1-based, columns in code points).
  std::string where(size_t offset) const;
  [[noreturn]] void fail(size_t offset, const std::string& message) const;  // throws kiln::Error
};

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // data, name, decoded string literal, operator
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;  // into Source::text
};

// Newlines to "\n", and one trailing newline removed (keep_trailing_newline off).
std::string normalize_newlines(std::string_view text);

// Throws kiln::Error "name:line:col: message" on malformed input.
std::vector<Token> tokenize(const Source& source);

}  // namespace kiln::tokenizers::jinja
