#include "kiln/models/gpt2.h"

#include <cmath>
#include <limits>

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
// GPT2Config's keys. n_ctx is written (as n_positions) for older readers.
constexpr auto gpt2_fields = [](auto& c, auto&& visit) {
  visit("vocab_size", c.vocab_size);
  visit("n_positions", c.n_positions);
  visit("n_embd", c.n_embd);
  visit("n_layer", c.n_layer);
  visit("n_head", c.n_head);
  visit("n_inner", c.n_inner);
  visit("activation_function", c.activation_function);
  visit("resid_pdrop", c.resid_pdrop);
  visit("embd_pdrop", c.embd_pdrop);
  visit("attn_pdrop", c.attn_pdrop);
  visit("layer_norm_epsilon", c.layer_norm_epsilon);
  visit("initializer_range", c.initializer_range);
  visit("scale_attn_weights", c.scale_attn_weights);
  visit("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx);
  visit("reorder_and_upcast_attn", c.reorder_and_upcast_attn);
  visit("bos_token_id", c.bos_token_id);
  visit("eos_token_id", c.eos_token_id);
  visit("pad_token_id", c.pad_token_id, Unset::omit);
};
constexpr double kMin = std::numeric_limits<float>::lowest();
}  // namespace

std::vector<SizeTerm> GPT2Config::size_terms() const {
  const long double h = n_embd;
  return {{detail::concat("token embeddings wte (vocab_size ", vocab_size, " x n_embd ", n_embd, ")"), vocab_size * h},
          {detail::concat("position embeddings wpe (n_positions ", n_positions, " x n_embd ", n_embd, ")"), n_positions * h},
          {detail::concat(n_layer, " layers (n_layer), each 4 x n_embd^2 + 2 x n_embd x n_inner (", n_embd, ", ", inner(), ")"),
           n_layer * (4 * h * h + 2 * h * static_cast<long double>(inner()))}};
}

GPT2Config GPT2Config::from_json(const json& j, const std::string& src) {
  GPT2Config c;
  config_json::read_common(j, c, src);
  config_json::read_fields(j, c, src, gpt2_fields);
  c.validate(src);
  return c;
}

void GPT2Config::validate(const std::string& src) const {
  KILN_CHECK(model_type == "gpt2", src, ": model_type '", model_type, "' is not gpt2");
  auto positive = [&](const char* k, int64_t v) { KILN_CHECK(v > 0, src, ": '", k, "' must be positive, got ", v); };
  positive("vocab_size", vocab_size);
  positive("n_positions", n_positions);
  positive("n_embd", n_embd);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_inner", inner());
  KILN_CHECK(n_embd % n_head == 0, src, ": n_embd ", n_embd, " is not a multiple of n_head ", n_head);
  for (auto [k, v] : {std::pair{"resid_pdrop", resid_pdrop}, {"embd_pdrop", embd_pdrop}, {"attn_pdrop", attn_pdrop}})
    KILN_CHECK(v >= 0 && v < 1, src, ": '", k, "' must be in [0, 1), got ", v);
  KILN_CHECK(!reorder_and_upcast_attn, src, ": reorder_and_upcast_attn is not supported");
  KILN_CHECK(layer_norm_epsilon >= 0, src, ": 'layer_norm_epsilon' must be >= 0, got ", layer_norm_epsilon);
  if (pad_token_id) KILN_CHECK(*pad_token_id >= 0 && *pad_token_id < vocab_size, src, ": pad_token_id ", *pad_token_id,
                               " out of range [0, ", vocab_size, ")");
  config_json::validate_common(*this, src);
  try {
    nn::check_activation(activation_function);
  } catch (const Error& e) {
    throw Error(src + ": activation_function: " + e.what());
  }
}

json GPT2Config::to_json() const {
  json j = config_json::write_common(*this);
  gpt2_fields(*this, config_json::Writer{j});
  j["n_ctx"] = n_positions;
  return j;
}

std::optional<GPT2Config> GPT2Config::preset(const std::string& name) {
  if (name != "gpt2" && name != "gpt2-tiny") return std::nullopt;
  GPT2Config c;
  if (name == "gpt2-tiny") {
    c.n_layer = 2;
    c.n_embd = 128;
    c.n_head = 2;
    c.n_positions = 256;
  }
  c.architectures = {"GPT2LMHeadModel"};
  return c;
}

std::string GPT2Config::architecture_for(ModelTask task) const {
  if (task == ModelTask::CausalLM) return "GPT2LMHeadModel";
  if (task == ModelTask::SequenceClassification) return "GPT2ForSequenceClassification";
  return "";
}

void GPT2Config::adapt_to_tokenizer(const TokenizerIds& ids) {
  vocab_size = ids.vocab_size;
  // GPT2ForSequenceClassification finds each row's end by it; the collator pads with the same id.
  if (!pad_token_id) pad_token_id = ids.pad_id;
}

const ModelFamily& gpt2_family() {
  static const ModelFamily family{.model_types = {"gpt2"},
                                  .architectures = {"GPT2Model", "GPT2LMHeadModel", "GPT2ForSequenceClassification"},
                                  .aliases = {},
                                  .presets = {"gpt2", "gpt2-tiny"},
                                  .read_config = &read_config_as<GPT2Config>,
                                  .preset = &preset_as<GPT2Config>,
                                  .build = &build_as<GPT2ForTask, GPT2Config>};
  return family;
}

GPT2Block::GPT2Block(const GPT2Config& c, int64_t layer, const nn::Init& init, const std::shared_ptr<Generator>& gen)
    : c_(c), layer_(layer) {
  // HF scales the init of the residual projections by 1/sqrt(2·n_layer).
  nn::Init proj = init;
  proj.std = init.std / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  ln_1_ = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_epsilon, init.device));
  c_attn_ = register_module("attn.c_attn", std::make_shared<nn::Conv1D>(c.n_embd, 3 * c.n_embd, init));
  attn_proj_ = register_module("attn.c_proj", std::make_shared<nn::Conv1D>(c.n_embd, c.n_embd, proj));
  attn_dropout_ = register_module("attn.attn_dropout", std::make_shared<nn::Dropout>(c.attn_pdrop, gen));
  resid_dropout_ = register_module("attn.resid_dropout", std::make_shared<nn::Dropout>(c.resid_pdrop, gen));
  ln_2_ = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_epsilon, init.device));
  c_fc_ = register_module("mlp.c_fc", std::make_shared<nn::Conv1D>(c.n_embd, c.inner(), init));
  mlp_proj_ = register_module("mlp.c_proj", std::make_shared<nn::Conv1D>(c.inner(), c.n_embd, proj));
  mlp_dropout_ = register_module("mlp.dropout", std::make_shared<nn::Dropout>(c.resid_pdrop, gen));
}

Tensor GPT2Block::forward(const Tensor& x, const Tensor& causal, const RowMasks& rows) {
  const int64_t B = x.dim(0), T = x.dim(1), C = c_.n_embd, NH = c_.n_head, D = C / NH;
  Tensor qkv = c_attn_->forward(ln_1_->forward(x));  // [B,T,3C]
  auto heads = [&](int64_t i) { return permute(reshape(slice(qkv, 2, i * C, (i + 1) * C), {B, T, NH, D}), {0, 2, 1, 3}); };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  double scale = 1.0;
  if (c_.scale_attn_weights) scale /= std::sqrt(static_cast<double>(D));
  if (c_.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(layer_ + 1);
  Tensor attended = attend(q, k, v,  // [B,NH,T,D]
                           {.mask = rows.padding,
                            .scale = scale,
                            .causal = true,
                            .allowed = causal,
                            .segments = rows.segments,
                            .composite_mask = rows.composite()},
                           *attn_dropout_);
  Tensor ctx = reshape(permute(attended, {0, 2, 1, 3}), {B, T, C});
  Tensor h = x + resid_dropout_->forward(attn_proj_->forward(ctx));
  Tensor m = mlp_proj_->forward(nn::activation(c_.activation_function, c_fc_->forward(ln_2_->forward(h))));
  return h + mlp_dropout_->forward(m);
}

Tensor GPT2Block::decode(const Tensor& x, const Tensor& slots, const Tensor& mask, Tensor& k_cache, Tensor& v_cache) {
  const int64_t B = x.dim(0), T = x.dim(1), C = c_.n_embd, NH = c_.n_head, D = C / NH;
  Tensor qkv = c_attn_->forward(ln_1_->forward(x));  // [B,T,3C]
  auto heads = [&](int64_t i) { return permute(reshape(slice(qkv, 2, i * C, (i + 1) * C), {B, T, NH, D}), {0, 2, 1, 3}); };
  // Write the tokens' keys and values into their slots.
  Tensor k = with_slot(k_cache, slots, heads(1)), v = with_slot(v_cache, slots, heads(2));
  k_cache.assign(k);
  v_cache.assign(v);
  double scale = 1.0;
  if (c_.scale_attn_weights) scale /= std::sqrt(static_cast<double>(D));
  if (c_.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(layer_ + 1);
  Tensor probs = softmax(matmul(heads(0), k, false, true) * scale, -1, mask);  // [B,NH,T,L]
  Tensor ctx = reshape(permute(matmul(probs, v), {0, 2, 1, 3}), {B, T, C});
  Tensor h = x + attn_proj_->forward(ctx);
  return h + mlp_proj_->forward(nn::activation(c_.activation_function, c_fc_->forward(ln_2_->forward(h))));
}

GPT2ForTask::GPT2ForTask(std::string architecture, const GPT2Config& config, uint64_t seed, Device device)
    : CausalLM(config.clone()), architecture_(std::move(architecture)), gen_(std::make_shared<Generator>(seed)) {
  if (architecture_ == "GPT2Model") head_ = Head::None;
  else if (architecture_ == "GPT2LMHeadModel") head_ = Head::LM;
  else if (architecture_ == "GPT2ForSequenceClassification") head_ = Head::SequenceClassification;
  else throw Error("unsupported architecture '" + architecture_ + "'");
  auto& cfg = static_cast<GPT2Config&>(config_ref());
  if (cfg.architectures.empty()) cfg.architectures = {architecture_};
  else cfg.architectures[0] = architecture_;
  const GPT2Config& c = cfg;
  nn::Init init{gen_.get(), c.initializer_range, device};
  std::string p = head_ == Head::None ? "" : "transformer.";
  wte_ = register_module(p + "wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, init));
  wpe_ = register_module(p + "wpe", std::make_shared<nn::Embedding>(c.n_positions, c.n_embd, init));
  drop_ = register_module(p + "drop", std::make_shared<nn::Dropout>(c.embd_pdrop, gen_));
  for (int64_t i = 0; i < c.n_layer; ++i)
    h_.push_back(register_module(p + "h." + std::to_string(i), std::make_shared<GPT2Block>(c, i, init, gen_)));
  ln_f_ = register_module(p + "ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, c.layer_norm_epsilon, device));
  if (head_ == Head::SequenceClassification)
    score_ = register_module("score", std::make_shared<nn::Linear>(c.n_embd, c.num_labels(), init, false));
  nn::materialize(parameters());
}

Tensor GPT2ForTask::transformer(const ModelInputs& in) {
  const GPT2Config& c = gpt2_config();
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined() && ids.rank() == 2 && is_integral(ids.dtype()),
             "forward: input_ids must be an integer tensor [batch, seq]");
  const int64_t B = ids.dim(0), T = ids.dim(1);
  KILN_CHECK(T <= c.n_positions, "forward: sequence length ", T, " exceeds n_positions ", c.n_positions);
  KILN_CHECK(!in.attention_mask.defined() || in.attention_mask.shape() == ids.shape(), "forward: attention_mask ",
             to_string(in.attention_mask.shape()), " does not match input_ids ", to_string(ids.shape()));
  KILN_CHECK(!in.token_type_ids.defined() ||
                 (in.token_type_ids.shape() == ids.shape() && is_integral(in.token_type_ids.dtype())),
             "forward: token_type_ids ", to_string(in.token_type_ids.shape()), " must be integer ids like input_ids ",
             to_string(ids.shape()));
  Device dev = ids.device();
  Tensor pos = broadcast_to(reshape(arange(T, DType::i64, dev), {1, T}), {B, T});
  if (in.position_ids.defined()) {  // packed rows (models/packing.h): positions below n_positions, as T's
    check_position_ids(in.position_ids, ids);
    pos = cast(in.position_ids, DType::i64);
  }
  Tensor x = wte_->forward(ids) + wpe_->forward(pos);
  if (in.token_type_ids.defined()) x = x + wte_->forward(in.token_type_ids);  // as HF's GPT2Model: from wte
  x = drop_->forward(x);
  Tensor idx = arange(T, DType::i64, dev);
  Tensor causal = reshape(le(reshape(idx, {1, T}), reshape(idx, {T, 1})), {1, 1, T, T});  // key <= query
  Tensor padding;
  if (in.attention_mask.defined())
    padding = reshape((1.0 - cast(in.attention_mask, DType::f32)) * kMin, {B, 1, 1, T});
  const RowMasks rows = row_masks(in.position_ids, padding);
  for (auto& block : h_)
    x = run_layer(gradient_checkpointing_, *this, *gen_,
                  [block, causal, rows](const Tensor& h) { return block->forward(h, causal, rows); }, x);
  return ln_f_->forward(x);
}

std::vector<int64_t> GPT2ForTask::eos_token_ids() const {
  const auto& eos = gpt2_config().eos_token_id;
  return eos ? std::vector<int64_t>{*eos} : std::vector<int64_t>{};
}

CausalLM::CacheShape GPT2ForTask::cache_shape() const {
  const GPT2Config& c = gpt2_config();
  return {c.n_layer, c.n_head, c.n_embd / c.n_head};
}

Tensor GPT2ForTask::decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                                std::vector<Tensor>& v_cache, std::optional<int64_t> /*prefill_length*/,
                                const Tensor& last) {
  KILN_CHECK(k_cache.size() == h_.size() && v_cache.size() == h_.size(), "decode_step: one cache per layer expected");
  const int64_t L = k_cache[0].dim(2), T = token.dim(1);
  Device dev = token.device();
  Tensor positions = step_positions(pos, T);
  Tensor mask = reshape(where(visible_slots(positions, L), zeros({}, DType::f32, dev), full({}, kMin, DType::f32, dev)),
                        {1, 1, T, L});
  Tensor x = wte_->forward(token) + wpe_->forward(reshape(positions, {1, T}));
  for (size_t i = 0; i < h_.size(); ++i) x = h_[i]->decode(x, positions, mask, k_cache[i], v_cache[i]);
  return wte_->tied_logits(ln_f_->forward(token_at(x, last)));
}

ModelOutputs GPT2ForTask::forward(const ModelInputs& in) {
  const GPT2Config& c = gpt2_config();
  if (head_ == Head::None) check_accepts(in, {"input_ids", "attention_mask", "token_type_ids"});
  else if (head_ == Head::LM) check_accepts(in, {"input_ids", "attention_mask", "token_type_ids", "labels", "position_ids"});
  else check_accepts(in, {"input_ids", "attention_mask", "token_type_ids", "labels"});
  Tensor h = transformer(in);
  ModelOutputs out;
  switch (head_) {
    case Head::None:
      out.last_hidden_state = h;
      return out;
    case Head::LM: {
      out.logits = wte_->tied_logits(h);  // lm_head tied to wte
      if (in.labels.defined()) out.loss = causal_lm_loss(out.logits, in.labels, in.input_ids);
      return out;
    }
    case Head::SequenceClassification: {
      out.logits = last_token_logits(architecture_, score_->forward(h), in.input_ids, c.pad_token_id);
      if (in.labels.defined()) out.loss = sequence_classification_loss(c, out.logits, in.labels);
      return out;
    }
  }
  return out;
}

}  // namespace kiln::models
