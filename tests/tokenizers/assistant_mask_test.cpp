// {% generation %} spans and assistant token masks as transformers makes them
// (apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)):
// the goldens of tests/goldens/gen_sft_goldens.py, for a ChatML template, the
// SmolLM3-form template and one whose generation block sits in a macro, with
// the small byte-level tokenizer of tests/goldens/sft/tokenizer (trim_offsets on,
// so offsets leave leading spaces out).
#include <gtest/gtest.h>

#include <ctime>
#include <iomanip>
#include <sstream>

#include "kiln/core/json.h"
#include "kiln/tokenizers/chat_template.h"
#include "support/local_time.h"
#include "kiln/tokenizers/tokenizer.h"

using namespace kiln::tokenizers;
using nlohmann::ordered_json;

namespace {

const std::string kSft = std::string(KILN_TEST_DATA_DIR) + "/sft/";

using kiln::testing::local_time;

std::vector<std::pair<size_t, size_t>> spans_of(const ordered_json& j) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& s : j) out.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
  return out;
}

template <typename T>
std::vector<int64_t> as_i64(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

TEST(AssistantMask, MatchesTransformers) {
  const ordered_json goldens = kiln::read_ordered_json_file(kSft + "goldens.json");
  const Tokenizer tok = Tokenizer::from_pretrained(kSft + "tokenizer");
  const ordered_json special = ChatTemplate::from_pretrained(kSft + "tokenizer").special_tokens();
  ChatTemplateOptions options;
  options.render.now = local_time(goldens["now"].get<std::string>());
  size_t cases = 0, marked = 0;
  for (const auto& [name, t] : goldens["masks"].items()) {
    const ChatTemplate chat(t["template"].get<std::string>(), special, name);
    EXPECT_TRUE(chat.has_generation_blocks()) << name;
    for (const auto& [conv, c] : t["cases"].items()) {
      SCOPED_TRACE(name + " / " + conv);
      const ChatRendering r = chat.render(c["messages"], options);
      EXPECT_EQ(r.text, c["text"].get<std::string>());
      EXPECT_EQ(r.generation_spans, spans_of(c["generation_spans"]));
      const Encoding e = tok.encode(r.text, false);
      EXPECT_EQ(as_i64(e.ids), c["input_ids"].get<std::vector<int64_t>>());
      const std::vector<int64_t> mask = assistant_tokens_mask(e, r.generation_spans);
      EXPECT_EQ(mask, c["assistant_masks"].get<std::vector<int64_t>>());
      marked += static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));
      ++cases;
    }
  }
  EXPECT_EQ(cases, 18u);
  EXPECT_GT(marked, 50u);
}

// Rendering without tracking leaves the text as it is; apply() is render().text.
TEST(AssistantMask, SpansDoNotChangeTheText) {
  const std::string tpl =
      "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{{ '\\n' }}{% endfor %}";
  const ChatTemplate chat(tpl);
  const ordered_json messages = ordered_json::parse(
      R"([{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "wörld"},
          {"role": "user", "content": "again"}, {"role": "assistant", "content": ""}])");
  const ChatRendering r = chat.render(messages);
  EXPECT_EQ(r.text, chat.apply(messages));
  EXPECT_EQ(r.text, "user: héllo\nassistant: wörld\nuser: again\nassistant: \n");
  // Characters, not bytes: "user: héllo\n" is 12 characters, "assistant: " 11.
  const std::vector<std::pair<size_t, size_t>> want = {{23, 28}, {52, 52}};
  EXPECT_EQ(r.generation_spans, want);
}

TEST(AssistantMask, TemplatesWithoutGenerationBlocks) {
  EXPECT_FALSE(ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}").has_generation_blocks());
  EXPECT_TRUE(ChatTemplate("{%- generation -%}x{% endgeneration %}").has_generation_blocks());
  // A rendering with no generation block has no spans and a mask of zeros.
  const ChatTemplate chat("{% for m in messages %}{{ m.content }}{% endfor %}");
  const ChatRendering r = chat.render(ordered_json::parse(R"([{"role": "assistant", "content": "hi"}])"));
  EXPECT_TRUE(r.generation_spans.empty());
  Encoding e;
  e.offsets = {{0, 1}, {1, 2}};
  e.ids = {1, 2};
  EXPECT_EQ(assistant_tokens_mask(e, r.generation_spans), (std::vector<int64_t>{0, 0}));
}

// Offsets overlapping a span mark the token, partly or wholly; tokens past the last span stop the walk.
TEST(AssistantMask, OverlapRule) {
  Encoding e;
  e.ids = {1, 2, 3, 4, 5};
  e.offsets = {{0, 3}, {3, 6}, {6, 9}, {9, 12}, {12, 15}};
  EXPECT_EQ(assistant_tokens_mask(e, {{4, 7}}), (std::vector<int64_t>{0, 1, 1, 0, 0}));
  EXPECT_EQ(assistant_tokens_mask(e, {{0, 1}, {12, 20}}), (std::vector<int64_t>{1, 0, 0, 0, 1}));
  EXPECT_EQ(assistant_tokens_mask(e, {{6, 6}}), (std::vector<int64_t>{0, 0, 0, 0, 0}));  // empty span
}

}  // namespace
