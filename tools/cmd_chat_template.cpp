// kiln chat-template --tokenizer DIR --messages FILE.json [--add_generation_prompt] [--tokenize]
//                    [--tools FILE.json] [--template_name NAME]
// Prints what transformers' tokenizer.apply_chat_template(messages,
// tokenize=False, add_generation_prompt=...) returns, byte for byte (no
// newline added); with --tokenize, the ids of that text encoded without
// special tokens added, as a list. The work is kiln::tokenizers::ChatTemplate.
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/tokenizers/chat_template.h"
#include "kiln/tokenizers/tokenizer.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln chat-template --tokenizer DIR --messages FILE.json [--add_generation_prompt] [--tokenize]\n"
    "                          [--tools FILE.json] [--template_name NAME]";

int run_chat_template(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("chat-template",
                         {{"tokenizer", true, true},
                          {"messages", true, true},
                          {"add_generation_prompt", false, false},
                          {"tokenize", false, false},
                          {"tools", true, false},
                          {"template_name", true, false}},
                         kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const std::string dir = flags.get("tokenizer"), messages_path = flags.get("messages");
  nlohmann::ordered_json messages = kiln::read_ordered_json_file(messages_path);
  kiln::tokenizers::check_messages(messages, messages_path);
  kiln::tokenizers::ChatTemplateOptions options;
  options.add_generation_prompt = flags.has("add_generation_prompt");
  if (flags.has("tools")) {
    options.tools = kiln::read_ordered_json_file(flags.get("tools"));
    KILN_CHECK(options.tools.is_array(), flags.get("tools"), ": expected a JSON list of tool schemas, found ",
               kiln::json_found(options.tools));
  }
  auto chat = kiln::tokenizers::ChatTemplate::from_pretrained(dir, flags.get("template_name"), flags.has("tools"));
  const std::string text = chat.apply(messages, options);
  if (!flags.has("tokenize")) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  auto tokenizer = kiln::tokenizers::Tokenizer::from_pretrained(dir);
  const auto ids = tokenizer.encode(text, /*add_special_tokens=*/false).ids;
  std::string line = "[";
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
  line += "]\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace

KILN_COMMAND_NAMED(chat_template, "chat-template",
                   "render a conversation with a tokenizer's chat template (apply_chat_template)", run_chat_template);
