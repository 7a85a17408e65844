#pragma once
// GPT-2 as Hugging Face defines it (modeling_gpt2.py): Conv1D weights stored
// [in, out], pre-LayerNorm blocks, causal self-attention, tanh-form GELU,
// lm_head tied to wte (saved once, as HF saves it). B batch, T sequence,
// C = n_embd, NH heads, D = C / NH.
#include <memory>
#include <optional>

#include "kiln/models/model.h"
#include "kiln/models/packing.h"

namespace kiln::models {

struct GPT2Config : PretrainedConfig {
  GPT2Config() {
    model_type = "gpt2";
    id2label = {{0, "LABEL_0"}, {1, "LABEL_1"}};
  }
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  std::optional<int64_t> n_inner;  // default 4 * n_embd
  std::string activation_function = "gelu_new";
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  bool reorder_and_upcast_attn = false;
  std::optional<int64_t> bos_token_id = 50256, eos_token_id = 50256, pad_token_id;

  int64_t inner() const { return n_inner.value_or(4 * n_embd); }
  static GPT2Config from_json(const nlohmann::json& j, const std::string& source);
  // Presets: "gpt2" (GPT-2 small) and "gpt2-tiny" (2 layers, n_embd 128); nullopt for other names.
  static std::optional<GPT2Config> preset(const std::string& name);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<GPT2Config>(*this); }
  std::string class_prefix() const override { return "GPT2"; }
  std::vector<SizeTerm> size_terms() const override;
  std::optional<int64_t> max_positions() const override { return n_positions; }
  int64_t vocabulary_size() const override { return vocab_size; }
  std::optional<int64_t> batch_pad_id() const override { return pad_token_id; }
  std::string architecture_for(ModelTask task) const override;
  void adapt_to_tokenizer(const TokenizerIds& ids) override;
  void validate(const std::string& source) const;
};

class GPT2Block : public nn::Module {
 public:
  GPT2Block(const GPT2Config& c, int64_t layer, const nn::Init& init, const std::shared_ptr<Generator>& gen);
  // x [B,T,C]; causal [T,T] bool (key <= query); the padding and packed rows' masks
  Tensor forward(const Tensor& x, const Tensor& causal, const RowMasks& rows);
  // One decode step of T tokens against a key/value cache of fixed capacity
  // L: x [B,T,C]; slots (i64 [T]) are their positions; mask [1,1,T,L]
  // additive hides the slots after each. k_cache / v_cache [B,NH,L,D] are
  // updated in place.
  Tensor decode(const Tensor& x, const Tensor& slots, const Tensor& mask, Tensor& k_cache, Tensor& v_cache);

 private:
  GPT2Config c_;
  int64_t layer_;
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<nn::Conv1D> c_attn_, attn_proj_, c_fc_, mlp_proj_;
  std::shared_ptr<nn::Dropout> attn_dropout_, resid_dropout_, mlp_dropout_;
};

// GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification.
class GPT2ForTask : public CausalLM {
 public:
  GPT2ForTask(std::string architecture, const GPT2Config& config, uint64_t seed, Device device);
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return "transformer"; }
  std::vector<std::string> head_prefixes() const override { return {"lm_head.", "score."}; }
  Generator& dropout_generator() override { return *gen_; }
  void set_gradient_checkpointing(bool on) override { gradient_checkpointing_ = on; }
  const GPT2Config& gpt2_config() const { return static_cast<const GPT2Config&>(config()); }
  bool has_lm_head() const { return head_ == Head::LM; }
  bool can_generate() const override { return has_lm_head(); }
  int64_t vocab_size() const override { return gpt2_config().vocab_size; }
  std::vector<int64_t> eos_token_ids() const override;
  CacheShape cache_shape() const override;
  // Caches [B,NH,L,D] (learned positions: prefill_length changes nothing).
  Tensor decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                     std::vector<Tensor>& v_cache, std::optional<int64_t> prefill_length,
                     const Tensor& last) override;

 private:
  enum class Head { None, LM, SequenceClassification };
  // The transformer: [B,T] ids -> [B,T,C] after ln_f.
  Tensor transformer(const ModelInputs& in);
  std::string architecture_;
  Head head_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<GPT2Block>> h_;
  bool gradient_checkpointing_ = false;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> score_;
};

}  // namespace kiln::models
