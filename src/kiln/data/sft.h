#pragma once
// Supervised fine-tuning data, as TRL's SFTTrainer prepares it
// (SFTTrainer._prepare_dataset): rows of a JSON-lines file in one of TRL's
// formats, rendered with the model's chat template when conversational,
// tokenized, and given labels that are -100 where the loss is not taken.
//
//   language modeling       {"text": "..."}           the text + EOS, loss on all tokens
//   conversational          {"messages": [{"role", "content"}, ...]}
//   prompt-completion       {"prompt": "...", "completion": "..."}      completion + EOS
//   conversational p-c      {"prompt": [messages], "completion": [messages]}
//
// Packing (TRL's packing strategies, pack_sft) then puts several examples in
// one row; Features::seq_lengths records where each starts again.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/tokenizers/chat_template.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::data {

enum class SftFormat { Language, Conversational, PromptCompletion, ConversationalPromptCompletion };
const char* sft_format_name(SftFormat f);

// TRL's dataset type of a file: from its first row, as TRL decides it
// ("prompt" -> prompt-completion, "messages" -> conversational, else the text
// column). `conversations` lists of {"from", "value"} (ShareGPT) count as
// messages (TRL converts them).
SftFormat detect_sft_format(const JsonRows& rows, const std::string& text_column = "text");

// Whether the first row of a JSON-lines / JSON file is conversational or
// prompt-completion data (what makes --task causal-lm read it as SFT data).
bool looks_like_sft_data(const JsonRows& rows);

struct SftOptions {
  // Loss only on the tokens of the template's {% generation %} blocks
  // (conversational data; an error for a template without them).
  bool assistant_only_loss = false;
  // Loss only on the completion; unset: TRL's default, on for prompt-completion data.
  std::optional<bool> completion_only_loss;
  // TRL's max_length (keep_start truncation, then rows left without a label
  // dropped); <= 0: none. Not applied here when packing (pack_sft truncates).
  int64_t max_length = 1024;
  bool packing = false;
  std::string text_column = "text";  // TRL's dataset_text_field
  std::string eos_token;             // appended to non-conversational text and completions
};

struct SftStats {
  size_t rows = 0, dropped = 0;  // dropped: left without a label by truncation
  size_t prefix_mismatches = 0;  // prompt tokens that are not a prefix of prompt + completion's (TRL warns)
};

// input_ids and token_labels per row (labels = the ids, -100 outside the
// loss). `chat` is needed for conversational data. Errors name the file and row.
Features tokenize_sft(const JsonRows& rows, const tokenizers::Tokenizer& tok, const tokenizers::ChatTemplate* chat,
                      const SftOptions& options, SftStats* stats = nullptr);

// TRL's packing_strategy values: "bfd" (its default), "bfd_split", "wrapped".
enum class PackingStrategy { Bfd, BfdSplit, Wrapped };
const char* packing_strategy_name(PackingStrategy s);
// From TRL's name; anything else is an error naming the choices.
PackingStrategy parse_packing_strategy(const std::string& name);

// TRL's pack_dataset(rows, max_length, strategy), a batch of 1000 rows at a
// time as datasets' map hands them to it:
//   bfd        each row cut to max_length, then best-fit decreasing into rows
//              of at most max_length tokens (the longest first, each into the
//              fullest row it fits; empty rows dropped);
//   bfd_split  the same, with a row longer than max_length split into pieces
//              of max_length (and the rest) instead of cut;
//   wrapped    the rows one after another, cut every max_length tokens: an
//              example may span two rows and a row holds one sequence (no
//              seq_lengths: attention crosses examples, as TRL's).
// seq_lengths (bfd, bfd_split) gives each packed row's examples' lengths, in order.
Features pack_sft(const Features& rows, int64_t max_length, PackingStrategy strategy = PackingStrategy::Bfd);

// Whether any row has a token to train on: a label other than -100 past the first token of its example
// (the first is never predicted; packed rows' examples are seq_lengths).
bool has_label(const Features& f);

}  // namespace kiln::data
