#include "kiln/compiler/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kiln/core/env.h"

namespace kiln::compiler {

namespace {

const std::string& profile_mode() {
  static const std::string mode = env_choice("KILN_PROFILE", {"0", "1", "all"});
  return mode;
}

bool full_profile() { return profile_mode() == "all"; }

struct Profile {
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::mutex mu;
  std::map<std::string, Entry> entries;
  ProfileTotals totals;
  ~Profile() {
    if (entries.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "kiln profile (KILN_PROFILE=1): %.3f s in kernels\n", total);
    std::fprintf(stderr, "  %9s %6s %9s  %s\n", "seconds", "%", "calls", "kernel");
    for (size_t i = 0; i < rows.size() && (i < 40 || full_profile()); ++i)
      std::fprintf(stderr, "  %9.3f %5.1f%% %9lld  %s\n", rows[i].second.seconds, 100 * rows[i].second.seconds / total,
                   static_cast<long long>(rows[i].second.calls), rows[i].first.c_str());
  }
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

bool profiling() {
  static const bool on = profile_mode() != "0";
  return on;
}

std::string instr_label(const Instr& ins) {
  std::string s = op_label(ins);
  if (!ins.extra_outputs.empty()) s += " +" + std::to_string(ins.extra_outputs.size()) + " outputs";
  s += " " + to_string(ins.output.view.shape);
  if (ins.op == ir::Op::MatMul && ins.inputs.size() >= 2) {  // which product: "NT K=768 +bias"
    const ir::MatMulAttrs m = ir::MatMulAttrs::of(ins.attrs);
    const bool ta = m.transpose_a, tb = m.transpose_b;
    s += std::string(" ") + (ta ? "T" : "N") + (tb ? "T" : "N") + " K=" + std::to_string(reduction_length(ins));
    if (ins.inputs.size() == 3) s += " +bias";
  }
  return s;
}

void profile_add(const Instr& ins, double seconds, const char* note) {
  Profile& p = profile();
  std::string key = instr_label(ins);
  if (note) key += std::string(" (") + note + ")";
  std::lock_guard<std::mutex> lock(p.mu);
  auto& e = p.entries[key];
  e.seconds += seconds;
  ++e.calls;
  if (ins.op == ir::Op::MatMul) {
    p.totals.product_seconds += seconds;
    p.totals.product_flops += 2.0 * static_cast<double>(numel(ins.output.view.shape)) * reduction_length(ins);
  } else if (ins.op == ir::Op::Attention || ins.op == ir::Op::AttentionGrad) {
    p.totals.attention_seconds += seconds;
  } else {
    p.totals.other_seconds += seconds;
  }
}

ProfileTotals profile_totals() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.totals;
}

void profile_reset() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.entries.clear();
  p.totals = {};
}

}  // namespace kiln::compiler
