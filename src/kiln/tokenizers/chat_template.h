#pragma once
// Chat templates: transformers' apply_chat_template(messages, tokenize=False)
// in C++. A template is the Jinja text of a tokenizer directory
// (chat_template.jinja, or tokenizer_config.json's "chat_template"); it is
// rendered with the variables transformers passes: `messages`, `tools` and
// `documents` (none unless given), `add_generation_prompt`, the tokenizer's
// special tokens (`bos_token`, `eos_token`, ... as strings), then any extra
// variables, which override the special tokens.
//
//   auto chat = kiln::tokenizers::ChatTemplate::from_pretrained("models/llama");
//   std::string prompt = chat.apply(messages, {.add_generation_prompt = true});
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/tokenizers/encoding.h"
#include "kiln/tokenizers/jinja.h"

namespace kiln::tokenizers {

// A rendering with where its {% generation %} blocks landed.
struct ChatRendering {
  std::string text;
  // [start, end) in characters (code points) of `text`, one per generation
  // block rendered, in order: transformers' generation_indices.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;      // a list of tool schemas; null: not given (the template sees none)
  nlohmann::ordered_json documents;  // a list of documents; null: not given
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // apply_chat_template's **kwargs
  jinja::RenderOptions render;
};

class ChatTemplate {
 public:
  // `special_tokens`: a JSON object of template variables such as
  // {"bos_token": "<s>", "eos_token": "</s>"}. `name` prefixes error positions.
  explicit ChatTemplate(std::string_view text,
                        nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object(),
                        std::string name = "chat_template");

  // The template of a tokenizer directory as transformers loads it:
  // chat_template.jinja when present, else tokenizer_config.json's
  // "chat_template" (a string, or a list of {"name", "template"} of which
  // `template_name` is used, by default "tool_use" when with_tools and
  // "default" otherwise). Named templates may also come from
  // additional_chat_templates/NAME.jinja. Special tokens are the non-empty
  // bos/eos/unk/sep/pad/cls/mask tokens and additional_special_tokens of
  // tokenizer_config.json, overridden by special_tokens_map.json.
  static ChatTemplate from_pretrained(const std::string& directory, const std::string& template_name = "",
                                      bool with_tools = false);

  // The rendered conversation. `messages` must be a list of objects with a
  // string "role" (checked, errors name "messages[i]").
  std::string apply(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options = {}) const;
  // The same, with the spans of the {% generation %} blocks (transformers'
  // apply_chat_template with return_assistant_tokens_mask=True).
  ChatRendering render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options = {}) const;
  // Whether the template has a {% generation %} tag (transformers' test:
  // the regex \{\%-?\s*generation\s*-?\%\}), without which no token is an
  // assistant token.
  bool has_generation_blocks() const { return has_generation_; }

  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  // Where the template came from ("DIR/chat_template.jinja", ...), for messages.
  const std::string& origin() const { return origin_; }

 private:
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;
  std::string origin_;
  bool has_generation_ = false;
};

// One-off rendering: ChatTemplate(text, special_tokens).apply(messages, options).
std::string render_chat_template(std::string_view text, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object(),
                                 const ChatTemplateOptions& options = {});


// The special tokens of a tokenizer directory, as from_pretrained gives them
// to its template: {"bos_token": "<s>", "eos_token": "</s>", ...} (none
// without tokenizer_config.json or special_tokens_map.json).
nlohmann::ordered_json pretrained_special_tokens(const std::string& directory);

// transformers' assistant_masks (apply_chat_template with
// return_assistant_tokens_mask=True): 1 for every token of `encoding` (the
// rendering's text, encoded without special tokens) whose character offsets
// overlap a generation span, 0 elsewhere; a span cut by truncation keeps the
// tokens that remain.
std::vector<int64_t> assistant_tokens_mask(const Encoding& encoding,
                                           const std::vector<std::pair<size_t, size_t>>& spans);

// Throws kiln::Error unless `messages` is a list of objects with a string
// "role": "<where>: messages[2]: missing key 'role'".
void check_messages(const nlohmann::ordered_json& messages, const std::string& where);

}  // namespace kiln::tokenizers
