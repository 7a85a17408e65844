#pragma once
// The BERT family as Hugging Face defines it (modeling_bert.py,
// modeling_roberta.py, modeling_distilbert.py): same parameter names and
// shapes, same math.
// B batch, T sequence, H hidden, NH heads, D = H / NH, V vocabulary.
#include <memory>

#include "kiln/models/model.h"

namespace kiln::models {

// Shared by every module of one model: weight initialiser and dropout stream.
struct BertContext {
  BertConfig config;
  std::shared_ptr<Generator> gen;
  nn::Init init;
};

class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertContext& ctx);
  // input_ids [B,T] -> [B,T,H]
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& position_ids);
  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertContext& ctx);
  // x [B,T,H], additive mask [B,1,1,T] (or undefined) -> [B,T,H]; with
  // first_only, the output of position 0 alone, [B,1,H]: its query attends
  // to every key, and nothing is computed for the other rows.
  Tensor forward(const Tensor& x, const Tensor& mask, bool first_only = false);

 private:
  BertConfig config_;
  std::shared_ptr<nn::Linear> query_, key_, value_, attn_out_, intermediate_, out_;
  std::shared_ptr<nn::LayerNorm> attn_norm_, out_norm_;
  std::shared_ptr<nn::Dropout> attn_probs_dropout_, attn_out_dropout_, out_dropout_;
};

// BertModel / RobertaModel: embeddings, encoder, optional pooler.
class BertBackbone : public nn::Module {
 public:
  BertBackbone(const BertContext& ctx, bool add_pooling_layer);
  struct Out {
    Tensor sequence, pooled;
  };
  // first_only: the caller reads position 0 of the last layer alone (a
  // sequence classifier), so the last layer computes only that row and
  // `sequence` is [B,1,H]. The same values and gradients; for bert-base
  // about 1/14 fewer FLOPs a step.
  Out forward(const ModelInputs& in, bool first_only = false);
  std::shared_ptr<BertEmbeddings> embeddings;
  std::vector<std::shared_ptr<BertLayer>> layers;
  std::shared_ptr<nn::Linear> pooler;
  bool gradient_checkpointing = false;

 private:
  BertConfig config_;
  std::shared_ptr<Generator> gen_;
};

// One class for every head: the architecture name picks the head.
class BertForTask : public PreTrainedModel {
 public:
  BertForTask(std::string architecture, const BertConfig& config, uint64_t seed, Device device);
  ModelOutputs forward(const ModelInputs& inputs) override;
  std::string architecture() const override { return architecture_; }
  std::string base_model_prefix() const override { return prefix_; }
  std::vector<std::string> head_prefixes() const override {
    return {"cls.", "lm_head.", "classifier", "qa_outputs", "pre_classifier.", "vocab_"};
  }
  // RoBERTa's and DistilBERT's tokenizers give none.
  bool tokenizer_gives_token_types() const override { return !roberta_ && !distil_; }
  BertBackbone& backbone() { return *backbone_; }
  Generator& dropout_generator() override { return *ctx_.gen; }
  void set_gradient_checkpointing(bool on) override { backbone_->gradient_checkpointing = on; }
  const BertConfig& bert_config() const { return static_cast<const BertConfig&>(config()); }

 private:
  ModelOutputs forward_choices(const ModelInputs& inputs);
  void build_distilbert_head();
  Tensor classifier_input(const BertBackbone::Out& h);
  enum class Head { None, SequenceClassification, TokenClassification, QuestionAnswering, MaskedLM, MultipleChoice };
  std::string architecture_, prefix_;
  Head head_;
  bool roberta_, distil_;
  BertContext ctx_;
  std::shared_ptr<BertBackbone> backbone_;
  std::shared_ptr<nn::Dropout> head_dropout_;
  std::shared_ptr<nn::Linear> classifier_, classifier_dense_, lm_transform_;
  std::shared_ptr<nn::LayerNorm> lm_norm_;
  Tensor lm_bias_;
};

}  // namespace kiln::models
