#pragma once
// Llama as Hugging Face defines it (modeling_llama.py): pre-RMSNorm decoder
// blocks, rotary position embeddings (rotate_half form, tables in float32),
// grouped-query attention (num_key_value_heads), a SwiGLU MLP
// (down(silu(gate(x)) · up(x))), no biases unless the config asks, lm_head
// untied unless tie_word_embeddings. B batch, T sequence, C = hidden_size,
// NH query heads, KVH key/value heads, D = head_dim.
#include <memory>
#include <optional>
#include <vector>

#include "kiln/models/model.h"

namespace kiln::models {

// LlamaConfig, and the configs of the models built the same way: Mistral
// (MistralConfig: no biases, a sliding_window) and Qwen2 (Qwen2Config: biases
// on the query, key and value projections, an optional sliding window). Each
// is read and written under its own keys and defaults; `model_type` says which.
struct LlamaConfig : PretrainedConfig {
  LlamaConfig() { model_type = "llama"; }
  // The defaults of model_type "llama", "mistral" or "qwen2".
  static LlamaConfig defaults(const std::string& model_type);
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  std::optional<int64_t> num_key_value_heads;  // default num_attention_heads
  std::optional<int64_t> head_dim;             // default hidden_size / num_attention_heads
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 2048;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id = 1;
  std::vector<int64_t> eos_token_id = {2};  // config.json: one id or a list (Llama 3)
  int64_t pretraining_tp = 1;  // HF splits its products that many ways: the same math
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  bool attention_bias = false;
  double attention_dropout = 0.0;
  bool mlp_bias = false;
  // Mistral (always) and Qwen2 (with use_sliding_window): a query sees the last
  // sliding_window keys. kiln builds no windowed attention: longer sequences are
  // an error, shorter ones are unaffected by the window.
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;  // Qwen2
  int64_t max_window_layers = 28;   // Qwen2

  // Biases of the attention's projections: Llama's attention_bias on all four,
  // Qwen2's on query, key and value only.
  bool qkv_bias() const { return attention_bias || model_type == "qwen2"; }
  bool output_bias() const { return attention_bias; }
  // The window that limits the sequence length, if any.
  std::optional<int64_t> window() const {
    return model_type == "mistral" || use_sliding_window ? sliding_window : std::nullopt;
  }

  int64_t kv_heads() const { return num_key_value_heads.value_or(num_attention_heads); }
  int64_t head_size() const { return head_dim.value_or(hidden_size / num_attention_heads); }
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& source);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<LlamaConfig>(*this); }
  std::vector<SizeTerm> size_terms() const override;
  std::string class_prefix() const override {
    return model_type == "mistral" ? "Mistral" : model_type == "qwen2" ? "Qwen2" : "Llama";
  }
  void validate(const std::string& source) const;
};

class LlamaDecoderLayer;

// <Prefix>Model, <Prefix>ForCausalLM, <Prefix>ForSequenceClassification for
// Llama, Mistral and Qwen2.
class LlamaForTask : public CausalLM {
 public:
  LlamaForTask(std::string architecture, const LlamaConfig& config, uint64_t seed, Device device);
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return "model"; }
  Generator& dropout_generator() override { return *gen_; }
  void set_gradient_checkpointing(bool on) override { gradient_checkpointing_ = on; }
  const LlamaConfig& llama_config() const { return static_cast<const LlamaConfig&>(config()); }
  bool can_generate() const override { return head_ == Head::LM; }
  int64_t vocab_size() const override { return llama_config().vocab_size; }
  std::vector<int64_t> eos_token_ids() const override { return llama_config().eos_token_id; }
  CacheShape cache_shape() const override;
  // Caches [B,KVH,L,D], keys stored rotated.
  Tensor decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                     std::vector<Tensor>& v_cache) override;

 private:
  enum class Head { None, LM, SequenceClassification };
  // [B,T] ids -> [B,T,C] after the final norm.
  Tensor body(const ModelInputs& in);
  // The rotary tables ([rows, D] cos and sin) cover positions 0..needed-1.
  void ensure_rotary(int64_t needed);
  // An error when `positions` exceed the config's sliding window.
  void check_window(int64_t positions) const;
  const Tensor& lm_weight() const;
  std::string architecture_;
  Head head_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::Embedding> embed_tokens_;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers_;
  std::shared_ptr<nn::RMSNorm> norm_;
  std::shared_ptr<nn::Linear> lm_head_, score_;
  Tensor cos_, sin_;  // [rows, D], not parameters
  int64_t rotary_rows_ = 0;
  bool gradient_checkpointing_ = false;
};

}  // namespace kiln::models
