// The chat-template API beyond the goldens: loading a tokenizer directory's
// template the way transformers does, the variables a template sees, errors
// that name the template position, and hostile templates that must fail
// cleanly instead of crashing or hanging.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/tokenizers/chat_template.h"
#include "kiln/tokenizers/jinja.h"
#include "kiln/tokenizers/python_str.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

using namespace kiln::tokenizers;
using nlohmann::ordered_json;

namespace {

using kiln::testing::error_of;

#define EXPECT_HAS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "\"" << (text) << "\" lacks \"" << (part) << "\""

const ordered_json kChat = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "Hi"}])");

std::string render(const std::string& text, const ordered_json& vars = ordered_json::object(),
                   const jinja::RenderLimits& limits = {}) {
  jinja::RenderOptions o;
  o.limits = limits;
  return jinja::Template(text, "chat_template").render(vars, o);
}

TEST(ChatTemplate, ErrorsNameTheTemplatePosition) {
  EXPECT_EQ(error_of([] { jinja::Template("{% if x %}\n  {{ y | foo }}{% endif %}", "chat_template"); }),
            "chat_template:2:10: unknown filter 'foo'");
  EXPECT_EQ(error_of([] { jinja::Template("{{ x is nosuch }}", "chat_template"); }),
            "chat_template:1:9: unknown test 'nosuch'");
  EXPECT_EQ(error_of([] { jinja::Template("{% for m in messages %}", "chat_template"); }),
            "chat_template:1:24: unexpected end of template: expected 'endfor' or 'else' to close the 'for' at "
            "chat_template:1:4");
  EXPECT_EQ(error_of([] { jinja::Template("{% do x %}", "t"); }), "t:1:4: unknown tag 'do'");
  EXPECT_EQ(error_of([] { jinja::Template("{{ 'é' ~ @ }}", "t"); }), "t:1:10: unexpected character '@'");
  EXPECT_EQ(error_of([] { jinja::Template("{{ (1, 2] }}", "t"); }), "t:1:9: unexpected ']', expected ')'");
  EXPECT_EQ(error_of([] { jinja::Template("{% break %}", "t"); }), "t:1:4: 'break' outside of a loop");
  EXPECT_EQ(error_of([] { jinja::Template("{% include 'x' %}", "t"); }),
            "t:1:4: the 'include' tag is not supported in chat templates");
  EXPECT_EQ(error_of([] { jinja::Template("{{ x|wordwrap }}", "t"); }), "t:1:6: filter 'wordwrap' is not supported");
  EXPECT_EQ(error_of([] { render("\n\n   {{ messages[0].content.upper() }}", {{"messages", ordered_json::array()}}); }),
            "chat_template:3:18: list object has no element 0");
  EXPECT_EQ(error_of([] { render("{{ 1 + 'a' }}"); }),
            "chat_template:1:4: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(error_of([] { jinja::Template(std::string("{{ '\xff' }}"), "t"); }), "t: invalid UTF-8 at byte 4 of the template");
}

TEST(ChatTemplate, RaiseExceptionCarriesTheTemplatesMessage) {
  const std::string text = "{% for m in messages %}\n{% if m.role == 'system' %}"
                           "{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}";
  try {
    render_chat_template(text, kChat);
    FAIL() << "no error";
  } catch (const jinja::RaisedError& e) {
    EXPECT_EQ(e.message(), "System role not supported");
    EXPECT_STREQ(e.what(), "chat_template:2:31: System role not supported");
  }
}

TEST(ChatTemplate, VariablesAreThoseApplyChatTemplatePasses) {
  const std::string text =
      "{{ tools is defined }}/{{ tools is none }}/{{ documents is none }}/{{ add_generation_prompt }}/"
      "{{ bos_token }}/{{ eos_token }}/{{ unk_token is defined }}/{{ messages|length }}/{{ (tools or [])|length }}";
  ordered_json special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  EXPECT_EQ(render_chat_template(text, kChat, special), "True/True/True/False/<s>/</s>/False/2/0");
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  o.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  o.extra = {{"eos_token", "<override>"}};
  EXPECT_EQ(render_chat_template(text, kChat, special, o), "True/False/True/True/<s>/<override>/False/2/1");
}

TEST(ChatTemplate, DictsKeepTheirKeyOrderInTojson) {
  ordered_json vars = {{"x", ordered_json::parse(R"({"zeta": 1, "alpha": {"b": [1.0, 2.5e-7], "a": null}})")}};
  EXPECT_EQ(render("{{ x|tojson }}", vars), R"({"zeta": 1, "alpha": {"b": [1.0, 2.5e-07], "a": null}})");
  EXPECT_EQ(render("{{ x }}", vars), "{'zeta': 1, 'alpha': {'b': [1.0, 2.5e-07], 'a': None}}");
}

TEST(ChatTemplate, MessagesAreChecked) {
  EXPECT_HAS(error_of([] { check_messages(ordered_json::object(), "chat.json"); }),
             "chat.json: expected a JSON list of messages, found object");
  EXPECT_EQ(error_of([] { check_messages(ordered_json::parse(R"([{"role": "user"}, {"content": "x"}])"), "chat.json"); }),
            "chat.json: messages[1]: missing key 'role'");
  EXPECT_HAS(error_of([] { check_messages(ordered_json::parse(R"([{"role": 3}])"), "chat.json"); }),
             "chat.json: messages[0]: 'role' must be a string");
  EXPECT_HAS(error_of([] { check_messages(ordered_json::parse(R"(["hi"])"), "chat.json"); }),
             "chat.json: messages[0]: expected an object");
  EXPECT_HAS(error_of([] { render_chat_template("x", ordered_json::parse(R"([{"content": "x"}])")); }),
             "messages[0]: missing key 'role'");
}

TEST(ChatTemplate, ToolsJsonKeepsKeyOrder) {  // tool schemas print in file order, as Python's json keeps them
  kiln::testing::TempDir dir;
  auto ok = dir.write("tools.json", R"([{"zeta": 1, "alpha": "[{\"}"}])");
  EXPECT_EQ(kiln::read_ordered_json_file(ok).dump(), R"([{"zeta":1,"alpha":"[{\"}"}])");
}

TEST(ChatTemplate, FromPretrainedReadsTheConfigTemplateAndSpecialTokens) {
  kiln::testing::TempDir dir;
  dir.write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<|begin|>", "lstrip": false},
    "eos_token": "<|end|>", "pad_token": null, "unk_token": "",
    "additional_special_tokens": ["<a>", {"content": "<b>"}],
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}|{{ pad_token is defined }}{{ unk_token is defined }}{{ additional_special_tokens }}"})");
  auto chat = ChatTemplate::from_pretrained(dir.path().string());
  EXPECT_EQ(chat.apply(kChat), "<|begin|>[system]Be brief.<|end|>[user]Hi<|end|>|FalseFalse['<a>', '<b>']");
  EXPECT_EQ(chat.special_tokens().dump(),
            R"({"bos_token":"<|begin|>","eos_token":"<|end|>","additional_special_tokens":["<a>","<b>"]})");

  // special_tokens_map.json overrides the config's tokens.
  dir.write("special_tokens_map.json", R"({"eos_token": {"content": "<|eot|>"}})");
  EXPECT_EQ(ChatTemplate::from_pretrained(dir.path().string()).apply(kChat),
            "<|begin|>[system]Be brief.<|eot|>[user]Hi<|eot|>|FalseFalse['<a>', '<b>']");

  // chat_template.jinja wins over the config, as in recent transformers.
  dir.write("chat_template.jinja", "{% for m in messages %}{{ m.content }};{% endfor %}\n");
  auto from_file = ChatTemplate::from_pretrained(dir.path().string());
  EXPECT_EQ(from_file.apply(kChat), "Be brief.;Hi;");
  EXPECT_EQ(from_file.origin(), (dir.path() / "chat_template.jinja").string());
}

TEST(ChatTemplate, FromPretrainedPicksANamedTemplate) {
  kiln::testing::TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [
    {"name": "default", "template": "default:{{ messages|length }}"},
    {"name": "tool_use", "template": "tools:{{ tools|length }}"},
    {"name": "rag", "template": "rag:{{ documents|length }}"}]})");
  const std::string d = dir.path().string();
  EXPECT_EQ(ChatTemplate::from_pretrained(d).apply(kChat), "default:2");
  ChatTemplateOptions o;
  o.tools = ordered_json::parse("[1, 2, 3]");
  EXPECT_EQ(ChatTemplate::from_pretrained(d, "", /*with_tools=*/true).apply(kChat, o), "tools:3");
  o.documents = ordered_json::parse("[{}]");
  EXPECT_EQ(ChatTemplate::from_pretrained(d, "rag").apply(kChat, o), "rag:1");
  EXPECT_HAS(error_of([&] { ChatTemplate::from_pretrained(d, "chat"); }),
             "no chat template named 'chat' (templates: default, rag, tool_use)");

  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "a", "template": "x"}]})");
  EXPECT_HAS(error_of([&] { ChatTemplate::from_pretrained(d); }), "several chat templates and none named 'default'");
  dir.write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_HAS(error_of([&] { ChatTemplate::from_pretrained(d); }),
             "tokenizer_config.json: 'chat_template' must be a string or a list");
}

TEST(ChatTemplate, FromPretrainedWithoutATemplateSaysWhere) {
  kiln::testing::TempDir dir;
  const std::string d = dir.path().string();
  EXPECT_EQ(error_of([&] { ChatTemplate::from_pretrained(d); }),
            d + ": no chat template (no chat_template.jinja, and no tokenizer_config.json)");
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_pretrained(d); }),
            d + ": no chat template (no chat_template.jinja, and " + d +
                "/tokenizer_config.json has no 'chat_template')");
  EXPECT_HAS(error_of([&] { ChatTemplate::from_pretrained(d + "/missing"); }), "not a directory");
  dir.write("tokenizer_config.json", R"({"chat_template": "{{ messages|nosuch }}"})");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_pretrained(d); }), "chat_template:1:13: unknown filter 'nosuch'");
}

TEST(ChatTemplate, TemplateIsReusableAndStateless) {
  jinja::Template t("{% set g = messages|map(attribute='role') %}{{ g|list }}{{ g|list }}"
                    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  ordered_json vars = {{"messages", kChat}};
  EXPECT_EQ(t.render(vars), "['system', 'user'][]2");
  EXPECT_EQ(t.render(vars), "['system', 'user'][]2");
}

TEST(ChatTemplate, HostileTemplatesFailCleanly) {
  // Nesting deep enough to exhaust a recursive parser's stack.
  std::string deep = "{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}";
  EXPECT_HAS(error_of([&] { jinja::Template(deep, "t"); }), "nested deeper than");
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_HAS(error_of([&] { jinja::Template(blocks, "t"); }), "nested deeper than");
  // A left-nested chain as long: parsed and freed without recursion, refused when rendered.
  std::string chain = "{{ 1";
  for (int i = 0; i < 200000; ++i) chain += i % 2 ? " + 1" : " * x.y[0]|first";
  jinja::Template{chain + " }}", "t"};
  EXPECT_HAS(error_of([&] { render(chain + " }}"); }), "nested too deeply");
  // Operands are evaluated left to right, as Python does: the left one's error is the one raised.
  EXPECT_HAS(error_of([] { render("{{ raise_exception('left') + raise_exception('right') }}"); }), "left");
  EXPECT_HAS(error_of([] { render("{{ {raise_exception('key'): raise_exception('value')} }}"); }), "key");
  // Unbounded recursion through a macro.
  EXPECT_HAS(error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }),
             "macro calls nested deeper than 100");
  // Loops that would run for hours.
  jinja::RenderLimits limits;
  limits.max_steps = 100000;
  EXPECT_HAS(error_of([&] { render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, limits); }),
             "template ran past 100000 steps");
  // Output and values that grow without bound.
  limits.max_output_bytes = 1 << 20;
  EXPECT_HAS(error_of([&] { render("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", {}, limits); }),
             "more than 1048576 bytes");
  EXPECT_HAS(error_of([&] { render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", {}, limits); }),
             "more than 1048576 bytes");
  EXPECT_HAS(error_of([&] { render("{{ 'x' * 100000000000 }}", {}, limits); }), "more than 1048576 bytes");
  EXPECT_HAS(error_of([] { render("{{ range(1000000) }}"); }), "Range too big");
  // A namespace that holds itself: attribute access works, printing is refused.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "True");
  EXPECT_HAS(error_of([] { render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); }), "nested deeper than");
  EXPECT_HAS(error_of([] { render("{{ 9223372036854775807 + 1 }}"); }), "integer overflow");
}

TEST(PythonStr, FloatsPrintAsPythonRepr) {
  EXPECT_EQ(pystr::float_repr(1.0), "1.0");
  EXPECT_EQ(pystr::float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(pystr::float_repr(1e16), "1e+16");
  EXPECT_EQ(pystr::float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(pystr::float_repr(0.0001), "0.0001");
  EXPECT_EQ(pystr::float_repr(0.00001), "1e-05");
  EXPECT_EQ(pystr::float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(pystr::float_repr(-0.0), "-0.0");
}

TEST(PythonStr, StrMethodsCountCodePoints) {
  EXPECT_EQ(pystr::length("héllo👋"), 6u);
  EXPECT_EQ(pystr::strip("\u3000 x\u00a0", std::nullopt), "x");
  EXPECT_EQ(pystr::split(" a\u2003b  c ", std::nullopt), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(pystr::rsplit("a b c", std::string(" "), 1), (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(pystr::title("they're ǆ ß"), "They'Re ǅ Ss");
  EXPECT_EQ(pystr::repr("it's \"q\"\n\x01"), "'it\\'s \"q\"\\n\\x01'");
  EXPECT_EQ(pystr::find("añb", "b"), 2);
}

}  // namespace
