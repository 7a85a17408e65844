#include "kiln/train/decay.h"

#include <algorithm>
#include <cctype>
#include <memory>

namespace kiln::train {

bool decay_exempt_name(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n.find("bias") != std::string::npos || n.find("layernorm") != std::string::npos ||
      n.find("rmsnorm") != std::string::npos)
    return true;
  // HF's r"(?:^|\.)norm(?:$|\.)" and r"_norm(?:$|\.)".
  for (size_t at = n.find("norm"); at != std::string::npos; at = n.find("norm", at + 1)) {
    const bool ends = at + 4 == n.size() || n[at + 4] == '.';
    if (ends && (at == 0 || n[at - 1] == '.' || n[at - 1] == '_')) return true;
  }
  return false;
}

std::unordered_set<std::string> no_decay_parameter_names(nn::Module& model) {
  std::unordered_set<std::string> out;
  for (const auto& [path, module] : model.named_modules()) {
    if (!dynamic_cast<const nn::LayerNorm*>(module)) continue;
    const std::string prefix = path.empty() ? "" : path + ".";
    for (const auto& [name, p] : module->named_parameters()) out.insert(prefix + name);
  }
  for (const auto& [name, p] : model.named_parameters())
    if (decay_exempt_name(name)) out.insert(name);
  return out;
}

}  // namespace kiln::train
