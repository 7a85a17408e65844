#pragma once
// T5 as Hugging Face defines it (modeling_t5.py): RMS layer norm without
// bias, no 1/sqrt(d) attention scaling, relative position buckets computed in
// each stack's first layer and shared by its layers (bidirectional in the
// encoder, causal in the decoder), ReLU or gated-GELU feed-forward, decoder
// inputs made by shifting labels right. B batch, S source, T target length,
// C = d_model, NH heads, D = d_kv.
#include <memory>
#include <optional>
#include <vector>

#include "kiln/models/model.h"

namespace kiln::models {

struct T5Config : PretrainedConfig {
  T5Config() { model_type = "t5"; }
  int64_t vocab_size = 32128;
  int64_t d_model = 512, d_kv = 64, d_ff = 2048;
  int64_t num_layers = 6;
  std::optional<int64_t> num_decoder_layers;  // default num_layers
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32, relative_attention_max_distance = 128;
  double dropout_rate = 0.1, layer_norm_epsilon = 1e-6, initializer_factor = 1.0;
  std::string feed_forward_proj = "relu";  // "relu", "gated-gelu", "gated-relu", "gelu"
  bool tie_word_embeddings = true;
  // transformers 5's name for what tie_word_embeddings meant to T5 before:
  // whether the decoder's output is scaled by d_model^-0.5 before the head
  // (original T5 yes, v1.1 no). Unset: as tie_word_embeddings.
  std::optional<bool> scale_decoder_outputs;
  int64_t pad_token_id = 0, eos_token_id = 1, decoder_start_token_id = 0;

  bool scales_decoder_outputs() const { return scale_decoder_outputs.value_or(tie_word_embeddings); }

  int64_t decoder_layers() const { return num_decoder_layers.value_or(num_layers); }
  bool gated() const { return feed_forward_proj.rfind("gated-", 0) == 0; }
  std::string act() const;  // the activation inside the feed-forward
  static T5Config from_json(const nlohmann::json& j, const std::string& source);
  // Presets: "t5-small", "t5-tiny" (2 layers, d_model 64) and "t5-v1_1-tiny" (the
  // same in T5 v1.1's form: gated-gelu, untied lm_head); nullopt for other names.
  static std::optional<T5Config> preset(const std::string& name);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<T5Config>(*this); }
  std::vector<SizeTerm> size_terms() const override;
  std::string class_prefix() const override { return "T5"; }
  int64_t vocabulary_size() const override { return vocab_size; }
  bool is_encoder_decoder() const override { return true; }
  std::string architecture_for(ModelTask task) const override {
    return task == ModelTask::Seq2SeqLM ? "T5ForConditionalGeneration" : "";
  }
  void adapt_to_tokenizer(const TokenizerIds& ids) override;
  std::vector<std::string> ignored_checkpoint_keys() const override;
  std::optional<std::pair<std::string, std::string>> tied_output_head() const override;
  void untie_output_head() override { tie_word_embeddings = false; }
  void validate(const std::string& source) const;
};

// HF's _relative_position_bucket for one (query, key) offset.
int64_t t5_relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                    int64_t max_distance);

class T5Stack;

// The decoder's state while generating (T5ForTask::start_decoding). L is the
// capacity: decoder position t writes its self-attention key and value into
// slot t and attends to slots 0..t; the cross-attention keys and values are
// projected from the encoder output once. S source length.
struct T5DecoderCache {
  std::vector<Tensor> self_k, self_v;    // per decoder layer [B,NH,L,D], updated in place
  std::vector<Tensor> cross_k, cross_v;  // per decoder layer [B,NH,S,D]
  Tensor cross_bias;                     // [B or 1,1,1,S] additive encoder padding mask
  Tensor buckets;                        // [L,L] i64: the decoder's relative position buckets for L positions
  int64_t capacity() const { return self_k.empty() ? 0 : self_k[0].dim(2); }
};

// T5ForConditionalGeneration and T5EncoderModel.
class T5ForTask : public PreTrainedModel {
 public:
  T5ForTask(std::string architecture, const T5Config& config, uint64_t seed, Device device);
  ~T5ForTask() override;
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return "transformer"; }
  // T5EncoderModel: a T5ForConditionalGeneration checkpoint's decoder is another head's.
  std::vector<std::string> head_prefixes() const override {
    if (encoder_only_) return {"lm_head.", "decoder."};
    return {"lm_head."};
  }
  Generator& dropout_generator() override { return *gen_; }
  void set_gradient_checkpointing(bool on) override;
  const T5Config& t5_config() const { return static_cast<const T5Config&>(config()); }
  bool can_generate() const override { return !encoder_only_; }

  // The pieces forward() is made of, for generation. encode: ids [B,S] and
  // their 0/1 mask (or undefined) -> encoder output [B,S,C].
  Tensor encode(const Tensor& input_ids, const Tensor& attention_mask);
  // The decoder and the LM head: decoder ids [B,T] -> logits [B,T,V].
  Tensor decode(const Tensor& decoder_input_ids, const Tensor& decoder_attention_mask, const Tensor& encoder_hidden,
                const Tensor& attention_mask);
  // Cross-attention keys/values from the encoder output, empty self-attention
  // caches of `capacity` decoder positions.
  T5DecoderCache start_decoding(const Tensor& encoder_hidden, const Tensor& attention_mask, int64_t capacity);
  // Logits [B,1,V] of decoder position `pos` (i64 scalar, a graph input) fed
  // `token` [B,1], given the positions before it in the cache: row pos of what
  // decode() gives for the whole decoder input. Writes slot pos of the cache.
  Tensor decode_step(const Tensor& token, const Tensor& pos, T5DecoderCache& cache);

 private:
  Tensor lm_logits(const Tensor& decoder_hidden) const;
  std::string architecture_;
  bool encoder_only_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::Embedding> shared_;
  std::shared_ptr<T5Stack> encoder_, decoder_;
  std::shared_ptr<nn::Linear> lm_head_;
};

}  // namespace kiln::models
