#include "kiln/models/deberta.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/models/config_json.h"
#include "kiln/models/registry.h"

namespace kiln::models {

using nlohmann::json;

namespace {

using config_json::Unset;
// DebertaV2Config's keys. pooler_hidden_size is written (hidden_size) unless
// the config read one (kept in extra).
constexpr auto deberta_fields = [](auto& c, auto&& visit) {
  config_json::encoder_fields(c, visit);
  visit("relative_attention", c.relative_attention);
  visit("max_relative_positions", c.max_relative_positions);
  visit("position_buckets", c.position_buckets);
  visit("pad_token_id", c.pad_token_id);
  visit("position_biased_input", c.position_biased_input);
  visit("pos_att_type");  // a list, or the older "p2c|c2p" string: read_pos_att_type
  visit("share_att_key", c.share_att_key);
  visit("norm_rel_ebd", c.norm_rel_ebd);
  visit("pooler_dropout", c.pooler_dropout);
  visit("pooler_hidden_act", c.pooler_hidden_act);
  visit("cls_dropout", c.cls_dropout, Unset::omit);
};

// pos_att_type: a list of strings, or HF's older "p2c|c2p" string form.
std::vector<std::string> read_pos_att_type(const json& j, const std::string& src) {
  std::vector<std::string> out;
  auto it = j.find("pos_att_type");
  if (it == j.end() || it->is_null()) return out;
  auto bad = [&] { return Error(src + ": 'pos_att_type' must be a list of \"c2p\"/\"p2c\" or a \"p2c|c2p\" string, got " +
                                json_found(*it)); };
  if (it->is_string()) {
    std::stringstream ss(it->get<std::string>());
    for (std::string part; std::getline(ss, part, '|');) {
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      std::transform(part.begin(), part.end(), part.begin(), [](unsigned char ch) { return std::tolower(ch); });
      out.push_back(part);
    }
  } else if (it->is_array()) {
    for (const auto& v : *it) {
      if (!v.is_string()) throw bad();
      out.push_back(v.get<std::string>());
    }
  } else {
    throw bad();
  }
  return out;
}

// Fields HF reads with getattr that kiln does not build: their presence with a
// value other than the default is an error, and they are kept in `extra`.
void check_unsupported(const json& j, const DebertaV2Config& c, const std::string& src) {
  auto int_field = [&](const char* key) { return json_value<int64_t>(j, key, -1, src); };
  if (j.contains("conv_kernel_size") && !j["conv_kernel_size"].is_null())
    KILN_CHECK(int_field("conv_kernel_size") <= 0, src, ": 'conv_kernel_size' ", int_field("conv_kernel_size"),
               " is not supported (the encoder's convolution layer of deberta-v2-xlarge; kiln builds none)");
  if (j.contains("embedding_size") && !j["embedding_size"].is_null())
    KILN_CHECK(int_field("embedding_size") == c.hidden_size, src, ": 'embedding_size' ", int_field("embedding_size"),
               " differs from hidden_size ", c.hidden_size, " (embed_proj is not supported)");
  if (j.contains("z_steps") && !j["z_steps"].is_null())
    KILN_CHECK(int_field("z_steps") <= 1, src, ": 'z_steps' ", int_field("z_steps"), " > 1 is not supported");
  if (j.contains("attention_head_size") && !j["attention_head_size"].is_null() && c.num_attention_heads > 0)
    KILN_CHECK(int_field("attention_head_size") == c.hidden_size / c.num_attention_heads, src, ": 'attention_head_size' ",
               int_field("attention_head_size"), " other than hidden_size / num_attention_heads is not supported");
  if (j.contains("pooler_hidden_size") && !j["pooler_hidden_size"].is_null())
    KILN_CHECK(int_field("pooler_hidden_size") == c.hidden_size, src, ": 'pooler_hidden_size' ",
               int_field("pooler_hidden_size"), " must equal hidden_size ", c.hidden_size,
               " (HF's classifier reads hidden_size features from the pooler)");
}

std::vector<std::string> split_norm_rel_ebd(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, '|');) {
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    std::transform(part.begin(), part.end(), part.begin(), [](unsigned char ch) { return std::tolower(ch); });
    parts.push_back(part);
  }
  return parts;
}

bool has(const std::vector<std::string>& v, const char* x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

bool DebertaV2Config::c2p() const { return has(pos_att_type, "c2p"); }
bool DebertaV2Config::p2c() const { return has(pos_att_type, "p2c"); }

int64_t DebertaV2Config::attention_span() const {
  if (position_buckets > 0) return position_buckets;
  return max_relative_positions < 1 ? max_position_embeddings : max_relative_positions;
}

DebertaV2Config DebertaV2Config::from_json(const json& j, const std::string& src) {
  KILN_CHECK(j.is_object(), src, ": expected a JSON object, got ", json_found(j));
  DebertaV2Config c;
  config_json::read_common(j, c, src);
  config_json::read_fields(j, c, src, deberta_fields);
  c.pos_att_type = read_pos_att_type(j, src);
  c.validate(src);
  check_unsupported(j, c, src);
  return c;
}

void DebertaV2Config::validate(const std::string& src) const {
  KILN_CHECK(model_type == "deberta-v2", src, ": model_type '", model_type, "' is not deberta-v2");
  config_json::validate_encoder(*this, src);
  KILN_CHECK(type_vocab_size >= 0, src, ": 'type_vocab_size' must be >= 0, got ", type_vocab_size);
  if (pad_token_id)
    KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, src, ": pad_token_id ", *pad_token_id,
               " out of range [0, ", vocab_size, ")");
  auto prob = [&](const char* k, double v) { KILN_CHECK(v >= 0 && v < 1, src, ": '", k, "' must be in [0, 1), got ", v); };
  prob("pooler_dropout", pooler_dropout);
  if (cls_dropout) prob("cls_dropout", *cls_dropout);
  for (const auto& t : pos_att_type)
    KILN_CHECK(t == "c2p" || t == "p2c", src, ": 'pos_att_type' entry '", excerpt(t),
               "' is not supported (c2p, p2c)");
  for (const auto& n : split_norm_rel_ebd(norm_rel_ebd))
    KILN_CHECK(n == "none" || n == "layer_norm", src, ": 'norm_rel_ebd' '", excerpt(norm_rel_ebd),
               "' is not supported (none, layer_norm)");
  if (relative_attention) {
    const int64_t max_rel = max_relative_positions < 1 ? max_position_embeddings : max_relative_positions;
    KILN_CHECK(max_rel <= (int64_t{1} << 24), src, ": 'max_relative_positions' ", max_rel, " is too large");
    if (position_buckets > 0) {
      // make_log_bucket_position divides by log((max_relative_positions - 1) / (position_buckets / 2)).
      KILN_CHECK(position_buckets >= 2 && position_buckets <= (int64_t{1} << 24), src, ": 'position_buckets' ",
                 position_buckets, " must be in [2, 2^24] (or <= 0 for none)");
      KILN_CHECK(max_rel - 1 > position_buckets / 2, src, ": 'max_relative_positions' ", max_rel,
                 " must exceed position_buckets / 2 + 1 (", position_buckets / 2 + 1, ") for the log buckets");
    }
  }
  config_json::validate_common(*this, src);
  try {
    nn::check_activation(pooler_hidden_act);
  } catch (const Error& e) {
    throw Error(src + ": pooler_hidden_act: " + e.what());
  }
}

json DebertaV2Config::to_json() const {
  json j = config_json::write_common(*this);
  deberta_fields(*this, config_json::Writer{j});
  j["pos_att_type"] = pos_att_type;
  if (!j.contains("pooler_hidden_size")) j["pooler_hidden_size"] = hidden_size;
  return j;
}

std::optional<DebertaV2Config> DebertaV2Config::preset(const std::string& name) {
  if (name != "deberta-v3-base" && name != "deberta-v3-tiny") return std::nullopt;
  // microsoft/deberta-v3-base's config.json.
  json j = {{"model_type", "deberta-v2"},          {"vocab_size", 128100},
            {"hidden_size", 768},                  {"num_hidden_layers", 12},
            {"num_attention_heads", 12},           {"intermediate_size", 3072},
            {"relative_attention", true},          {"position_buckets", 256},
            {"norm_rel_ebd", "layer_norm"},        {"share_att_key", true},
            {"pos_att_type", "p2c|c2p"},           {"layer_norm_eps", 1e-7},
            {"max_relative_positions", -1},        {"position_biased_input", false},
            {"type_vocab_size", 0},                {"pooler_dropout", 0},
            {"pooler_hidden_act", "gelu"}};
  if (name == "deberta-v3-tiny")
    j.update({{"hidden_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"intermediate_size", 512}});
  DebertaV2Config c = from_json(j, "preset " + name);
  c.architectures = {"DebertaV2ForSequenceClassification"};
  return c;
}

std::string DebertaV2Config::architecture_for(ModelTask task) const {
  if (task == ModelTask::SequenceClassification) return "DebertaV2ForSequenceClassification";
  if (task == ModelTask::TokenClassification) return "DebertaV2ForTokenClassification";
  return "";
}

void DebertaV2Config::adapt_to_tokenizer(const TokenizerIds& ids) {
  vocab_size = ids.vocab_size;
  pad_token_id = ids.pad_id;
}

std::vector<std::string> DebertaV2Config::ignored_checkpoint_keys() const {
  // DeBERTa-v3 has no absolute positions: HF ignores a checkpoint's (_keys_to_ignore_on_load_unexpected).
  if (position_biased_input) return {};
  return {"deberta.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"};
}

const ModelFamily& deberta_family() {
  static const ModelFamily family{
      .model_types = {"deberta-v2"},
      .architectures = {"DebertaV2Model", "DebertaV2ForSequenceClassification", "DebertaV2ForTokenClassification"},
      .aliases = {},
      .presets = {"deberta-v3-tiny", "deberta-v3-base"},
      .read_config = &read_config_as<DebertaV2Config>,
      .preset = &preset_as<DebertaV2Config>,
      .build = &build_as<DebertaV2ForTask, DebertaV2Config>};
  return family;
}

std::vector<SizeTerm> DebertaV2Config::size_terms() const {
  const long double h = hidden_size, i = intermediate_size;
  const long double pos_proj = share_att_key ? 0 : (c2p() ? 1 : 0) + (p2c() ? 1 : 0);
  return {{detail::concat("word embeddings (vocab_size ", vocab_size, " x hidden_size ", hidden_size, ")"), vocab_size * h},
          {detail::concat("position embeddings (max_position_embeddings ", max_position_embeddings, " x hidden_size ",
                          hidden_size, ")"),
           position_biased_input ? max_position_embeddings * h : 0},
          {detail::concat("token type embeddings (type_vocab_size ", type_vocab_size, " x hidden_size ", hidden_size, ")"),
           type_vocab_size * h},
          {detail::concat("relative embeddings (2 x position_buckets or max_relative_positions ", attention_span(),
                          " x hidden_size ", hidden_size, ")"),
           relative_attention ? 2 * static_cast<long double>(attention_span()) * h : 0},
          {detail::concat(num_hidden_layers, " layers (num_hidden_layers), each 4 x hidden_size^2 + 2 x hidden_size x ",
                          "intermediate_size (", hidden_size, ", ", intermediate_size, ")"),
           num_hidden_layers * ((4 + pos_proj) * h * h + 2 * h * i)}};
}

std::vector<int64_t> deberta_relative_positions(int64_t T, int64_t bucket_size, int64_t max_position) {
  std::vector<int64_t> rel(static_cast<size_t>(T * T));
  const int64_t mid = bucket_size / 2;
  // float32 throughout, as torch computes make_log_bucket_position.
  const float denom = bucket_size > 0 ? std::log(static_cast<float>(static_cast<double>(max_position - 1) / mid)) : 1.0f;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      int64_t r = i - j;
      if (bucket_size > 0 && max_position > 0) {
        const int64_t a = std::abs(r);
        if (a > mid) {
          float lp = std::ceil(std::log(static_cast<float>(a) / static_cast<float>(mid)) / denom *
                               static_cast<float>(mid - 1)) + static_cast<float>(mid);
          r = static_cast<int64_t>(lp) * (r < 0 ? -1 : 1);
        }
      }
      rel[static_cast<size_t>(i * T + j)] = r;
    }
  return rel;
}

namespace {
DebertaContext make_context(const DebertaV2Config& c, uint64_t seed, Device device) {
  auto gen = std::make_shared<Generator>(seed);
  return DebertaContext{c, gen, nn::Init{gen.get(), c.initializer_range, device}};
}
}  // namespace

DebertaV2Layer::DebertaV2Layer(const DebertaContext& ctx) : config_(ctx.config) {
  const auto& c = ctx.config;
  const int64_t H = c.hidden_size;
  auto lin = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, std::make_shared<nn::Linear>(in, out, ctx.init));
  };
  auto norm = [&](const char* name) {
    return register_module(name, std::make_shared<nn::LayerNorm>(H, c.layer_norm_eps, ctx.init.device));
  };
  auto drop = [&](const char* name, double p) { return register_module(name, std::make_shared<nn::Dropout>(p, ctx.gen)); };
  query_ = lin("attention.self.query_proj", H, H);
  key_ = lin("attention.self.key_proj", H, H);
  value_ = lin("attention.self.value_proj", H, H);
  if (c.relative_attention) {
    pos_dropout_ = drop("attention.self.pos_dropout", c.hidden_dropout_prob);
    if (!c.share_att_key && c.c2p()) pos_key_ = lin("attention.self.pos_key_proj", H, H);
    if (!c.share_att_key && c.p2c()) pos_query_ = lin("attention.self.pos_query_proj", H, H);
  }
  attn_probs_dropout_ = drop("attention.self.dropout", c.attention_probs_dropout_prob);
  attn_out_ = lin("attention.output.dense", H, H);
  attn_norm_ = norm("attention.output.LayerNorm");
  attn_out_dropout_ = drop("attention.output.dropout", c.hidden_dropout_prob);
  intermediate_ = lin("intermediate.dense", H, c.intermediate_size);
  out_ = lin("output.dense", c.intermediate_size, H);
  out_norm_ = norm("output.LayerNorm");
  out_dropout_ = drop("output.dropout", c.hidden_dropout_prob);
}

// disentangled_attention_bias: c2p[b,h,i,j] = q_i · pos_k[c2p_index[i,j]],
// p2c[b,h,i,j] = k_j · pos_q[p2c_index[j,i]], each divided by `scale`.
Tensor DebertaV2Layer::relative_scores(const Tensor& q, const Tensor& k, const Tensor& rel, const Tensor& c2p_index,
                                       const Tensor& p2c_index, double scale) {
  const int64_t B = q.dim(0), NH = q.dim(1), T = q.dim(2), D = q.dim(3), S2 = rel.dim(0);
  Tensor r = pos_dropout_->forward(rel);
  // [2S,H] -> [NH,2S,D]
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {S2, NH, D}), {1, 0, 2}); };
  const Shape idx_shape{B, NH, T, T};
  Tensor score;
  if (config_.c2p()) {
    Tensor pos_k = heads((config_.share_att_key ? key_ : pos_key_)->forward(r));
    Tensor c2p = matmul(q, pos_k, false, true);  // [B,NH,T,2S]
    score = gather(c2p, 3, broadcast_to(c2p_index, idx_shape)) * (1.0 / scale);
  }
  if (config_.p2c()) {
    Tensor pos_q = heads((config_.share_att_key ? query_ : pos_query_)->forward(r));
    Tensor p2c = matmul(k, pos_q, false, true);  // [B,NH,T(keys),2S]
    Tensor term = transpose(gather(p2c, 3, broadcast_to(p2c_index, idx_shape)), 2, 3) * (1.0 / scale);
    score = score.defined() ? score + term : term;
  }
  return score;
}

Tensor DebertaV2Layer::forward(const Tensor& x, const Tensor& mask, const Tensor& rel, const Tensor& c2p_index,
                               const Tensor& p2c_index) {
  const int64_t B = x.dim(0), T = x.dim(1), H = config_.hidden_size, NH = config_.num_attention_heads,
                D = config_.head_dim();
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, T, NH, D}), {0, 2, 1, 3}); };
  Tensor q = heads(query_->forward(x)), k = heads(key_->forward(x)), v = heads(value_->forward(x));
  // Each of the content, c2p and p2c terms is divided by sqrt(D · (number of terms)).
  const bool rel_on = config_.relative_attention && rel.defined();
  const int64_t terms = 1 + (rel_on && config_.c2p() ? 1 : 0) + (rel_on && config_.p2c() ? 1 : 0);
  const double scale = std::sqrt(static_cast<double>(static_cast<float>(D) * static_cast<float>(terms)));
  Tensor scores = matmul(q, k, false, true) * (1.0 / scale);
  if (rel_on && terms > 1) scores = scores + relative_scores(q, k, rel, c2p_index, p2c_index, scale);
  Tensor probs = attn_probs_dropout_->forward(softmax(scores, -1, mask));
  Tensor context = reshape(permute(matmul(probs, v), {0, 2, 1, 3}), {B, T, H});
  Tensor attn = attn_norm_->forward(attn_out_dropout_->forward(attn_out_->forward(context)) + x);
  Tensor inter = nn::activation(config_.hidden_act, intermediate_->forward(attn));
  return out_norm_->forward(out_dropout_->forward(out_->forward(inter)) + attn);
}

DebertaV2Backbone::DebertaV2Backbone(const DebertaContext& ctx) : config_(ctx.config), gen_(ctx.gen) {
  const auto& c = ctx.config;
  const int64_t H = c.hidden_size;
  word_embeddings_ = register_module("embeddings.word_embeddings",
                                     std::make_shared<nn::Embedding>(c.vocab_size, H, ctx.init, c.pad_token_id.value_or(-1)));
  if (c.position_biased_input)
    position_embeddings_ = register_module("embeddings.position_embeddings",
                                           std::make_shared<nn::Embedding>(c.max_position_embeddings, H, ctx.init));
  if (c.type_vocab_size > 0)
    token_type_embeddings_ = register_module("embeddings.token_type_embeddings",
                                             std::make_shared<nn::Embedding>(c.type_vocab_size, H, ctx.init));
  emb_norm_ = register_module("embeddings.LayerNorm", std::make_shared<nn::LayerNorm>(H, c.layer_norm_eps, ctx.init.device));
  emb_dropout_ = register_module("embeddings.dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, ctx.gen));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(register_module("encoder.layer." + std::to_string(i), std::make_shared<DebertaV2Layer>(ctx)));
  if (c.relative_attention)
    rel_embeddings_ = register_module("encoder.rel_embeddings",
                                      std::make_shared<nn::Embedding>(2 * c.attention_span(), H, ctx.init));
  if (has(split_norm_rel_ebd(c.norm_rel_ebd), "layer_norm"))
    rel_norm_ = register_module("encoder.LayerNorm", std::make_shared<nn::LayerNorm>(H, c.layer_norm_eps, ctx.init.device));
}

// Word (+ absolute position) (+ token type) embeddings, LayerNorm, padding rows zeroed, dropout.
Tensor DebertaV2Backbone::embed(const ModelInputs& in, const Tensor& mask01) {
  const Tensor& ids = in.input_ids;
  const int64_t B = ids.dim(0), T = ids.dim(1);
  Tensor x = word_embeddings_->forward(ids);
  if (position_embeddings_)
    x = x + position_embeddings_->forward(broadcast_to(reshape(arange(T, DType::i64, ids.device()), {1, T}), {B, T}));
  if (token_type_embeddings_)
    x = x + token_type_embeddings_->forward(in.token_type_ids.defined() ? in.token_type_ids
                                                                        : zeros({B, T}, DType::i64, ids.device()));
  x = emb_norm_->forward(x);
  if (mask01.defined()) x = x * reshape(mask01, {B, T, 1});
  return emb_dropout_->forward(x);
}

Tensor DebertaV2Backbone::forward(const ModelInputs& in) {
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined(), "forward: input_ids is required");
  KILN_CHECK(ids.rank() == 2 && is_integral(ids.dtype()), "forward: input_ids must be an integer tensor [batch, seq], got ",
             dtype_name(ids.dtype()), to_string(ids.shape()));
  const int64_t B = ids.dim(0), T = ids.dim(1);
  const Device dev = ids.device();
  if (config_.position_biased_input)
    KILN_CHECK(T <= config_.max_position_embeddings, "forward: sequence length ", T, " exceeds the model's ",
               config_.max_position_embeddings, " positions (max_position_embeddings)");
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&in.attention_mask, "attention_mask"},
                                {&in.token_type_ids, "token_type_ids"}})
    KILN_CHECK(!t->defined() || t->shape() == ids.shape(), "forward: ", name, " ", to_string(t->shape()),
               " does not match input_ids ", to_string(ids.shape()));
  KILN_CHECK(!in.token_type_ids.defined() || token_type_embeddings_,
             "forward: token_type_ids given, but the model has no token types (type_vocab_size 0)");

  Tensor mask01 = in.attention_mask.defined() ? cast(in.attention_mask, DType::f32) : Tensor();
  Tensor x = embed(in, mask01);
  // Query i may attend key j when both are tokens (HF: mask_i · mask_j); other
  // pairs score finfo(float32).min, so a padding row attends evenly to all.
  Tensor mask;
  if (mask01.defined()) {
    Tensor pair = reshape(mask01, {B, 1, T, 1}) * reshape(mask01, {B, 1, 1, T});
    mask = (1.0 - pair) * static_cast<double>(std::numeric_limits<float>::lowest());
  }
  Tensor rel, c2p_index, p2c_index;
  if (config_.relative_attention) {
    rel = rel_embeddings_->weight;
    if (rel_norm_) rel = rel_norm_->forward(rel);
    const int64_t S = config_.attention_span();
    const int64_t max_rel = config_.max_relative_positions < 1 ? config_.max_position_embeddings
                                                               : config_.max_relative_positions;
    std::vector<int64_t> r = deberta_relative_positions(T, config_.position_buckets, max_rel), c2p(r.size()), p2c(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
      c2p[i] = std::clamp<int64_t>(r[i] + S, 0, 2 * S - 1);
      p2c[i] = std::clamp<int64_t>(-r[i] + S, 0, 2 * S - 1);
    }
    c2p_index = Tensor::from_vector(c2p, {T, T}, dev);
    p2c_index = Tensor::from_vector(p2c, {T, T}, dev);
  }
  for (const auto& layer : layers_)
    x = run_layer(gradient_checkpointing, *this, *gen_,
                  [layer, mask, rel, c2p_index, p2c_index](const Tensor& h) {
                    return layer->forward(h, mask, rel, c2p_index, p2c_index);
                  },
                  x);
  return x;
}

DebertaV2ForTask::DebertaV2ForTask(std::string architecture, const DebertaV2Config& config, uint64_t seed, Device device)
    : PreTrainedModel(config.clone()), architecture_(std::move(architecture)), ctx_(make_context(config, seed, device)) {
  const std::string& a = architecture_;
  if (a == "DebertaV2Model") head_ = Head::None;
  else if (a == "DebertaV2ForSequenceClassification") head_ = Head::SequenceClassification;
  else if (a == "DebertaV2ForTokenClassification") head_ = Head::TokenClassification;
  else throw Error("unsupported architecture '" + a + "' (DeBERTa-v2: DebertaV2Model, "
                   "DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification)");
  auto& archs = config_ref().architectures;
  if (archs.empty()) archs = {a};
  else archs[0] = a;
  auto backbone = std::make_shared<DebertaV2Backbone>(ctx_);
  backbone_ = head_ == Head::None ? register_module("", backbone) : register_module("deberta", backbone);
  const auto& c = ctx_.config;
  const nn::Init& init = ctx_.init;
  if (head_ == Head::SequenceClassification) {
    // ContextPooler: token 0 -> dropout -> dense -> pooler_hidden_act; then dropout -> classifier.
    pooler_dropout_ = register_module("pooler.dropout", std::make_shared<nn::Dropout>(c.pooler_dropout, ctx_.gen));
    pooler_ = register_module("pooler.dense", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
    head_dropout_ = register_module(
        "dropout", std::make_shared<nn::Dropout>(c.cls_dropout.value_or(c.hidden_dropout_prob), ctx_.gen));
  } else if (head_ == Head::TokenClassification) {
    head_dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, ctx_.gen));
  }
  if (head_ != Head::None)
    classifier_ = register_module("classifier", std::make_shared<nn::Linear>(c.hidden_size, config_ref().num_labels(), init));
  nn::materialize(parameters());
}

// DebertaV2ForSequenceClassification's loss. With a problem_type, the usual
// one; without, HF's own rules: one label is regression, integer labels
// [B] are cross entropy over the rows whose label is >= 0, and [B,C]
// labels are soft targets: -(log_softmax(logits) · labels).sum(-1).mean().
Tensor DebertaV2ForTask::sequence_loss(const Tensor& logits, const Tensor& labels) const {
  const PretrainedConfig& c = config();
  const int64_t C = c.num_labels();
  if (c.problem_type || C == 1) return sequence_classification_loss(c, logits, labels);
  if (labels.rank() == 1 || (labels.rank() == 2 && labels.dim(1) == 1)) {
    // The mean over the labelled rows; 0 when there are none (HF's torch.tensor(0)).
    Tensor l = reshape(cast(labels, DType::i64), {-1, 1});
    const Device dev = l.device();
    Tensor labelled = cast(ge(l, zeros({}, DType::i64, dev)), DType::f32);  // [B,1]
    Tensor index = maximum(l, zeros({}, DType::i64, dev));
    Tensor nll = -gather(log_softmax(logits, -1), 1, index);  // [B,1]
    return sum(nll * labelled) / maximum(sum(labelled), full({}, 1.0, DType::f32, dev));
  }
  KILN_CHECK(labels.shape() == logits.shape(), architecture_, ": soft labels ", to_string(labels.shape()),
             " must match logits ", to_string(logits.shape()));
  return -mean(sum(log_softmax(logits, -1) * cast(labels, DType::f32), {-1}));
}

ModelOutputs DebertaV2ForTask::forward(const ModelInputs& in) {
  std::vector<std::string_view> takes = {"input_ids", "attention_mask", "token_type_ids"};
  if (head_ != Head::None) takes.push_back("labels");
  check_accepts(in, takes);
  Tensor h = backbone_->forward(in);
  ModelOutputs out;
  if (head_ == Head::None) {
    out.last_hidden_state = h;
    return out;
  }
  if (head_ == Head::SequenceClassification) {
    Tensor first = squeeze(slice(h, 1, 0, 1), 1);
    Tensor pooled = nn::activation(ctx_.config.pooler_hidden_act, pooler_->forward(pooler_dropout_->forward(first)));
    out.logits = classifier_->forward(head_dropout_->forward(pooled));
    if (in.labels.defined()) out.loss = sequence_loss(out.logits, in.labels);
    return out;
  }
  out.logits = classifier_->forward(head_dropout_->forward(h));
  if (in.labels.defined())
    out.loss = cross_entropy(reshape(out.logits, {-1, config().num_labels()}), reshape(in.labels, {-1}));
  return out;
}

}  // namespace kiln::models
