#include "kiln/tokenizers/jinja.h"

#include "kiln/tokenizers/jinja_interpreter.h"
#include "kiln/tokenizers/jinja_lexer.h"
#include "kiln/tokenizers/jinja_parser.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

Template::Template(std::string_view text, std::string name) {
  if (auto bad = utf8::find_invalid(text))
    throw Error(name + ": invalid UTF-8 at byte " + std::to_string(*bad) + " of the template");
  auto source = std::make_shared<Source>();
  source->name = std::move(name);
  source->text = normalize_newlines(text);
  std::vector<Token> tokens = tokenize(*source);
  body_ = std::make_shared<const Body>(parse(*source, tokens));
  source_ = std::move(source);
}

std::string Template::render(const nlohmann::ordered_json& variables, const RenderOptions& options) const {
  if (variables.is_null()) return render(DictData{}, options);
  if (!variables.is_object())
    throw Error(source_->name + ": template variables must be a JSON object, found " + variables.type_name());
  Value v;
  try {
    v = from_json(variables);
  } catch (const EvalError& e) {
    throw Error(source_->name + ": template variables: " + e.what());
  }
  return render(v.as_dict(), options);
}

std::string Template::render(const DictData& variables, const RenderOptions& options) const {
  Interpreter interpreter(*source_, options);
  try {
    return interpreter.render(*body_, variables);
  } catch (const EvalError& e) {
    throw Error(source_->name + ": " + e.what());
  }
}

}  // namespace kiln::tokenizers::jinja
