#pragma once
// Tokenized datasets: the `datasets.map(preprocess_function, batched=True)`
// step of run_glue (tokenize_dataset) and run_mlm / run_clm (group_texts).
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/labels.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::data {

// Rows of token ids, unpadded (the collator pads per batch).
struct Features {
  std::vector<std::vector<int64_t>> input_ids, token_type_ids;
  std::vector<int64_t> labels;      // class ids (or empty)
  std::vector<float> float_labels;  // regression (or empty)
  std::vector<std::vector<int64_t>> target_ids;  // seq2seq targets (or empty)
  std::vector<std::vector<int64_t>> token_labels;  // token classification: a class id or -100 per token (or empty)
  // token classification: the word each token belongs to (-1 for specials), to read predictions per word
  std::vector<std::vector<int64_t>> word_ids;
  // Question answering (tokenize_qa), per row -- one window of a context:
  // the answer's first and last token (both the [CLS] token's position when
  // the window does not hold the whole answer, or there is none), or empty
  // when the data has no answers; the example (row of `examples`) it comes
  // from; and each token's character span in that example's context
  // ({-1, -1}: a question token, a special token).
  std::vector<int64_t> start_positions, end_positions;
  std::vector<int64_t> example_index;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> context_offsets;
  std::shared_ptr<const Dataset> examples;  // ids, contexts and gold answers
  // Multiple choice (tokenize_choices): input_ids / token_type_ids hold a
  // row's choices one after the other; these are their lengths.
  std::vector<std::vector<int64_t>> choice_lengths;
  // Packed rows (pack_sft): the lengths of the examples each row holds, in
  // order; the collator restarts position ids and confines attention to each.
  std::vector<std::vector<int64_t>> seq_lengths;
  size_t size() const { return input_ids.size(); }
  // The first n rows (all when n >= size()): HF's dataset.select(range(n)).
  Features head(size_t n) const;
};

// Special tokens added, pairs when any row has a text_pair, truncation to
// max_length (longest_first for pairs; max_length <= 0: none), no padding.
// Labels: class ids through `labels`, or float values when
// labels->is_regression; none when `labels` is null or `ds` is unlabeled.
// A label `labels` does not know is an error naming the file and row.
// Encodes on all cores (the tokenizer's batch encode).
Features tokenize_dataset(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                          const LabelMap* labels);

// Token classification (run_ner's tokenize_and_align_labels): each row's
// words encoded as pre-split input (is_split_into_words; a byte-level
// tokenizer with add_prefix_space, as run_ner loads RoBERTa's) with specials,
// truncated to max_length tokens. The first token of a word gets the word's
// tag id; specials get -100, and so do a word's other tokens unless
// label_all_tokens, which gives them the tag with B- turned into I- when the
// label map has that I- tag (HF's b_to_i_label). Tags through `labels`; none
// when `labels` is null or `ds` is unlabeled.
Features tokenize_words(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                        const LabelMap* labels, bool label_all_tokens);

// One value per word of a row: the value of the word's first token (how a
// token classifier's per-token predictions become one tag per word).
// `word_ids` is the row's Features::word_ids (-1 for specials); a word cut by
// truncation has no token and no value.
std::vector<int64_t> per_word(const std::vector<int64_t>& token_values, const std::vector<int64_t>& word_ids);

// Question answering (run_qa's prepare_train_features and
// prepare_validation_features): each example's question (leading whitespace
// stripped) and context encoded as a pair with specials, the context cut
// into windows of max_length tokens that overlap by doc_stride tokens (HF's
// truncation="only_second", return_overflowing_tokens), one row per window.
// Every window: without tokenizers 0.23's truncation early exit, which keeps
// only what fits the first (TruncationParams::early_exit).
// When `ds` has answers, each window's start/end positions are its first
// answer's tokens. Unlike HF's walk, which can run past the context into
// [SEP] and padding when the answer starts in the window's last token, the
// positions never leave the context.
Features tokenize_qa(std::shared_ptr<const Dataset> ds, const tokenizers::Tokenizer& tok, int64_t max_length,
                     int64_t doc_stride);

// Multiple choice (run_swag's preprocess_function): each choice of a row is
// the pair (context, choice start + " " + ending) with specials, truncated
// longest-first to max_length; labels are the right choice's index (a label
// that is not an index below the number of choices is an error naming the
// row; none when `ds` is unlabeled).
Features tokenize_choices(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_length);

// Causal / masked LM text (run_clm / run_mlm "group_texts"): every row encoded
// without special tokens, concatenated, and cut into blocks; with
// add_special_tokens each block is wrapped in the tokenizer's own single-
// sequence specials ([CLS] … [SEP] for BERT, <s> … </s> for RoBERTa, none for
// GPT-2) and the whole block, specials included, is block_size long. The
// final partial block is dropped, unless the text is shorter than one block.
Features group_texts(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t block_size,
                     bool add_special_tokens);

// Sequence-to-sequence (run_summarization / run_translation): each row's text
// (with `source_prefix` in front, e.g. "summarize: ") becomes input_ids, its
// text_pair the target ids; both with the tokenizer's specials (T5: </s>),
// truncated to their maximum lengths.
Features tokenize_seq2seq(const Dataset& ds, const tokenizers::Tokenizer& tok, int64_t max_source_length,
                          int64_t max_target_length, const std::string& source_prefix);

}  // namespace kiln::data
