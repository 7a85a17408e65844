#include "kiln/core/env.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kiln/core/error.h"

namespace kiln {
namespace {

constexpr EnvVar kVars[] = {
    {"KILN_CACHE_DIR", "",
     "folder of the on-disk compile cache; 'off' disables it (default: $XDG_CACHE_HOME/kiln or ~/.cache/kiln)"},
    {"KILN_CACHE_MIN_COMPILE_MS", "5", "programs compiled faster than this many milliseconds are not cached on disk"},
    {"KILN_CACHE_SIZE", "1024", "compiled programs kept in memory per device"},
    {"KILN_HOST_CACHE_MB", "",
     "megabytes of freed host buffers kept for reuse; 0 turns the cache off (default: 1/8 of RAM, at most 2048)"},
    {"KILN_HUGE_PAGES", "1", "large host buffers use transparent huge pages (0/off turns that off)"},
    {"KILN_EAGER", "0", "1: run each op as it is traced instead of compiling graphs (for debugging)"},
    {"KILN_JIT", "1", "CPU: fused elementwise loops compiled to machine code (0: the interpreter runs them)"},
    {"KILN_JIT_WIDE", "1", "CPU: the compiled loops use 16-lane AVX-512 registers where the CPU has them"},
    {"KILN_CPU_BF16", "auto",
     "CPU: products of bf16 operands run as oneDNN's bf16 matmul where the CPU has AVX512-BF16 or AMX ('auto'), "
     "or widened to f32 ('emulate')"},
    {"KILN_CPU_AMX", "auto",
     "CPU: the fused attention's bf16 block products use AMX tiles where the CPU has them ('auto'), "
     "or AVX512-BF16 ('off'; oneDNN's own products follow ONEDNN_MAX_CPU_ISA)"},
    {"KILN_ATTENTION", "auto", "attention as one fused kernel ('fused'), as matmul/softmax/matmul ('composite'), "
                               "or the fused kernel where it applies ('auto')"},
    {"KILN_CUDA_FUSED", "auto",
     "CUDA: fused programs run as generated kernels ('generate'), in the interpreter ('interpret'), or by size ('auto')"},
    {"KILN_CUDA_GEMM_PAD", "1", "CUDA: pad products to tensor-core-friendly shapes (0 turns the padded copies off)"},
    {"KILN_PROFILE", "0", "1: time every kernel and print the top 40 at exit; 'all': print every kernel"},
    {"KILN_DUMP", "", "comma-separated: 'graph' prints each traced graph, 'program' each compiled program, to stderr"},
};

const EnvVar& entry(std::string_view name) {
  for (const EnvVar& v : kVars)
    if (v.name == name) return v;
  throw Error("internal error: environment variable " + std::string(name) + " is not in the table of core/env.cpp");
}

[[noreturn]] void malformed(std::string_view name, std::string_view expected, const std::string& found) {
  throw Error(std::string(name) + ": expected " + std::string(expected) + ", found '" + found + "'");
}

}  // namespace

std::span<const EnvVar> env_vars() { return kVars; }

std::string env_value(std::string_view name) {
  const EnvVar& v = entry(name);
  const char* set = std::getenv(std::string(name).c_str());
  return set && *set ? std::string(set) : std::string(v.fallback);
}

bool env_switch(std::string_view name) {
  const std::string v = env_value(name);
  if (v == "1" || v == "on") return true;
  if (v == "0" || v == "off") return false;
  malformed(name, "0, 1, on or off", v);
}

int64_t env_integer(std::string_view name, int64_t min) {
  const std::string v = env_value(name);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != 0 || errno != 0 || n < min)
    malformed(name, "a whole number >= " + std::to_string(min), v);
  return n;
}

double env_number(std::string_view name, double min) {
  const std::string v = env_value(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != 0 || !std::isfinite(x) || x < min) {
    char bound[32];
    std::snprintf(bound, sizeof bound, "%g", min);
    malformed(name, std::string("a number >= ") + bound, v);
  }
  return x;
}

std::string env_choice(std::string_view name, std::initializer_list<std::string_view> choices) {
  const std::string v = env_value(name);
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string expected = "one of";
  for (std::string_view c : choices) expected += " '" + std::string(c) + "'";
  malformed(name, expected, v);
}

bool env_lists(std::string_view name, std::string_view item, std::initializer_list<std::string_view> items) {
  const std::string v = env_value(name);
  bool found = false;
  size_t start = 0;
  while (start <= v.size() && !v.empty()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    const std::string_view word = std::string_view(v).substr(start, end - start);
    if (std::find(items.begin(), items.end(), word) == items.end()) {
      std::string expected = "a comma-separated list of";
      for (std::string_view c : items) expected += " '" + std::string(c) + "'";
      malformed(name, expected, v);
    }
    found = found || word == item;
    start = end + 1;
  }
  return found;
}

}  // namespace kiln
