#pragma once
// DeBERTa-v2 and DeBERTa-v3 (model_type "deberta-v2") as Hugging Face defines
// them (modeling_deberta_v2.py, configuration_deberta_v2.py): the same
// parameter names and shapes, the same math. Disentangled attention adds to
// the content scores q·kᵀ a content-to-position term (queries against
// projected relative-position embeddings, "c2p") and a position-to-content
// term (keys against them, "p2c"), each read at the relative distance of
// every query/key pair (log buckets past position_buckets / 2).
// B batch, T sequence, H hidden, NH heads, D = H / NH, S attention span.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/models/model.h"

namespace kiln::models {

struct DebertaV2Config : PretrainedConfig, EncoderConfig {
  // DebertaV2Config's defaults (deberta-v2-xlarge); v3 checkpoints set the
  // relative-attention fields.
  DebertaV2Config() {
    model_type = "deberta-v2";
    vocab_size = 128100;
    hidden_size = 1536;
    num_hidden_layers = 24;
    num_attention_heads = 24;
    intermediate_size = 6144;
    type_vocab_size = 0;  // 0: no token type embeddings
    layer_norm_eps = 1e-7;
  }
  bool relative_attention = false;
  int64_t max_relative_positions = -1;  // < 1: max_position_embeddings
  int64_t position_buckets = -1;        // <= 0: no buckets, distances clamp at max_relative_positions
  std::optional<int64_t> pad_token_id = 0;
  bool position_biased_input = true;   // absolute position embeddings added to the input
  std::vector<std::string> pos_att_type;  // "c2p", "p2c"
  bool share_att_key = false;            // positions projected by query_proj/key_proj, not their own
  std::string norm_rel_ebd = "none";     // "layer_norm": the encoder's LayerNorm on the relative embeddings
  double pooler_dropout = 0.0;
  std::string pooler_hidden_act = "gelu";
  std::optional<double> cls_dropout;     // the sequence classifier's dropout (else hidden_dropout_prob)

  static DebertaV2Config from_json(const nlohmann::json& j, const std::string& source);
  // "deberta-v3-tiny" (microsoft/deberta-v3-base's layout, 2 layers, hidden 128),
  // "deberta-v3-base"; nullopt for other names.
  static std::optional<DebertaV2Config> preset(const std::string& name);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<DebertaV2Config>(*this); }
  std::string class_prefix() const override { return "DebertaV2"; }
  std::optional<int64_t> max_positions() const override {
    return position_biased_input ? std::optional<int64_t>(max_position_embeddings) : std::nullopt;
  }
  std::vector<SizeTerm> size_terms() const override;
  int64_t vocabulary_size() const override { return vocab_size; }
  std::string architecture_for(ModelTask task) const override;
  void adapt_to_tokenizer(const TokenizerIds& ids) override;
  std::vector<std::string> ignored_checkpoint_keys() const override;
  void validate(const std::string& source) const;

  bool c2p() const;
  bool p2c() const;
  // The relative distances the embeddings cover each side: S.
  int64_t attention_span() const;
};

struct DebertaContext {
  DebertaV2Config config;
  std::shared_ptr<Generator> gen;
  nn::Init init;
};

class DebertaV2Layer : public nn::Module {
 public:
  explicit DebertaV2Layer(const DebertaContext& ctx);
  // x [B,T,H]; mask additive [B,1,T,T]; rel [2S,H] (normalised relative
  // embeddings, or undefined without relative attention); c2p_index and
  // p2c_index [T,T] i64 -> [B,T,H]
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& rel, const Tensor& c2p_index,
                 const Tensor& p2c_index);

 private:
  Tensor relative_scores(const Tensor& q, const Tensor& k, const Tensor& rel, const Tensor& c2p_index,
                         const Tensor& p2c_index, double scale);
  DebertaV2Config config_;
  std::shared_ptr<nn::Linear> query_, key_, value_, pos_key_, pos_query_, attn_out_, intermediate_, out_;
  std::shared_ptr<nn::LayerNorm> attn_norm_, out_norm_;
  std::shared_ptr<nn::Dropout> pos_dropout_, attn_probs_dropout_, attn_out_dropout_, out_dropout_;
};

// DebertaV2Model: embeddings and the encoder (layers, relative embeddings).
class DebertaV2Backbone : public nn::Module {
 public:
  explicit DebertaV2Backbone(const DebertaContext& ctx);
  Tensor forward(const ModelInputs& in);  // -> [B,T,H]
  bool gradient_checkpointing = false;

 private:
  Tensor embed(const ModelInputs& in, const Tensor& mask01);
  DebertaV2Config config_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<nn::Embedding> word_embeddings_, position_embeddings_, token_type_embeddings_, rel_embeddings_;
  std::shared_ptr<nn::LayerNorm> emb_norm_, rel_norm_;
  std::shared_ptr<nn::Dropout> emb_dropout_;
  std::vector<std::shared_ptr<DebertaV2Layer>> layers_;
};

// DebertaV2Model, DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification.
class DebertaV2ForTask : public PreTrainedModel {
 public:
  DebertaV2ForTask(std::string architecture, const DebertaV2Config& config, uint64_t seed, Device device);
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return "deberta"; }
  // (lm_predictions. and mask_predictions.: DeBERTa-v3's pre-training heads, in deberta-v3-base.)
  std::vector<std::string> head_prefixes() const override {
    return {"cls.", "classifier", "qa_outputs", "lm_predictions.", "mask_predictions."};
  }
  bool tokenizer_gives_token_types() const override {
    return static_cast<const DebertaV2Config&>(config()).type_vocab_size > 0;
  }
  Generator& dropout_generator() override { return *ctx_.gen; }
  void set_gradient_checkpointing(bool on) override { backbone_->gradient_checkpointing = on; }

 private:
  Tensor sequence_loss(const Tensor& logits, const Tensor& labels) const;
  enum class Head { None, SequenceClassification, TokenClassification };
  std::string architecture_;
  Head head_;
  DebertaContext ctx_;
  std::shared_ptr<DebertaV2Backbone> backbone_;
  std::shared_ptr<nn::Linear> pooler_, classifier_;
  std::shared_ptr<nn::Dropout> pooler_dropout_, head_dropout_;
};

// HF's relative distance of query i to key j (i - j), in log buckets when
// bucket_size > 0: [T*T] row-major, as make_log_bucket_position computes it
// (in float32, as torch does).
std::vector<int64_t> deberta_relative_positions(int64_t T, int64_t bucket_size, int64_t max_position);

}  // namespace kiln::models
