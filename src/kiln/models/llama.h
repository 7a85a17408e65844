#pragma once
// Llama as Hugging Face defines it (modeling_llama.py): pre-RMSNorm decoder
// blocks, rotary position embeddings (rotate_half form, tables in float32,
// rope_scaling as rope.h), grouped-query attention (num_key_value_heads), a
// gated MLP (down(act(gate(x)) · up(x))), no biases unless the config asks,
// lm_head untied unless tie_word_embeddings. The families built from the same
// layers differ only where their config says (see LlamaConfig): Mistral,
// Qwen2, Qwen3, Gemma and Gemma 2. B batch, T sequence, C = hidden_size, NH
// query heads, KVH key/value heads, D = head_dim.
#include <memory>
#include <optional>
#include <vector>

#include "kiln/models/model.h"
#include "kiln/models/rope.h"

namespace kiln::models {

// LlamaConfig, and the configs of the models built the same way, each read
// and written under its own keys and defaults (`model_type` says which):
//   mistral  no biases, a sliding_window on every layer;
//   qwen2    biases on the query, key and value projections, an optional
//            sliding window (use_sliding_window) from layer max_window_layers;
//   qwen3    Qwen2 without those biases (attention_bias), RMSNorm over each
//            head of the queries and keys before the rotation (q_norm, k_norm);
//   gemma    embeddings times sqrt(hidden_size), RMSNorm weights stored as
//            w - 1 (the norm multiplies by 1 + w), gelu_pytorch_tanh, tied head;
//   gemma2   Gemma with norms after the attention and around the MLP,
//            scores scaled by query_pre_attn_scalar^-1/2 and tanh-capped
//            (attn_logit_softcapping), capped logits (final_logit_softcapping),
//            sliding-window attention on alternate layers (layer_types);
//   phi3     one qkv_proj and one gate_up_proj, dropout on the residual
//            branches (resid_pdrop), longrope scaling against the top-level
//            original_max_position_embeddings, sliding_window on every layer.
struct LlamaConfig : PretrainedConfig {
  LlamaConfig() { model_type = "llama"; }
  // The model types this config reads, comma-separated.
  static constexpr const char* kTypes = "llama, mistral, qwen2, qwen3, gemma, gemma2, phi3";
  static bool is_type(const std::string& model_type);
  // The defaults of each model type (HF's config class defaults).
  static LlamaConfig defaults(const std::string& model_type);
  // Tiny presets of each family's layout (kiln init): "llama-tiny" (Llama 2's), "llama3-tiny" (Llama 3.2's:
  // llama3 rope scaling, tied, explicit head_dim), "qwen3-tiny", "mistral-tiny"
  // (a 64-key window), "gemma-tiny", "gemma2-tiny", "phi3-tiny"; nullopt for other names.
  static std::optional<LlamaConfig> preset(const std::string& name);
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
  RopeScaling rope;  // rope_theta and rope_scaling (or rope_parameters)
  bool attention_bias = false;
  double attention_dropout = 0.0;
  bool mlp_bias = false;
  // Mistral (every layer), Qwen2 / Qwen3 (with use_sliding_window) and Gemma 2
  // (the layers layer_types marks "sliding_attention"): a query sees its own
  // and the sliding_window - 1 keys before it.
  std::optional<int64_t> sliding_window;
  bool use_sliding_window = false;  // Qwen2, Qwen3
  int64_t max_window_layers = 28;   // Qwen2, Qwen3
  // Qwen2, Qwen3, Gemma 2: "full_attention" or "sliding_attention" per layer;
  // empty: the model type's pattern (default_layer_types).
  std::vector<std::string> layer_types;
  // Gemma 2.
  int64_t query_pre_attn_scalar = 256;
  std::optional<double> attn_logit_softcapping, final_logit_softcapping;
  // Phi-3 (embd_pdrop is read and written; HF's Phi3Model applies no embedding dropout).
  double resid_pdrop = 0.0, embd_pdrop = 0.0;
  int64_t original_max_position_embeddings = 4096;

  // Biases of the attention's projections: attention_bias on all four, Qwen2's on query, key and value only.
  bool qkv_bias() const { return attention_bias || model_type == "qwen2"; }
  bool output_bias() const { return attention_bias; }
  bool gemma() const { return model_type == "gemma" || model_type == "gemma2"; }
  bool gemma2() const { return model_type == "gemma2"; }
  bool qk_norm() const { return model_type == "qwen3"; }
  bool phi3() const { return model_type == "phi3"; }
  // The layer types HF derives when the config gives none.
  std::vector<std::string> default_layer_types() const;
  // The window of layer i's attention, if it has one.
  std::optional<int64_t> layer_window(int64_t layer) const;
  // The attention scores' scale: head_dim^-1/2 (Gemma 2: query_pre_attn_scalar^-1/2).
  double attention_scale() const;

  int64_t kv_heads() const { return num_key_value_heads.value_or(num_attention_heads); }
  int64_t head_size() const { return head_dim.value_or(hidden_size / num_attention_heads); }
  static LlamaConfig from_json(const nlohmann::json& j, const std::string& source);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<LlamaConfig>(*this); }
  std::vector<SizeTerm> size_terms() const override;
  std::string class_prefix() const override;
  int64_t vocabulary_size() const override { return vocab_size; }
  std::optional<int64_t> batch_pad_id() const override { return pad_token_id; }
  std::string architecture_for(ModelTask task) const override;
  void adapt_to_tokenizer(const TokenizerIds& ids) override;
  std::vector<std::string> ignored_checkpoint_keys() const override;
  std::optional<std::pair<std::string, std::string>> tied_output_head() const override;
  void untie_output_head() override { tie_word_embeddings = false; }
  void validate(const std::string& source) const;
};

class LlamaDecoderLayer;
class DecoderNorm;

// <Prefix>Model, <Prefix>ForCausalLM, <Prefix>ForSequenceClassification for
// each model type of LlamaConfig.
class LlamaForTask : public CausalLM {
 public:
  LlamaForTask(std::string architecture, const LlamaConfig& config, uint64_t seed, Device device);
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return "model"; }
  std::vector<std::string> head_prefixes() const override { return {"lm_head.", "score."}; }
  Generator& dropout_generator() override { return *gen_; }
  void set_gradient_checkpointing(bool on) override { gradient_checkpointing_ = on; }
  const LlamaConfig& llama_config() const { return static_cast<const LlamaConfig&>(config()); }
  bool can_generate() const override { return head_ == Head::LM; }
  int64_t vocab_size() const override { return llama_config().vocab_size; }
  std::vector<int64_t> eos_token_ids() const override { return llama_config().eos_token_id; }
  CacheShape cache_shape() const override;
  // Caches [B,KVH,L,D], keys stored rotated.
  Tensor decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                     std::vector<Tensor>& v_cache, std::optional<int64_t> prefill_length,
                     const Tensor& last) override;
  // Phi-3 with longrope: original_max_position_embeddings.
  std::optional<int64_t> cache_recompute_position() const override;

 private:
  enum class Head { None, LM, SequenceClassification };
  // [B,T] ids -> [B,T,C] after the final norm.
  Tensor body(const ModelInputs& in);
  // Rotary tables [rows, D] for positions 0..rows-1 (see rotary_tables).
  struct Rotary {
    Tensor cos, sin;
    int64_t rows = 0;
    int64_t seq_len = -1;  // the frequencies' sequence length; 0: each row its own (decoding)
  };
  // The table covering `needed` positions, for a sequence of seq_len (0: decoding).
  const Rotary& rotary(Rotary& table, int64_t needed, int64_t seq_len);
  Tensor lm_logits(const Tensor& h) const;
  // Gemma 2's final_logit_softcapping on the head's logits.
  Tensor cap_logits(const Tensor& logits) const;
  std::string architecture_;
  Head head_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::Embedding> embed_tokens_;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers_;
  std::shared_ptr<DecoderNorm> norm_;
  std::shared_ptr<nn::Linear> lm_head_, score_;
  Rotary rotary_, decode_rotary_, prefill_rotary_;  // not parameters
  bool gradient_checkpointing_ = false;
};

}  // namespace kiln::models
