#pragma once
// What `kiln train`, `kiln eval` and `kiln predict` share: loading the
// tokenizer and datasets of a run, and the collator settings.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/data/loader.h"
#include "kiln/models/config.h"
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
// What a config without weights adapts to (PretrainedConfig::adapt_to_tokenizer):
// the tokenizer's size, pad id, and end token (</s>, else [SEP]), which
// seq2seq targets end with and generation stops at.
models::TokenizerIds tokenizer_ids(const TokenizerBundle& tok);

// The id the collator pads with: the tokenizer's, except for a decoder-only
// model (GPT-2, the Llama family) whose config names its own pad_token_id:
// its sequence classifier finds each row's last token by that id, and HF
// users commonly set it to the eos id (tokenizer.pad_token = eos_token), an id
// the tokenizer does not call a pad.
int64_t padding_id(const TokenizerBundle& tok, const models::PretrainedConfig& config);

data::DatasetOptions dataset_options(const std::map<std::string, std::string>& flags);

// --max_seq_length against the model's positions (HF's run_glue): `asked`
// (absent: `fallback`, run_qa's is 384) if the position embeddings cover it;
// else their length, with a warning when the value was asked for (the
// default is lowered silently).
int64_t sequence_length(std::optional<int64_t> asked, const models::PretrainedConfig& config, const char* command,
                        int64_t fallback = 128);

// The seq2seq source prefix ("summarize: ") a model was trained with, kept in
// its config.json where HF's pipelines read it
// (task_specific_params.summarization.prefix); "" when none.
std::string saved_source_prefix(const models::PretrainedConfig& config);
void save_source_prefix(models::PretrainedConfig& config, const std::string& prefix);

// run_qa's defaults: --max_seq_length 384 and --doc_stride 128, the stride
// lowered to a third of a shorter sequence length (128 of 384).
constexpr int64_t kQaMaxSeqLength = 384;
inline int64_t default_doc_stride(int64_t max_length) { return std::min<int64_t>(128, max_length / 3); }

}  // namespace kiln::cli
