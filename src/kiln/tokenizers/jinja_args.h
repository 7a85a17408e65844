#pragma once
// Binding call arguments to a built-in's Python-style signature, and the
// conversions the built-ins share.
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tokenizers/jinja_value.h"

namespace kiln::tokenizers::jinja {

struct Param {
  const char* name;
  std::optional<Value> fallback;  // none: a required parameter
};

// The arguments in parameter order, defaults filled in. Throws EvalError for
// too many, unknown, repeated or missing arguments.
std::vector<Value> bind(const std::string& fn, const CallArgs& args, std::initializer_list<Param> params);

// An integer argument (bool counts, as in Python); throws for anything else.
int64_t int_arg(const Value& v, const std::string& what);

}  // namespace kiln::tokenizers::jinja
