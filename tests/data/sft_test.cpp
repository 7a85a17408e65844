// SFT data as TRL's SFTTrainer prepares it: the input ids and labels of every
// row of tests/goldens/sft's files, for each loss setting, equal the goldens of
// tests/goldens/gen_sft_goldens.py (TRL's tokenize_fn and build_labels over
// transformers' tokenizer); packing as TRL's best-fit-decreasing packs.
#include <gtest/gtest.h>

#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/data/collator.h"
#include "kiln/data/sft.h"
#include "support/test_util.h"

using namespace kiln;
using nlohmann::ordered_json;

namespace {

const std::string kSft = std::string(KILN_TEST_DATA_DIR) + "/sft/";

struct Fixture {
  tokenizers::Tokenizer tok = tokenizers::Tokenizer::from_pretrained(kSft + "tokenizer");
  tokenizers::ChatTemplate chat = tokenizers::ChatTemplate::from_pretrained(kSft + "tokenizer");
  data::SftOptions options() const {
    data::SftOptions o;
    o.eos_token = chat.special_tokens()["eos_token"].get<std::string>();
    return o;
  }
};

data::Features tokenize(const Fixture& fx, const std::string& file, const std::string& setting) {
  data::SftOptions o = fx.options();
  o.assistant_only_loss = setting == "assistant_only_loss";
  if (setting == "all_tokens") o.completion_only_loss = false;
  return data::tokenize_sft(data::load_json_rows(kSft + file), fx.tok, &fx.chat, o);
}

TEST(Sft, MatchesTrl) {
  Fixture fx;
  const ordered_json goldens = read_ordered_json_file(kSft + "goldens.json");
  size_t sets = 0;
  for (const auto& [file, settings] : goldens["sft"].items())
    for (const auto& [setting, rows] : settings.items()) {
      SCOPED_TRACE(file + " / " + setting);
      const data::Features f = tokenize(fx, file, setting);
      ASSERT_EQ(f.size(), rows.size());
      for (size_t r = 0; r < f.size(); ++r) {
        EXPECT_EQ(f.input_ids[r], rows[r]["input_ids"].get<std::vector<int64_t>>()) << "row " << r;
        EXPECT_EQ(f.token_labels[r], rows[r]["labels"].get<std::vector<int64_t>>()) << "row " << r;
      }
      ++sets;
    }
  EXPECT_EQ(sets, 7u);
}

// The assistant-only labels cover exactly the assistant turns of the rendered text: decoding the labelled
// tokens gives each answer followed by the end of turn, nothing else.
TEST(Sft, AssistantLabelsAreTheAnswers) {
  Fixture fx;
  const data::JsonRows rows = data::load_json_rows(kSft + "chat.jsonl");
  data::SftOptions o = fx.options();
  o.assistant_only_loss = true;
  const data::Features f = data::tokenize_sft(rows, fx.tok, &fx.chat, o);
  for (size_t r = 0; r < f.size(); ++r) {
    std::string want;
    for (const auto& m : rows.objects[r]["messages"])
      if (m["role"] == "assistant") want += m["content"].get<std::string>() + "<|im_end|>";
    std::vector<uint32_t> labelled;
    for (int64_t y : f.token_labels[r])
      if (y != -100) labelled.push_back(static_cast<uint32_t>(y));
    EXPECT_EQ(fx.tok.decode(labelled, false), want) << "row " << r;
  }
}

TEST(Sft, DetectsFormats) {
  auto rows = [](const std::string& text) { return data::parse_json_rows(text, "t.jsonl"); };
  EXPECT_EQ(data::detect_sft_format(rows(R"({"messages": [{"role": "user", "content": "x"}]})")),
            data::SftFormat::Conversational);
  EXPECT_EQ(data::detect_sft_format(rows(R"({"prompt": "a", "completion": "b"})")), data::SftFormat::PromptCompletion);
  EXPECT_EQ(data::detect_sft_format(rows(R"({"prompt": [{"role": "user", "content": "a"}], )"
                                                  R"("completion": [{"role": "assistant", "content": "b"}]})")),
            data::SftFormat::ConversationalPromptCompletion);
  EXPECT_EQ(data::detect_sft_format(rows(R"({"text": "plain"})")), data::SftFormat::Language);
  EXPECT_TRUE(data::looks_like_sft_data(rows(R"({"messages": [{"role": "user", "content": "x"}]})")));
  EXPECT_FALSE(data::looks_like_sft_data(rows(R"({"text": "plain"})")));
  try {
    data::detect_sft_format(rows(R"({"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]})"));
    FAIL() << "mixed prompt-completion accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("both be strings or both lists"), std::string::npos) << e.what();
  }
}

// ShareGPT "conversations" of {"from", "value"} read as messages (TRL's maybe_convert_to_chatml).
TEST(Sft, ShareGptConversations) {
  Fixture fx;
  const auto a = data::tokenize_sft(
      data::parse_json_rows(R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]})",
                            "s.jsonl"),
      fx.tok, &fx.chat, fx.options());
  const auto b = data::tokenize_sft(
      data::parse_json_rows(R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})",
                            "m.jsonl"),
      fx.tok, &fx.chat, fx.options());
  EXPECT_EQ(a.input_ids, b.input_ids);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one mentioning " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Sft, Errors) {
  Fixture fx;
  data::SftOptions o = fx.options();
  o.assistant_only_loss = true;
  // Not conversational.
  expect_error([&] { data::tokenize_sft(data::load_json_rows(kSft + "prompt_completion_text.jsonl"), fx.tok, &fx.chat, o); },
               "--assistant_only_loss is for conversational data");
  // A template without generation blocks.
  const tokenizers::ChatTemplate plain("{% for m in messages %}{{ m.content }}{% endfor %}", fx.chat.special_tokens());
  expect_error([&] { data::tokenize_sft(data::load_json_rows(kSft + "chat.jsonl"), fx.tok, &plain, o); },
               "has no {% generation %} blocks");
  // A conversation with no assistant turn.
  expect_error([&] {
    data::tokenize_sft(data::parse_json_rows(R"({"messages": [{"role": "user", "content": "x"}]})", "u.jsonl"), fx.tok,
                       &fx.chat, o);
  }, "u.jsonl:1: --assistant_only_loss, but this example has no assistant tokens");
  // A later row in another format, a message without a role.
  expect_error([&] {
    data::tokenize_sft(data::parse_json_rows("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n{\"text\": \"y\"}",
                                             "m.jsonl"), fx.tok, &fx.chat, fx.options());
  }, "m.jsonl:2: missing key 'messages'");
  expect_error([&] {
    data::tokenize_sft(data::parse_json_rows(R"({"messages": [{"role": "user", "content": "x"}, {"content": "y"}]})",
                                             "r.jsonl"), fx.tok, &fx.chat, fx.options());
  }, "messages[1]");
  expect_error([&] { data::parse_json_rows("[1]", "a.json"); }, "expected a JSON object");
}

// Truncation keeps the start (TRL's keep_start), and a row left without labels is dropped.
TEST(Sft, TruncationDropsRowsWithoutLabels) {
  Fixture fx;
  data::SftOptions o = fx.options();
  o.max_length = 8;  // shorter than every prompt of prompt_completion.jsonl
  data::SftStats stats;
  expect_error([&] { data::tokenize_sft(data::load_json_rows(kSft + "prompt_completion.jsonl"), fx.tok, &fx.chat, o, &stats); },
               "no example left");
  o.completion_only_loss = false;
  const auto f = data::tokenize_sft(data::load_json_rows(kSft + "prompt_completion.jsonl"), fx.tok, &fx.chat, o, &stats);
  EXPECT_EQ(stats.dropped, 0u);
  for (const auto& ids : f.input_ids) EXPECT_EQ(ids.size(), 8u);
}

// TRL's pack_dataset docstring example, bfd: [[1,2,3,4],[8,9,10,11],[6,7]] with seq_lengths [[4],[3,1],[2]].
TEST(Sft, PackingIsBestFitDecreasing) {
  data::Features f;
  f.input_ids = {{1, 2, 3, 4, 5}, {6, 7}, {8, 9, 10}, {11}};
  f.token_labels = f.input_ids;
  const data::Features p = data::pack_sft(f, 4);
  const std::vector<std::vector<int64_t>> ids = {{1, 2, 3, 4}, {8, 9, 10, 11}, {6, 7}};
  const std::vector<std::vector<int64_t>> lengths = {{4}, {3, 1}, {2}};
  EXPECT_EQ(p.input_ids, ids);
  EXPECT_EQ(p.token_labels, ids);
  EXPECT_EQ(p.seq_lengths, lengths);
}

// TRL's pack_dataset docstring example, bfd_split: the 5-token row's last token becomes a piece of its own.
TEST(Sft, PackingBfdSplitKeepsTheOverflow) {
  data::Features f;
  f.input_ids = {{1, 2, 3, 4, 5}, {6, 7}, {8, 9, 10}, {11}, {}};
  f.token_labels = {{1, -100, 3, 4, 5}, {6, 7}, {8, 9, 10}, {11}, {}};
  const data::Features p = data::pack_sft(f, 4, data::PackingStrategy::BfdSplit);
  const std::vector<std::vector<int64_t>> ids = {{1, 2, 3, 4}, {8, 9, 10, 5}, {6, 7, 11}};
  const std::vector<std::vector<int64_t>> labels = {{1, -100, 3, 4}, {8, 9, 10, 5}, {6, 7, 11}};
  const std::vector<std::vector<int64_t>> lengths = {{4}, {3, 1}, {2, 1}};
  EXPECT_EQ(p.input_ids, ids);
  EXPECT_EQ(p.token_labels, labels);
  EXPECT_EQ(p.seq_lengths, lengths);
}

// wrapped: the rows one after another cut every max_length tokens, one sequence a row (no seq_lengths).
TEST(Sft, PackingWrappedCutsAcrossExamples) {
  data::Features f;
  f.input_ids = {{1, 2, 3}, {4, 5}, {}, {6, 7, 8}, {9}};
  f.token_labels = {{1, 2, 3}, {-100, 5}, {}, {6, 7, 8}, {9}};
  const data::Features p = data::pack_sft(f, 4, data::PackingStrategy::Wrapped);
  const std::vector<std::vector<int64_t>> ids = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9}};
  const std::vector<std::vector<int64_t>> labels = {{1, 2, 3, -100}, {5, 6, 7, 8}, {9}};
  EXPECT_EQ(p.input_ids, ids);
  EXPECT_EQ(p.token_labels, labels);
  EXPECT_TRUE(p.seq_lengths.empty());
  EXPECT_EQ(data::parse_packing_strategy("bfd_split"), data::PackingStrategy::BfdSplit);
  EXPECT_CONTAINS(kiln::testing::error_of([] { data::parse_packing_strategy("best"); }),
                  "packing_strategy must be one of bfd, bfd_split, wrapped (TRL's), got 'best'");
}

// TRL packs each batch of 1000 rows that datasets' map hands it apart: 1001 one-token rows wrapped into rows of 3
// are 334 rows for the first 1000 (the last of 1 token) and one for the last row, not 334 in all.
TEST(Sft, PackingWorksOnBatchesOf1000Rows) {
  data::Features f;
  for (int64_t i = 0; i < 1001; ++i) {
    f.input_ids.push_back({i});
    f.token_labels.push_back({i});
  }
  const data::Features p = data::pack_sft(f, 3, data::PackingStrategy::Wrapped);
  ASSERT_EQ(p.size(), 335u);
  EXPECT_EQ(p.input_ids[333], std::vector<int64_t>{999});
  EXPECT_EQ(p.input_ids[334], std::vector<int64_t>{1000});
  const data::Features b = data::pack_sft(f, 3);
  EXPECT_EQ(b.size(), 335u);  // (bfd: 333 full rows and one of 1 from the first batch)
}

// Every token of every example lands in exactly one packed row, and no row is longer than max_length.
TEST(Sft, PackingKeepsEveryToken) {
  Fixture fx;
  data::SftOptions o = fx.options();
  o.packing = true;
  const auto rows = data::tokenize_sft(data::load_json_rows(kSft + "chat.jsonl"), fx.tok, &fx.chat, o);
  const auto packed = data::pack_sft(rows, 64);
  size_t before = 0, after = 0;
  for (const auto& r : rows.input_ids) before += r.size();
  for (size_t i = 0; i < packed.size(); ++i) {
    after += packed.input_ids[i].size();
    EXPECT_LE(packed.input_ids[i].size(), 64u);
    EXPECT_EQ(std::accumulate(packed.seq_lengths[i].begin(), packed.seq_lengths[i].end(), int64_t{0}),
              static_cast<int64_t>(packed.input_ids[i].size()));
  }
  EXPECT_EQ(before, after);
  EXPECT_LT(packed.size(), rows.size());
}

// The collator restarts positions per packed example and takes each example's first token out of the loss
// (TRL's padding-free labels); padding has position 0 and label -100.
TEST(Sft, CollatorRestartsPositions) {
  data::Features f;
  f.input_ids = {{1, 2, 3, 4, 5}, {6, 7}};
  f.token_labels = {{1, 2, -100, 4, 5}, {6, 7}};
  f.seq_lengths = {{2, 3}, {2}};
  data::CollatorOptions o;
  o.causal_lm = true;
  const data::Batch b = data::collate(f, {0, 1}, o, 0);
  EXPECT_EQ(b.position_ids, (std::vector<int64_t>{0, 1, 0, 1, 2, 0, 1, 0, 0, 0}));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{-100, 2, -100, 4, 5, -100, 7, -100, -100, -100}));
  EXPECT_EQ(b.attention_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  // Unpacked rows have no position ids.
  f.seq_lengths.clear();
  EXPECT_TRUE(data::collate(f, {0, 1}, o, 0).position_ids.empty());
}

// Hostile rows: a template error names the row; data with nothing to predict (empty conversations, one-token
// rows) is an error rather than a run whose loss is 0.
TEST(Sft, HostileRowsAreErrorsNamingTheRow) {
  Fixture fx;
  for (const char* content : {"null", "42"})
    expect_error([&] {
      data::tokenize_sft(data::parse_json_rows(std::string(R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": )") +
                                                   content + "}]}", "c.jsonl"),
                         fx.tok, &fx.chat, fx.options());
    }, "c.jsonl:1: rendering the chat template: chat_template:");
  expect_error([&] { data::tokenize_sft(data::parse_json_rows(R"({"messages": []})", "e.jsonl"), fx.tok, &fx.chat, fx.options()); },
               "e.jsonl: no example left with a token to train on");
  data::SftOptions o = fx.options();
  o.packing = true;
  expect_error([&] { data::tokenize_sft(data::parse_json_rows(R"({"messages": []})", "e.jsonl"), fx.tok, &fx.chat, o); },
               "e.jsonl: no example has a token to train on");
  o.packing = false;
  o.max_length = 1;  // one token: the first token of an example is never a target
  expect_error([&] { data::tokenize_sft(data::load_json_rows(kSft + "chat.jsonl"), fx.tok, &fx.chat, o); },
               "no example has a token to train on");
}

TEST(Sft, HasLabelSkipsEachExamplesFirstToken) {
  data::Features f;
  f.input_ids = {{1, 2, 3}};
  f.token_labels = {{1, -100, -100}};
  EXPECT_FALSE(data::has_label(f));
  f.token_labels = {{1, -100, 3}};
  EXPECT_TRUE(data::has_label(f));
  f.seq_lengths = {{2, 1}};  // 3 is the first token of the second example
  EXPECT_FALSE(data::has_label(f));
}

}  // namespace
