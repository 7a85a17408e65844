#include "train_sft.h"

#include <algorithm>
#include <cstdio>

#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/data/sft.h"
#include "kiln/tokenizers/chat_template.h"
#include "kiln/train/training_args.h"

namespace kiln::cli {

namespace fs = std::filesystem;

bool is_sft_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext != ".jsonl" && ext != ".json") return false;
  return data::looks_like_sft_data(data::load_json_rows(path));
}

std::optional<int64_t> sft_max_length_flag(const std::map<std::string, std::string>& flags) {
  std::optional<int64_t> length;
  for (const char* name : {"max_length", "max_seq_length"})
    if (auto it = flags.find(name); it != flags.end()) {
      const int64_t n = cli::integer_value("train", name, it->second, 1);
      KILN_CHECK(!length || *length == n, "train: --max_length ", *length, " and --max_seq_length ", n,
                 " disagree (one flag, two spellings: give one)");
      length = n;
    }
  return length;
}

namespace {

// An SFT special token (eos_token, pad_token) as tokenizer_config.json / special_tokens_map.json name it, or "".
std::string special_token(const TokenizerBundle& tok, const char* name) {
  const auto s = tokenizers::pretrained_special_tokens(tok.dir.string());
  return s.contains(name) && s[name].is_string() ? s[name].get<std::string>() : "";
}

// An optional boolean of TRL's (completion_only_loss, eval_packing), read as HF's argument parser reads
// booleans (its string_to_bool).
bool boolean_flag(const char* name, const std::string& value) {
  const std::optional<bool> b = train::parse_bool_word(value);
  KILN_CHECK(b.has_value(), "train: --", name, " must be true or false, got '", value, "'");
  return *b;
}

}  // namespace

int64_t sft_padding_id(const TokenizerBundle& tok) {
  for (const char* name : {"pad_token", "eos_token"}) {
    const std::string token = special_token(tok, name);
    if (auto id = tok.tokenizer.token_to_id(token); id && !token.empty()) return *id;
  }
  return tok.pad_id;
}

std::shared_ptr<data::Features> sft_features(const fs::path& file, const TokenizerBundle& tok,
                                             const std::map<std::string, std::string>& flags, int64_t max_length,
                                             bool evaluation) {
  const data::JsonRows rows = data::load_json_rows(file);
  data::SftOptions o;
  if (auto it = flags.find("dataset_text_field"); it != flags.end()) o.text_column = it->second;
  const data::SftFormat format = data::detect_sft_format(rows, o.text_column);
  const bool conversational =
      format == data::SftFormat::Conversational || format == data::SftFormat::ConversationalPromptCompletion;
  // Plain-text rows need no template (the tokenizer directory may have none).
  std::optional<tokenizers::ChatTemplate> chat;
  if (conversational) chat = tokenizers::ChatTemplate::from_pretrained(tok.dir.string());
  auto on = [&](const char* name) { return flags.count(name) && flags.at(name) == "true"; };
  o.assistant_only_loss = on("assistant_only_loss");
  o.packing = on("packing");
  const auto eval_packing = flags.find("eval_packing");
  const bool packs_eval = eval_packing != flags.end() ? boolean_flag("eval_packing", eval_packing->second) : o.packing;
  if (evaluation) o.packing = packs_eval;
  data::PackingStrategy strategy = data::PackingStrategy::Bfd;
  if (auto it = flags.find("packing_strategy"); it != flags.end()) {
    try {
      strategy = data::parse_packing_strategy(it->second);
    } catch (const Error& e) {
      throw Error(std::string("train: --") + e.what());
    }
    if (!evaluation && !o.packing && !packs_eval)  // (said once, for the training file)
      std::fprintf(stderr, "kiln train: warning: --packing_strategy %s applies with --packing or --eval_packing; "
                   "ignored\n", it->second.c_str());
  }
  if (auto it = flags.find("completion_only_loss"); it != flags.end()) {
    o.completion_only_loss = boolean_flag("completion_only_loss", it->second);
    if (*o.completion_only_loss && format != data::SftFormat::PromptCompletion &&
        format != data::SftFormat::ConversationalPromptCompletion)
      std::fprintf(stderr, "kiln train: warning: --completion_only_loss applies to prompt-completion data; %s is %s\n",
                   file.string().c_str(), data::sft_format_name(format));
  }
  o.max_length = max_length;
  o.eos_token = special_token(tok, "eos_token");
  KILN_CHECK(conversational || !o.eos_token.empty(), file.string(), ": ", data::sft_format_name(format),
             " data ends each text with the tokenizer's eos_token, and ", tok.dir.string(),
             "/tokenizer_config.json names none");
  data::SftStats stats;
  auto features = std::make_shared<data::Features>(data::tokenize_sft(rows, tok.tokenizer, chat ? &*chat : nullptr, o, &stats));
  size_t tokens = 0, longest = 0, kept = 0;  // kept: the tokens of the examples cut to max_length
  for (const auto& ids : features->input_ids) {
    tokens += ids.size();
    longest = std::max(longest, ids.size());
    kept += std::min<size_t>(ids.size(), static_cast<size_t>(max_length));
  }
  std::fprintf(stderr, "kiln train: %s: %s data, %zu examples, %zu tokens", file.string().c_str(),
               data::sft_format_name(format), stats.rows, tokens);
  if (stats.dropped) std::fprintf(stderr, ", %zu dropped (no label left after truncation)", stats.dropped);
  if (stats.prefix_mismatches)
    std::fprintf(stderr, ", %zu whose prompt tokens are not a prefix of prompt + completion's", stats.prefix_mismatches);
  if (o.packing) {
    const size_t examples = features->size();
    features = std::make_shared<data::Features>(data::pack_sft(*features, max_length, strategy));
    size_t packed = 0, longest_row = 0;
    for (const auto& ids : features->input_ids) {
      packed += ids.size();
      longest_row = std::max(longest_row, ids.size());
    }
    // The padding share of each side's batches, every row padded to the
    // longest: the packed rows, and the examples as unpacked training reads
    // them (cut to max_length; strategies that split an example keep all of
    // its tokens, so the two sides may hold different token counts).
    auto padding = [](size_t real, size_t rows, size_t width) {
      return rows * width == 0 ? 0.0 : 100.0 * (1.0 - static_cast<double>(real) / static_cast<double>(rows * width));
    };
    std::fprintf(stderr, "; packed (%s) into %zu rows of up to %lld tokens: %.1f%% padding, against %.1f%% for the "
                 "%zu examples padded to the longest", data::packing_strategy_name(strategy), features->size(),
                 static_cast<long long>(max_length), padding(packed, features->size(), longest_row),
                 padding(kept, examples, std::min<size_t>(longest, static_cast<size_t>(max_length))), examples);
  }
  std::fprintf(stderr, "\n");
  KILN_CHECK(data::has_label(*features), file.string(), ": no token to train on after packing into rows of ",
             max_length, " tokens (each example's trained tokens are past its first ", max_length, ")");
  return features;
}

}  // namespace kiln::cli
