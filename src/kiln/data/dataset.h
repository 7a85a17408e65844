#pragma once
// Text datasets read from files, the way Hugging Face's run_glue / run_mlm
// read --train_file: CSV, TSV, JSON Lines and plain text. Every row becomes an
// Example (text, optional text pair, optional label as written in the file).
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::data {

// One row of a text dataset.
struct Example {
  std::string text;
  std::string text_pair;
  std::string label;  // "" = none
  // Token classification (DatasetOptions::split_into_words): the row's words
  // and one tag per word (empty when unlabeled).
  std::vector<std::string> words = {}, word_labels = {};
};

struct DatasetOptions {
  // "" = HF run_glue defaults: "sentence" or "text" or "sentence1", else the
  // first non-label column.
  std::string text_column = "";
  // "" = "sentence2" if present, else none.
  std::string text_pair_column = "";
  // "" or absent in the file = unlabeled (prediction). A label column whose
  // cells are all empty also reads as unlabeled.
  std::string label_column = "label";
  // Token classification (run_ner): JSON rows whose text column is a list of
  // words and whose label column is a list of tags, one per word (strings or
  // integers). CSV, TSV and text files are an error.
  bool split_into_words = false;
};

struct Dataset {
  std::vector<Example> rows;
  std::string source;  // the file, for error messages
  bool has_labels = false;
};

// By extension:
//   .csv          RFC 4180: header row, quoted fields, "" escapes, newlines
//                 inside quotes, CRLF or LF, blank lines skipped.
//   .tsv          header row, tab-separated, no quoting (as GLUE's TSVs are
//                 read: quotes are ordinary characters).
//   .jsonl/.json  one JSON object per line (a .json file holding one array of
//                 objects is read too); the label may be a string, an integer
//                 or a number.
//   .txt          one example per non-blank line, no label.
// A UTF-8 byte-order mark is skipped. Errors (kiln::Error) name the file, the
// line and the column or key: missing column (listing those that exist),
// ragged row, bad quote, invalid JSON, empty dataset, invalid UTF-8.
Dataset load_dataset(const std::filesystem::path& path, const DatasetOptions& options = {});

}  // namespace kiln::data
