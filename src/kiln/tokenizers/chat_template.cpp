#include "kiln/tokenizers/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/json.h"

namespace kiln::tokenizers {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// transformers' SPECIAL_TOKENS_ATTRIBUTES, as special_tokens_map names them.
const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

// A token in a tokenizer config: "tok" or an AddedToken {"content": "tok", ...}.
std::optional<std::string> token_text(const ordered_json& v, const std::string& where, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw Error(where + ": '" + key + "' must be a string or {\"content\": ...}, found " + json_found(v));
}

// special_tokens_map keeps the tokens that are set and non-empty, as strings.
void collect_special_tokens(const ordered_json& cfg, const std::string& where, ordered_json& out) {
  if (!cfg.is_object()) throw Error(where + ": expected a JSON object, found " + json_found(cfg));
  for (const char* key : kSpecialTokens) {
    auto it = cfg.find(key);
    if (it == cfg.end()) continue;
    auto text = token_text(*it, where, key);
    if (text && !text->empty()) out[key] = *text;
    else out.erase(key);
  }
  if (auto it = cfg.find("additional_special_tokens"); it != cfg.end() && !it->is_null()) {
    if (!it->is_array()) throw Error(where + ": 'additional_special_tokens' must be a list, found " + json_found(*it));
    ordered_json list = ordered_json::array();
    for (const auto& t : *it)
      if (auto text = token_text(t, where, "additional_special_tokens")) list.push_back(*text);
    if (!list.empty()) out["additional_special_tokens"] = list;
    else out.erase("additional_special_tokens");
  }
  if (auto it = cfg.find("extra_special_tokens"); it != cfg.end() && it->is_object())
    for (auto e = it->begin(); e != it->end(); ++e)
      if (auto text = token_text(e.value(), where, "extra_special_tokens." + e.key())) out[e.key()] = *text;
}

// A template's text, the name its error positions use, and where it came from.
struct Found {
  std::string text, name, origin;
};

std::string known_names(const std::map<std::string, Found>& named) {
  std::string names;
  for (const auto& kv : named) names += (names.empty() ? "" : ", ") + kv.first;
  return names;
}

}  // namespace

void check_messages(const ordered_json& messages, const std::string& where) {
  const std::string prefix = where.empty() ? "" : where + ": ";
  if (!messages.is_array()) throw Error(prefix + "expected a JSON list of messages, found " + json_found(messages));
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string at = prefix + "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw Error(at + ": expected an object with \"role\" and \"content\", found " + json_found(m));
    auto role = m.find("role");
    if (role == m.end()) throw Error(at + ": missing key 'role'");
    if (!role->is_string()) throw Error(at + ": 'role' must be a string, found " + json_found(*role));
  }
}

ChatTemplate::ChatTemplate(std::string_view text, ordered_json special_tokens, std::string name)
    : template_(text, name),
      special_tokens_(std::move(special_tokens)),
      origin_(std::move(name)),
      has_generation_(std::regex_search(text.begin(), text.end(), std::regex(R"(\{%-?\s*generation\s*-?%\})"))) {
  if (!special_tokens_.is_object())
    throw Error(origin_ + ": special tokens must be a JSON object, found " + json_found(special_tokens_));
}

ChatTemplate ChatTemplate::from_pretrained(const std::string& directory, const std::string& template_name,
                                           bool with_tools) {
  const fs::path dir(directory);
  if (!fs::is_directory(dir)) throw Error(directory + ": not a directory");
  const fs::path config_path = dir / "tokenizer_config.json";
  ordered_json config = ordered_json::object();
  if (fs::exists(config_path)) config = read_ordered_json_file(config_path);
  if (!config.is_object()) throw Error(config_path.string() + ": expected a JSON object, found " + json_found(config));

  // The single template and the named ones, each with where it came from.
  std::optional<Found> single;
  std::map<std::string, Found> named;
  if (fs::exists(dir / "chat_template.jinja")) {
    const std::string path = (dir / "chat_template.jinja").string();
    single = Found{read_file(dir / "chat_template.jinja"), path, path};
  } else if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    const std::string where = config_path.string() + ": 'chat_template'";
    if (it->is_string()) {
      single = Found{it->get<std::string>(), "chat_template", where};
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const auto& t = (*it)[i];
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("template") ||
            !t["template"].is_string())
          throw Error(where + "[" + std::to_string(i) + "]: expected {\"name\": ..., \"template\": ...}, found " +
                      json_found(t));
        std::string name = t["name"].get<std::string>();
        named[name] = Found{t["template"].get<std::string>(), "chat_template[" + name + "]", where + " '" + name + "'"};
      }
    } else {
      throw Error(where + " must be a string or a list of {\"name\", \"template\"}, found " + json_found(*it));
    }
  }
  if (fs::is_directory(dir / "additional_chat_templates"))
    for (const auto& entry : fs::directory_iterator(dir / "additional_chat_templates"))
      if (entry.path().extension() == ".jinja")
        named[entry.path().stem().string()] = Found{read_file(entry.path()), entry.path().string(), entry.path().string()};
  if (single && !named.empty()) named.emplace("default", *single);

  Found chosen;
  if (!named.empty()) {
    std::string pick = template_name;
    if (pick.empty()) pick = with_tools && named.count("tool_use") ? "tool_use" : "default";
    auto it = named.find(pick);
    if (it == named.end()) {
      if (template_name.empty())
        throw Error(directory + ": several chat templates and none named 'default' (templates: " +
                    known_names(named) + ")");
      throw Error(directory + ": no chat template named '" + template_name + "' (templates: " + known_names(named) + ")");
    }
    chosen = it->second;
  } else if (single) {
    if (!template_name.empty() && template_name != "default")
      throw Error(directory + ": no chat template named '" + template_name + "' (the directory has one template)");
    chosen = *single;
  } else {
    throw Error(directory + ": no chat template (no chat_template.jinja, and " +
                (fs::exists(config_path) ? config_path.string() + " has no 'chat_template'"
                                         : std::string("no tokenizer_config.json")) + ")");
  }

  ChatTemplate t(chosen.text, pretrained_special_tokens(directory), chosen.name);
  t.origin_ = chosen.origin;
  return t;
}

ordered_json pretrained_special_tokens(const std::string& directory) {
  const fs::path dir(directory), config_path = dir / "tokenizer_config.json";
  ordered_json special = ordered_json::object();
  if (fs::exists(config_path)) {
    const ordered_json config = read_ordered_json_file(config_path);
    if (!config.is_object()) throw Error(config_path.string() + ": expected a JSON object, found " + json_found(config));
    collect_special_tokens(config, config_path.string(), special);
  }
  const fs::path map_path = dir / "special_tokens_map.json";
  if (fs::exists(map_path)) collect_special_tokens(read_ordered_json_file(map_path), map_path.string(), special);
  return special;
}

std::string ChatTemplate::apply(const ordered_json& messages, const ChatTemplateOptions& options) const {
  return render(messages, options).text;
}

ChatRendering ChatTemplate::render(const ordered_json& messages, const ChatTemplateOptions& options) const {
  check_messages(messages, "");
  using jinja::Value;
  jinja::DictData vars;
  auto put = [&vars](const std::string& key, Value v) { vars.set(Value::string(key), std::move(v)); };
  try {
    put("messages", jinja::from_json(messages));
    put("tools", jinja::from_json(options.tools));
    put("documents", jinja::from_json(options.documents));
    put("add_generation_prompt", Value::boolean(options.add_generation_prompt));
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) put(it.key(), jinja::from_json(it.value()));
    if (!options.extra.is_null()) {
      if (!options.extra.is_object()) throw Error(origin_ + ": extra template variables must be a JSON object");
      for (auto it = options.extra.begin(); it != options.extra.end(); ++it) put(it.key(), jinja::from_json(it.value()));
    }
  } catch (const jinja::EvalError& e) {
    throw Error(origin_ + ": template variables: " + e.what());
  }
  ChatRendering out;
  jinja::RenderOptions render = options.render;
  if (!render.generation_spans) render.generation_spans = &out.generation_spans;
  out.text = template_.render(vars, render);
  return out;
}

std::vector<int64_t> assistant_tokens_mask(const Encoding& encoding,
                                           const std::vector<std::pair<size_t, size_t>>& spans) {
  // One pass, spans and offsets both in order, as transformers walks them.
  std::vector<int64_t> mask(encoding.size(), 0);
  size_t span = 0;
  for (size_t t = 0; t < encoding.offsets.size(); ++t) {
    const auto [start, end] = encoding.offsets[t];
    while (span < spans.size() && start >= spans[span].second) ++span;
    if (span == spans.size()) break;
    if (end > spans[span].first) mask[t] = 1;
  }
  return mask;
}

std::string render_chat_template(std::string_view text, const ordered_json& messages,
                                 const ordered_json& special_tokens, const ChatTemplateOptions& options) {
  return ChatTemplate(text, special_tokens).apply(messages, options);
}

}  // namespace kiln::tokenizers
