#pragma once
// Reading and writing config.json fields: typed reads whose errors name the
// file and key, and the fields every PretrainedConfig shares.
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/models/config.h"

namespace kiln::models::config_json {

using nlohmann::json;

// Reads j[key] into out when present and not null; a wrong type is an error
// naming src and the key.
template <typename T>
void read(const json& j, const char* key, T& out, const std::string& src) {
  out = json_value<T>(j, key, out, src);
}

template <typename T>
void read_opt(const json& j, const char* key, std::optional<T>& out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  T v{};
  read(j, key, v, src);
  out = v;
}

// A config's field table is one function template per config that names each
// config.json key once, with the member it fills:
//
//   constexpr auto gpt2_fields = [](auto& c, auto&& visit) {  // c: GPT2Config or const GPT2Config
//     visit("n_embd", c.n_embd);
//     visit("n_inner", c.n_inner);                       // unset: written as null
//     visit("pad_token_id", c.pad_token_id, Unset::omit);  // unset: not written
//     visit("layer_types");  // a key the config reads and writes by hand
//   };
//
// Visiting it with Reader reads config.json, with Writer writes it and with
// KeyLister lists the keys the config interprets (the rest go to `extra`).
// Members are int64_t, double, bool, std::string or std::optional of those;
// a null in config.json unsets an optional member (HF's None).
enum class Unset { null, omit };  // how Writer writes an unset optional member

struct Reader {
  const json& j;
  const std::string& src;
  template <typename T>
  void operator()(const char* key, T& field, Unset = Unset::null) const {
    read(j, key, field, src);
  }
  template <typename T>
  void operator()(const char* key, std::optional<T>& field, Unset = Unset::null) const {
    auto it = j.find(key);
    if (it == j.end()) return;
    if (it->is_null()) return field.reset();
    T v{};
    read(j, key, v, src);
    field = v;
  }
  void operator()(const char*) const {}
};

struct Writer {
  json& j;
  template <typename T>
  void operator()(const char* key, const T& field, Unset = Unset::null) const {
    j[key] = field;
  }
  template <typename T>
  void operator()(const char* key, const std::optional<T>& field, Unset unset = Unset::null) const {
    if (field) j[key] = *field;
    else if (unset == Unset::null) j[key] = nullptr;
  }
  void operator()(const char*) const {}
};

struct KeyLister {
  std::vector<std::string>& keys;
  template <typename T>
  void operator()(const char* key, const T&, Unset = Unset::null) const {
    keys.emplace_back(key);
  }
  void operator()(const char* key) const { keys.emplace_back(key); }
};

// EncoderConfig's field table: BertConfig's and DebertaV2Config's keys.
constexpr auto encoder_fields = [](auto& c, auto&& visit) {
  visit("vocab_size", c.vocab_size);
  visit("hidden_size", c.hidden_size);
  visit("num_hidden_layers", c.num_hidden_layers);
  visit("num_attention_heads", c.num_attention_heads);
  visit("intermediate_size", c.intermediate_size);
  visit("hidden_act", c.hidden_act);
  visit("hidden_dropout_prob", c.hidden_dropout_prob);
  visit("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  visit("max_position_embeddings", c.max_position_embeddings);
  visit("type_vocab_size", c.type_vocab_size);
  visit("initializer_range", c.initializer_range);
  visit("layer_norm_eps", c.layer_norm_eps);
};

// DistilBertConfig's name for an EncoderConfig key ("dim" for hidden_size, "n_layers", "n_heads",
// "hidden_dim", "dropout", "attention_dropout", "activation"; the others keep theirs), or nullptr for the
// fields it does not have (type_vocab_size, layer_norm_eps).
const char* distilbert_key(const char* key);

// A field table's visitor under DistilBertConfig's names, skipping the fields it lacks.
template <class Visit>
struct DistilBertNames {
  Visit& visit;
  template <typename T>
  void operator()(const char* key, T& field, Unset unset = Unset::null) const {
    if (const char* k = distilbert_key(key)) visit(k, field, unset);
  }
};

// The checks of EncoderConfig's fields (sizes positive, heads dividing hidden_size, dropouts in [0, 1), a
// known activation), type_vocab_size aside; errors name `src` and each field's key, DistilBertConfig's
// with `distilbert_names`.
void validate_encoder(const EncoderConfig& c, const std::string& src, bool distilbert_names = false);

// Keys outside `known` (and the common ones) go to c.extra.
void keep_unknown(const json& j, PretrainedConfig& c, const std::vector<std::string>& known);

// Reads the fields `fields` names from j into c and keeps the keys it does not
// name (nor the common ones) in c.extra.
template <class Config, class Fields>
void read_fields(const json& j, Config& c, const std::string& src, const Fields& fields) {
  fields(c, Reader{j, src});
  std::vector<std::string> keys;
  fields(c, KeyLister{keys});
  keep_unknown(j, c, keys);
}

// model_type, architectures, id2label (or num_labels), problem_type, pad_token_id.
void read_common(const json& j, PretrainedConfig& c, const std::string& src);
// The common fields, over c.extra.
json write_common(const PretrainedConfig& c);
// problem_type and id2label consistency.
void validate_common(const PretrainedConfig& c, const std::string& src);

}  // namespace kiln::models::config_json
