#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "kiln/core/error.h"
#include "kiln/train/training_args.h"

namespace kiln::cli {

Flags::Flags(std::string command, std::vector<FlagSpec> specs, std::string usage)
    : command_(std::move(command)), usage_(std::move(usage)), specs_(std::move(specs)) {}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  return train::closest_name(word, candidates);
}

void Flags::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return;
    }
    KILN_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, command_, ": unexpected argument '", arg, "'\n", usage_);
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto spec = std::find_if(specs_.begin(), specs_.end(), [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs_.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs_) names.push_back(s.name);
      std::string near = closest(name, names);
      throw Error(command_ + ": unknown flag '--" + name + "'" + (near.empty() ? "" : " (did you mean --" + near + "?)") +
                  "\n" + usage_);
    }
    if (spec->takes_value) {
      if (!inline_value) {
        KILN_CHECK(i + 1 < args.size(), command_, ": flag --", name, " needs a value\n", usage_);
        value = args[++i];
      }
    } else {
      KILN_CHECK(!inline_value, command_, ": flag --", name, " takes no value\n", usage_);
      value = "true";
    }
    values_[name] = value;
  }
  for (const auto& s : specs_)
    KILN_CHECK(!s.required || has(s.name), command_, ": missing --", s.name, "\n", usage_);
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t integer_value(const std::string& command, const std::string& name, const std::string& v, int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  KILN_CHECK(!v.empty() && *end == 0 && errno == 0, command, ": --", name, ": invalid value '", v,
             "' (expected an integer)");
  KILN_CHECK(n >= min, command, ": --", name, " must be >= ", min, ", got ", n);
  return n;
}

double number_value(const std::string& command, const std::string& name, const std::string& v, double min,
                    double max) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  KILN_CHECK(!v.empty() && *end == 0 && std::isfinite(x), command, ": --", name, ": invalid value '", v,
             "' (expected a number)");
  KILN_CHECK(x >= min && x <= max, command, ": --", name, " must be in [", min, ", ", max, "], got ", v);
  return x;
}

int64_t Flags::integer(const std::string& name, int64_t fallback, int64_t min) const {
  return has(name) ? integer_value(command_, name, values_.at(name), min) : fallback;
}

double Flags::number(const std::string& name, double fallback) const {
  return has(name) ? number_value(command_, name, values_.at(name)) : fallback;
}

}  // namespace kiln::cli
