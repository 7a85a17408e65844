#pragma once
// jinja2's built-in filters, tests and globals, Hugging Face's additions
// (the `tojson` override, raise_exception, strftime_now), and the methods of
// str, dict and list that templates call (`content.strip()`, `d.items()`).
#include <string>
#include <string_view>

#include "kiln/tokenizers/jinja_value.h"

namespace kiln::tokenizers::jinja {

using FilterFn = Value (*)(Interpreter&, const Value& subject, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& subject, CallArgs& args);

// nullptr when unknown. `unsupported` names jinja2 filters kiln leaves out
// (wordwrap, urlize...), so a template using one gets a clear message.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
bool unsupported_filter(std::string_view name);

// A global function (range, namespace, dict, joiner, raise_exception,
// strftime_now...), or an undefined value when `name` is none.
Value find_global(std::string_view name);

// obj.name where name is a method of a str, dict or list: the bound method;
// nullopt when it is none. Mutating methods of lists and dicts are bound to
// an error, as the immutable sandbox makes them.
std::optional<Value> find_method(const Value& obj, const std::string& name);

}  // namespace kiln::tokenizers::jinja
