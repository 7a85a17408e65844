#pragma once
// Every KILN_* environment variable the library and the kiln command read,
// in one table (env.cpp): name, default and meaning. `kiln env` prints it
// with the values set now, and docs/environment.md describes each one.
// Readers name the variable; one missing from the table is a programming
// error, so a new switch cannot be read without being documented.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace kiln {

struct EnvVar {
  std::string_view name;
  std::string_view fallback;  // the value when the variable is unset or empty
  std::string_view meaning;
};

// The table, in the order `kiln env` prints it.
std::span<const EnvVar> env_vars();

// The variable's value, or its table default when unset or empty.
std::string env_value(std::string_view name);

// The readers below throw kiln::Error naming the variable, what it takes and
// the value found, for anything malformed.
// 1 or on → true; 0 or off → false.
bool env_switch(std::string_view name);
// A whole number >= min.
int64_t env_integer(std::string_view name, int64_t min);
// A finite number >= min.
double env_number(std::string_view name, double min);
// One of `choices`.
std::string env_choice(std::string_view name, std::initializer_list<std::string_view> choices);
// Whether the comma-separated list in the variable names `item`; every item
// must be one of `items`.
bool env_lists(std::string_view name, std::string_view item, std::initializer_list<std::string_view> items);

}  // namespace kiln
