// load_dataset: CSV (RFC 4180 edge cases), TSV, JSON Lines, plain text, and
// every error with the file, line and column or key it names.
#include <algorithm>

#include <gtest/gtest.h>

#include "data/util.h"
#include "kiln/core/file.h"
#include "kiln/data/dataset.h"
#include "kiln/data/labels.h"

using namespace kiln::data;
using kiln::testing::error_of;
using kiln::testing::TempDir;

TEST(CsvTest, QuotesEscapesCommasNewlinesCrlfBom) {
  TempDir d;
  auto p = d.write("t.csv",
                   "\xEF\xBB\xBFsentence,label\r\n"
                   "plain text,pos\r\n"
                   "\"with, comma\",neg\r\n"
                   "\"she said \"\"hi\"\"\",pos\r\n"
                   "\"two\r\nlines\",neg\r\n"
                   "\r\n"
                   "\"\",pos\n"
                   "last,neg");  // no final newline
  Dataset ds = load_dataset(p);
  ASSERT_EQ(ds.rows.size(), 6u);
  EXPECT_TRUE(ds.has_labels);
  EXPECT_EQ(ds.source, p.string());
  EXPECT_EQ(ds.rows[0].text, "plain text");
  EXPECT_EQ(ds.rows[0].label, "pos");
  EXPECT_EQ(ds.rows[1].text, "with, comma");
  EXPECT_EQ(ds.rows[2].text, "she said \"hi\"");
  EXPECT_EQ(ds.rows[3].text, "two\r\nlines");  // kept as written inside quotes
  EXPECT_EQ(ds.rows[4].text, "");              // a quoted empty field is a row, a blank line is not
  EXPECT_EQ(ds.rows[5].text, "last");
  EXPECT_EQ(ds.rows[5].label, "neg");
  EXPECT_TRUE(ds.rows[0].text_pair.empty());
}

TEST(CsvTest, DefaultColumnsFollowRunGlue) {
  TempDir d;
  // sentence1 + sentence2 make a pair; the label column is found wherever it is.
  Dataset a = load_dataset(d.write("a.csv", "label,idx,sentence1,sentence2\n1,0,a b,c d\n"));
  EXPECT_EQ(a.rows[0].text, "a b");
  EXPECT_EQ(a.rows[0].text_pair, "c d");
  EXPECT_EQ(a.rows[0].label, "1");
  // "text" wins over the first column; no sentence2, no pair.
  Dataset b = load_dataset(d.write("b.csv", "id,text,label\n7,hello,x\n"));
  EXPECT_EQ(b.rows[0].text, "hello");
  EXPECT_EQ(b.rows[0].text_pair, "");
  // Otherwise the first non-label column.
  Dataset c = load_dataset(d.write("c.csv", "label,review\nx,great\n"));
  EXPECT_EQ(c.rows[0].text, "great");
  // Explicit columns.
  Dataset e = load_dataset(d.write("e.csv", "q,a,y\nwho,me,yes\n"),
                           {.text_column = "q", .text_pair_column = "a", .label_column = "y"});
  EXPECT_EQ(e.rows[0].text, "who");
  EXPECT_EQ(e.rows[0].text_pair, "me");
  EXPECT_EQ(e.rows[0].label, "yes");
}

TEST(CsvTest, UnlabeledFiles) {
  TempDir d;
  Dataset a = load_dataset(d.write("a.csv", "sentence\nhello\n"));
  EXPECT_FALSE(a.has_labels);
  EXPECT_EQ(a.rows[0].label, "");
  // A label column with only empty cells (a prediction file) is unlabeled too.
  Dataset b = load_dataset(d.write("b.csv", "sentence,label\nhello,\nworld,\n"));
  EXPECT_FALSE(b.has_labels);
  // label_column "" ignores a label column.
  Dataset c = load_dataset(d.write("c.csv", "sentence,label\nhello,x\n"), {.label_column = ""});
  EXPECT_FALSE(c.has_labels);
  EXPECT_EQ(c.rows[0].label, "");
}

TEST(CsvTest, Errors) {
  TempDir d;
  auto missing = d.write("m.csv", "sentence,label\na,b\n");
  EXPECT_EQ(error_of([&] { load_dataset(missing, {.text_column = "review"}); }),
            missing.string() + ": missing text column 'review' (columns: sentence, label)");
  EXPECT_CONTAINS(error_of([&] { load_dataset(missing, {.text_pair_column = "hypothesis"}); }),
              "missing text pair column 'hypothesis' (columns: sentence, label)");

  auto ragged = d.write("r.csv", "sentence,label\na,b\n\"c,d\",e,f\n");
  EXPECT_EQ(error_of([&] { load_dataset(ragged); }),
            ragged.string() + ":3: ragged row: expected 2 fields (columns: sentence, label), found 3");

  // A quote inside an unquoted field is itself, as pandas reads it, with one warning naming the first.
  auto stray = d.write("q.csv", "sentence,label\nsaid \"hi\",b\nx\"y,c\n");
  ::testing::internal::CaptureStderr();
  Dataset quoted = load_dataset(stray);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(quoted.rows.size(), 2u);
  EXPECT_EQ(quoted.rows[0].text, "said \"hi\"");
  EXPECT_EQ(quoted.rows[1].text, "x\"y");
  EXPECT_CONTAINS(warning, stray.string() + ":2:6: '\"' inside an unquoted field, read as a quote as pandas reads it "
                           "(3 such quotes;");
  EXPECT_EQ(std::count(warning.begin(), warning.end(), '\n'), 1);
  // Text after a closing quote is appended to the field, as pandas reads it ("abc"d"e -> abcd"e), with a warning;
  // after a quoted field that ran over lines it is an error (pandas would join the lines: a quote left open).
  auto after = d.write("q2.csv", "sentence,label\n\"a\"b,c\n\"abc\"d\"e,\"pos\"itive\n\"x\" ,y\n");
  ::testing::internal::CaptureStderr();
  Dataset appended = load_dataset(after);
  const std::string after_warning = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(appended.rows.size(), 3u);
  EXPECT_EQ(appended.rows[0].text, "ab");
  EXPECT_EQ(appended.rows[1].text, "abcd\"e");
  EXPECT_EQ(appended.rows[1].label, "positive");
  EXPECT_EQ(appended.rows[2].text, "x ");
  EXPECT_CONTAINS(after_warning, after.string() + ":2:4: text after the closing quote of a quoted field, appended to "
                                 "the field as pandas reads it (4 such fields;");
  auto spanning = d.write("q4.csv", "sentence,label\n\"a\nb\"c,d\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(spanning); }),
                  spanning.string() + ":3:3: bad quote: 'c' after the closing quote of a field that opened at 2:1");
  // A lone CR ends a line, as in pandas' C parser.
  Dataset cr = load_dataset(d.write("cr.csv", "sentence,label\rabc,positive\r\"q\r\",negative\r"));
  ASSERT_EQ(cr.rows.size(), 2u);
  EXPECT_EQ(cr.rows[0].label, "positive");
  EXPECT_EQ(cr.rows[1].text, "q\r");
  auto open = d.write("q3.csv", "sentence,label\nx,y\n\"never closed,z\n");
  EXPECT_EQ(error_of([&] { load_dataset(open); }),
            open.string() + ":3:1: bad quote: quoted field is never closed");

  EXPECT_EQ(error_of([&] { load_dataset(d.write("h.csv", "sentence,label\n")); }),
            (d.path() / "h.csv").string() + ": empty dataset (no rows)");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("z.csv", "")); }), "empty dataset (no rows)");

  auto utf8 = d.write("u.csv", "sentence,label\nok,1\ncaf\xC3\xA9 \xFF,2\n");
  EXPECT_EQ(error_of([&] { load_dataset(utf8); }), utf8.string() + ":3:6: invalid UTF-8 (byte 0xFF)");
  // Overlong encodings and lone surrogates are invalid too.
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("o.csv", "s\n\xC0\xAF\n")); }), ":2:1: invalid UTF-8");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("s.csv", "s\n\xED\xA0\x80\n")); }), "invalid UTF-8");

  auto partial = d.write("p.csv", "sentence,label\na,x\nb,\n");
  EXPECT_EQ(error_of([&] { load_dataset(partial); }),
            partial.string() + ":3: empty label in column 'label' (other rows are labeled)");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("dup.csv", "a,a\n1,2\n")); }), "duplicate column 'a'");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("x.parquet", "")); }),
              "unsupported dataset file extension '.parquet'");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.path() / "absent.csv"); }), "absent.csv");
}

TEST(TsvTest, GluePairsFile) {
  // Committed file: tabs, an unbalanced quote (ordinary text in TSV), a blank line, CRLF.
  Dataset ds = load_dataset(std::string(KILN_TEST_DATA_DIR) + "/datasets/pairs.tsv");
  ASSERT_EQ(ds.rows.size(), 3u);
  EXPECT_EQ(ds.rows[1].text, "He said \"hi");
  EXPECT_EQ(ds.rows[1].text_pair, "She left.");
  EXPECT_EQ(ds.rows[2].label, "neutral");
  EXPECT_TRUE(ds.has_labels);
}

TEST(TsvTest, RaggedRowNamesLine) {
  TempDir d;
  auto p = d.write("r.tsv", "sentence\tlabel\na\t1\nb\n");
  EXPECT_EQ(error_of([&] { load_dataset(p); }),
            p.string() + ":3: ragged row: expected 2 fields (columns: sentence, label), found 1");
}

TEST(JsonlTest, LabelsOfEveryKind) {
  TempDir d;
  auto p = d.write("t.jsonl",
                   "{\"text\": \"good\", \"label\": \"pos\"}\n"
                   "\n"
                   "{\"label\": 3, \"text\": \"caf\\u00e9\"}\r\n"
                   "{\"text\": \"x\", \"label\": 0.25}\n"
                   "{\"text\": \"y\", \"label\": -2, \"extra\": [1]}\n");
  Dataset ds = load_dataset(p);
  ASSERT_EQ(ds.rows.size(), 4u);
  EXPECT_TRUE(ds.has_labels);
  EXPECT_EQ(ds.rows[0].label, "pos");
  EXPECT_EQ(ds.rows[1].text, "caf\xC3\xA9");
  EXPECT_EQ(ds.rows[1].label, "3");
  EXPECT_EQ(ds.rows[2].label, "0.25");
  EXPECT_EQ(ds.rows[3].label, "-2");
}

TEST(JsonlTest, ColumnsAndArrays) {
  TempDir d;
  // Key order of the first object decides the default text column.
  Dataset a = load_dataset(d.write("a.jsonl", "{\"label\": 1, \"review\": \"r\", \"title\": \"t\"}\n"));
  EXPECT_EQ(a.rows[0].text, "r");
  Dataset b = load_dataset(d.write("b.jsonl", "{\"sentence1\": \"p\", \"sentence2\": \"h\"}\n"));
  EXPECT_EQ(b.rows[0].text_pair, "h");
  EXPECT_FALSE(b.has_labels);
  // A .json file holding one array.
  Dataset c = load_dataset(d.write("c.json", "[{\"text\": \"a\", \"label\": 1},\n {\"text\": \"b\", \"label\": 0}]"));
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[1].text, "b");
}

TEST(JsonlTest, Errors) {
  TempDir d;
  auto bad = d.write("bad.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\",}\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(bad); }), bad.string() + ":2:14: invalid JSON");
  auto missing = d.write("m.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"txt\": \"b\", \"label\": 2}\n");
  EXPECT_EQ(error_of([&] { load_dataset(missing); }), missing.string() + ":2: missing key 'text' (keys: txt, label)");
  auto col = d.write("c.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_EQ(error_of([&] { load_dataset(col, {.text_column = "sentence"}); }),
            col.string() + ":1: missing text column 'sentence' (columns: text)");
  auto arr = d.write("arr.jsonl", "[1, 2]\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(arr); }), ":1: expected a JSON object");
  auto obj = d.write("obj.jsonl", "{\"text\": {\"a\": 1}}\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(obj); }), ":1: key 'text': expected a string, found object {\"a\":1}");
  auto lab = d.write("lab.jsonl", "{\"text\": \"a\", \"label\": [1]}\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(lab); }), "key 'label': expected a string or a number");
  EXPECT_EQ(error_of([&] { load_dataset(d.write("e.jsonl", "\n  \n")); }),
            (d.path() / "e.jsonl").string() + ": empty dataset (no rows)");
  auto utf8 = d.write("u.jsonl", "{\"text\": \"\xE2\x82\"}\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(utf8); }), ":1:11: invalid UTF-8 (byte 0xE2)");
}

TEST(TextTest, OneExamplePerNonBlankLine) {
  TempDir d;
  Dataset ds = load_dataset(d.write("t.txt", "first line\r\n\n   \nsecond, \"quoted\" line\nlast"));
  ASSERT_EQ(ds.rows.size(), 3u);
  EXPECT_EQ(ds.rows[0].text, "first line");
  EXPECT_EQ(ds.rows[1].text, "second, \"quoted\" line");
  EXPECT_EQ(ds.rows[2].text, "last");
  EXPECT_FALSE(ds.has_labels);
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("e.txt", "\n\n")); }), "empty dataset (no rows)");
}

// datasets' text loader with keep_linebreaks (run_clm's default): every line, its break kept, blank ones too.
TEST(TextTest, KeepLinebreaksKeepsEveryLineWithItsBreak) {
  TempDir d;
  DatasetOptions o;
  o.keep_linebreaks = true;
  Dataset ds = load_dataset(d.write("t.txt", "first line\r\n\n   \nlast"), o);
  ASSERT_EQ(ds.rows.size(), 4u);
  EXPECT_EQ(ds.rows[0].text, "first line\r\n");
  EXPECT_EQ(ds.rows[1].text, "\n");
  EXPECT_EQ(ds.rows[2].text, "   \n");
  EXPECT_EQ(ds.rows[3].text, "last");
}

// Compressed files as datasets reads them: the format from the name under .gz / .zst; several gzip members one
// after the other; a damaged stream an error naming the file.
TEST(CompressedTest, GzipAndZstdFilesReadAsTheirFormat) {
  const std::string dir = std::string(KILN_TEST_DATA_DIR) + "/datasets/";
  for (const char* name : {"rows.csv.gz", "rows.csv.zst"}) {
    Dataset ds = load_dataset(dir + name);
    ASSERT_EQ(ds.rows.size(), 2u) << name;
    EXPECT_EQ(ds.rows[1].text, "bad, slow screen") << name;
    EXPECT_EQ(ds.rows[1].label, "negative") << name;
  }
  Dataset two = load_dataset(dir + "two_members.csv.gz");
  ASSERT_EQ(two.rows.size(), 3u);
  EXPECT_EQ(two.rows[2].text, "more text");
  EXPECT_EQ(load_dataset(dir + "rows.jsonl.zst").rows[1].text, "another");

  TempDir d;
  const std::string gz = kiln::read_file(dir + "rows.csv.gz"), zst = kiln::read_file(dir + "rows.csv.zst");
  auto cut = d.write("cut.csv.gz", gz.substr(0, gz.size() / 2));
  EXPECT_EQ(error_of([&] { load_dataset(cut); }), cut.string() + ": truncated gzip stream (it ends before its last block)");
  auto cut_zst = d.write("cut.csv.zst", zst.substr(0, zst.size() - 4));
  EXPECT_EQ(error_of([&] { load_dataset(cut_zst); }), cut_zst.string() + ": truncated zstd stream (it ends inside a frame)");
  auto plain = d.write("plain.csv.gz", "sentence,label\nx,y\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(plain); }), plain.string() + ": not a valid gzip stream (");
  auto junk = d.write("junk.csv.zst", "sentence,label\nx,y\n");
  EXPECT_CONTAINS(error_of([&] { load_dataset(junk); }), junk.string() + ": not a valid zstd stream (");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("t.parquet.gz", gz)); }), "unsupported dataset file extension '.parquet'");
}

// datasets' JSON with a field: {"version": ..., "data": [rows]}, the field named or the only list found.
TEST(JsonTest, RowsUnderAField) {
  TempDir d;
  auto p = d.write("f.json", "{\"version\": \"1.0\",\n \"data\": [{\"text\": \"a\", \"label\": \"x\"},\n"
                             "  {\"text\": \"b\", \"label\": \"y\"}]}\n");
  for (const std::string field : {"", "data"}) {
    Dataset ds = load_dataset(p, {.json_field = field});
    ASSERT_EQ(ds.rows.size(), 2u) << field;
    EXPECT_EQ(ds.rows[1].text, "b");
    EXPECT_EQ(ds.rows[1].label, "y");
  }
  EXPECT_EQ(error_of([&] { load_dataset(p, {.json_field = "rows"}); }),
            p.string() + ": no field 'rows' (keys: version, data)");
  EXPECT_EQ(error_of([&] { load_dataset(p, {.json_field = "version"}); }),
            p.string() + ": field 'version' must be a list of rows or an object of columns, found string \"1.0\"");
  // An object of columns under the field, as datasets reads it through pandas; columns of unequal length are an
  // error naming them.
  auto columns = d.write("c.json", "{\"data\": {\"text\": [\"a\", \"b\"], \"label\": [\"x\", \"y\"]}}");
  Dataset by_column = load_dataset(columns, {.json_field = "data"});
  ASSERT_EQ(by_column.rows.size(), 2u);
  EXPECT_EQ(by_column.rows[1].text, "b");
  EXPECT_EQ(by_column.rows[1].label, "y");
  EXPECT_EQ(error_of([&] { load_dataset(d.write("u.json", "{\"data\": {\"text\": [\"a\"], \"label\": []}}"),
                                        {.json_field = "data"}); }),
            (d.path() / "u.json").string() + ": field 'data': column 'label' has 0 values, column 'text' has 1 "
                                              "(columns must be of the same length)");
  // A list of strings is one "text" column (datasets names pandas' column 0 so).
  Dataset texts = load_dataset(d.write("s.json", "{\"data\": [\"one\", \"two\"]}"), {.json_field = "data"});
  ASSERT_EQ(texts.rows.size(), 2u);
  EXPECT_EQ(texts.rows[1].text, "two");
  // Without a field, lists of rows under two keys are ambiguous.
  auto two = d.write("two.json", "{\"a\": [{\"text\": \"x\"}], \"b\": [{\"text\": \"y\"}]}");
  EXPECT_CONTAINS(error_of([&] { load_dataset(two); }),
                  two.string() + ": lists of rows under several keys (a, b): name the one to read");
  auto bad = d.write("b.json", "{\"data\": [{\"text\": \"a\", \"label\": 1}, 3]}");
  EXPECT_CONTAINS(error_of([&] { load_dataset(bad); }), bad.string() + ": data[1]: expected a JSON object");
  // A JSON-lines .json file is read as before.
  EXPECT_EQ(load_dataset(d.write("l.json", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": 2}\n")).rows.size(), 2u);
}

// run_ner's files: a list of words and a list of tags per JSON row.
TEST(WordsTest, TokensAndNerTagsPerRow) {
  TempDir d;
  DatasetOptions o;
  o.split_into_words = true;
  Dataset ds = load_dataset(d.write("t.jsonl", "{\"id\": 0, \"tokens\": [\"EU\", \"rejects\"], \"ner_tags\": [\"B-ORG\", \"O\"]}\n"
                                               "{\"id\": 1, \"tokens\": [\"Peter\"], \"ner_tags\": [\"B-PER\"]}\n"),
                            o);
  ASSERT_EQ(ds.rows.size(), 2u);
  EXPECT_TRUE(ds.has_labels);
  EXPECT_EQ(ds.rows[0].words, (std::vector<std::string>{"EU", "rejects"}));
  EXPECT_EQ(ds.rows[0].word_labels, (std::vector<std::string>{"B-ORG", "O"}));
  EXPECT_EQ(LabelMap::from_word_labels(ds).labels, (std::vector<std::string>{"B-ORG", "B-PER", "O"}));
  // Integer tags (a datasets export of ClassLabel ids) sort numerically; other column names by flag.
  o.text_column = "words";
  o.label_column = "tags";
  ds = load_dataset(d.write("i.json", "[{\"words\": [\"a\", \"b\", \"c\"], \"tags\": [10, 2, 0]}]"), o);
  EXPECT_EQ(LabelMap::from_word_labels(ds).labels, (std::vector<std::string>{"0", "2", "10"}));
  // Unlabeled rows: words only.
  o = DatasetOptions{};
  o.split_into_words = true;
  ds = load_dataset(d.write("u.jsonl", "{\"tokens\": [\"a\"]}\n"), o);
  EXPECT_FALSE(ds.has_labels);
  EXPECT_CONTAINS(error_of([&] { LabelMap::from_word_labels(ds); }), "u.jsonl: no tags");
}

TEST(WordsTest, ErrorsNameTheRowAndKey) {
  TempDir d;
  DatasetOptions o;
  o.split_into_words = true;
  auto error = [&](const std::string& name, const std::string& text) {
    return error_of([&] { load_dataset(d.write(name, text), o); });
  };
  EXPECT_CONTAINS(error("a.jsonl", "{\"tokens\": [\"a\", \"b\"], \"ner_tags\": [\"O\"]}\n"),
                  "a.jsonl:1: 2 words in 'tokens' but 1 tags in 'ner_tags' (one tag per word)");
  EXPECT_CONTAINS(error("b.jsonl", "{\"tokens\": \"a b\", \"ner_tags\": [\"O\"]}\n"),
                  "b.jsonl:1: key 'tokens': expected a list of words, found string \"a b\"");
  EXPECT_CONTAINS(error("c.jsonl", "{\"tokens\": [\"a\", 3], \"ner_tags\": [\"O\", \"O\"]}\n"),
                  "c.jsonl:1: key 'tokens': expected strings in the list, found number 3");
  EXPECT_CONTAINS(error("d.jsonl", "{\"tokens\": [\"a\"], \"ner_tags\": [\"O\"]}\n{\"tokens\": [\"b\"]}\n"),
                  "d.jsonl: 1 of 2 rows have no 'ner_tags'");
  EXPECT_CONTAINS(error("e.csv", "tokens,ner_tags\na,O\n"), "e.csv: token classification reads .jsonl or .json");
}
