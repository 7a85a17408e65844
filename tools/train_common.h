#pragma once
// What `kiln train`, `kiln eval` and `kiln predict` share: loading the
// tokenizer and datasets of a run, and the collator settings.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/data/loader.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::cli {

struct TokenizerBundle {
  tokenizers::Tokenizer tokenizer;
  std::filesystem::path dir;
  std::vector<std::filesystem::path> files;  // copied next to saved models
  int64_t pad_id = 0, mask_id = -1;
  std::vector<int64_t> special_ids;
};
TokenizerBundle load_tokenizer(const std::filesystem::path& dir);

data::DatasetOptions dataset_options(const std::map<std::string, std::string>& flags);

}  // namespace kiln::cli
