// Chat templates rendered byte for byte as transformers renders them: the
// goldens of tests/goldens/gen_chat_template_goldens.py (jinja2 with HF's
// environment) for ten templates in the form of model families' templates
// over every golden conversation, and small templates covering the language.
//
// KILN_CHAT_TEMPLATE_GOLDENS=/path/goldens.json runs the same comparison over
// another goldens file of that format (for instance real templates rendered by
// jinja2 outside the repository); the test is skipped when it is unset.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "kiln/tokenizers/chat_template.h"
#include "support/local_time.h"
#include "kiln/tokenizers/jinja.h"

using namespace kiln::tokenizers;
using nlohmann::ordered_json;

namespace {

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/chat_templates/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json read_json(const std::string& path) { return ordered_json::parse(slurp(path)); }

using kiln::testing::local_time;

// What one rendering gave, in the goldens' terms.
struct Outcome {
  std::string kind;  // "output", "raised" or "error"
  std::string text;
};

template <typename F>
Outcome run(F&& render) {
  try {
    return {"output", render()};
  } catch (const jinja::RaisedError& e) {
    return {"raised", e.message()};
  } catch (const kiln::Error& e) {
    return {"error", e.what()};
  }
}

// Compares one outcome with its golden: the same text, the same
// raise_exception message, or (for jinja2's other errors) any error.
void expect_matches(const Outcome& got, const ordered_json& golden, const std::string& label) {
  if (golden.contains("output")) {
    ASSERT_EQ(got.kind, "output") << label << ": " << got.text;
    EXPECT_EQ(got.text, golden["output"].get<std::string>()) << label;
  } else if (golden.contains("raised")) {
    ASSERT_EQ(got.kind, "raised") << label << ": " << got.text;
    EXPECT_EQ(got.text, golden["raised"].get<std::string>()) << label;
  } else {
    EXPECT_EQ(got.kind, "error") << label << ": jinja2 failed with " << golden["error"] << ", kiln gave "
                                 << got.text;
  }
}

// Every template x conversation x add_generation_prompt of a goldens file.
// Returns the number of renderings compared.
size_t check_goldens(const std::string& path) {
  const ordered_json g = read_json(path);
  const std::string dir = std::filesystem::path(path).parent_path().string() + "/";
  const ordered_json& conversations = g["conversations"];
  jinja::RenderOptions render;
  render.now = local_time(g["now"].get<std::string>());
  size_t n = 0;
  for (auto t = g["templates"].begin(); t != g["templates"].end(); ++t) {
    const std::string name = t.key();
    ChatTemplate chat(slurp(dir + t.value()["file"].get<std::string>()), t.value()["special_tokens"], name);
    for (const auto& c : t.value()["cases"]) {
      const ordered_json& conv = conversations[c["conversation"].get<std::string>()];
      ChatTemplateOptions options;
      options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      if (conv.contains("tools")) options.tools = conv["tools"];
      if (conv.contains("extra")) options.extra = conv["extra"];
      options.render = render;
      const std::string label = name + " / " + c["conversation"].get<std::string>() +
                                (options.add_generation_prompt ? " / generation prompt" : "");
      expect_matches(run([&] { return chat.apply(conv["messages"], options); }), c, label);
      ++n;
    }
  }
  return n;
}

TEST(ChatTemplateGoldens, TemplatesOfTenFamiliesMatchJinja2) {
  size_t n = check_goldens(kDir + "goldens.json");
  EXPECT_GE(n, 300u);
}

TEST(ChatTemplateGoldens, LanguageCasesMatchJinja2) {
  const ordered_json g = read_json(kDir + "jinja_cases.json");
  jinja::RenderOptions render;
  render.now = local_time(g["now"].get<std::string>());
  size_t n = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["template"].get<std::string>();
    expect_matches(run([&] { return jinja::Template(text, "case").render(g["variables"], render); }), c, text);
    ++n;
  }
  EXPECT_GE(n, 100u);
}

TEST(ChatTemplateGoldens, ExternalGoldensFromEnvironment) {
  const char* path = std::getenv("KILN_CHAT_TEMPLATE_GOLDENS");
  if (!path || !*path) GTEST_SKIP() << "KILN_CHAT_TEMPLATE_GOLDENS is not set";
  EXPECT_GT(check_goldens(path), 0u);
}

}  // namespace
