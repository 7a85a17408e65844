// Question answering data: run_qa's file forms (JSON lines, an array,
// {"data": [...]}, SQuAD's nested file), their errors, and tokenize_qa's
// windows and answer positions on a tiny WordPiece vocabulary.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "data/util.h"
#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/core/atomic_file.h"

using namespace kiln::data;
using kiln::testing::error_of;
using kiln::testing::TempDir;

namespace {

DatasetOptions qa_options() {
  DatasetOptions o;
  o.question_answering = true;
  return o;
}

// The rows as (id | question | context | answers@starts) strings, to compare file forms.
std::vector<std::string> summary(const Dataset& ds) {
  std::vector<std::string> out;
  for (const auto& r : ds.rows) {
    std::string s = r.id + " | " + r.text + " | " + r.text_pair + " |";
    for (size_t k = 0; k < r.answer_texts.size(); ++k) s += " " + r.answer_texts[k] + "@" + std::to_string(r.answer_starts[k]);
    out.push_back(s);
  }
  return out;
}

// ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 the=5 cat=6 sat=7 on=8 mat=9 a=10 dog=11 ran=12 .=13 ##s=14
kiln::tokenizers::Tokenizer tiny_tokenizer(const TempDir& d) {
  d.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\na\ndog\nran\n.\n##s\n");
  d.write("tokenizer_config.json", "{\"do_lower_case\": true}");
  return kiln::tokenizers::Tokenizer::from_pretrained(d.path().string());
}

}  // namespace

TEST(QaDatasetTest, RunQaRowsArraysAndSquadsNestedFileReadAlike) {
  TempDir d;
  const std::string a = R"({"id": "q1", "question": "who sat?", "context": "the cat sat on the mat.",)"
                        R"( "answers": {"text": ["the cat", "cat"], "answer_start": [0, 4]}})";
  const std::string b = R"({"id": "q2", "question": " where?", "context": "the cat sat on the mat.",)"
                        R"( "answers": {"text": ["the mat"], "answer_start": [15]}})";
  const std::vector<std::string> expected = {"q1 | who sat? | the cat sat on the mat. | the cat@0 cat@4",
                                             "q2 |  where? | the cat sat on the mat. | the mat@15"};
  EXPECT_EQ(summary(load_dataset(d.write("a.jsonl", a + "\n\n" + b + "\n"), qa_options())), expected);
  EXPECT_EQ(summary(load_dataset(d.write("b.json", "[" + a + ", " + b + "]"), qa_options())), expected);
  EXPECT_EQ(summary(load_dataset(d.write("c.json", "{\"version\": \"x\", \"data\": [" + a + ", " + b + "]}"),
                                 qa_options())),
            expected);
  const Dataset squad = load_dataset(
      d.write("d.json", R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "the cat sat on the mat.",)"
                        R"( "qas": [{"id": "q1", "question": "who sat?", "answers": [{"text": "the cat", "answer_start": 0},)"
                        R"( {"text": "cat", "answer_start": 4}]}, {"id": "q2", "question": " where?",)"
                        R"( "answers": [{"text": "the mat", "answer_start": 15}]}]}]}]})"),
      qa_options());
  EXPECT_EQ(summary(squad), expected);
  EXPECT_TRUE(squad.has_labels);
  // Character offsets count code points; rows without an id (or a null one) are named by position; no answers:
  // unanswerable.
  const Dataset more = load_dataset(
      d.write("e.jsonl", R"({"question": "q", "context": "él vio un gato", "answers": {"text": ["gato"], "answer_start": [10]}})"
                         "\n"
                         R"({"id": null, "question": "q", "context": "nada", "answers": {"text": [], "answer_start": []}})"),
      qa_options());
  EXPECT_EQ(summary(more), (std::vector<std::string>{"0 | q | él vio un gato | gato@10", "1 | q | nada |"}));
  // Named columns; and no answers column at all: unlabeled (prediction).
  DatasetOptions named = qa_options();
  named.text_column = "query";
  named.text_pair_column = "passage";
  named.label_column = "spans";
  EXPECT_EQ(summary(load_dataset(d.write("f.jsonl", R"({"id": 7, "query": "q", "passage": "p x", "spans": {"text": ["x"], "answer_start": [2]}})"),
                                 named)),
            (std::vector<std::string>{"7 | q | p x | x@2"}));
  const Dataset plain = load_dataset(d.write("g.jsonl", R"({"id": "a", "question": "q", "context": "c"})"), qa_options());
  EXPECT_FALSE(plain.has_labels);
}

TEST(QaDatasetTest, BadRowsAreNamed) {
  TempDir d;
  auto error = [&](const std::string& body, const char* name = "x.jsonl") {
    return error_of([&] { load_dataset(d.write(name, body), qa_options()); });
  };
  const std::string ctx = R"("question": "q", "context": "the cat")";
  EXPECT_CONTAINS(error(R"({"question": "q"})"), "x.jsonl:1: missing key 'context'");
  EXPECT_CONTAINS(error("{" + ctx + R"(, "answers": "cat"})"),
                  "x.jsonl:1: key 'answers': expected {\"text\": [...], \"answer_start\": [...]} or a list");
  EXPECT_CONTAINS(error("{" + ctx + R"(, "answers": {"text": ["cat"], "answer_start": [4, 5]}})"),
                  "key 'answers': 1 texts but 2 answer_start values");
  EXPECT_CONTAINS(error("{" + ctx + R"(, "answers": {"text": ["cat"], "answer_start": ["4"]}})"),
                  "an answer's answer_start must be a character index (an integer >= 0), found string \"4\"");
  EXPECT_CONTAINS(error("{" + ctx + R"(, "answers": {"text": ["cat"], "answer_start": [6]}})"),
                  "answer 'cat' at answer_start 6 ends at 9, past the context's 7 characters");
  const std::string twice = error("{\"id\": 1, " + ctx + "}\n{\"id\": \"1\", " + ctx + "}");
  EXPECT_CONTAINS(twice, "x.jsonl:2: id '1' is also the id of ");
  EXPECT_CONTAINS(twice, "x.jsonl:1 (predictions are keyed by id)");
  EXPECT_CONTAINS(error("{" + ctx + R"(, "answers": {"text": [], "answer_start": []}})" + "\n{" + ctx + "}"),
                  "1 of 2 rows have no 'answers'");
  EXPECT_CONTAINS(error(R"({"data": [{"paragraphs": [{"context": "c"}]}]})", "y.json"),
                  "y.json: data[0].paragraphs[0]: expected {\"context\": ..., \"qas\": [...]}");
  EXPECT_CONTAINS(error("question,context\nq,c\n", "z.csv"), "z.csv: question answering reads .jsonl or .json rows");
  // An answer that is not where answer_start says is trained on as given (as run_qa), with a warning.
  const Dataset moved = load_dataset(d.write("m.jsonl", "{" + ctx + R"(, "answers": {"text": ["cat"], "answer_start": [0]}})"),
                                     qa_options());
  EXPECT_EQ(moved.rows[0].answer_starts, (std::vector<int64_t>{0}));
}

// [CLS] the cat [SEP] + a window of 4 context tokens + [SEP] (max_length 9), windows 2 tokens apart (stride 2).
// Context "a dog sat on the mat." : a(0,1) dog(2,5) sat(6,9) on(10,12) the(13,16) mat(17,20) .(20,21)
TEST(TokenizeQaTest, WindowsOverlapByTheStrideAndPositionsFollowTheAnswer) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  auto ds = std::make_shared<Dataset>();
  ds->source = "mem.jsonl";
  ds->has_labels = true;
  ds->rows.push_back({"  the cat", "a dog sat on the mat.", ""});  // leading whitespace is stripped (run_qa)
  ds->rows.back().id = "r0";
  ds->rows.back().answer_texts = {"the mat"};
  ds->rows.back().answer_starts = {13};
  ds->rows.push_back({"the cat", "a dog sat on the mat.", ""});  // the answer in a window's last token
  ds->rows.back().answer_texts = {"."};
  ds->rows.back().answer_starts = {20};
  ds->rows.push_back({"the cat", "a dog", ""});  // unanswerable: [CLS]
  const Features f = tokenize_qa(ds, tok, 9, 2);
  ASSERT_EQ(f.size(), 7u);
  EXPECT_EQ(f.example_index, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(f.input_ids[0], (std::vector<int64_t>{2, 5, 6, 3, 10, 11, 7, 8, 3}));
  EXPECT_EQ(f.input_ids[1], (std::vector<int64_t>{2, 5, 6, 3, 7, 8, 5, 9, 3}));
  EXPECT_EQ(f.input_ids[2], (std::vector<int64_t>{2, 5, 6, 3, 5, 9, 13, 3}));
  EXPECT_EQ(f.input_ids[6], (std::vector<int64_t>{2, 5, 6, 3, 10, 11, 3}));
  EXPECT_EQ(f.token_type_ids[1], (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 1}));
  using Span = std::pair<int64_t, int64_t>;
  const Span none{-1, -1};
  EXPECT_EQ(f.context_offsets[1], (std::vector<Span>{none, none, none, none, {6, 9}, {10, 12}, {13, 16}, {17, 20}, none}));
  // "the mat": not whole in window 0 ([CLS]), tokens 6-7 of window 1, 4-5 of window 2.
  EXPECT_EQ(f.start_positions, (std::vector<int64_t>{0, 6, 4, 0, 0, 6, 0}));
  EXPECT_EQ(f.end_positions, (std::vector<int64_t>{0, 7, 5, 0, 0, 6, 0}));
  EXPECT_EQ(f.examples, ds);
  // The collator carries the positions into each batch.
  const Batch b = collate(f, {1, 2}, CollatorOptions{}, 0);
  EXPECT_EQ(b.start_positions, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(b.end_positions, (std::vector<int64_t>{7, 5}));
  // head() keeps the windows' bookkeeping in step.
  const Features h = f.head(2);
  EXPECT_EQ(h.example_index.size(), 2u);
  EXPECT_EQ(h.context_offsets.size(), 2u);
  EXPECT_EQ(h.start_positions.size(), 2u);
  // Unlabeled data: windows without positions.
  auto unlabeled = std::make_shared<Dataset>(*ds);
  unlabeled->has_labels = false;
  EXPECT_TRUE(tokenize_qa(unlabeled, tok, 9, 2).start_positions.empty());
  // A stride that leaves no room, or a question longer than the window, fails naming the file.
  EXPECT_CONTAINS(error_of([&] { tokenize_qa(ds, tok, 9, 9); }), "mem.jsonl: doc_stride 9 must be at least 0 and below");
  EXPECT_CONTAINS(error_of([&] { tokenize_qa(ds, tok, 9, 5); }), "mem.jsonl: tokenizing (question, context)");
  EXPECT_CONTAINS(error_of([&] { tokenize_qa(ds, tok, 5, 1); }), "mem.jsonl: tokenizing (question, context)");
}

// RoBERTa's byte-level BPE (a tokenizer from the overflow goldens: add_prefix_space, trim_offsets): <s> question
// </s></s> context </s>; the context's offsets leave out the spaces its tokens carry (but one, below), so a span
// reads its words.
TEST(TokenizeQaTest, ByteLevelWindowsPointAtTheWordsWithoutTheirSpaces) {
  const auto goldens = nlohmann::json::parse(kiln::read_file(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/overflow.json"));
  std::string json;
  for (const auto& t : goldens["tokenizers"])
    if (t["name"] == "roberta_byte_level") json = t["tokenizer"].dump();
  ASSERT_FALSE(json.empty());
  const auto tok = kiln::tokenizers::Tokenizer::from_json_string(json, "roberta_byte_level");
  auto ds = std::make_shared<Dataset>();
  ds->source = "mem.jsonl";
  ds->has_labels = true;
  ds->rows.push_back({"world", "hello world hello world hello", ""});
  ds->rows.back().answer_texts = {"world"};
  ds->rows.back().answer_starts = {18};
  // 8 tokens: <s> Ġworld </s> </s>, 3 of the context's 5, </s>; the two windows share one token (stride 1).
  const Features f = tokenize_qa(ds, tok, 8, 1);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f.input_ids[0].front(), 0);  // <s>
  using Span = std::pair<int64_t, int64_t>;
  const Span none{-1, -1};
  EXPECT_EQ(f.context_offsets[0], (std::vector<Span>{none, none, none, none, {0, 5}, {6, 11}, {12, 17}, none}));
  // A later window's first token keeps its space (11, not 12), as in HF: tokenizers' process_offsets does not
  // trim the first token of an encoding (here the overflowing piece) under add_prefix_space.
  EXPECT_EQ(f.context_offsets[1], (std::vector<Span>{none, none, none, none, {11, 17}, {18, 23}, {24, 29}, none}));
  EXPECT_EQ(f.start_positions, (std::vector<int64_t>{0, 5}));  // window 0 lacks the answer: <s>
  EXPECT_EQ(f.end_positions, (std::vector<int64_t>{0, 5}));
}

// run_swag's rows: sent1 and sent2 + " " + each ending, a [B, C, T] batch padded to the longest choice.
TEST(MultipleChoiceTest, ChoicesArePairsPaddedToTheLongestChoice) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  DatasetOptions o;
  o.multiple_choice = true;
  const Dataset ds = load_dataset(d.write("swag.csv",
                                          "video-id,sent1,sent2,ending0,ending1,ending2,label\n"
                                          "v1,the cat sat.,a,dog ran,cat,mat,1\n"
                                          "v2,a dog,the,cat sat on the mat,dog,cat,0\n"),
                                  o);
  ASSERT_EQ(ds.rows.size(), 2u);
  EXPECT_EQ(ds.rows[0].choices, (std::vector<std::string>{"dog ran", "cat", "mat"}));
  EXPECT_EQ(ds.rows[0].text_pair, "a");
  const Features f = tokenize_choices(ds, tok, 9);
  // Row 0: [CLS] the cat sat . [SEP] a dog ran [SEP] (10 tokens, cut longest-first to 9), [CLS] the cat sat . [SEP]
  // a cat [SEP], ... mat ...
  EXPECT_EQ(f.choice_lengths[0], (std::vector<int64_t>{9, 9, 9}));
  EXPECT_EQ(f.choice_lengths[1], (std::vector<int64_t>{9, 7, 7}));
  EXPECT_EQ(f.labels, (std::vector<int64_t>{1, 0}));
  const Batch b = collate(f, {1, 0}, CollatorOptions{}, 0);
  EXPECT_EQ(b.num_choices, 3);
  EXPECT_EQ(b.seq_len, 9);
  ASSERT_EQ(b.input_ids.size(), 2u * 3 * 9);
  // Row 1, choice 1: [CLS] a dog [SEP] the dog [SEP] and two pads.
  EXPECT_EQ(std::vector<int64_t>(b.input_ids.begin() + 9, b.input_ids.begin() + 18),
            (std::vector<int64_t>{2, 10, 11, 3, 5, 11, 3, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(b.attention_mask.begin() + 9, b.attention_mask.begin() + 18),
            (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(std::vector<int64_t>(b.token_type_ids.begin() + 9, b.token_type_ids.begin() + 18),
            (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 0, 0}));
  // Row 0, choice 2: ... [SEP] a mat [SEP].
  EXPECT_EQ(std::vector<int64_t>(b.input_ids.begin() + 45, b.input_ids.begin() + 54),
            (std::vector<int64_t>{2, 5, 6, 7, 13, 3, 10, 9, 3}));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(f.head(1).choice_lengths.size(), 1u);
  // Bad labels and missing endings are named.
  EXPECT_CONTAINS(error_of([&] {
                    tokenize_choices(load_dataset(d.write("b.csv", "sent1,sent2,ending0,ending1,label\na,b,c,d,2\n"), o),
                                     tok, 9);
                  }),
                  "b.csv row 1: label '2' is not the index of a choice (0 to 1)");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("c.csv", "sent1,sent2,ending0,ending2,label\na,b,c,d,0\n"), o); }),
                  "c.csv: multiple choice needs columns ending0, ending1, ... (at least two), found 1");
  EXPECT_CONTAINS(error_of([&] { load_dataset(d.write("d.jsonl", R"({"sent1": "a", "ending0": "b", "ending1": "c"})"), o); }),
                  "d.jsonl:1: missing column 'sent2'");
}
