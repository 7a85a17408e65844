#pragma once
// Command-line flags of the `kiln` subcommands: "--name value", "--name=value"
// and switches ("--bf16", or "--bf16 true|false" as HF's parser takes them).
// Every command takes Hugging Face's names (--model_name_or_path,
// --tokenizer_name, --per_device_eval_batch_size, ...) and kiln's short ones
// (--model, --tokenizer, --batch_size) for the same flag (kHfNames), with
// dashes or underscores. An unknown flag is an error that suggests the
// closest valid name; a missing value or required flag names the flag.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

struct FlagSpec {
  std::string name;  // without "--"; either name of a kHfNames pair
  bool takes_value = true;
  bool required = false;
  std::string alias = "";  // another name this command takes for it (kHfNames' pairs need none)
};

// Hugging Face's name of a flag and kiln's short one: a command that declares
// either accepts both, and get()/has() answer to either.
struct FlagAlias {
  const char* hf;
  const char* kiln;
};
extern const std::vector<FlagAlias> kHfNames;

// `args` with kiln's short names (kHfNames) spelled as HF's and dashes in
// flag names as underscores, for the commands whose parser knows HF's names
// only (kiln train and eval): "--model D" is "--model_name_or_path D". Names
// in `keep` are not renamed.
std::vector<std::string> with_hf_names(const std::vector<std::string>& args, const std::vector<std::string>& keep = {});

class Flags {
 public:
  Flags(std::string command, std::vector<FlagSpec> specs, std::string usage);
  void parse(const std::vector<std::string>& args);
  bool help() const { return help_; }
  const std::string& usage() const { return usage_; }
  bool has(const std::string& name) const { return values_.count(canonical(name)) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // The flag's value as a whole integer (at least `min`) or a whole number;
  // `fallback` when absent. Anything else ("3abc", "2.7" for an integer, a
  // value below min) is an error naming the command, flag and value.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min = INT64_MIN) const;
  double number(const std::string& name, double fallback) const;
  // A switch as given: true ("--x", "--x true"), false ("--x false"), or
  // `fallback` when absent (a setting a file made, which the flag overrides).
  bool switch_or(const std::string& name, bool fallback) const;

 private:
  // The declared name that `name` (either of a kHfNames pair, dashes or underscores) stands for; "" if none.
  std::string canonical(const std::string& name) const;
  std::string command_, usage_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> switched_off_;  // switches given as false
  bool help_ = false;
};

// A flag's text as a whole integer >= min, or a whole finite number in
// [min, max]: anything else is an error naming the command, flag and value.
// Flags::integer/number and kiln train's own flags use them.
int64_t integer_value(const std::string& command, const std::string& name, const std::string& text,
                      int64_t min = INT64_MIN);
double number_value(const std::string& command, const std::string& name, const std::string& text,
                    double min = -HUGE_VAL, double max = HUGE_VAL);

// The candidate nearest to `word` by edit distance ("" when none is close).
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace kiln::cli
