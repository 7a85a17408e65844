#include "kiln/models/registry.h"

#include <algorithm>

namespace kiln::models {

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> families = {&bert_family(), &gpt2_family(), &llama_family(),
                                                           &t5_family(), &deberta_family()};
  return families;
}

namespace {
bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace

const ModelFamily* family_of_type(const std::string& model_type) {
  for (const ModelFamily* f : model_families())
    if (has(f->model_types, model_type)) return f;
  return nullptr;
}

const ModelFamily* family_of_architecture(const std::string& architecture) {
  for (const ModelFamily* f : model_families())
    if (has(f->architectures, architecture) || has(f->aliases, architecture)) return f;
  return nullptr;
}

std::vector<std::string> class_names(const std::vector<std::string>& prefixes, const std::vector<std::string>& suffixes) {
  std::vector<std::string> names;
  for (const auto& p : prefixes)
    for (const auto& s : suffixes) names.push_back(p + s);
  return names;
}

}  // namespace kiln::models
