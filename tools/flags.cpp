#include "flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "kiln/core/error.h"
#include "kiln/train/training_args.h"

namespace kiln::cli {

const std::vector<FlagAlias> kHfNames = {{"model_name_or_path", "model"},
                                         {"tokenizer_name", "tokenizer"},
                                         {"config_name", "config"},
                                         {"per_device_eval_batch_size", "batch_size"}};

namespace {

std::string underscored(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// The other name of `name`'s kHfNames pair ("" when it has none).
std::string other_name(const std::string& name) {
  for (const auto& a : kHfNames) {
    if (name == a.hf) return a.kiln;
    if (name == a.kiln) return a.hf;
  }
  return "";
}

}  // namespace

Flags::Flags(std::string command, std::vector<FlagSpec> specs, std::string usage)
    : command_(std::move(command)), usage_(std::move(usage)), specs_(std::move(specs)) {}

std::string Flags::canonical(const std::string& name) const {
  const std::string n = underscored(name), other = other_name(n);
  for (const auto& s : specs_)
    if (s.name == n || (!other.empty() && s.name == other) || (!s.alias.empty() && s.alias == n)) return s.name;
  return "";
}

std::vector<std::string> with_hf_names(const std::vector<std::string>& args, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& arg : args) {
    std::string rewritten = arg;
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      const std::string name = underscored(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      rewritten = "--" + name + (eq == std::string::npos ? "" : arg.substr(eq));
      for (const auto& a : kHfNames)
        if (name == a.kiln && std::find(keep.begin(), keep.end(), name) == keep.end())
          rewritten = "--" + std::string(a.hf) + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    out.push_back(rewritten);
  }
  return out;
}

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
    const std::string declared = canonical(name);
    auto spec = std::find_if(specs_.begin(), specs_.end(), [&](const FlagSpec& s) { return s.name == declared; });
    if (spec == specs_.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs_) {
        names.push_back(s.name);
        if (std::string other = other_name(s.name); !other.empty()) names.push_back(other);
        if (!s.alias.empty()) names.push_back(s.alias);
      }
      std::string near = closest(underscored(name), names);
      throw Error(command_ + ": unknown flag '--" + name + "'" + (near.empty() ? "" : " (did you mean --" + near + "?)") +
                  "\n" + usage_);
    }
    if (spec->takes_value) {
      if (!inline_value) {
        KILN_CHECK(i + 1 < args.size(), command_, ": flag --", name, " needs a value\n", usage_);
        value = args[++i];
      }
    } else {
      // "--bf16", or HF's "--bf16 true|false" (a following word that is not a bool word is not its value).
      if (!inline_value && i + 1 < args.size() && train::parse_bool_word(args[i + 1])) value = args[++i];
      if (!inline_value && value.empty()) value = "true";
      auto on = train::parse_bool_word(value);
      KILN_CHECK(on, command_, ": flag --", name, ": invalid value '", value, "' (expected true or false, or no value)\n",
                 usage_);
      if (!*on) {
        values_.erase(spec->name);
        switched_off_[spec->name] = true;
        continue;
      }
      switched_off_.erase(spec->name);
      value = "true";
    }
    values_[spec->name] = value;
  }
  for (const auto& s : specs_) {
    const std::string other = s.alias.empty() ? other_name(s.name) : s.alias;
    KILN_CHECK(!s.required || has(s.name), command_, ": missing --", s.name,
               other.empty() ? "" : " (or --" + other + ")", "\n", usage_);
  }
}

bool Flags::switch_or(const std::string& name, bool fallback) const {
  if (has(name)) return true;
  return switched_off_.count(canonical(name)) ? false : fallback;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(canonical(name));
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
  return has(name) ? integer_value(command_, name, get(name), min) : fallback;
}

double Flags::number(const std::string& name, double fallback) const {
  return has(name) ? number_value(command_, name, get(name)) : fallback;
}

}  // namespace kiln::cli
