#include "kiln/data/dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/core/atomic_file.h"
#include "kiln/io/compressed.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::data {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

// 1-based column, in code points, of byte `pos` on the line starting at `line_start`.
size_t column_of(std::string_view text, size_t line_start, size_t pos) {
  size_t col = 1;
  for (size_t i = line_start; i < pos && i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++col;
  return col;
}

// Throws at the first byte that does not start a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF included).
void check_utf8(std::string_view s, const std::string& where) {
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b == '\n') {
      ++line;
      line_start = ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(detail::concat(where, ":", line, ":", column_of(s, line_start, i), ": invalid UTF-8 (byte ", hex,
                                 ")"));
    }
    i += len;
  }
}

// A table read from CSV/TSV: the header, then each record with the line it starts on.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> records;
  std::vector<size_t> lines;
};

// RFC 4180 with LF, CRLF or CR line ends (pandas' C parser takes a lone CR as
// one). A quote opens a field or, doubled, stands for itself inside a quoted
// field; inside an unquoted field it is itself, and text after a quoted
// field's closing quote is appended to it, as pandas reads them (with a
// warning: often a field that should have been quoted). A quoted field that
// ran over lines and is followed by text is an error instead (pandas would
// join those lines into one row): most often a quote left open.
Table parse_csv(std::string_view s, const std::string& where) {
  Table t;
  size_t i = 0, line = 1, line_start = 0;
  size_t stray_quotes = 0, after_close = 0;
  std::string first_stray, first_after_close;
  auto at = [&](size_t pos) { return detail::concat(where, ":", line, ":", column_of(s, line_start, pos)); };
  auto is_eol = [&](size_t pos) { return s[pos] == '\n' || s[pos] == '\r'; };
  while (i < s.size()) {
    size_t record_line = line;
    std::vector<std::string> fields;
    bool any_quoted = false;
    while (true) {
      std::string field;
      if (i < s.size() && s[i] == '"') {
        any_quoted = true;
        size_t open = i, open_line = line, open_line_start = line_start;
        ++i;
        while (true) {
          if (i >= s.size())
            throw Error(detail::concat(where, ":", open_line, ":", column_of(s, open_line_start, open),
                                       ": bad quote: quoted field is never closed"));
          char c = s[i];
          if (c == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n') {
            ++line;
            line_start = i + 1;
          }
          field += c;
          ++i;
        }
        if (i < s.size() && s[i] != ',' && !is_eol(i)) {
          if (line != open_line)  // often a quote left open lines before: say where
            throw Error(detail::concat(at(i), ": bad quote: '", excerpt(std::string_view(s).substr(i, 1)),
                                       "' after the closing quote of a field that opened at ", open_line, ":",
                                       column_of(s, open_line_start, open),
                                       " (a quote inside a field is written \"\")"));
          if (after_close++ == 0) first_after_close = at(i);
          while (i < s.size() && s[i] != ',' && !is_eol(i)) field += s[i++];
        }
      } else {
        while (i < s.size() && s[i] != ',' && !is_eol(i)) {
          if (s[i] == '"' && stray_quotes++ == 0) first_stray = at(i);
          field += s[i++];
        }
      }
      fields.push_back(std::move(field));
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size()) {  // end of line
        i += s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
        ++line;
        line_start = i;
      }
      break;
    }
    if (fields.size() == 1 && fields[0].empty() && !any_quoted) continue;  // blank line
    if (t.header.empty()) {
      t.header = std::move(fields);
    } else {
      t.records.push_back(std::move(fields));
      t.lines.push_back(record_line);
    }
  }
  if (stray_quotes > 0)
    std::fprintf(stderr, "kiln: warning: %s: '\"' inside an unquoted field, read as a quote as pandas reads it (%zu "
                 "such quote%s; to be sure, quote the whole field and double the quote: \"a \"\"b\"\"\")\n",
                 first_stray.c_str(), stray_quotes, stray_quotes == 1 ? "" : "s");
  if (after_close > 0)
    std::fprintf(stderr, "kiln: warning: %s: text after the closing quote of a quoted field, appended to the field as "
                 "pandas reads it (%zu such field%s; to be sure, quote the whole field and double the quotes inside it)\n",
                 first_after_close.c_str(), after_close, after_close == 1 ? "" : "s");
  return t;
}

// Calls fn(number, line, ended) for each line of s: numbered from 1, without
// its '\n' (ended: it had one).
template <class Fn>
void for_each_line(std::string_view s, Fn&& fn) {
  size_t number = 0, pos = 0;
  while (pos < s.size()) {
    size_t end = s.find('\n', pos);
    const bool ended = end != std::string_view::npos;
    if (!ended) end = s.size();
    fn(++number, s.substr(pos, end - pos), ended);
    pos = end + 1;
  }
}

// Tab-separated, one record per line, no quoting.
Table parse_tsv(std::string_view s) {
  Table t;
  for_each_line(s, [&](size_t line, std::string_view l, bool) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) return;
    std::vector<std::string> fields;
    size_t start = 0;
    while (true) {
      size_t tab = l.find('\t', start);
      fields.emplace_back(l.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    if (t.header.empty()) {
      t.header = std::move(fields);
    } else {
      t.records.push_back(std::move(fields));
      t.lines.push_back(line);
    }
  });
  return t;
}

// Which columns hold the text, the pair and the label.
struct Columns {
  std::string text, pair, label;  // "" = none
};

Columns resolve_columns(const std::vector<std::string>& names, const DatasetOptions& o, const std::string& where) {
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  auto missing = [&](const char* what, const std::string& n) {
    return Error(detail::concat(where, ": missing ", what, " column '", n, "' (columns: ", joined(names), ")"));
  };
  Columns c;
  if (!o.label_column.empty() && has(o.label_column)) c.label = o.label_column;
  // run_ner's defaults: "tokens" and "ner_tags".
  if (o.split_into_words && o.label_column == "label" && c.label.empty() && has("ner_tags")) c.label = "ner_tags";
  if (o.split_into_words && o.text_column.empty() && has("tokens")) {
    c.text = "tokens";
  } else if (!o.text_column.empty()) {
    if (!has(o.text_column)) throw missing("text", o.text_column);
    c.text = o.text_column;
  } else {
    for (const char* n : {"sentence", "text", "sentence1"})
      if (has(n)) {
        c.text = n;
        break;
      }
    if (c.text.empty())
      for (const auto& n : names)
        if (n != c.label) {
          c.text = n;
          break;
        }
    KILN_CHECK(!c.text.empty(), where, ": no text column (columns: ", joined(names), ")");
  }
  if (!o.text_pair_column.empty()) {
    if (!has(o.text_pair_column)) throw missing("text pair", o.text_pair_column);
    c.pair = o.text_pair_column;
  } else if (has("sentence2") && c.text != "sentence2") {
    c.pair = "sentence2";
  }
  return c;
}

// Multiple choice: the context and choice-start columns, and ending0, ending1, ... as many as exist.
Columns choice_columns(const std::vector<std::string>& names, const DatasetOptions& o, const std::string& where,
                       std::vector<std::string>* endings) {
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  Columns c;
  c.text = o.text_column.empty() ? "sent1" : o.text_column;
  c.pair = o.text_pair_column.empty() ? "sent2" : o.text_pair_column;
  for (const std::string* n : {&c.text, &c.pair})
    KILN_CHECK(has(*n), where, ": missing column '", *n, "' (multiple choice reads run_swag's sent1, sent2, ",
               "ending0, ending1, ...; columns: ", joined(names), ")");
  while (has("ending" + std::to_string(endings->size()))) endings->push_back("ending" + std::to_string(endings->size()));
  KILN_CHECK(endings->size() >= 2, where, ": multiple choice needs columns ending0, ending1, ... (at least two), found ",
             endings->size(), " (columns: ", joined(names), ")");
  if (!o.label_column.empty() && has(o.label_column)) c.label = o.label_column;
  return c;
}

// An empty label column means an unlabeled file; a partly empty one is an error.
void finish_labels(Dataset& ds, const Columns& c, const std::vector<std::string>& row_where) {
  if (c.label.empty()) return;
  size_t empty = 0;
  for (const auto& r : ds.rows) empty += r.label.empty();
  if (empty == ds.rows.size()) return;
  for (size_t r = 0; r < ds.rows.size(); ++r)
    KILN_CHECK(!ds.rows[r].label.empty(), row_where[r], ": empty label in column '", c.label,
               "' (other rows are labeled)");
  ds.has_labels = true;
}

Dataset from_table(Table t, const DatasetOptions& o, const std::string& where) {
  KILN_CHECK(!t.records.empty(), where, ": empty dataset (no rows)");
  for (size_t a = 0; a < t.header.size(); ++a)
    for (size_t b = a + 1; b < t.header.size(); ++b)
      KILN_CHECK(t.header[a] != t.header[b], where, ": duplicate column '", t.header[a], "' in the header");
  std::vector<std::string> endings;
  Columns c = o.multiple_choice ? choice_columns(t.header, o, where, &endings) : resolve_columns(t.header, o, where);
  auto index = [&](const std::string& n) -> int {
    if (n.empty()) return -1;
    return static_cast<int>(std::find(t.header.begin(), t.header.end(), n) - t.header.begin());
  };
  int ti = index(c.text), pi = index(c.pair), li = index(c.label);
  std::vector<int> ei;
  for (const auto& n : endings) ei.push_back(index(n));
  Dataset ds;
  ds.source = where;
  ds.rows.reserve(t.records.size());
  std::vector<std::string> row_where;
  for (size_t r = 0; r < t.records.size(); ++r) {
    auto& f = t.records[r];
    row_where.push_back(detail::concat(where, ":", t.lines[r]));
    KILN_CHECK(f.size() == t.header.size(), row_where.back(), ": ragged row: expected ", t.header.size(),
               " fields (columns: ", joined(t.header), "), found ", f.size());
    Example e;
    e.text = std::move(f[ti]);
    if (pi >= 0) e.text_pair = std::move(f[pi]);
    if (li >= 0) e.label = std::move(f[li]);
    for (int k : ei) e.choices.push_back(std::move(f[k]));
    ds.rows.push_back(std::move(e));
  }
  finish_labels(ds, c, row_where);
  return ds;
}

std::string number_string(const ordered_json& v) {
  if (v.is_number_integer()) return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>())
                                                           : std::to_string(v.get<int64_t>());
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v.get<double>());  // shortest round-trip form
  return std::string(buf, res.ptr);
}

// A cell of a JSON record as text: strings as they are, numbers and booleans written out.
std::string json_cell(const ordered_json& obj, const std::string& key, bool label, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    std::vector<std::string> keys;
    for (auto k = obj.begin(); k != obj.end(); ++k) keys.push_back(k.key());
    throw Error(detail::concat(where, ": missing key '", key, "' (keys: ", joined(keys), ")"));
  }
  const ordered_json& v = *it;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return number_string(v);
  if (label && v.is_null()) return "";
  if (!label && v.is_boolean()) return v.get<bool>() ? "true" : "false";
  throw Error(detail::concat(where, ": key '", key, "': expected ", label ? "a string or a number" : "a string",
                             ", found ", json_found(v)));
}

// A JSON list of strings (numbers written out when `numbers`), for split_into_words.
std::vector<std::string> json_list(const ordered_json& obj, const std::string& key, bool numbers,
                                   const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    std::vector<std::string> keys;
    for (auto k = obj.begin(); k != obj.end(); ++k) keys.push_back(k.key());
    throw Error(detail::concat(where, ": missing key '", key, "' (keys: ", joined(keys), ")"));
  }
  KILN_CHECK(it->is_array(), where, ": key '", key, "': expected a list of ", numbers ? "tags" : "words",
             ", found ", json_found(*it));
  std::vector<std::string> out;
  for (const auto& v : *it) {
    KILN_CHECK(v.is_string() || (numbers && v.is_number()), where, ": key '", key, "': expected ",
               numbers ? "strings or integers" : "strings", " in the list, found ", json_found(v));
    out.push_back(v.is_string() ? v.get<std::string>() : number_string(v));
  }
  return out;
}

// One answer of a question-answering row, checked against its context.
void add_answer(Example& e, const ordered_json& text, const ordered_json& start, const std::string& where,
                size_t* misplaced, std::string* first_misplaced) {
  KILN_CHECK(text.is_string(), where, ": an answer's text must be a string, found ", json_found(text));
  KILN_CHECK(start.is_number_integer() && start.get<int64_t>() >= 0, where,
             ": an answer's answer_start must be a character index (an integer >= 0), found ", json_found(start));
  const std::string t = text.get<std::string>();
  const int64_t begin = start.get<int64_t>();
  const size_t n = tokenizers::utf8::count_chars(t), context = tokenizers::utf8::count_chars(e.text_pair);
  KILN_CHECK(static_cast<size_t>(begin) + n <= context, where, ": answer '", t, "' at answer_start ", begin, " ends at ",
             static_cast<size_t>(begin) + n, ", past the context's ", context, " characters");
  const std::string_view found = tokenizers::utf8::slice_chars(e.text_pair, static_cast<size_t>(begin), begin + n);
  if (found != t && (*misplaced)++ == 0)
    *first_misplaced = detail::concat(where, ": answer '", t, "' at answer_start ", begin, " reads '", found, "'");
  e.answer_texts.push_back(t);
  e.answer_starts.push_back(begin);
}

// run_qa's rows (or SQuAD's nested file, flattened) as question/context/answers examples.
Dataset load_qa(const std::vector<ordered_json>& objects, const std::vector<std::string>& row_where,
                const DatasetOptions& o, const std::string& where) {
  const std::string question = o.text_column.empty() ? "question" : o.text_column;
  const std::string context = o.text_pair_column.empty() ? "context" : o.text_pair_column;
  const std::string answers = o.label_column == "label" ? "answers" : o.label_column;  // "": unlabeled
  Dataset ds;
  ds.source = where;
  size_t labeled = 0, misplaced = 0;
  std::string first_misplaced;
  std::map<std::string, size_t> ids;
  for (size_t r = 0; r < objects.size(); ++r) {
    const ordered_json& row = objects[r];
    const std::string& at = row_where[r];
    Example e;
    e.text = json_cell(row, question, false, at);
    e.text_pair = json_cell(row, context, false, at);
    const auto id = row.find("id");
    e.id = id != row.end() && !id->is_null() ? json_cell(row, "id", true, at) : std::to_string(r);
    auto [seen, fresh] = ids.emplace(e.id, r);
    KILN_CHECK(fresh, at, ": id '", e.id, "' is also the id of ", row_where[seen->second],
               " (predictions are keyed by id)");
    auto a = answers.empty() ? row.end() : row.find(answers);
    if (a != row.end() && !a->is_null()) {
      ++labeled;
      if (a->is_object()) {  // datasets' squad features: {"text": [...], "answer_start": [...]}
        auto t = a->find("text"), s = a->find("answer_start");
        KILN_CHECK(t != a->end() && s != a->end() && t->is_array() && s->is_array(), at, ": key '", answers,
                   "': expected {\"text\": [...], \"answer_start\": [...]}, found ", json_found(*a));
        KILN_CHECK(t->size() == s->size(), at, ": key '", answers, "': ", t->size(), " texts but ", s->size(),
                   " answer_start values");
        for (size_t k = 0; k < t->size(); ++k) add_answer(e, (*t)[k], (*s)[k], at, &misplaced, &first_misplaced);
      } else {
        KILN_CHECK(a->is_array(), at, ": key '", answers,
                   "': expected {\"text\": [...], \"answer_start\": [...]} or a list of {\"text\", \"answer_start\"}, "
                   "found ", json_found(*a));
        for (const auto& one : *a) {
          KILN_CHECK(one.is_object() && one.contains("text") && one.contains("answer_start"), at, ": key '", answers,
                     "': expected {\"text\", \"answer_start\"} in the list, found ", json_found(one));
          add_answer(e, one["text"], one["answer_start"], at, &misplaced, &first_misplaced);
        }
      }
    }
    ds.rows.push_back(std::move(e));
  }
  KILN_CHECK(labeled == 0 || labeled == ds.rows.size(), where, ": ", ds.rows.size() - labeled, " of ",
             ds.rows.size(), " rows have no '", answers, "' (other rows have answers; an unanswerable question has ",
             "an empty list)");
  ds.has_labels = labeled > 0;
  if (misplaced)  // trained on as they are, as run_qa does; the count says how many
    std::fprintf(stderr, "kiln: warning: %s: %zu answer(s) differ from the context at their answer_start; first: %s\n",
                 where.c_str(), misplaced, first_misplaced.c_str());
  return ds;
}

// A whole .json document holding {"data": [...]} (run_qa's field="data"):
// its rows, flattening SQuAD's nested data/paragraphs/qas; nullopt when the
// document is not such an object (it is read as JSON lines then).
std::optional<std::vector<ordered_json>> qa_document(std::string_view s, const std::string& where,
                                                     std::vector<std::string>* row_where) {
  ordered_json doc;
  try {
    doc = parse_ordered_json(s, where);
  } catch (const Error&) {  // not one document: JSON lines, read (and reported) as such
    return std::nullopt;
  }
  if (!doc.is_object() || !doc.contains("data")) return std::nullopt;
  const ordered_json& data = doc["data"];
  KILN_CHECK(data.is_array(), where, ": key 'data': expected a list of rows, found ", json_found(data));
  std::vector<ordered_json> rows;
  for (size_t k = 0; k < data.size(); ++k) {
    const ordered_json& item = data[k];
    if (!item.is_object() || !item.contains("paragraphs")) {
      rows.push_back(item);
      row_where->push_back(detail::concat(where, ": data[", k, "]"));
      continue;
    }
    const ordered_json& paragraphs = item["paragraphs"];
    KILN_CHECK(paragraphs.is_array(), where, ": data[", k, "].paragraphs: expected a list, found ",
               json_found(paragraphs));
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string at = detail::concat(where, ": data[", k, "].paragraphs[", p, "]");
      const ordered_json& par = paragraphs[p];
      KILN_CHECK(par.is_object() && par.contains("context") && par.contains("qas") && par["qas"].is_array(), at,
                 ": expected {\"context\": ..., \"qas\": [...]}, found ", json_found(par));
      for (size_t q = 0; q < par["qas"].size(); ++q) {
        ordered_json row = par["qas"][q];
        KILN_CHECK(row.is_object(), at, ".qas[", q, "]: expected a JSON object, found ", json_found(row));
        row["context"] = par["context"];
        rows.push_back(std::move(row));
        row_where->push_back(detail::concat(at, ".qas[", q, "]"));
      }
    }
  }
  return rows;
}

// The value under datasets' `field` as rows, as datasets reads it through pandas: a list of rows; a list of
// scalars, as one "text" column; or an object of equal-length lists, one per column.
std::vector<ordered_json> rows_of_field(ordered_json& v, const std::string& key, const std::string& where,
                                        std::vector<std::string>* row_where) {
  std::vector<ordered_json> rows;
  if (v.is_object()) {
    size_t n = 0;
    std::string first;
    for (const auto& [column, values] : v.items()) {
      KILN_CHECK(values.is_array(), where, ": field '", key, "' holds columns, but column '", column,
                 "' is not a list: found ", json_found(values));
      if (first.empty()) std::tie(first, n) = std::pair{column, values.size()};
      KILN_CHECK(values.size() == n, where, ": field '", key, "': column '", column, "' has ", values.size(),
                 " values, column '", first, "' has ", n, " (columns must be of the same length)");
    }
    for (size_t r = 0; r < n; ++r) {
      ordered_json row = ordered_json::object();
      for (auto& [column, values] : v.items()) row[column] = std::move(values[r]);
      row_where->push_back(detail::concat(where, ": ", key, " row ", r));
      rows.push_back(std::move(row));
    }
    return rows;
  }
  KILN_CHECK(v.is_array(), where, ": field '", key, "' must be a list of rows or an object of columns, found ",
             json_found(v));
  const bool scalars = std::none_of(v.begin(), v.end(), [](const ordered_json& x) { return x.is_structured(); });
  for (size_t k = 0; k < v.size(); ++k) {
    row_where->push_back(detail::concat(where, ": ", key, "[", k, "]"));
    rows.push_back(scalars ? ordered_json{{"text", std::move(v[k])}} : std::move(v[k]));
  }
  return rows;
}

// datasets' JSON with `field`: the rows under `field` (or under the only key holding a list of objects) of a file
// that is one object; nullopt when the file is not one object (JSON lines) and no field was asked for.
std::optional<std::vector<ordered_json>> field_rows(std::string_view s, const std::string& field,
                                                    const std::string& where, std::vector<std::string>* row_where) {
  ordered_json doc;
  try {
    doc = parse_ordered_json(s, where);
  } catch (const Error&) {
    if (!field.empty()) throw;
    return std::nullopt;  // JSON lines (or broken JSON: the line reader says where)
  }
  if (!doc.is_object()) return std::nullopt;
  std::string key = field;
  if (key.empty()) {
    std::vector<std::string> lists;
    for (const auto& [k, v] : doc.items())
      if (v.is_array() && !v.empty() && v.front().is_object()) lists.push_back(k);
    KILN_CHECK(lists.size() < 2, where, ": lists of rows under several keys (", joined(lists),
               "): name the one to read, as datasets' `field` (--train_file_field, --validation_file_field or "
               "--test_file_field)");
    if (lists.empty()) return std::nullopt;  // one row of JSON lines
    key = lists.front();
  }
  if (!doc.contains(key)) {
    std::vector<std::string> keys;
    for (auto k = doc.begin(); k != doc.end(); ++k) keys.push_back(k.key());
    throw Error(detail::concat(where, ": no field '", key, "' (keys: ", joined(keys), ")"));
  }
  return rows_of_field(doc[key], key, where, row_where);
}

// A .json file's one array of objects, or JSON lines; each value with where it came from.
JsonRows json_rows(std::string_view s, bool allow_array, const std::string& where) {
  JsonRows rows;
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (allow_array && first != std::string_view::npos && s[first] == '[') {
    ordered_json arr = parse_ordered_json(s, where);
    for (size_t k = 0; k < arr.size(); ++k) {
      rows.where.push_back(detail::concat(where, ": item ", k));
      rows.objects.push_back(std::move(arr[k]));
    }
    return rows;
  }
  for_each_line(s, [&](size_t line, std::string_view l, bool) {
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) return;
    rows.objects.push_back(parse_ordered_json(l, where, line));
    rows.where.push_back(detail::concat(where, ":", line));
  });
  return rows;
}

Dataset load_json(std::string_view s, bool allow_array, const DatasetOptions& o, const std::string& where) {
  std::vector<ordered_json> objects;
  std::vector<std::string> row_where;
  size_t first = s.find_first_not_of(" \t\r\n");
  std::optional<std::vector<ordered_json>> document;
  if (o.question_answering && allow_array && first != std::string_view::npos && s[first] == '{')
    document = qa_document(s, where, &row_where);
  if (!document && allow_array && first != std::string_view::npos && s[first] == '{')
    document = field_rows(s, o.json_field, where, &row_where);
  if (document) {
    objects = std::move(*document);
  } else {
    JsonRows rows = json_rows(s, allow_array, where);
    objects = std::move(rows.objects);
    row_where = std::move(rows.where);
  }
  KILN_CHECK(!objects.empty(), where, ": empty dataset (no rows)");
  for (size_t r = 0; r < objects.size(); ++r)
    KILN_CHECK(objects[r].is_object(), row_where[r], ": expected a JSON object, found ", json_found(objects[r]));
  if (o.question_answering) return load_qa(objects, row_where, o, where);
  std::vector<std::string> names, endings;
  for (auto k = objects[0].begin(); k != objects[0].end(); ++k) names.push_back(k.key());
  Columns c = o.multiple_choice ? choice_columns(names, o, row_where[0], &endings) : resolve_columns(names, o, row_where[0]);
  Dataset ds;
  ds.source = where;
  ds.rows.reserve(objects.size());
  if (o.split_into_words) {  // run_ner: a list of words and a list of tags per row
    size_t labeled = 0;
    for (size_t r = 0; r < objects.size(); ++r) {
      Example e;
      e.words = json_list(objects[r], c.text, false, row_where[r]);
      if (!c.label.empty() && objects[r].contains(c.label) && !objects[r][c.label].is_null()) {
        e.word_labels = json_list(objects[r], c.label, true, row_where[r]);
        KILN_CHECK(e.word_labels.size() == e.words.size(), row_where[r], ": ", e.words.size(), " words in '", c.text,
                   "' but ", e.word_labels.size(), " tags in '", c.label, "' (one tag per word)");
        ++labeled;
      }
      ds.rows.push_back(std::move(e));
    }
    KILN_CHECK(labeled == 0 || labeled == ds.rows.size(), where, ": ", ds.rows.size() - labeled, " of ",
               ds.rows.size(), " rows have no '", c.label, "' (other rows are labeled)");
    ds.has_labels = labeled > 0;
    return ds;
  }
  for (size_t r = 0; r < objects.size(); ++r) {
    Example e;
    e.text = json_cell(objects[r], c.text, false, row_where[r]);
    if (!c.pair.empty()) e.text_pair = json_cell(objects[r], c.pair, false, row_where[r]);
    if (!c.label.empty()) e.label = json_cell(objects[r], c.label, true, row_where[r]);
    for (const auto& n : endings) e.choices.push_back(json_cell(objects[r], n, false, row_where[r]));
    ds.rows.push_back(std::move(e));
  }
  finish_labels(ds, c, row_where);
  return ds;
}

Dataset load_text(std::string_view s, const std::string& where, bool keep_linebreaks) {
  Dataset ds;
  ds.source = where;
  for_each_line(s, [&](size_t, std::string_view l, bool ended) {
    if (keep_linebreaks) {
      ds.rows.push_back(Example{std::string(l) + (ended ? "\n" : ""), "", ""});
      return;
    }
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.find_first_not_of(" \t\f\v\r") == std::string_view::npos) return;
    ds.rows.push_back(Example{std::string(l), "", ""});
  });
  KILN_CHECK(!ds.rows.empty(), where, ": empty dataset (no rows)");
  return ds;
}

// The format's extension, lower case (".csv"; "train.csv.gz" is a CSV file); an error for other files.
std::string check_extension(const fs::path& path) {
  std::string ext = io::without_compression(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  KILN_CHECK(ext == ".csv" || ext == ".tsv" || ext == ".json" || ext == ".jsonl" || ext == ".txt", path.string(),
             ": unsupported dataset file extension '", ext,
             "' (expected .csv, .tsv, .json, .jsonl or .txt, optionally compressed: .gz or .zst)");
  return ext;
}

}  // namespace

Dataset load_dataset(const fs::path& path, const DatasetOptions& options) {
  check_extension(path);
  return parse_dataset(io::read_data_file(path), path.string(), options);
}

JsonRows load_json_rows(const fs::path& path) { return parse_json_rows(read_file(path), path.string()); }

JsonRows parse_json_rows(std::string_view s, const std::string& where) {
  const std::string ext = check_extension(where);
  KILN_CHECK(ext == ".json" || ext == ".jsonl", where, ": expected a .jsonl or .json file of JSON objects, not '", ext,
             "'");
  if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  check_utf8(s, where);
  JsonRows rows = json_rows(s, ext == ".json", where);
  KILN_CHECK(!rows.objects.empty(), where, ": empty dataset (no rows)");
  for (size_t r = 0; r < rows.objects.size(); ++r)
    KILN_CHECK(rows.objects[r].is_object(), rows.where[r], ": expected a JSON object, found ",
               json_found(rows.objects[r]));
  return rows;
}

Dataset parse_dataset(std::string_view s, const std::string& where, const DatasetOptions& options) {
  const std::string ext = check_extension(where);
  if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  check_utf8(s, where);
  KILN_CHECK(!options.question_answering || ext == ".json" || ext == ".jsonl", where, ": question answering reads ",
             ".jsonl or .json rows {\"id\", \"question\", \"context\", \"answers\": {\"text\": [...], ",
             "\"answer_start\": [...]}} (or SQuAD's own .json), not '", ext, "'");
  KILN_CHECK(!options.split_into_words || ext == ".json" || ext == ".jsonl", where, ": token classification reads ",
             ".jsonl or .json rows holding a list of words and a list of tags (e.g. {\"tokens\": [\"EU\", ",
             "\"rejects\"], \"ner_tags\": [\"B-ORG\", \"O\"]}), not '", ext, "'");
  if (ext == ".csv") return from_table(parse_csv(s, where), options, where);
  if (ext == ".tsv") return from_table(parse_tsv(s), options, where);
  KILN_CHECK(!options.multiple_choice || ext != ".txt", where, ": multiple choice reads CSV, TSV or JSON rows ",
             "(sent1, sent2, ending0, ending1, ..., label), not '", ext, "'");
  if (ext == ".txt") return load_text(s, where, options.keep_linebreaks);
  return load_json(s, ext == ".json", options, where);
}

}  // namespace kiln::data
