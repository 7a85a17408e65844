#include "kiln/models/config.h"
#include "kiln/models/config_json.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/core/host_memory.h"
#include "kiln/nn/module.h"

namespace kiln::models {

using nlohmann::json;

using config_json::read;
using config_json::read_opt;

namespace {
using config_json::Unset;
// BertConfig's keys (RobertaConfig's are the same), or DistilBertConfig's
// names for the same fields, for reading and writing alike (Config is
// BertConfig or const BertConfig).
constexpr auto bert_fields = [](auto& c, auto&& visit) {
  if (c.distilbert()) {
    visit("sinusoidal_pos_embds");  // must be false: checked on reading, written false
    config_json::encoder_fields(c, config_json::DistilBertNames<std::remove_reference_t<decltype(visit)>>{visit});
    visit("qa_dropout", c.qa_dropout);
    visit("seq_classif_dropout", c.seq_classif_dropout);
    visit("pad_token_id", c.pad_token_id);
    return;
  }
  config_json::encoder_fields(c, visit);
  visit("pad_token_id", c.pad_token_id);
  visit("bos_token_id", c.bos_token_id, Unset::omit);
  visit("eos_token_id", c.eos_token_id, Unset::omit);
  visit("position_embedding_type", c.position_embedding_type);
  visit("classifier_dropout", c.classifier_dropout);
};
const std::vector<std::string> kCommonKeys = {"model_type", "architectures", "id2label", "label2id", "num_labels",
                                              "problem_type"};
}  // namespace

namespace config_json {

const char* distilbert_key(const char* key) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"hidden_size", "dim"},           {"num_hidden_layers", "n_layers"},
      {"num_attention_heads", "n_heads"}, {"intermediate_size", "hidden_dim"},
      {"hidden_dropout_prob", "dropout"}, {"attention_probs_dropout_prob", "attention_dropout"},
      {"hidden_act", "activation"},     {"type_vocab_size", nullptr},
      {"layer_norm_eps", nullptr}};
  for (const auto& [name, distil] : kNames)
    if (std::string_view(name) == key) return distil;
  return key;
}

void validate_encoder(const EncoderConfig& c, const std::string& src, bool distilbert_names) {
  auto key = [&](const char* k) {
    const char* d = distilbert_names ? distilbert_key(k) : k;
    return d ? d : k;
  };
  auto positive = [&](const char* k, int64_t v) { KILN_CHECK(v > 0, src, ": '", key(k), "' must be positive, got ", v); };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("intermediate_size", c.intermediate_size);
  positive("max_position_embeddings", c.max_position_embeddings);
  KILN_CHECK(c.hidden_size % c.num_attention_heads == 0, src, ": ", key("hidden_size"), " ", c.hidden_size,
             " is not a multiple of ", key("num_attention_heads"), " ", c.num_attention_heads);
  KILN_CHECK(c.layer_norm_eps >= 0, src, ": 'layer_norm_eps' must be >= 0, got ", c.layer_norm_eps);
  auto prob = [&](const char* k, double v) {
    KILN_CHECK(v >= 0 && v < 1, src, ": '", key(k), "' must be in [0, 1), got ", v);
  };
  prob("hidden_dropout_prob", c.hidden_dropout_prob);
  prob("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  try {
    nn::check_activation(c.hidden_act);
  } catch (const Error& e) {
    throw Error(src + ": " + key("hidden_act") + ": " + e.what());
  }
}

void read_common(const json& j, PretrainedConfig& c, const std::string& src) {
  KILN_CHECK(j.is_object(), src, ": expected a JSON object, got ", json_found(j));
  read(j, "model_type", c.model_type, src);
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    KILN_CHECK(it->is_array(), src, ": 'architectures' must be a list of strings, got ", json_found(*it));
    c.architectures.clear();
    for (const auto& a : *it) {
      KILN_CHECK(a.is_string(), src, ": 'architectures' must be a list of strings, got ", json_found(*it));
      c.architectures.push_back(a.get<std::string>());
    }
  }
  read_opt(j, "problem_type", c.problem_type, src);
  if (auto it = j.find("id2label"); it != j.end() && !it->is_null()) {
    KILN_CHECK(it->is_object(), src, ": 'id2label' must be an object {\"0\": \"label\", ...}, got ", json_found(*it));
    c.id2label.clear();
    for (const auto& [k, v] : it->items()) {
      char* end = nullptr;
      long long id = std::strtoll(k.c_str(), &end, 10);
      KILN_CHECK(!k.empty() && *end == 0 && id >= 0, src, ": 'id2label' key '", k, "' is not a label id");
      KILN_CHECK(v.is_string(), src, ": 'id2label' value for ", k, " must be a string, got ", json_found(v));
      c.id2label[id] = v.get<std::string>();
    }
  } else if (auto n = j.find("num_labels"); n != j.end() && !n->is_null()) {
    int64_t num = 2;
    read(j, "num_labels", num, src);
    c.set_num_labels(num);
  }
}

void keep_unknown(const json& j, PretrainedConfig& c, const std::vector<std::string>& known) {
  for (const auto& [k, v] : j.items())
    if (std::find(known.begin(), known.end(), k) == known.end() &&
        std::find(kCommonKeys.begin(), kCommonKeys.end(), k) == kCommonKeys.end())
      c.extra[k] = v;
}

json write_common(const PretrainedConfig& c) {
  json j = c.extra;
  j["model_type"] = c.model_type;
  j["architectures"] = c.architectures;
  if (c.problem_type) j["problem_type"] = *c.problem_type;
  json id2 = json::object(), l2id = json::object();
  for (const auto& [id, label] : c.id2label) {
    id2[std::to_string(id)] = label;
    l2id[label] = id;
  }
  j["id2label"] = id2;
  j["label2id"] = l2id;
  return j;
}

void validate_common(const PretrainedConfig& c, const std::string& src) {
  if (c.problem_type)
    KILN_CHECK(*c.problem_type == "regression" || *c.problem_type == "single_label_classification" ||
                   *c.problem_type == "multi_label_classification",
               src, ": problem_type '", *c.problem_type,
               "' is not one of regression, single_label_classification, multi_label_classification");
  for (int64_t i = 0; i < c.num_labels(); ++i)
    KILN_CHECK(c.id2label.count(i), src, ": 'id2label' must have ids 0..", c.num_labels() - 1, ", id ", i, " is missing");
}

}  // namespace config_json


namespace {
std::string count_text(long double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, n < 1e6L ? "%.0Lf" : "%.3Lg", n);
  return buf;
}
std::string bytes_text(long double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, bytes < 1e6L ? "%.1Lf %s" : "%.3Lg %s", bytes, units[u]);
  return buf;
}
}  // namespace

void check_model_size(const PretrainedConfig& c, const std::string& src, int bytes_per_parameter) {
  std::vector<SizeTerm> terms = c.size_terms();
  long double total = 0;
  for (const auto& t : terms) total += t.parameters;
  const long double bytes = total * bytes_per_parameter, memory = static_cast<long double>(host_memory::physical_bytes());
  if (memory == 0 || bytes <= memory) return;
  std::sort(terms.begin(), terms.end(), [](const SizeTerm& a, const SizeTerm& b) { return a.parameters > b.parameters; });
  std::string parts;
  for (size_t i = 0; i < terms.size() && i < 2; ++i)
    parts += (i ? "; " : "") + terms[i].what + " = " + count_text(terms[i].parameters);
  const char* as = bytes_per_parameter == 2 ? " as bf16" : " as f32";
  throw Error(detail::concat(src, ": the model would hold ", count_text(total), " parameters (", bytes_text(bytes), as,
                             "), more than this machine's memory (", bytes_text(memory), "); the largest parts: ", parts));
}

std::vector<SizeTerm> BertConfig::size_terms() const {
  const long double h = hidden_size, i = intermediate_size;
  const bool d = distilbert();
  auto name = [&](const char* bert, const char* distil) { return std::string(d ? distil : bert); };
  return {{detail::concat("word embeddings (vocab_size ", vocab_size, " x ", name("hidden_size ", "dim "), hidden_size, ")"),
           vocab_size * h},
          {detail::concat("position embeddings (max_position_embeddings ", max_position_embeddings, " x ",
                          name("hidden_size ", "dim "), hidden_size, ")"),
           max_position_embeddings * h},
          {detail::concat("token type embeddings (type_vocab_size ", type_vocab_size, " x hidden_size ", hidden_size, ")"),
           type_vocab_size * h},
          {detail::concat(num_hidden_layers, " layers (", name("num_hidden_layers", "n_layers"), "), each 4 x ",
                          name("hidden_size", "dim"), "^2 + 2 x ", name("hidden_size", "dim"), " x ",
                          name("intermediate_size", "hidden_dim"), " (", hidden_size, ", ", intermediate_size, ")"),
           num_hidden_layers * (4 * h * h + 2 * h * i)}};
}

void PretrainedConfig::set_num_labels(int64_t n) {
  KILN_CHECK(n >= 1 && n <= kMaxLabels, "num_labels must be in [1, ", kMaxLabels, "], got ", n);
  id2label.clear();
  for (int64_t i = 0; i < n; ++i) id2label[i] = "LABEL_" + std::to_string(i);
}

BertConfig BertConfig::from_json(const json& j, const std::string& src) {
  KILN_CHECK(j.is_object(), src, ": expected a JSON object, got ", json_found(j));
  BertConfig c;
  read(j, "model_type", c.model_type, src);
  if (c.model_type == "roberta") {  // RobertaConfig's defaults
    c.pad_token_id = 1;
    c.bos_token_id = 0;
    c.eos_token_id = 2;
    c.max_position_embeddings = 514;
    c.type_vocab_size = 1;
    c.layer_norm_eps = 1e-5;
    c.vocab_size = 50265;
  }
  if (c.model_type == "distilbert") {  // DistilBertConfig's defaults
    c.num_hidden_layers = 6;
    c.type_vocab_size = 0;  // no token type embeddings
  }
  config_json::read_common(j, c, src);
  if (c.distilbert()) {
    bool sinusoidal = false;
    read(j, "sinusoidal_pos_embds", sinusoidal, src);
    KILN_CHECK(!sinusoidal, src, ": 'sinusoidal_pos_embds' true is not supported (HF freezes those position "
               "embeddings; kiln would train them)");
  }
  config_json::read_fields(j, c, src, bert_fields);
  c.validate(src);
  return c;
}

void BertConfig::validate(const std::string& src) const {
  KILN_CHECK(model_type == "bert" || model_type == "roberta" || distilbert(), src, ": model_type '", model_type,
             "' is not a BERT-family type (bert, roberta, distilbert)");
  // Errors name the key config.json has.
  const bool d = distilbert();
  config_json::validate_encoder(*this, src, d);
  if (!d) KILN_CHECK(type_vocab_size > 0, src, ": 'type_vocab_size' must be positive, got ", type_vocab_size);
  KILN_CHECK(position_embedding_type == "absolute", src, ": position_embedding_type '", position_embedding_type,
             "' is not supported (only 'absolute')");
  KILN_CHECK(pad_token_id >= 0 && pad_token_id < vocab_size, src, ": pad_token_id ", pad_token_id,
             " out of range [0, ", vocab_size, ")");
  auto prob = [&](const char* k, double v) { KILN_CHECK(v >= 0 && v < 1, src, ": '", k, "' must be in [0, 1), got ", v); };
  if (classifier_dropout) prob("classifier_dropout", *classifier_dropout);
  if (d) {
    prob("qa_dropout", qa_dropout);
    prob("seq_classif_dropout", seq_classif_dropout);
  }
  config_json::validate_common(*this, src);
}

BertConfig BertConfig::from_file(const std::filesystem::path& path) {
  return from_json(read_json_file(path), path.string());
}

std::optional<BertConfig> BertConfig::preset(const std::string& name) {
  BertConfig c;
  auto size = [&](int64_t layers, int64_t hidden, int64_t heads) {
    c.num_hidden_layers = layers;
    c.hidden_size = hidden;
    c.num_attention_heads = heads;
    c.intermediate_size = 4 * hidden;
  };
  if (name == "bert-tiny") size(2, 128, 2);
  else if (name == "bert-mini") size(4, 256, 4);
  else if (name == "bert-small") size(4, 512, 8);
  else if (name == "bert-base") size(12, 768, 12);
  else if (name == "roberta-base") {
    json j = {{"model_type", "roberta"}};
    c = from_json(j, "preset roberta-base");
  } else if (name == "distilbert-base" || name == "distilbert-tiny") {
    json j = {{"model_type", "distilbert"}};
    if (name == "distilbert-tiny") j.update({{"n_layers", 2}, {"dim", 128}, {"n_heads", 2}, {"hidden_dim", 512}});
    c = from_json(j, "preset " + name);
  } else {
    return std::nullopt;
  }
  c.architectures = {c.class_prefix() + "ForMaskedLM"};
  return c;
}

std::string BertConfig::architecture_for(ModelTask task) const {
  switch (task) {
    case ModelTask::SequenceClassification: return class_prefix() + "ForSequenceClassification";
    case ModelTask::TokenClassification: return class_prefix() + "ForTokenClassification";
    case ModelTask::QuestionAnswering: return class_prefix() + "ForQuestionAnswering";
    case ModelTask::MultipleChoice: return class_prefix() + "ForMultipleChoice";
    case ModelTask::MaskedLM: return class_prefix() + "ForMaskedLM";
    default: return "";
  }
}

void BertConfig::adapt_to_tokenizer(const TokenizerIds& ids) {
  vocab_size = ids.vocab_size;
  pad_token_id = ids.pad_id;
}

std::vector<std::string> BertConfig::ignored_checkpoint_keys() const {
  // The masked-LM decoders, tied to the word embeddings.
  if (distilbert()) return {"vocab_projector.weight"};
  return {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "lm_head.decoder.weight",
          "lm_head.decoder.bias"};
}

json BertConfig::to_json() const {
  json j = config_json::write_common(*this);
  if (distilbert()) j["sinusoidal_pos_embds"] = false;
  bert_fields(*this, config_json::Writer{j});
  return j;
}

}  // namespace kiln::models
