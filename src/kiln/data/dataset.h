#pragma once
// Text datasets read from files, the way Hugging Face's run_glue / run_mlm
// read --train_file: CSV, TSV, JSON Lines and plain text. Every row becomes an
// Example (text, optional text pair, optional label as written in the file).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::data {

// One row of a text dataset.
struct Example {
  std::string text;
  std::string text_pair;
  std::string label;  // "" = none
  // Token classification (DatasetOptions::split_into_words): the row's words
  // and one tag per word (empty when unlabeled).
  std::vector<std::string> words = {}, word_labels = {};
  // Question answering (DatasetOptions::question_answering): `text` is the
  // question, `text_pair` the context; the row's id, and its answers: each
  // text and where it starts in the context, in characters (code points, as
  // SQuAD's answer_start). No answers: unanswerable (SQuAD 2.0).
  std::string id = {};
  std::vector<std::string> answer_texts = {};
  std::vector<int64_t> answer_starts = {};
  // Multiple choice (DatasetOptions::multiple_choice): `text` is the context,
  // `text_pair` the start of every choice, `choices` their endings and
  // `label` the right one's index.
  std::vector<std::string> choices = {};
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
  // Question answering (run_qa): JSON rows {"id", "question", "context",
  // "answers": {"text": [...], "answer_start": [...]}} -- the question,
  // context and answers columns are text_column, text_pair_column and
  // label_column when those are set ("" label column: unlabeled) -- as JSON
  // lines, one array, run_qa's {"data": [rows]}, or SQuAD's own nested
  // {"data": [{"paragraphs": [{"context", "qas": [{"id", "question",
  // "answers": [{"text", "answer_start"}]}]}]}]}. A row without "id" (or with a null one) is
  // named by its position ("0", "1", ...). CSV, TSV and text files are an error.
  bool question_answering = false;
  // Multiple choice (run_swag): CSV/TSV/JSON rows with a context (text_column,
  // default "sent1"), the start of the choices (text_pair_column, default
  // "sent2"), endings "ending0", "ending1", ... (at least two, numbered from
  // 0 without gaps) and the right ending's index (label_column).
  bool multiple_choice = false;
  // Text files (.txt): each line keeps its line break ("\n", or "\r\n"), and a
  // blank line is a row of its line break, as datasets' text loader with
  // keep_linebreaks (run_clm's default). Otherwise lines lose them and blank
  // lines are dropped.
  bool keep_linebreaks = false;
  // A .json file holding one object with the rows under a key, as datasets'
  // JSON loader reads it with `field`: that key; "" = the object's only key
  // whose value is a list of objects. The key holds a list of rows, a list of
  // strings (a "text" column) or an object of equal-length column lists. A
  // file of JSON lines is read as before.
  std::string json_field = "";
};

struct Dataset {
  std::vector<Example> rows;
  std::string source;  // the file, for error messages
  bool has_labels = false;
};

// By extension:
//   .csv          RFC 4180: header row, quoted fields, "" escapes, newlines
//                 inside quotes, CRLF, LF or CR, blank lines skipped; a
//                 stray quote, or text after a closing quote, as pandas
//                 reads it (with a warning).
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
// The same from a file's bytes in memory: `source` is the file's name, whose
// extension picks the format, and prefixes every error.
Dataset parse_dataset(std::string_view bytes, const std::string& source, const DatasetOptions& options = {});

// The rows of a .jsonl file (one JSON object a line, blank lines skipped) or
// a .json file holding one array of objects, as JSON values, each with where
// it came from ("f.jsonl:3", "f.json: item 2"): for data whose cells are not
// strings (conversations). A UTF-8 byte-order mark is skipped; errors as
// load_dataset's (invalid JSON or UTF-8, a row that is not an object, no rows).
struct JsonRows {
  std::vector<nlohmann::ordered_json> objects;
  std::vector<std::string> where;
};
JsonRows load_json_rows(const std::filesystem::path& path);
JsonRows parse_json_rows(std::string_view bytes, const std::string& source);

}  // namespace kiln::data
