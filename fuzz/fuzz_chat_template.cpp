// Fuzz target: a chat template (tokenizer_config.json's chat_template or
// chat_template.jinja: jinja::Template through ChatTemplate). Input: the
// template's text. It is parsed, then rendered with a fixed conversation
// (system, user, assistant, with tools and an extra variable), with and
// without the generation prompt, so the lexer, parser, interpreter, filters
// and globals all run on what it holds.
// The render limits are lowered so that a template looping for its full
// default budget does not read as a hang; a limit reached is a rejection.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "kiln/tokenizers/chat_template.h"

namespace {

using nlohmann::ordered_json;

const ordered_json& messages() {
  static const ordered_json m = ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Héllo\nwörld 東京 \ud83d\ude00"},
    {"role": "assistant", "content": "Hi.", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "{\"ok\": 1}"},
    {"role": "user", "content": [{"type": "text", "text": "and?"}]}
  ])");
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kiln::tokenizers::ChatTemplate;
  using kiln::tokenizers::ChatTemplateOptions;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::fuzz::attempt([&] {
    const ChatTemplate t(text, ordered_json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"pad_token", nullptr}});
    ChatTemplateOptions options;
    options.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])");
    options.extra = ordered_json{{"enable_thinking", false}};
    options.render.limits.max_steps = 20000;
    options.render.limits.max_output_bytes = size_t{1} << 20;
    options.render.now = std::chrono::system_clock::time_point{};
    for (bool prompt : {false, true}) {
      options.add_generation_prompt = prompt;
      kiln::fuzz::attempt([&] { t.render(messages(), options); });
    }
  });
  return 0;
}
