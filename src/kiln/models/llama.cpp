#include "kiln/models/llama.h"

#include <cmath>
#include <array>
#include <limits>
#include <map>

#include "kiln/core/error.h"
#include "kiln/models/attention.h"
#include "kiln/models/config_json.h"
#include "kiln/models/packing.h"
#include "kiln/models/registry.h"
#include "kiln/nn/module.h"

namespace kiln::models {

using nlohmann::json;

namespace {
using config_json::Unset;
// The key of the activation: Gemma 2 names it hidden_activation.
const char* act_key(const std::string& type) { return type == "gemma2" ? "hidden_activation" : "hidden_act"; }
bool qwen(const std::string& type) { return type == "qwen2" || type == "qwen3"; }
// The keys every type of the family has, then each type's own.
constexpr auto llama_fields = [](auto& c, auto&& visit) {
  const std::string& type = c.model_type;
  visit("vocab_size", c.vocab_size);
  visit("hidden_size", c.hidden_size);
  visit("intermediate_size", c.intermediate_size);
  visit("num_hidden_layers", c.num_hidden_layers);
  visit("num_attention_heads", c.num_attention_heads);
  visit("num_key_value_heads", c.num_key_value_heads);  // written resolved (kv_heads)
  visit("head_dim", c.head_dim, Unset::omit);
  visit(act_key(type), c.hidden_act);
  visit("max_position_embeddings", c.max_position_embeddings);
  visit("initializer_range", c.initializer_range);
  visit("rms_norm_eps", c.rms_norm_eps);
  visit("pad_token_id", c.pad_token_id, Unset::omit);
  visit("bos_token_id", c.bos_token_id);
  visit("eos_token_id");  // one id or a list
  visit("tie_word_embeddings", c.tie_word_embeddings);
  for (const char* rope_key : {"rope_theta", "rope_scaling", "rope_parameters"}) visit(rope_key);  // RopeScaling
  visit("attention_dropout", c.attention_dropout);
  if (type == "llama") {  // LlamaConfig's own
    visit("pretraining_tp", c.pretraining_tp);
    visit("mlp_bias", c.mlp_bias);
  }
  if (type != "mistral" && type != "qwen2" && type != "phi3") visit("attention_bias", c.attention_bias);
  if (type == "phi3") {
    visit("original_max_position_embeddings", c.original_max_position_embeddings);
    visit("resid_pdrop", c.resid_pdrop);
    visit("embd_pdrop", c.embd_pdrop);
  }
  if (type != "llama" && type != "gemma") visit("sliding_window", c.sliding_window);  // null: no window
  if (qwen(type)) {
    visit("use_sliding_window", c.use_sliding_window);
    visit("max_window_layers", c.max_window_layers);
  }
  if (qwen(type) || type == "gemma2") visit("layer_types");  // written resolved (default_layer_types)
  if (type == "gemma2") {
    visit("query_pre_attn_scalar", c.query_pre_attn_scalar);
    visit("final_logit_softcapping", c.final_logit_softcapping);
    visit("attn_logit_softcapping", c.attn_logit_softcapping);
  }
};
constexpr double kMin = std::numeric_limits<float>::lowest();


// [B,KVH,T,D] -> [B,KVH·rep,T,D], each key/value head serving `rep` query heads in a row (repeat_kv).
Tensor repeat_kv(const Tensor& x, int64_t rep) {
  if (rep == 1) return x;
  const int64_t B = x.dim(0), KVH = x.dim(1), T = x.dim(2), D = x.dim(3);
  return reshape(broadcast_to(reshape(x, {B, KVH, 1, T, D}), {B, KVH, rep, T, D}), {B, KVH * rep, T, D});
}

// tanh(x / cap) · cap: Gemma 2's soft capping of scores and logits.
Tensor soft_cap(const Tensor& x, std::optional<double> cap) { return cap ? tanh(x / *cap) * *cap : x; }
}  // namespace

bool LlamaConfig::is_type(const std::string& t) {
  return t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3" || t == "gemma" || t == "gemma2" || t == "phi3";
}

std::string LlamaConfig::class_prefix() const {
  if (model_type == "mistral") return "Mistral";
  if (model_type == "qwen2") return "Qwen2";
  if (model_type == "qwen3") return "Qwen3";
  if (model_type == "gemma") return "Gemma";
  if (model_type == "gemma2") return "Gemma2";
  if (model_type == "phi3") return "Phi3";
  return "Llama";
}

LlamaConfig LlamaConfig::defaults(const std::string& model_type) {
  LlamaConfig c;
  c.model_type = model_type;
  if (model_type == "mistral") {  // MistralConfig's defaults (Mistral 7B)
    c.intermediate_size = 14336;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 4096 * 32;
    c.sliding_window = 4096;
  } else if (model_type == "qwen2" || model_type == "qwen3") {  // Qwen2Config's, Qwen3Config's
    c.vocab_size = 151936;
    c.intermediate_size = 22016;
    c.max_position_embeddings = 32768;
    c.sliding_window = 4096;
    c.bos_token_id.reset();
    c.eos_token_id.clear();
    if (model_type == "qwen3") c.head_dim = 128;
  } else if (c.gemma()) {  // GemmaConfig's (Gemma 7B), Gemma2Config's (Gemma 2 2B)
    const bool two = model_type == "gemma2";
    c.vocab_size = 256000;
    c.hidden_size = two ? 2304 : 3072;
    c.intermediate_size = two ? 9216 : 24576;
    c.num_hidden_layers = two ? 26 : 28;
    c.num_attention_heads = two ? 8 : 16;
    c.num_key_value_heads = two ? 4 : 16;
    c.head_dim = 256;
    c.hidden_act = "gelu_pytorch_tanh";
    c.max_position_embeddings = 8192;
    c.pad_token_id = 0;
    c.eos_token_id = {1};
    c.bos_token_id = 2;
    c.tie_word_embeddings = true;
    if (two) {
      c.sliding_window = 4096;
      c.final_logit_softcapping = 30.0;
      c.attn_logit_softcapping = 50.0;
    }
  } else if (model_type == "phi3") {  // Phi3Config's (Phi-3 mini)
    c.vocab_size = 32064;
    c.hidden_size = 3072;
    c.intermediate_size = 8192;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-5;
    c.eos_token_id = {32000};
    c.pad_token_id = 32000;
  }
  return c;
}

std::optional<LlamaConfig> LlamaConfig::preset(const std::string& name) {
  if (name == "llama-tiny") {  // Llama's layout at a size that trains in seconds
    LlamaConfig c;
    c.hidden_size = 128;
    c.intermediate_size = 352;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 512;
    c.architectures = {"LlamaForCausalLM"};
    return c;
  }
  static const std::map<std::string, std::string> types = {{"llama3-tiny", "llama"},   {"qwen3-tiny", "qwen3"},
                                                           {"mistral-tiny", "mistral"}, {"gemma-tiny", "gemma"},
                                                           {"gemma2-tiny", "gemma2"}, {"phi3-tiny", "phi3"}};
  auto it = types.find(name);
  if (it == types.end()) return std::nullopt;
  LlamaConfig c = defaults(it->second);
  c.vocab_size = 32000;
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = c.gemma() && !c.gemma2() ? 1 : 2;  // Gemma 2B's multi-query attention
  if (c.phi3()) c.vocab_size = 32064;  // (its eos and pad ids, 32000, stay inside)
  else c.head_dim = 32;                 // (Phi3Config has no head_dim: hidden_size / heads, 32 here too)
  c.max_position_embeddings = 2048;
  c.original_max_position_embeddings = 2048;
  if (c.pad_token_id) c.pad_token_id = 0;
  if (name == "llama3-tiny") {  // Llama 3.2 1B's rope and head, at this size
    c.rope = RopeScaling::from_json({{"rope_theta", 500000.0},
                                     {"rope_scaling",
                                      {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}}}},
                                    c.rope.theta, "preset " + name);
    c.tie_word_embeddings = true;
    c.bos_token_id = 1;
    c.eos_token_id = {2};
  }
  if (name == "mistral-tiny" || name == "gemma2-tiny") c.sliding_window = 64;
  if (name == "gemma2-tiny") c.query_pre_attn_scalar = 32;
  c.architectures = {c.class_prefix() + "ForCausalLM"};
  return c;
}

std::string LlamaConfig::architecture_for(ModelTask task) const {
  if (task == ModelTask::CausalLM) return class_prefix() + "ForCausalLM";
  if (task == ModelTask::SequenceClassification) return class_prefix() + "ForSequenceClassification";
  return "";
}

void LlamaConfig::adapt_to_tokenizer(const TokenizerIds& ids) {
  vocab_size = ids.vocab_size;
  // LlamaForSequenceClassification finds each row's end by it; the collator pads with the same id.
  if (!pad_token_id) pad_token_id = ids.pad_id;
}

std::vector<std::string> LlamaConfig::ignored_checkpoint_keys() const {
  if (tie_word_embeddings) return {"lm_head.weight"};  // tied to model.embed_tokens.weight
  return {};
}

std::optional<std::pair<std::string, std::string>> LlamaConfig::tied_output_head() const {
  if (!tie_word_embeddings) return std::nullopt;
  return std::pair<std::string, std::string>{"lm_head.weight", "model.embed_tokens.weight"};
}

const ModelFamily& llama_family() {
  static const ModelFamily family{
      .model_types = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"},
      .architectures = class_names({"Llama", "Mistral", "Qwen2", "Qwen3", "Gemma", "Gemma2", "Phi3"},
                                   {"Model", "ForCausalLM", "ForSequenceClassification"}),
      .aliases = {},
      .presets = {"llama-tiny", "llama3-tiny", "qwen3-tiny", "mistral-tiny", "gemma-tiny", "gemma2-tiny", "phi3-tiny"},
      .read_config = &read_config_as<LlamaConfig>,
      .preset = &preset_as<LlamaConfig>,
      .build = &build_as<LlamaForTask, LlamaConfig>};
  return family;
}

std::vector<std::string> LlamaConfig::default_layer_types() const {
  std::vector<std::string> types;
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    bool sliding = false;
    if (model_type == "qwen2" || model_type == "qwen3")
      sliding = use_sliding_window && sliding_window && i >= max_window_layers;
    else if (model_type == "gemma2")
      sliding = i % 2 == 0;
    types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  return types;
}

std::optional<int64_t> LlamaConfig::layer_window(int64_t layer) const {
  if (model_type == "mistral" || model_type == "phi3") return sliding_window;
  if (model_type == "qwen2" || model_type == "qwen3") {
    if (!use_sliding_window) return std::nullopt;
  } else if (model_type != "gemma2") {
    return std::nullopt;
  }
  const std::vector<std::string> types = layer_types.empty() ? default_layer_types() : layer_types;
  return types.at(static_cast<size_t>(layer)) == "sliding_attention" ? sliding_window : std::nullopt;
}

double LlamaConfig::attention_scale() const {
  return 1.0 / std::sqrt(static_cast<double>(gemma2() ? query_pre_attn_scalar : head_size()));
}

std::vector<SizeTerm> LlamaConfig::size_terms() const {
  const long double h = hidden_size, d = head_dim.value_or(num_attention_heads > 0 ? hidden_size / num_attention_heads : 0);
  const long double attention = h * d * (2 * static_cast<long double>(num_attention_heads) + 2 * kv_heads());
  std::vector<SizeTerm> terms = {
      {detail::concat("token embeddings (vocab_size ", vocab_size, " x hidden_size ", hidden_size, ")"), vocab_size * h},
      {detail::concat(num_hidden_layers, " layers (num_hidden_layers), each attention (hidden_size ", hidden_size,
                      ", num_attention_heads ", num_attention_heads, ", num_key_value_heads ", kv_heads(),
                      ") + 3 x hidden_size x intermediate_size (", intermediate_size, ")"),
       num_hidden_layers * (attention + 3 * h * intermediate_size)}};
  if (!tie_word_embeddings)
    terms.push_back({detail::concat("lm_head (vocab_size ", vocab_size, " x hidden_size ", hidden_size, ")"), vocab_size * h});
  return terms;
}

namespace {
// The keys the table leaves to code: eos_token_id, the rotary keys, layer_types, and checks across keys.
void read_by_hand(const json& j, LlamaConfig& c, const std::string& src) {
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    c.eos_token_id.clear();
    const json ids = it->is_array() ? *it : it->is_null() ? json::array() : json::array({*it});
    for (const json& id : ids) {
      KILN_CHECK(id.is_number_integer(), src, ": 'eos_token_id' must be an id or a list of ids, got ", it->dump());
      c.eos_token_id.push_back(id.get<int64_t>());
    }
  }
  c.rope = RopeScaling::from_json(j, c.rope.theta, src);
  // Phi3Config's original_max_position_embeddings is the one longrope reads.
  if (c.phi3() && c.rope.type == "longrope") c.rope.original_max_position_embeddings = c.original_max_position_embeddings;
  if (qwen(c.model_type) || c.gemma2())
    if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
      KILN_CHECK(it->is_array(), src, ": 'layer_types' must be a list, got ", json_found(*it));
      for (const json& t : *it) {
        KILN_CHECK(t == "full_attention" || t == "sliding_attention", src,
                   ": 'layer_types' entries must be \"full_attention\" or \"sliding_attention\", got ", json_found(t));
        c.layer_types.push_back(t.get<std::string>());
      }
    }
  if (c.gemma()) {
    KILN_CHECK(json_value<bool>(j, "use_bidirectional_attention", false, src) == false, src,
               ": 'use_bidirectional_attention' true is not supported (kiln builds causal Gemma decoders)");
    if (c.hidden_act == "gelu") c.hidden_act = "gelu_pytorch_tanh";  // GemmaConfig's reading of its legacy value
  }
}
}  // namespace

LlamaConfig LlamaConfig::from_json(const json& j, const std::string& src) {
  auto type = j.find("model_type");
  LlamaConfig c = defaults(type != j.end() && type->is_string() ? type->get<std::string>() : "llama");
  config_json::read_common(j, c, src);
  KILN_CHECK(is_type(c.model_type), src, ": model_type '", c.model_type, "' is not one of ", kTypes);
  config_json::read_fields(j, c, src, llama_fields);
  read_by_hand(j, c, src);
  c.validate(src);
  return c;
}

void LlamaConfig::validate(const std::string& src) const {
  KILN_CHECK(is_type(model_type), src, ": model_type '", model_type, "' is not one of ", kTypes);
  auto positive = [&](const char* k, int64_t v) { KILN_CHECK(v > 0, src, ": '", k, "' must be positive, got ", v); };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", kv_heads());
  positive("max_position_embeddings", max_position_embeddings);
  positive("pretraining_tp", pretraining_tp);
  positive("query_pre_attn_scalar", query_pre_attn_scalar);
  if (head_dim) positive("head_dim", *head_dim);
  else
    KILN_CHECK(hidden_size % num_attention_heads == 0, src, ": hidden_size ", hidden_size,
               " is not a multiple of num_attention_heads ", num_attention_heads, " (or give head_dim)");
  if (sliding_window) positive("sliding_window", *sliding_window);
  KILN_CHECK(head_size() % 2 == 0, src, ": the head size ", head_size(), " must be even (the rotary embedding pairs halves)");
  KILN_CHECK(num_attention_heads % kv_heads() == 0, src, ": num_attention_heads ", num_attention_heads,
             " is not a multiple of num_key_value_heads ", kv_heads());
  rope.validate(head_size(), src);
  KILN_CHECK(rms_norm_eps >= 0, src, ": 'rms_norm_eps' must be >= 0, got ", rms_norm_eps);
  for (auto [key, p] : {std::pair{"attention_dropout", attention_dropout}, std::pair{"resid_pdrop", resid_pdrop},
                        std::pair{"embd_pdrop", embd_pdrop}})
    KILN_CHECK(p >= 0 && p < 1, src, ": '", key, "' must be in [0, 1), got ", p);
  if (phi3()) positive("original_max_position_embeddings", original_max_position_embeddings);
  for (auto [key, cap] : {std::pair{"final_logit_softcapping", final_logit_softcapping},
                          std::pair{"attn_logit_softcapping", attn_logit_softcapping}})
    if (cap) KILN_CHECK(*cap > 0, src, ": '", key, "' must be positive or null, got ", *cap);
  KILN_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_hidden_layers, src,
             ": 'layer_types' has ", layer_types.size(), " entries for ", num_hidden_layers, " layers");
  if (pad_token_id)
    KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, src, ": pad_token_id ", *pad_token_id,
               " out of range [0, ", vocab_size, ")");
  config_json::validate_common(*this, src);
  try {
    nn::check_activation(hidden_act);
  } catch (const Error& e) {
    throw Error(src + ": " + act_key(model_type) + ": " + e.what());
  }
}

json LlamaConfig::to_json() const {
  json j = config_json::write_common(*this);
  llama_fields(*this, config_json::Writer{j});
  j["num_key_value_heads"] = kv_heads();
  j["eos_token_id"] = eos_token_id.size() == 1 ? json(eos_token_id[0])
                      : eos_token_id.empty()   ? json(nullptr)
                                               : json(eos_token_id);
  rope.write(j);
  if (qwen(model_type) || gemma2()) j["layer_types"] = layer_types.empty() ? default_layer_types() : layer_types;
  return j;
}

// LlamaRMSNorm (x · rsqrt(mean(x²) + eps) · w, w from ones) or, for Gemma,
// GemmaRMSNorm (the same times 1 + w, w from zeros).
class DecoderNorm : public nn::Module {
 public:
  DecoderNorm(int64_t dim, double eps, bool gemma, Device device) : eps_(eps), gemma_(gemma) {
    weight = register_parameter("weight", gemma ? zeros({dim}, DType::f32, device) : ones({dim}, DType::f32, device));
  }
  Tensor forward(const Tensor& x) const {
    Tensor normed = x * rsqrt(mean(x * x, {-1}, true) + eps_);
    return gemma_ ? normed * (weight + 1.0) : normed * weight;
  }
  Tensor weight;

 private:
  double eps_;
  bool gemma_;
};

// The attention masks of one forward: causal [1,1,T,T] bool (key <= query),
// the same within the sliding window (windowed), the padding and packed rows'
// masks (models/packing.h).
struct LayerMasks {
  Tensor causal, windowed;
  RowMasks rows;
};

// LlamaDecoderLayer: x + attn(input_layernorm(x)), then + mlp(post_attention_layernorm(·)).
// Gemma 2: x + post_attention_layernorm(attn(input_layernorm(x))), then
// + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(·))).
class LlamaDecoderLayer : public nn::Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, int64_t index, const nn::Init& init, const std::shared_ptr<Generator>& gen)
      : NH_(c.num_attention_heads), KVH_(c.kv_heads()), D_(c.head_size()), act_(c.hidden_act),
        window_(c.layer_window(index)), scale_(c.attention_scale()), cap_(c.attn_logit_softcapping) {
    auto lin = [&](const char* name, int64_t in, int64_t out, bool bias) {
      return register_module(name, std::make_shared<nn::Linear>(in, out, init, bias));
    };
    auto norm = [&](const char* name, int64_t dim) {
      return register_module(name, std::make_shared<DecoderNorm>(dim, c.rms_norm_eps, c.gemma(), init.device));
    };
    const int64_t C = c.hidden_size, I = c.intermediate_size;
    if (c.phi3()) {  // Phi3Attention's one qkv_proj: rows [queries; keys; values]
      qkv_ = lin("self_attn.qkv_proj", C, (NH_ + 2 * KVH_) * D_, false);
    } else {
      q_ = lin("self_attn.q_proj", C, NH_ * D_, c.qkv_bias());
      k_ = lin("self_attn.k_proj", C, KVH_ * D_, c.qkv_bias());
      v_ = lin("self_attn.v_proj", C, KVH_ * D_, c.qkv_bias());
    }
    o_ = lin("self_attn.o_proj", NH_ * D_, C, c.output_bias());
    if (c.qk_norm()) {
      q_norm_ = norm("self_attn.q_norm", D_);
      k_norm_ = norm("self_attn.k_norm", D_);
    }
    if (c.phi3()) {  // Phi3MLP's one gate_up_proj: rows [gate; up]
      gate_up_ = lin("mlp.gate_up_proj", C, 2 * I, false);
    } else {
      gate_ = lin("mlp.gate_proj", C, I, c.mlp_bias);
      up_ = lin("mlp.up_proj", C, I, c.mlp_bias);
    }
    down_ = lin("mlp.down_proj", I, C, c.mlp_bias);
    input_norm_ = norm("input_layernorm", C);
    post_norm_ = norm("post_attention_layernorm", C);
    if (c.gemma2()) {
      pre_ff_norm_ = norm("pre_feedforward_layernorm", C);
      post_ff_norm_ = norm("post_feedforward_layernorm", C);
    }
    attn_dropout_ = std::make_shared<nn::Dropout>(c.attention_dropout, gen);  // HF's attention_dropout: no module
    resid_dropout_ = std::make_shared<nn::Dropout>(c.resid_pdrop, gen);       // Phi-3's resid_attn / resid_mlp
  }

  // x [B,T,C]; cos / sin [1,1,T,D].
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const LayerMasks& m) {
    const int64_t B = x.dim(0), T = x.dim(1);
    Tensor h = input_norm_->forward(x);
    auto [qp, kp, vp] = projections(h);
    Tensor q = rope(normed_heads(qp, q_norm_, NH_), cos, sin);
    Tensor k = repeat_kv(rope(normed_heads(kp, k_norm_, KVH_), cos, sin), NH_ / KVH_);
    Tensor v = repeat_kv(heads(vp, KVH_), NH_ / KVH_);
    const bool windowed = window_ && *window_ < T;  // (a window as long as the sequence changes nothing)
    // The CPU kernel skips the blocks before a window; the CUDA kernels have no window yet.
    Tensor attended = attend(q, k, v,  // [B,NH,T,D]
                             {.mask = m.rows.padding,
                              .scale = scale_,
                              .causal = true,
                              .allowed = windowed ? m.windowed : m.causal,
                              .window = windowed ? *window_ : 0,
                              .soft_cap = cap_,
                              .fusable = !windowed || x.device().kind == DeviceKind::CPU,
                              .segments = m.rows.segments,
                              .composite_mask = m.rows.composite()},
                             *attn_dropout_);
    return residual_mlp(x, o_->forward(reshape(permute(attended, {0, 2, 1, 3}), {B, T, NH_ * D_})));
  }

  // T tokens per row: x [B,T,C]; cos / sin [1,1,T,D] at their positions; slots (i64 [T]) their cache slots;
  // mask / windowed [1,1,T,L] hide later slots (and those past the window); caches [B,KVH,L,D] updated in place.
  Tensor decode(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& slots, const Tensor& mask,
                const Tensor& windowed, Tensor& k_cache, Tensor& v_cache) {
    const int64_t B = x.dim(0), T = x.dim(1), L = k_cache.dim(2);
    Tensor h = input_norm_->forward(x);
    auto [qp, kp, vp] = projections(h);
    Tensor q = rope(normed_heads(qp, q_norm_, NH_), cos, sin);
    Tensor k = with_slot(k_cache, slots, rope(normed_heads(kp, k_norm_, KVH_), cos, sin));
    Tensor v = with_slot(v_cache, slots, heads(vp, KVH_));
    k_cache.assign(k);
    v_cache.assign(v);
    // The G query heads that share a key/value head read it in one batched
    // product ([B,KVH,G·T,D]·[B,KVH,L,D]ᵀ), not from the caches repeated per
    // query head (repeat_kv: a copy of both caches every step).
    const int64_t G = NH_ / KVH_;
    Tensor scores = soft_cap(matmul(reshape(q, {B, KVH_, G * T, D_}), k, false, true) * scale_, cap_);
    Tensor probs = softmax(reshape(scores, {B, NH_, T, L}), -1, window_ ? windowed : mask);  // [B,NH,T,L]
    Tensor ctx = reshape(matmul(reshape(probs, {B, KVH_, G * T, L}), v), {B, NH_, T, D_});
    ctx = reshape(permute(ctx, {0, 2, 1, 3}), {B, T, NH_ * D_});
    return residual_mlp(x, o_->forward(ctx));
  }

 private:
  // [B,T,n·D] -> [B,n,T,D]
  Tensor heads(const Tensor& x, int64_t n) const {
    return permute(reshape(x, {x.dim(0), x.dim(1), n, D_}), {0, 2, 1, 3});
  }
  // The query, key and value projections [B,T,n·D] of h.
  std::array<Tensor, 3> projections(const Tensor& h) const {
    if (!qkv_) return {q_->forward(h), k_->forward(h), v_->forward(h)};
    Tensor all = qkv_->forward(h);
    const int64_t axis = all.rank() - 1, q = NH_ * D_, kv = KVH_ * D_;
    return {slice(all, axis, 0, q), slice(all, axis, q, q + kv), slice(all, axis, q + kv, q + 2 * kv)};
  }
  // The heads of a query or key projection, RMS-normed per head when the model has q_norm / k_norm.
  Tensor normed_heads(const Tensor& x, const std::shared_ptr<DecoderNorm>& norm, int64_t n) const {
    return norm ? norm->forward(heads(x, n)) : heads(x, n);
  }
  // x plus the attention's output a, then plus the MLP of that.
  Tensor residual_mlp(const Tensor& x, const Tensor& a) const {
    if (!pre_ff_norm_) {
      Tensor y = x + resid_dropout_->forward(a);
      return y + resid_dropout_->forward(mlp(post_norm_->forward(y)));
    }
    Tensor y = x + post_norm_->forward(a);
    return y + post_ff_norm_->forward(mlp(pre_ff_norm_->forward(y)));
  }
  Tensor mlp(const Tensor& h) const {
    if (gate_up_) {
      Tensor both = gate_up_->forward(h);
      const int64_t axis = both.rank() - 1, I = both.dim(axis) / 2;
      return down_->forward(nn::activation(act_, slice(both, axis, 0, I)) * slice(both, axis, I, 2 * I));
    }
    return down_->forward(nn::activation(act_, gate_->forward(h)) * up_->forward(h));
  }
  int64_t NH_, KVH_, D_;
  std::string act_;
  std::optional<int64_t> window_;
  double scale_;
  std::optional<double> cap_;
  std::shared_ptr<nn::Linear> q_, k_, v_, qkv_, o_, gate_, up_, gate_up_, down_;
  std::shared_ptr<DecoderNorm> q_norm_, k_norm_, input_norm_, post_norm_, pre_ff_norm_, post_ff_norm_;
  std::shared_ptr<nn::Dropout> attn_dropout_, resid_dropout_;
};

LlamaForTask::LlamaForTask(std::string architecture, const LlamaConfig& config, uint64_t seed, Device device)
    : CausalLM(config.clone()), architecture_(std::move(architecture)), gen_(std::make_shared<Generator>(seed)) {
  const std::string prefix = config.class_prefix();
  const std::string kind = architecture_.rfind(prefix, 0) == 0 ? architecture_.substr(prefix.size()) : "";
  if (kind == "Model") head_ = Head::None;
  else if (kind == "ForCausalLM") head_ = Head::LM;
  else if (kind == "ForSequenceClassification") head_ = Head::SequenceClassification;
  else
    throw Error("architecture " + architecture_ + " does not match model_type '" + config.model_type + "' (its " +
                prefix + "Model, " + prefix + "ForCausalLM, " + prefix + "ForSequenceClassification)");
  auto& cfg = static_cast<LlamaConfig&>(config_ref());
  if (cfg.architectures.empty()) cfg.architectures = {architecture_};
  else cfg.architectures[0] = architecture_;
  const LlamaConfig& c = cfg;
  nn::Init init{gen_.get(), c.initializer_range, device};
  const std::string p = head_ == Head::None ? "" : "model.";
  embed_tokens_ = register_module(
      p + "embed_tokens", std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, init, c.pad_token_id.value_or(-1)));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(
        register_module(p + "layers." + std::to_string(i), std::make_shared<LlamaDecoderLayer>(c, i, init, gen_)));
  norm_ = register_module(p + "norm", std::make_shared<DecoderNorm>(c.hidden_size, c.rms_norm_eps, c.gemma(), device));
  if (head_ == Head::LM && !c.tie_word_embeddings)
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, init, false));
  if (head_ == Head::SequenceClassification)
    score_ = register_module("score", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init, false));
  nn::materialize(parameters());
}

const LlamaForTask::Rotary& LlamaForTask::rotary(Rotary& table, int64_t needed, int64_t seq_len) {
  const LlamaConfig& c = llama_config();
  // Lengths with the same frequencies share a table: every length for most
  // types, those up to max_position_embeddings for dynamic, each side of the
  // original length for longrope.
  if (!c.rope.length_dependent()) seq_len = 1;
  else if (seq_len > 0 && c.rope.type == "dynamic") seq_len = std::max(seq_len, c.max_position_embeddings);
  else if (seq_len > 0) {
    const int64_t original = *c.rope.original_max_position_embeddings;
    seq_len = seq_len > original ? original + 1 : 1;
  }
  if (needed <= table.rows && seq_len == table.seq_len) return table;
  // Built on first use, for the positions in use rounded up to a power of two
  // (at least 64): a 128k-position config does not hold 128k rows it never
  // reads, and a longer batch regrows the table (and recompiles) rarely.
  int64_t n = 64;
  while (n < needed) n *= 2;
  const int64_t D = c.head_size();
  std::vector<float> cos, sin;
  rotary_tables(c.rope, D, c.max_position_embeddings, n, seq_len > 0 ? std::optional<int64_t>(seq_len) : std::nullopt,
                cos, sin);
  Device dev = parameters().front().device();
  table.cos = Tensor::from_vector(cos, {n, D}, dev, "rotary_cos");
  table.sin = Tensor::from_vector(sin, {n, D}, dev, "rotary_sin");
  table.rows = n;
  table.seq_len = seq_len;
  return table;
}

Tensor LlamaForTask::lm_logits(const Tensor& h) const {
  // Through the module, so a LoRA branch PEFT put on lm_head computes too;
  // tie_word_embeddings: lm_head is embed_tokens.
  return cap_logits(lm_head_ ? lm_head_->forward(h) : embed_tokens_->tied_logits(h));
}

Tensor LlamaForTask::cap_logits(const Tensor& logits) const {
  return soft_cap(logits, llama_config().final_logit_softcapping);
}

CausalLM::CacheShape LlamaForTask::cache_shape() const {
  const LlamaConfig& c = llama_config();
  return {c.num_hidden_layers, c.kv_heads(), c.head_size()};
}

Tensor LlamaForTask::body(const ModelInputs& in) {
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined() && ids.rank() == 2 && is_integral(ids.dtype()),
             "forward: input_ids must be an integer tensor [batch, seq]");
  const LlamaConfig& c = llama_config();
  const int64_t B = ids.dim(0), T = ids.dim(1), D = c.head_size();
  KILN_CHECK(!in.attention_mask.defined() || in.attention_mask.shape() == ids.shape(), "forward: attention_mask ",
             to_string(in.attention_mask.shape()), " does not match input_ids ", to_string(ids.shape()));
  const Rotary& table = rotary(rotary_, T, T);  // positions past max_position_embeddings rotate on, as in HF
  Device dev = ids.device();
  Tensor cos = reshape(slice(table.cos, 0, 0, T), {1, 1, T, D}), sin = reshape(slice(table.sin, 0, 0, T), {1, 1, T, D});
  Tensor key = reshape(arange(T, DType::i64, dev), {1, T}), query = reshape(arange(T, DType::i64, dev), {T, 1});
  LayerMasks m;
  m.causal = reshape(le(key, query), {1, 1, T, T});
  if (c.sliding_window && *c.sliding_window < T)  // key > query - window
    m.windowed = logical_and(m.causal, reshape(gt(key + static_cast<double>(*c.sliding_window), query), {1, 1, T, T}));
  Tensor padding;
  if (in.attention_mask.defined())
    padding = reshape((1.0 - cast(in.attention_mask, DType::f32)) * kMin, {B, 1, 1, T});
  if (in.position_ids.defined()) {  // packed rows: each token's own position, attention within its example
    check_position_ids(in.position_ids, ids);
    Tensor at = reshape(cast(in.position_ids, DType::i64), {B * T});
    cos = reshape(index_select(table.cos, at), {B, 1, T, D});
    sin = reshape(index_select(table.sin, at), {B, 1, T, D});
  }
  m.rows = row_masks(in.position_ids, padding);
  Tensor x = embed_tokens_->forward(ids);
  if (c.gemma()) x = x * std::sqrt(static_cast<double>(c.hidden_size));  // GemmaModel's normalizer
  for (auto& layer : layers_)
    x = run_layer(gradient_checkpointing_, *this, *gen_,
                  [layer, cos, sin, m](const Tensor& h) { return layer->forward(h, cos, sin, m); }, x);
  return norm_->forward(x);
}

std::optional<int64_t> LlamaForTask::cache_recompute_position() const {
  const LlamaConfig& c = llama_config();
  if (c.phi3() && c.rope.type == "longrope") return c.original_max_position_embeddings;
  return std::nullopt;
}

Tensor LlamaForTask::decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                                 std::vector<Tensor>& v_cache, std::optional<int64_t> prefill_length,
                                 const Tensor& last) {
  KILN_CHECK(k_cache.size() == layers_.size() && v_cache.size() == layers_.size(),
             "decode_step: one cache per layer expected");
  const LlamaConfig& c = llama_config();
  const int64_t L = k_cache[0].dim(2), D = c.head_size(), T = token.dim(1);
  // A generated token: each row its own length's frequencies; a prefill's
  // tokens: all those of the prefill's length.
  KILN_CHECK(!prefill_length || *prefill_length >= 1, "decode_step: prefill_length must be at least 1, got ",
             prefill_length.value_or(0));
  const bool prefill = prefill_length && c.rope.length_dependent();
  const Rotary& table = prefill ? rotary(prefill_rotary_, L, *prefill_length) : rotary(decode_rotary_, L, 0);
  Device dev = token.device();
  Tensor positions = step_positions(pos, T);
  Tensor zero = zeros({}, DType::f32, dev), lowest = full({}, kMin, DType::f32, dev);
  Tensor mask = reshape(where(visible_slots(positions, L), zero, lowest), {1, 1, T, L}), windowed;
  if (c.sliding_window) windowed = reshape(where(visible_slots(positions, L, c.sliding_window), zero, lowest), {1, 1, T, L});
  Tensor cos = reshape(index_select(table.cos, positions), {1, 1, T, D});
  Tensor sin = reshape(index_select(table.sin, positions), {1, 1, T, D});
  Tensor x = embed_tokens_->forward(token);
  if (c.gemma()) x = x * std::sqrt(static_cast<double>(c.hidden_size));
  for (size_t i = 0; i < layers_.size(); ++i)
    x = layers_[i]->decode(x, cos, sin, positions, mask, windowed, k_cache[i], v_cache[i]);
  return lm_logits(norm_->forward(token_at(x, last)));
}

ModelOutputs LlamaForTask::forward(const ModelInputs& in) {
  if (head_ == Head::None) check_accepts(in, {"input_ids", "attention_mask"});
  else if (head_ == Head::LM) check_accepts(in, {"input_ids", "attention_mask", "labels", "position_ids"});
  else check_accepts(in, {"input_ids", "attention_mask", "labels"});
  Tensor h = body(in);
  ModelOutputs out;
  switch (head_) {
    case Head::None:
      out.last_hidden_state = h;
      return out;
    case Head::LM:
      out.logits = lm_logits(h);
      if (in.labels.defined()) out.loss = causal_lm_loss(out.logits, in.labels, in.input_ids);
      return out;
    case Head::SequenceClassification:
      out.logits = last_token_logits(architecture_, score_->forward(h), in.input_ids, llama_config().pad_token_id);
      if (in.labels.defined()) out.loss = sequence_classification_loss(config(), out.logits, in.labels);
      return out;
  }
  return out;
}

}  // namespace kiln::models
