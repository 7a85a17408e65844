#include "kiln/models/t5.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/models/config_json.h"
#include "kiln/models/registry.h"
#include "kiln/nn/module.h"

namespace kiln::models {

using nlohmann::json;

namespace {

constexpr double kMin = std::numeric_limits<float>::lowest();

// T5Config's keys. num_decoder_layers is written resolved (num_layers when
// unset), and is_encoder_decoder true, as HF writes them.
constexpr auto t5_fields = [](auto& c, auto&& visit) {
  visit("vocab_size", c.vocab_size);
  visit("d_model", c.d_model);
  visit("d_kv", c.d_kv);
  visit("d_ff", c.d_ff);
  visit("num_layers", c.num_layers);
  visit("num_decoder_layers", c.num_decoder_layers);
  visit("num_heads", c.num_heads);
  visit("relative_attention_num_buckets", c.relative_attention_num_buckets);
  visit("relative_attention_max_distance", c.relative_attention_max_distance);
  visit("dropout_rate", c.dropout_rate);
  visit("layer_norm_epsilon", c.layer_norm_epsilon);
  visit("initializer_factor", c.initializer_factor);
  visit("feed_forward_proj", c.feed_forward_proj);
  visit("tie_word_embeddings", c.tie_word_embeddings);
  visit("scale_decoder_outputs", c.scale_decoder_outputs, config_json::Unset::omit);
  visit("pad_token_id", c.pad_token_id);
  visit("eos_token_id", c.eos_token_id);
  visit("decoder_start_token_id", c.decoder_start_token_id);
};

nn::Init scaled(const nn::Init& base, double std) { return nn::Init{base.gen, std, base.device}; }

class Attention : public nn::Module {
 public:
  Attention(const T5Config& c, bool relative_bias, const nn::Init& init) : NH_(c.num_heads), D_(c.d_kv) {
    double f = c.initializer_factor, C = static_cast<double>(c.d_model), inner = static_cast<double>(c.num_heads * c.d_kv);
    q = register_module("q", std::make_shared<nn::Linear>(c.d_model, c.num_heads * c.d_kv, scaled(init, f / std::sqrt(C * c.d_kv)), false));
    k = register_module("k", std::make_shared<nn::Linear>(c.d_model, c.num_heads * c.d_kv, scaled(init, f / std::sqrt(C)), false));
    v = register_module("v", std::make_shared<nn::Linear>(c.d_model, c.num_heads * c.d_kv, scaled(init, f / std::sqrt(C)), false));
    o = register_module("o", std::make_shared<nn::Linear>(c.num_heads * c.d_kv, c.d_model, scaled(init, f / std::sqrt(inner)), false));
    if (relative_bias)
      rel = register_module("relative_attention_bias",
                            std::make_shared<nn::Embedding>(c.relative_attention_num_buckets, c.num_heads, scaled(init, f / std::sqrt(C))));
  }
  // x [B,T,C] -> queries [B,NH,T,D]
  Tensor queries(const Tensor& x) const { return heads(q->forward(x)); }
  // kv [B,T,C] -> keys and values [B,NH,T,D]
  std::pair<Tensor, Tensor> keys_values(const Tensor& kv) const { return {heads(k->forward(kv)), heads(v->forward(kv))}; }
  // qh [B,NH,Tq,D], kh / vh [B,NH,Tk,D], bias [.,NH,Tq,Tk] (position bias + masks) -> [B,Tq,C]
  Tensor attend(const Tensor& qh, const Tensor& kh, const Tensor& vh, const Tensor& bias, nn::Dropout& dropout) const {
    const int64_t B = qh.dim(0), Tq = qh.dim(2);
    Tensor scores = matmul(qh, kh, false, true);  // no 1/sqrt(D)
    Tensor probs = dropout.forward(softmax(scores, -1, bias));
    return o->forward(reshape(permute(matmul(probs, vh), {0, 2, 1, 3}), {B, Tq, NH_ * D_}));
  }
  std::shared_ptr<nn::Linear> q, k, v, o;
  std::shared_ptr<nn::Embedding> rel;

 private:
  Tensor heads(const Tensor& t) const { return permute(reshape(t, {t.dim(0), t.dim(1), NH_, D_}), {0, 2, 1, 3}); }
  int64_t NH_, D_;
};

class FeedForward : public nn::Module {
 public:
  FeedForward(const T5Config& c, const nn::Init& init, const std::shared_ptr<Generator>& gen) : c_(c) {
    double f = c.initializer_factor;
    nn::Init in = scaled(init, f / std::sqrt(static_cast<double>(c.d_model)));
    if (c.gated()) {
      wi_0 = register_module("wi_0", std::make_shared<nn::Linear>(c.d_model, c.d_ff, in, false));
      wi_1 = register_module("wi_1", std::make_shared<nn::Linear>(c.d_model, c.d_ff, in, false));
    } else {
      wi = register_module("wi", std::make_shared<nn::Linear>(c.d_model, c.d_ff, in, false));
    }
    wo = register_module("wo", std::make_shared<nn::Linear>(c.d_ff, c.d_model, scaled(init, f / std::sqrt(static_cast<double>(c.d_ff))), false));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout_rate, gen));
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = c_.gated() ? nn::activation(c_.act(), wi_0->forward(x)) * wi_1->forward(x) : nn::activation(c_.act(), wi->forward(x));
    return wo->forward(dropout->forward(h));
  }
  std::shared_ptr<nn::Linear> wi, wi_0, wi_1, wo;
  std::shared_ptr<nn::Dropout> dropout;

 private:
  T5Config c_;
};

class Block : public nn::Module {
 public:
  Block(const T5Config& c, bool decoder, bool first, const nn::Init& init, const std::shared_ptr<Generator>& gen) {
    auto norm = [&](const std::string& name) {
      return register_module(name, std::make_shared<nn::RMSNorm>(c.d_model, c.layer_norm_epsilon, init.device));
    };
    auto drop = [&](const std::string& name) { return register_module(name, std::make_shared<nn::Dropout>(c.dropout_rate, gen)); };
    self_attn = register_module("layer.0.SelfAttention", std::make_shared<Attention>(c, first, init));
    self_norm = norm("layer.0.layer_norm");
    self_drop = drop("layer.0.dropout");
    std::string ff = "layer.1";
    if (decoder) {
      cross_attn = register_module("layer.1.EncDecAttention", std::make_shared<Attention>(c, false, init));
      cross_norm = norm("layer.1.layer_norm");
      cross_drop = drop("layer.1.dropout");
      attn_drop = drop("layer.1.EncDecAttention.dropout");
      ff = "layer.2";
    }
    self_probs_drop = drop("layer.0.SelfAttention.dropout");
    ffn = register_module(ff + ".DenseReluDense", std::make_shared<FeedForward>(c, init, gen));
    ff_norm = norm(ff + ".layer_norm");
    ff_drop = drop(ff + ".dropout");
  }
  // x = x + dropout(sublayer(layer_norm(x))), for each sublayer. x [B,T,C], enc [B,S,C]
  Tensor forward(Tensor x, const Tensor& self_bias, const Tensor& enc, const Tensor& cross_bias) const {
    Tensor h = self_norm->forward(x);
    auto [k, v] = self_attn->keys_values(h);
    x = x + self_drop->forward(self_attn->attend(self_attn->queries(h), k, v, self_bias, *self_probs_drop));
    if (cross_attn) {
      auto [ck, cv] = cross_attn->keys_values(enc);
      x = cross(x, ck, cv, cross_bias);
    }
    return x + ff_drop->forward(ffn->forward(ff_norm->forward(x)));
  }
  // The same for one decoder position t against caches of capacity L: x [B,1,C];
  // slot (i64 [1]) is t, where this position's key and value are written
  // (k_cache / v_cache [B,NH,L,D], updated in place); self_bias [1,NH,1,L] hides
  // the slots after t; cross_k / cross_v [B,NH,S,D] from the encoder output.
  Tensor decode(Tensor x, const Tensor& self_bias, const Tensor& slot, Tensor& k_cache, Tensor& v_cache,
                const Tensor& cross_k, const Tensor& cross_v, const Tensor& cross_bias) const {
    Tensor h = self_norm->forward(x);
    auto [k, v] = self_attn->keys_values(h);  // [B,NH,1,D]
    k_cache.assign(with_slot(k_cache, slot, k));
    v_cache.assign(with_slot(v_cache, slot, v));
    x = x + self_drop->forward(self_attn->attend(self_attn->queries(h), k_cache, v_cache, self_bias, *self_probs_drop));
    x = cross(x, cross_k, cross_v, cross_bias);
    return x + ff_drop->forward(ffn->forward(ff_norm->forward(x)));
  }
  Tensor cross(const Tensor& x, const Tensor& ck, const Tensor& cv, const Tensor& cross_bias) const {
    Tensor q = cross_attn->queries(cross_norm->forward(x));
    return x + cross_drop->forward(cross_attn->attend(q, ck, cv, cross_bias, *attn_drop));
  }
  std::shared_ptr<Attention> self_attn, cross_attn;
  std::shared_ptr<nn::RMSNorm> self_norm, cross_norm, ff_norm;
  std::shared_ptr<nn::Dropout> self_drop, cross_drop, ff_drop, self_probs_drop, attn_drop;
  std::shared_ptr<FeedForward> ffn;
};

// Additive padding mask [B,1,1,T] from a 0/1 mask, or undefined.
Tensor padding_bias(const Tensor& mask) {
  if (!mask.defined()) return {};
  return reshape((1.0 - cast(mask, DType::f32)) * kMin, {mask.dim(0), 1, 1, mask.dim(1)});
}

}  // namespace

std::string T5Config::act() const {
  std::string a = gated() ? feed_forward_proj.substr(6) : feed_forward_proj;
  return a == "gelu" && gated() ? "gelu_new" : a;  // HF maps "gated-gelu" to gelu_new
}

std::vector<SizeTerm> T5Config::size_terms() const {
  const long double m = d_model, inner = static_cast<long double>(num_heads) * d_kv, ff = (gated() ? 3 : 2) * m * d_ff;
  std::vector<SizeTerm> terms = {
      {detail::concat("shared embeddings (vocab_size ", vocab_size, " x d_model ", d_model, ")"), vocab_size * m},
      {detail::concat(num_layers, " encoder layers (num_layers), each 4 x d_model x num_heads x d_kv + the feed-forward "
                      "d_model x d_ff (", d_model, ", ", num_heads, ", ", d_kv, ", ", d_ff, ")"),
       num_layers * (4 * m * inner + ff)},
      {detail::concat(decoder_layers(), " decoder layers (num_decoder_layers), each 8 x d_model x num_heads x d_kv + "
                      "the feed-forward (", d_model, ", ", num_heads, ", ", d_kv, ", ", d_ff, ")"),
       decoder_layers() * (8 * m * inner + ff)},
      {detail::concat("relative attention bias (relative_attention_num_buckets ", relative_attention_num_buckets,
                      " x num_heads ", num_heads, ", twice)"),
       2.0L * relative_attention_num_buckets * num_heads}};
  if (!tie_word_embeddings)
    terms.push_back({detail::concat("lm_head (vocab_size ", vocab_size, " x d_model ", d_model, ")"), vocab_size * m});
  return terms;
}

T5Config T5Config::from_json(const json& j, const std::string& src) {
  T5Config c;
  config_json::read_common(j, c, src);
  config_json::read_fields(j, c, src, t5_fields);
  c.validate(src);
  return c;
}

void T5Config::validate(const std::string& src) const {
  KILN_CHECK(model_type == "t5", src, ": model_type '", model_type, "' is not t5");
  for (auto [k, v] : {std::pair{"vocab_size", vocab_size}, {"d_model", d_model}, {"d_kv", d_kv}, {"d_ff", d_ff},
                      {"num_layers", num_layers}, {"num_heads", num_heads},
                      {"relative_attention_num_buckets", relative_attention_num_buckets}})
    KILN_CHECK(v > 0, src, ": '", k, "' must be positive, got ", v);
  KILN_CHECK(decoder_layers() > 0, src, ": 'num_decoder_layers' must be positive");
  KILN_CHECK(dropout_rate >= 0 && dropout_rate < 1, src, ": 'dropout_rate' must be in [0, 1), got ", dropout_rate);
  KILN_CHECK(layer_norm_epsilon >= 0, src, ": 'layer_norm_epsilon' must be >= 0, got ", layer_norm_epsilon);
  // Distances past the exact buckets (half of them, each way or causal) are
  // binned by log(d / exact) / log(max_distance / exact): it must exceed them.
  KILN_CHECK(relative_attention_max_distance > relative_attention_num_buckets / 2, src,
             ": 'relative_attention_max_distance' must be greater than relative_attention_num_buckets / 2 (",
             relative_attention_num_buckets / 2, "), got ", relative_attention_max_distance);
  for (auto [k, v] : {std::pair{"pad_token_id", pad_token_id}, {"decoder_start_token_id", decoder_start_token_id}})
    KILN_CHECK(v >= 0 && v < vocab_size, src, ": ", k, " ", v, " out of range [0, ", vocab_size, ")");
  const std::string a = gated() ? feed_forward_proj.substr(6) : feed_forward_proj;
  KILN_CHECK(a == "relu" || a == "gelu" || a == "gelu_new", src, ": feed_forward_proj '", feed_forward_proj,
             "' is not supported (relu, gelu, gated-relu, gated-gelu)");
  config_json::validate_common(*this, src);
}

json T5Config::to_json() const {
  json j = config_json::write_common(*this);
  t5_fields(*this, config_json::Writer{j});
  j["num_decoder_layers"] = decoder_layers();
  j["is_encoder_decoder"] = true;
  return j;
}

std::optional<T5Config> T5Config::preset(const std::string& name) {
  if (name != "t5-small" && name != "t5-tiny" && name != "t5-v1_1-tiny") return std::nullopt;
  T5Config c;  // defaults are t5-small's
  if (name != "t5-small") {
    c.d_model = 64;
    c.d_kv = 16;
    c.d_ff = 128;
    c.num_layers = 2;
    c.num_heads = 4;
  }
  if (name == "t5-v1_1-tiny") {
    c.feed_forward_proj = "gated-gelu";
    c.tie_word_embeddings = false;
  }
  c.architectures = {"T5ForConditionalGeneration"};
  return c;
}

void T5Config::adapt_to_tokenizer(const TokenizerIds& ids) {
  vocab_size = ids.vocab_size;
  pad_token_id = ids.pad_id;
  decoder_start_token_id = ids.pad_id;
  // Targets end with the tokenizer's end token; generation stops there.
  if (ids.eos_id) eos_token_id = *ids.eos_id;
}

std::vector<std::string> T5Config::ignored_checkpoint_keys() const {
  return {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"};  // both are `shared`
}

std::optional<std::pair<std::string, std::string>> T5Config::tied_output_head() const {
  if (!tie_word_embeddings) return std::nullopt;
  return std::pair<std::string, std::string>{"lm_head.weight", "shared.weight"};
}

const ModelFamily& t5_family() {
  static const ModelFamily family{.model_types = {"t5"},
                                  .architectures = {"T5ForConditionalGeneration", "T5EncoderModel"},
                                  .aliases = {"T5WithLMHeadModel"},  // the old name of T5ForConditionalGeneration
                                  .presets = {"t5-small", "t5-tiny", "t5-v1_1-tiny"},
                                  .read_config = &read_config_as<T5Config>,
                                  .preset = &preset_as<T5Config>,
                                  .build = &build_as<T5ForTask, T5Config>};
  return family;
}

int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                    int64_t max_distance) {
  int64_t bucket = 0;
  int64_t n = num_buckets;
  int64_t rp = relative_position;
  if (bidirectional) {
    n /= 2;
    if (rp > 0) bucket += n;
    rp = std::abs(rp);
  } else {
    rp = -std::min<int64_t>(rp, 0);
  }
  // half the buckets are exact offsets, the rest grow logarithmically up to max_distance
  int64_t max_exact = n / 2;
  if (rp < max_exact) return bucket + rp;
  double large = static_cast<double>(max_exact) +
                 std::log(static_cast<float>(rp) / static_cast<float>(max_exact)) /
                     std::log(static_cast<double>(max_distance) / max_exact) * (n - max_exact);
  int64_t v = std::min<int64_t>(static_cast<int64_t>(large), n - 1);
  return bucket + v;
}

class T5Stack : public nn::Module {
 public:
  bool gradient_checkpointing = false;  // HF: T5Stack.gradient_checkpointing

  T5Stack(const T5Config& c, bool decoder, std::shared_ptr<nn::Embedding> embed, const nn::Init& init,
          const std::shared_ptr<Generator>& gen)
      : c_(c), decoder_(decoder), embed_(std::move(embed)), gen_(gen) {
    int64_t n = decoder ? c.decoder_layers() : c.num_layers;
    for (int64_t i = 0; i < n; ++i)
      blocks_.push_back(register_module("block." + std::to_string(i), std::make_shared<Block>(c, decoder, i == 0, init, gen)));
    final_norm_ = register_module("final_layer_norm", std::make_shared<nn::RMSNorm>(c.d_model, c.layer_norm_epsilon, init.device));
    dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout_rate, gen));
  }

  // ids [B,T] -> [B,T,C]; the decoder also takes enc [B,S,C] and its mask.
  Tensor forward(const Tensor& ids, const Tensor& mask, const Tensor& enc, const Tensor& enc_mask) {
    const int64_t B = ids.dim(0), T = ids.dim(1);
    Device dev = ids.device();
    Tensor bias = position_bias(relative_buckets(T, dev));  // [1,NH,T,T]
    Tensor self_bias;
    if (decoder_) {
      // (1 - causal·mask) · min, as HF builds the decoder's extended mask
      Tensor idx = arange(T, DType::i64, dev);
      Tensor causal = cast(le(reshape(idx, {1, T}), reshape(idx, {T, 1})), DType::f32);  // key <= query
      Tensor m = mask.defined() ? reshape(causal, {1, 1, T, T}) * reshape(cast(mask, DType::f32), {B, 1, 1, T})
                                : reshape(causal, {1, 1, T, T});
      self_bias = bias + (1.0 - m) * kMin;
    } else {
      self_bias = mask.defined() ? bias + padding_bias(mask) : bias;
    }
    Tensor cross = decoder_ ? cross_bias(enc, enc_mask) : Tensor();
    Tensor x = dropout_->forward(embed_->forward(ids));
    for (auto& blk : blocks_)
      x = run_layer(gradient_checkpointing, *this, *gen_,
                    [blk, self_bias, enc, cross](const Tensor& h) { return blk->forward(h, self_bias, enc, cross); }, x);
    return dropout_->forward(final_norm_->forward(x));
  }

  // Decoder only: the cross-attention keys/values of every layer from enc
  // [B,S,C], empty self-attention caches of capacity L, the position buckets.
  T5DecoderCache start_decoding(const Tensor& enc, const Tensor& enc_mask, int64_t L) const {
    const int64_t B = enc.dim(0), NH = c_.num_heads, D = c_.d_kv;
    Device dev = enc.device();
    T5DecoderCache cache;
    cache.buckets = relative_buckets(L, dev);
    cache.cross_bias = cross_bias(enc, enc_mask);
    for (const auto& blk : blocks_) {
      cache.self_k.push_back(zero_kv_cache({B, NH, L, D}, dev, "k_cache"));
      cache.self_v.push_back(zero_kv_cache({B, NH, L, D}, dev, "v_cache"));
      auto [k, v] = blk->cross_attn->keys_values(enc);
      cache.cross_k.push_back(k);
      cache.cross_v.push_back(v);
    }
    return cache;
  }

  // Decoder only: token [B,1] at position pos (i64 scalar) -> [B,1,C], what
  // forward() gives at row pos of a decoder input whose first pos tokens are
  // the ones already in the cache.
  Tensor decode_step(const Tensor& token, const Tensor& pos, T5DecoderCache& cache) {
    const int64_t L = cache.capacity();
    Tensor slot = step_positions(pos, 1);
    // Row pos of the bias forward() builds for L positions, and of its causal mask.
    Tensor bias = position_bias(index_select(cache.buckets, slot));            // [1,NH,1,L]
    Tensor causal = reshape(cast(visible_slots(slot, L), DType::f32), {1, 1, 1, L});  // key <= query
    Tensor self_bias = bias + (1.0 - causal) * kMin;
    Tensor x = dropout_->forward(embed_->forward(token));
    for (size_t i = 0; i < blocks_.size(); ++i)
      x = blocks_[i]->decode(x, self_bias, slot, cache.self_k[i], cache.self_v[i], cache.cross_k[i], cache.cross_v[i],
                             cache.cross_bias);
    return dropout_->forward(final_norm_->forward(x));
  }

 private:
  // Relative position buckets of (key - query) for T positions: [T,T] i64
  Tensor relative_buckets(int64_t T, Device dev) const {
    std::vector<int64_t> buckets(static_cast<size_t>(T * T));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        buckets[i * T + j] = t5_relative_position_bucket(j - i, !decoder_, c_.relative_attention_num_buckets,
                                                         c_.relative_attention_max_distance);
    return Tensor::from_vector(buckets, {T, T}, dev, decoder_ ? "decoder_position_buckets" : "position_buckets");
  }
  // buckets [Tq,Tk] -> bias [1,NH,Tq,Tk], from the first block's table
  Tensor position_bias(const Tensor& buckets) const {
    return unsqueeze(permute(blocks_[0]->self_attn->rel->forward(buckets), {2, 0, 1}), 0);
  }
  // The encoder's padding as an additive mask [B,1,1,S] (zeros without a mask).
  static Tensor cross_bias(const Tensor& enc, const Tensor& enc_mask) {
    Tensor b = padding_bias(enc_mask);
    return b.defined() ? b : zeros({1, 1, 1, enc.dim(1)}, DType::f32, enc.device());
  }

 private:
  T5Config c_;
  bool decoder_;
  std::shared_ptr<nn::Embedding> embed_;  // the shared table (tied, not a parameter of the stack)
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::RMSNorm> final_norm_;
  std::shared_ptr<nn::Dropout> dropout_;
};

void T5ForTask::set_gradient_checkpointing(bool on) {
  encoder_->gradient_checkpointing = on;
  if (decoder_) decoder_->gradient_checkpointing = on;
}

T5ForTask::T5ForTask(std::string architecture, const T5Config& config, uint64_t seed, Device device)
    : PreTrainedModel(config.clone()), architecture_(std::move(architecture)), gen_(std::make_shared<Generator>(seed)) {
  if (architecture_ == "T5ForConditionalGeneration" || architecture_ == "T5WithLMHeadModel") encoder_only_ = false;
  else if (architecture_ == "T5EncoderModel") encoder_only_ = true;
  else throw Error("unsupported architecture '" + architecture_ + "'");
  if (architecture_ == "T5WithLMHeadModel") architecture_ = "T5ForConditionalGeneration";  // the old name
  auto& archs = config_ref().architectures;
  if (archs.empty()) archs = {architecture_};
  else archs[0] = architecture_;
  const T5Config& c = t5_config();
  nn::Init init{gen_.get(), c.initializer_factor, device};
  shared_ = register_module("shared", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, init));
  encoder_ = register_module("encoder", std::make_shared<T5Stack>(c, false, shared_, init, gen_));
  if (!encoder_only_) {
    decoder_ = register_module("decoder", std::make_shared<T5Stack>(c, true, shared_, init, gen_));
    if (!c.tie_word_embeddings)
      lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(c.d_model, c.vocab_size, init, false));
  }
  nn::materialize(parameters());
}

T5ForTask::~T5ForTask() = default;

Tensor T5ForTask::encode(const Tensor& ids, const Tensor& attention_mask) {
  KILN_CHECK(ids.defined() && ids.rank() == 2 && is_integral(ids.dtype()),
             "forward: input_ids must be an integer tensor [batch, seq]");
  KILN_CHECK(!attention_mask.defined() || attention_mask.shape() == ids.shape(), "forward: attention_mask ",
             to_string(attention_mask.shape()), " does not match input_ids ", to_string(ids.shape()));
  return encoder_->forward(ids, attention_mask, {}, {});
}

Tensor T5ForTask::decode(const Tensor& decoder_input_ids, const Tensor& decoder_attention_mask,
                         const Tensor& encoder_hidden, const Tensor& attention_mask) {
  KILN_CHECK(!encoder_only_, architecture_, " has no decoder");
  return lm_logits(decoder_->forward(decoder_input_ids, decoder_attention_mask, encoder_hidden, attention_mask));
}

T5DecoderCache T5ForTask::start_decoding(const Tensor& encoder_hidden, const Tensor& attention_mask, int64_t capacity) {
  KILN_CHECK(!encoder_only_, architecture_, " has no decoder");
  KILN_CHECK(capacity > 0, "start_decoding: capacity must be positive, got ", capacity);
  KILN_CHECK(encoder_hidden.rank() == 3 && encoder_hidden.dim(2) == t5_config().d_model,
             "start_decoding: encoder output must be [batch, seq, ", t5_config().d_model, "], got ",
             to_string(encoder_hidden.shape()));
  return decoder_->start_decoding(encoder_hidden, attention_mask, capacity);
}

Tensor T5ForTask::decode_step(const Tensor& token, const Tensor& pos, T5DecoderCache& cache) {
  KILN_CHECK(!encoder_only_, architecture_, " has no decoder");
  KILN_CHECK(cache.self_k.size() == static_cast<size_t>(t5_config().decoder_layers()),
             "decode_step: the cache has ", cache.self_k.size(), " layers, the decoder ", t5_config().decoder_layers());
  KILN_CHECK(token.rank() == 2 && token.dim(1) == 1 && token.dim(0) == cache.self_k[0].dim(0), "decode_step: token ",
             to_string(token.shape()), " must be [", cache.self_k[0].dim(0), ", 1]");
  return lm_logits(decoder_->decode_step(token, pos, cache));
}

Tensor T5ForTask::lm_logits(const Tensor& h) const {
  const T5Config& c = t5_config();
  // Original T5 rescales the decoder output by d_model^-0.5 before the head (scale_decoder_outputs).
  const Tensor x = c.scales_decoder_outputs() ? h * (1.0 / std::sqrt(static_cast<double>(c.d_model))) : h;
  return c.tie_word_embeddings ? shared_->tied_logits(x) : lm_head_->forward(x);
}

ModelOutputs T5ForTask::forward(const ModelInputs& in) {
  const T5Config& c = t5_config();
  if (encoder_only_) check_accepts(in, {"input_ids", "attention_mask"});
  else check_accepts(in, {"input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask", "labels"});
  KILN_CHECK(!in.labels.defined() || (in.labels.rank() == 2 && in.labels.dim(1) > 0),
             "forward: labels must be [batch, target_len] with at least one target token, got ",
             to_string(in.labels.shape()));
  ModelOutputs out;
  Tensor enc = encode(in.input_ids, in.attention_mask);
  if (encoder_only_) {
    out.last_hidden_state = enc;
    return out;
  }
  out.encoder_last_hidden_state = enc;
  Tensor dec_ids = in.decoder_input_ids;
  if (!dec_ids.defined()) {
    KILN_CHECK(in.labels.defined(), "forward: T5 needs decoder_input_ids or labels");
    // Shift labels right: [start, labels[:-1]], with -100 replaced by the pad id.
    const Tensor& y = in.labels;
    const int64_t B = y.dim(0), T = y.dim(1);
    Tensor pad = full({}, static_cast<double>(c.pad_token_id), y.dtype(), y.device());
    Tensor clean = where(eq(y, full({}, -100, y.dtype(), y.device())), pad, y);
    Tensor start = full({B, 1}, static_cast<double>(c.decoder_start_token_id), y.dtype(), y.device());
    dec_ids = T > 1 ? concat({start, slice(clean, 1, 0, T - 1)}, 1) : start;
  }
  out.logits = decode(dec_ids, in.decoder_attention_mask, enc, in.attention_mask);
  if (in.labels.defined())
    out.loss = cross_entropy(reshape(out.logits, {-1, c.vocab_size}), reshape(in.labels, {-1}));
  return out;
}

}  // namespace kiln::models
