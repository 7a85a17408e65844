#include "kiln/models/llama.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/models/config_json.h"
#include "kiln/models/packing.h"
#include "kiln/nn/module.h"

namespace kiln::models {

using config_json::read;
using config_json::read_opt;
using nlohmann::json;

namespace {
// The keys every type of the family has, then each type's own.
const std::vector<std::string> kCommonKeys = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
    "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_theta", "rope_scaling",
    "attention_dropout"};
std::vector<std::string> keys_of(const std::string& type) {
  std::vector<std::string> keys = kCommonKeys;
  if (type == "llama") keys.insert(keys.end(), {"pretraining_tp", "attention_bias", "mlp_bias"});
  if (type == "mistral") keys.insert(keys.end(), {"sliding_window"});
  if (type == "qwen2") keys.insert(keys.end(), {"use_sliding_window", "sliding_window", "max_window_layers"});
  return keys;
}
constexpr double kMin = std::numeric_limits<float>::lowest();

// rotate_half: [x1, x2] -> [-x2, x1] over the last axis (D = 2 halves).
Tensor rotate_half(const Tensor& x) {
  const int64_t axis = x.rank() - 1, D = x.dim(axis);
  return concat({neg(slice(x, axis, D / 2, D)), slice(x, axis, 0, D / 2)}, axis);
}

// x [B,H,T,D] rotated by the tables cos / sin [1,1,T,D] (or [T,D]-shaped broadcastable).
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) { return x * cos + rotate_half(x) * sin; }

// [B,KVH,T,D] -> [B,KVH·rep,T,D], each key/value head serving `rep` query heads in a row (repeat_kv).
Tensor repeat_kv(const Tensor& x, int64_t rep) {
  if (rep == 1) return x;
  const int64_t B = x.dim(0), KVH = x.dim(1), T = x.dim(2), D = x.dim(3);
  return reshape(broadcast_to(reshape(x, {B, KVH, 1, T, D}), {B, KVH, rep, T, D}), {B, KVH * rep, T, D});
}
}  // namespace

LlamaConfig LlamaConfig::defaults(const std::string& model_type) {
  LlamaConfig c;
  c.model_type = model_type;
  if (model_type == "mistral") {  // MistralConfig's defaults (Mistral 7B)
    c.intermediate_size = 14336;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 4096 * 32;
    c.sliding_window = 4096;
  } else if (model_type == "qwen2") {  // Qwen2Config's
    c.vocab_size = 151936;
    c.intermediate_size = 22016;
    c.max_position_embeddings = 32768;
    c.sliding_window = 4096;
    c.bos_token_id.reset();
    c.eos_token_id.clear();
  }
  return c;
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

LlamaConfig LlamaConfig::from_json(const json& j, const std::string& src) {
  auto type = j.find("model_type");
  LlamaConfig c = defaults(type != j.end() && type->is_string() ? type->get<std::string>() : "llama");
  config_json::read_common(j, c, src);
  read(j, "vocab_size", c.vocab_size, src);
  read(j, "hidden_size", c.hidden_size, src);
  read(j, "intermediate_size", c.intermediate_size, src);
  read(j, "num_hidden_layers", c.num_hidden_layers, src);
  read(j, "num_attention_heads", c.num_attention_heads, src);
  read_opt(j, "num_key_value_heads", c.num_key_value_heads, src);
  read_opt(j, "head_dim", c.head_dim, src);
  read(j, "hidden_act", c.hidden_act, src);
  read(j, "max_position_embeddings", c.max_position_embeddings, src);
  read(j, "initializer_range", c.initializer_range, src);
  read(j, "rms_norm_eps", c.rms_norm_eps, src);
  read_opt(j, "pad_token_id", c.pad_token_id, src);
  if (j.contains("bos_token_id")) c.bos_token_id.reset(), read_opt(j, "bos_token_id", c.bos_token_id, src);
  if (auto it = j.find("eos_token_id"); it != j.end()) {
    c.eos_token_id.clear();
    const json ids = it->is_array() ? *it : it->is_null() ? json::array() : json::array({*it});
    for (const json& id : ids) {
      KILN_CHECK(id.is_number_integer(), src, ": 'eos_token_id' must be an id or a list of ids, got ", it->dump());
      c.eos_token_id.push_back(id.get<int64_t>());
    }
  }
  read(j, "tie_word_embeddings", c.tie_word_embeddings, src);
  read(j, "rope_theta", c.rope_theta, src);
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    // {"rope_type": "default"} (newer configs) is no scaling; linear, dynamic, llama3, yarn... are not built.
    const json type = it->is_object() ? it->value("rope_type", it->value("type", json())) : json();
    KILN_CHECK(type == "default", src, ": 'rope_scaling' ", json_found(*it),
               " is not supported (kiln builds the unscaled rotary embedding: null or {\"rope_type\": \"default\"})");
  }
  read(j, "attention_dropout", c.attention_dropout, src);
  if (c.model_type == "llama") {  // LlamaConfig's own
    read(j, "pretraining_tp", c.pretraining_tp, src);
    read(j, "attention_bias", c.attention_bias, src);
    read(j, "mlp_bias", c.mlp_bias, src);
  }
  if (c.model_type != "llama" && j.contains("sliding_window"))  // null: no window
    c.sliding_window.reset(), read_opt(j, "sliding_window", c.sliding_window, src);
  if (c.model_type == "qwen2") {
    read(j, "use_sliding_window", c.use_sliding_window, src);
    read(j, "max_window_layers", c.max_window_layers, src);
  }
  config_json::keep_unknown(j, c, keys_of(c.model_type));
  c.validate(src);
  return c;
}

void LlamaConfig::validate(const std::string& src) const {
  KILN_CHECK(model_type == "llama" || model_type == "mistral" || model_type == "qwen2", src, ": model_type '",
             model_type, "' is not llama, mistral or qwen2");
  auto positive = [&](const char* k, int64_t v) { KILN_CHECK(v > 0, src, ": '", k, "' must be positive, got ", v); };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", kv_heads());
  positive("max_position_embeddings", max_position_embeddings);
  positive("pretraining_tp", pretraining_tp);
  if (head_dim) positive("head_dim", *head_dim);
  if (sliding_window) positive("sliding_window", *sliding_window);
  else
    KILN_CHECK(hidden_size % num_attention_heads == 0, src, ": hidden_size ", hidden_size,
               " is not a multiple of num_attention_heads ", num_attention_heads, " (or give head_dim)");
  KILN_CHECK(head_size() % 2 == 0, src, ": the head size ", head_size(), " must be even (the rotary embedding pairs halves)");
  KILN_CHECK(num_attention_heads % kv_heads() == 0, src, ": num_attention_heads ", num_attention_heads,
             " is not a multiple of num_key_value_heads ", kv_heads());
  KILN_CHECK(rope_theta > 0, src, ": 'rope_theta' must be positive, got ", rope_theta);
  KILN_CHECK(rms_norm_eps >= 0, src, ": 'rms_norm_eps' must be >= 0, got ", rms_norm_eps);
  KILN_CHECK(attention_dropout >= 0 && attention_dropout < 1, src, ": 'attention_dropout' must be in [0, 1), got ",
             attention_dropout);
  if (pad_token_id)
    KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, src, ": pad_token_id ", *pad_token_id,
               " out of range [0, ", vocab_size, ")");
  config_json::validate_common(*this, src);
  try {
    nn::check_activation(hidden_act);
  } catch (const Error& e) {
    throw Error(src + ": hidden_act: " + e.what());
  }
}

json LlamaConfig::to_json() const {
  json j = config_json::write_common(*this);
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = kv_heads();
  if (head_dim) j["head_dim"] = *head_dim;
  j["hidden_act"] = hidden_act;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initializer_range"] = initializer_range;
  j["rms_norm_eps"] = rms_norm_eps;
  if (pad_token_id) j["pad_token_id"] = *pad_token_id;
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_id.size() == 1 ? json(eos_token_id[0])
                      : eos_token_id.empty()   ? json(nullptr)
                                               : json(eos_token_id);
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_dropout"] = attention_dropout;
  if (model_type == "llama") {
    j["pretraining_tp"] = pretraining_tp;
    j["attention_bias"] = attention_bias;
    j["mlp_bias"] = mlp_bias;
  } else {
    j["sliding_window"] = sliding_window ? json(*sliding_window) : json(nullptr);
  }
  if (model_type == "qwen2") {
    j["use_sliding_window"] = use_sliding_window;
    j["max_window_layers"] = max_window_layers;
  }
  return j;
}

// LlamaDecoderLayer: x + attn(input_layernorm(x)), then + mlp(post_attention_layernorm(·)).
class LlamaDecoderLayer : public nn::Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, const nn::Init& init, const std::shared_ptr<Generator>& gen)
      : NH_(c.num_attention_heads), KVH_(c.kv_heads()), D_(c.head_size()), act_(c.hidden_act) {
    auto lin = [&](const char* name, int64_t in, int64_t out, bool bias) {
      return register_module(name, std::make_shared<nn::Linear>(in, out, init, bias));
    };
    const int64_t C = c.hidden_size, I = c.intermediate_size;
    q_ = lin("self_attn.q_proj", C, NH_ * D_, c.qkv_bias());
    k_ = lin("self_attn.k_proj", C, KVH_ * D_, c.qkv_bias());
    v_ = lin("self_attn.v_proj", C, KVH_ * D_, c.qkv_bias());
    o_ = lin("self_attn.o_proj", NH_ * D_, C, c.output_bias());
    gate_ = lin("mlp.gate_proj", C, I, c.mlp_bias);
    up_ = lin("mlp.up_proj", C, I, c.mlp_bias);
    down_ = lin("mlp.down_proj", I, C, c.mlp_bias);
    input_norm_ = register_module("input_layernorm", std::make_shared<nn::RMSNorm>(C, c.rms_norm_eps, init.device));
    post_norm_ =
        register_module("post_attention_layernorm", std::make_shared<nn::RMSNorm>(C, c.rms_norm_eps, init.device));
    attn_dropout_ = std::make_shared<nn::Dropout>(c.attention_dropout, gen);  // HF's attention_dropout: no module
  }

  // x [B,T,C]; cos / sin [1,1,T,D]; causal [1,1,T,T] bool (key <= query); mask [B,1,1,T] additive or undefined.
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& causal, const Tensor& mask) {
    const int64_t B = x.dim(0), T = x.dim(1);
    Tensor h = input_norm_->forward(x);
    Tensor q = rotate(heads(q_->forward(h), NH_), cos, sin);
    Tensor k = repeat_kv(rotate(heads(k_->forward(h), KVH_), cos, sin), NH_ / KVH_);
    Tensor v = repeat_kv(heads(v_->forward(h), KVH_), NH_ / KVH_);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D_));
    Tensor attended;  // [B,NH,T,D]
    if (use_fused_attention(q, k, mask)) {
      attended = fused_attention(q, k, v, {mask, true, scale, attn_dropout_->active_p(), attn_dropout_->generator()});
    } else {
      Tensor scores = where(causal, matmul(q, k, false, true) * scale, full({}, kMin, DType::f32, x.device()));
      attended = matmul(attn_dropout_->forward(softmax(scores, -1, mask)), v);
    }
    Tensor y = x + o_->forward(reshape(permute(attended, {0, 2, 1, 3}), {B, T, NH_ * D_}));
    return y + mlp(post_norm_->forward(y));
  }

  // One token per row: x [B,1,C]; cos / sin [1,1,1,D] at its position; at [1,1,L,1] marks its cache slot;
  // mask [1,1,1,L] hides later slots; caches [B,KVH,L,D] updated in place.
  Tensor decode(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& at, const Tensor& mask,
                Tensor& k_cache, Tensor& v_cache) {
    const int64_t B = x.dim(0), L = k_cache.dim(2);
    Tensor h = input_norm_->forward(x);
    Tensor q = rotate(heads(q_->forward(h), NH_), cos, sin);
    Tensor k = where(at, broadcast_to(rotate(heads(k_->forward(h), KVH_), cos, sin), {B, KVH_, L, D_}), k_cache);
    Tensor v = where(at, broadcast_to(heads(v_->forward(h), KVH_), {B, KVH_, L, D_}), v_cache);
    k_cache.assign(k);
    v_cache.assign(v);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D_));
    Tensor probs = softmax(matmul(q, repeat_kv(k, NH_ / KVH_), false, true) * scale, -1, mask);  // [B,NH,1,L]
    Tensor ctx = reshape(permute(matmul(probs, repeat_kv(v, NH_ / KVH_)), {0, 2, 1, 3}), {B, 1, NH_ * D_});
    Tensor y = x + o_->forward(ctx);
    return y + mlp(post_norm_->forward(y));
  }

 private:
  // [B,T,n·D] -> [B,n,T,D]
  Tensor heads(const Tensor& x, int64_t n) const {
    return permute(reshape(x, {x.dim(0), x.dim(1), n, D_}), {0, 2, 1, 3});
  }
  Tensor mlp(const Tensor& h) const {
    return down_->forward(nn::activation(act_, gate_->forward(h)) * up_->forward(h));
  }
  int64_t NH_, KVH_, D_;
  std::string act_;
  std::shared_ptr<nn::Linear> q_, k_, v_, o_, gate_, up_, down_;
  std::shared_ptr<nn::RMSNorm> input_norm_, post_norm_;
  std::shared_ptr<nn::Dropout> attn_dropout_;
};

LlamaForTask::LlamaForTask(std::string architecture, const LlamaConfig& config, uint64_t seed, Device device)
    : CausalLM(config.clone()), architecture_(std::move(architecture)), gen_(std::make_shared<Generator>(seed)) {
  const std::string prefix = config.class_prefix();
  KILN_CHECK(architecture_.rfind(prefix, 0) == 0, "architecture ", architecture_, " does not match model_type '",
             config.model_type, "'");
  const std::string kind = architecture_.substr(prefix.size());
  if (kind == "Model") head_ = Head::None;
  else if (kind == "ForCausalLM") head_ = Head::LM;
  else if (kind == "ForSequenceClassification") head_ = Head::SequenceClassification;
  else throw Error("unsupported architecture '" + architecture_ + "'");
  auto& cfg = static_cast<LlamaConfig&>(config_ref());
  if (cfg.architectures.empty()) cfg.architectures = {architecture_};
  else cfg.architectures[0] = architecture_;
  const LlamaConfig& c = cfg;
  nn::Init init{gen_.get(), c.initializer_range, device};
  const std::string p = head_ == Head::None ? "" : "model.";
  embed_tokens_ = register_module(
      p + "embed_tokens", std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, init, c.pad_token_id.value_or(-1)));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(register_module(p + "layers." + std::to_string(i), std::make_shared<LlamaDecoderLayer>(c, init, gen_)));
  norm_ = register_module(p + "norm", std::make_shared<nn::RMSNorm>(c.hidden_size, c.rms_norm_eps, device));
  if (head_ == Head::LM && !c.tie_word_embeddings)
    lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size, init, false));
  if (head_ == Head::SequenceClassification)
    score_ = register_module("score", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init, false));
  nn::materialize(parameters());
}

void LlamaForTask::ensure_rotary(int64_t needed) {
  if (needed <= rotary_rows_) return;
  // Built on first use, for the positions in use rounded up to a power of two
  // (at least 64): a 128k-position config does not hold 128k rows it never
  // reads, and a longer batch regrows the table (and recompiles) rarely.
  int64_t n = 64;
  while (n < needed) n *= 2;
  // LlamaRotaryEmbedding, in float32 as HF computes it: inv_freq_i = 1 / theta^(2i / D),
  // angle = position · inv_freq_i, emb = [angles, angles], then cos and sin.
  const LlamaConfig& c = llama_config();
  const int64_t D = c.head_size();
  std::vector<float> inv_freq(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * i) / static_cast<float>(D));
  std::vector<float> cos(static_cast<size_t>(n * D)), sin(cos.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < D; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i % (D / 2)];
      cos[t * D + i] = std::cos(angle);
      sin[t * D + i] = std::sin(angle);
    }
  Device dev = parameters().front().device();
  cos_ = Tensor::from_vector(cos, {n, D}, dev, "rotary_cos");
  sin_ = Tensor::from_vector(sin, {n, D}, dev, "rotary_sin");
  rotary_rows_ = n;
}

void LlamaForTask::check_window(int64_t positions) const {
  const std::optional<int64_t> window = llama_config().window();
  KILN_CHECK(!window || positions <= *window, architecture_, ": ", positions, " positions exceed sliding_window ",
             *window, "; kiln does not build sliding-window attention (sequences up to the window are exact)");
}

const Tensor& LlamaForTask::lm_weight() const {
  return lm_head_ ? lm_head_->weight : embed_tokens_->weight;  // tie_word_embeddings: lm_head is embed_tokens
}

CausalLM::CacheShape LlamaForTask::cache_shape() const {
  const LlamaConfig& c = llama_config();
  return {c.num_hidden_layers, c.kv_heads(), c.head_size()};
}

Tensor LlamaForTask::body(const ModelInputs& in) {
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined() && ids.rank() == 2 && is_integral(ids.dtype()),
             "forward: input_ids must be an integer tensor [batch, seq]");
  const int64_t B = ids.dim(0), T = ids.dim(1), D = llama_config().head_size();
  KILN_CHECK(!in.attention_mask.defined() || in.attention_mask.shape() == ids.shape(), "forward: attention_mask ",
             to_string(in.attention_mask.shape()), " does not match input_ids ", to_string(ids.shape()));
  check_window(T);
  ensure_rotary(T);  // positions past max_position_embeddings rotate on, as in HF
  Device dev = ids.device();
  Tensor cos = reshape(slice(cos_, 0, 0, T), {1, 1, T, D}), sin = reshape(slice(sin_, 0, 0, T), {1, 1, T, D});
  Tensor idx = arange(T, DType::i64, dev);
  Tensor causal = reshape(le(reshape(idx, {1, T}), reshape(idx, {T, 1})), {1, 1, T, T});  // key <= query
  Tensor mask;
  if (in.attention_mask.defined()) mask = reshape((1.0 - cast(in.attention_mask, DType::f32)) * kMin, {B, 1, 1, T});
  if (in.position_ids.defined()) {  // packed rows: each token's own position, attention within its example
    check_position_ids(in.position_ids, ids);
    Tensor at = reshape(cast(in.position_ids, DType::i64), {B * T});
    cos = reshape(index_select(cos_, at), {B, 1, T, D});
    sin = reshape(index_select(sin_, at), {B, 1, T, D});
    mask = packed_attention_mask(in.position_ids, mask);
  }
  Tensor x = embed_tokens_->forward(ids);
  for (auto& layer : layers_)
    x = run_layer(gradient_checkpointing_, *this, *gen_,
                  [layer, cos, sin, causal, mask](const Tensor& h) { return layer->forward(h, cos, sin, causal, mask); }, x);
  return norm_->forward(x);
}

Tensor LlamaForTask::decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                                 std::vector<Tensor>& v_cache) {
  KILN_CHECK(k_cache.size() == layers_.size() && v_cache.size() == layers_.size(),
             "decode_step: one cache per layer expected");
  const int64_t L = k_cache[0].dim(2), D = llama_config().head_size();
  check_window(L);
  ensure_rotary(L);
  Device dev = token.device();
  Tensor slots = arange(L, DType::i64, dev);
  Tensor at = reshape(eq(slots, pos), {1, 1, L, 1});
  Tensor mask = reshape(where(le(slots, pos), zeros({}, DType::f32, dev), full({}, kMin, DType::f32, dev)), {1, 1, 1, L});
  Tensor row = reshape(pos, {1});
  Tensor cos = reshape(index_select(cos_, row), {1, 1, 1, D}), sin = reshape(index_select(sin_, row), {1, 1, 1, D});
  Tensor x = embed_tokens_->forward(token);
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->decode(x, cos, sin, at, mask, k_cache[i], v_cache[i]);
  return linear(norm_->forward(x), lm_weight());
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
      out.logits = linear(h, lm_weight());
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
