#pragma once
// A Jinja2 interpreter for chat templates: the subset of the language that
// Hugging Face chat templates use, rendered byte for byte as jinja2 renders
// it in transformers' apply_chat_template (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, the loopcontrols extension, HF's tojson,
// raise_exception and strftime_now). docs/chat_templates.md lists what is
// supported.
//
//   jinja::Template t(text, "chat_template");   // parse once
//   std::string out = t.render(variables);      // a JSON object of variables
//
// A parsed Template is immutable: render it as often as needed, from several
// threads at once. Errors are kiln::Error naming the template position:
// "chat_template:3:17: unknown filter 'foo'". A template's own
// raise_exception('...') throws RaisedError, whose message() is the text the
// template gave.
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/tokenizers/jinja_value.h"

namespace kiln::tokenizers::jinja {

// Bounds that keep a hostile template from hanging or exhausting memory.
// jinja2 itself caps range() at 100000 items; these cap the rest.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // the output and any string or list built
  int64_t max_steps = 10'000'000;              // loop iterations plus macro calls
  int max_call_depth = 100;                    // nested macro / caller() calls
};

struct RenderOptions {
  RenderLimits limits;
  // The time strftime_now() formats (local time); the current time when unset.
  std::optional<std::chrono::system_clock::time_point> now;
  // Where to record the output spans of {% generation %} blocks, as
  // transformers' AssistantTracker does for return_assistant_tokens_mask:
  // [start, end) in characters (code points) of the output; start is the
  // length of the output written so far when the block ends (inside a macro
  // or a block `set`, as in transformers, that is not where the text lands).
  // Null: not recorded.
  std::vector<std::pair<size_t, size_t>>* generation_spans = nullptr;
};

class RaisedError : public Error {
 public:
  RaisedError(const std::string& what, std::string message) : Error(what), message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

struct Source;
struct Stmt;

class Template {
 public:
  // Parses `text`; `name` prefixes error positions.
  explicit Template(std::string_view text, std::string name = "template");
  // Renders with the members of `variables` (a JSON object; null for none) as template variables.
  std::string render(const nlohmann::ordered_json& variables, const RenderOptions& options = {}) const;
  std::string render(const DictData& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Source> source_;
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace kiln::tokenizers::jinja
