#include "kiln/models/bert.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/models/attention.h"
#include "kiln/models/registry.h"

namespace kiln::models {

namespace {
BertContext make_context(const BertConfig& c, uint64_t seed, Device device) {
  auto gen = std::make_shared<Generator>(seed);
  return BertContext{c, gen, nn::Init{gen.get(), c.initializer_range, device}};
}
}  // namespace

BertEmbeddings::BertEmbeddings(const BertContext& ctx) {
  const auto& c = ctx.config;
  bool roberta = c.model_type == "roberta";
  // HF zeroes the padding row of the word embeddings (and RoBERTa's position padding row).
  word_embeddings = register_module("word_embeddings",
                                    std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, ctx.init, c.pad_token_id));
  position_embeddings = register_module(
      "position_embeddings", std::make_shared<nn::Embedding>(c.max_position_embeddings, c.hidden_size, ctx.init,
                                                             roberta ? c.pad_token_id : -1));
  if (!c.distilbert())  // DistilBERT has no token types
    token_type_embeddings = register_module(
        "token_type_embeddings", std::make_shared<nn::Embedding>(c.type_vocab_size, c.hidden_size, ctx.init));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps, ctx.init.device));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, ctx.gen));
}

Tensor BertEmbeddings::forward(const Tensor& ids, const Tensor& token_types, const Tensor& positions) {
  Tensor x = word_embeddings->forward(ids) + position_embeddings->forward(positions);
  if (token_type_embeddings) x = x + token_type_embeddings->forward(token_types);
  return dropout->forward(LayerNorm->forward(x));
}

BertLayer::BertLayer(const BertContext& ctx) : config_(ctx.config) {
  const auto& c = ctx.config;
  auto lin = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, std::make_shared<nn::Linear>(in, out, ctx.init));
  };
  auto norm = [&](const char* name) {
    return register_module(name, std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps, ctx.init.device));
  };
  auto drop = [&](const char* name, double p) { return register_module(name, std::make_shared<nn::Dropout>(p, ctx.gen)); };
  // DistilBERT's TransformerBlock is BERT's layer under other names, without
  // a dropout after the attention's output projection.
  const bool d = c.distilbert();
  query_ = lin(d ? "attention.q_lin" : "attention.self.query", c.hidden_size, c.hidden_size);
  key_ = lin(d ? "attention.k_lin" : "attention.self.key", c.hidden_size, c.hidden_size);
  value_ = lin(d ? "attention.v_lin" : "attention.self.value", c.hidden_size, c.hidden_size);
  attn_probs_dropout_ = drop(d ? "attention.dropout" : "attention.self.dropout", c.attention_probs_dropout_prob);
  attn_out_ = lin(d ? "attention.out_lin" : "attention.output.dense", c.hidden_size, c.hidden_size);
  attn_norm_ = norm(d ? "sa_layer_norm" : "attention.output.LayerNorm");
  attn_out_dropout_ = drop("attention.output.dropout", d ? 0.0 : c.hidden_dropout_prob);
  intermediate_ = lin(d ? "ffn.lin1" : "intermediate.dense", c.hidden_size, c.intermediate_size);
  out_ = lin(d ? "ffn.lin2" : "output.dense", c.intermediate_size, c.hidden_size);
  out_norm_ = norm(d ? "output_layer_norm" : "output.LayerNorm");
  out_dropout_ = drop(d ? "ffn.dropout" : "output.dropout", c.hidden_dropout_prob);
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask, bool first_only) {
  const int64_t B = x.dim(0), T = x.dim(1), H = config_.hidden_size, NH = config_.num_attention_heads,
                D = config_.head_dim();
  // The rows whose outputs are wanted: all, or position 0.
  const Tensor xq = first_only ? slice(x, 1, 0, 1) : x;
  const int64_t Tq = xq.dim(1);
  // [B,t,H] -> [B,NH,t,D]
  auto heads = [&](const Tensor& t, int64_t rows) { return permute(reshape(t, {B, rows, NH, D}), {0, 2, 1, 3}); };
  Tensor q = heads(query_->forward(xq), Tq), k = heads(key_->forward(x), T), v = heads(value_->forward(x), T);
  // scores = q kᵀ / √D + mask -> softmax over keys
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor attended = attend(q, k, v, {.mask = mask, .scale = scale}, *attn_probs_dropout_);  // [B,NH,t,D]
  Tensor context = reshape(permute(attended, {0, 2, 1, 3}), {B, Tq, H});
  Tensor attn = attn_norm_->forward(attn_out_dropout_->forward(attn_out_->forward(context)) + xq);
  Tensor inter = nn::activation(config_.hidden_act, intermediate_->forward(attn));
  return out_norm_->forward(out_dropout_->forward(out_->forward(inter)) + attn);
}

BertBackbone::BertBackbone(const BertContext& ctx, bool add_pooling_layer) : config_(ctx.config), gen_(ctx.gen) {
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(ctx));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    layers.push_back(register_module((config_.distilbert() ? "transformer.layer." : "encoder.layer.") + std::to_string(i),
                                     std::make_shared<BertLayer>(ctx)));
  if (add_pooling_layer)
    pooler = register_module("pooler.dense", std::make_shared<nn::Linear>(config_.hidden_size, config_.hidden_size, ctx.init));
}

BertBackbone::Out BertBackbone::forward(const ModelInputs& in, bool first_only) {
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined(), "forward: input_ids is required");
  KILN_CHECK(ids.rank() == 2 && is_integral(ids.dtype()), "forward: input_ids must be an integer tensor [batch, seq], got ",
             dtype_name(ids.dtype()), to_string(ids.shape()));
  const int64_t B = ids.dim(0), T = ids.dim(1);
  Device dev = ids.device();
  bool roberta = config_.model_type == "roberta";
  const int64_t max_pos = *config_.max_positions();
  KILN_CHECK(T <= max_pos, "forward: sequence length ", T, " exceeds the model's ", max_pos, " positions");
  auto check_like_ids = [&](const Tensor& t, const char* name) {
    KILN_CHECK(!t.defined() || t.shape() == ids.shape(), "forward: ", name, " ", to_string(t.shape()),
               " does not match input_ids ", to_string(ids.shape()));
  };
  check_like_ids(in.attention_mask, "attention_mask");
  check_like_ids(in.token_type_ids, "token_type_ids");

  Tensor positions;
  if (roberta) {
    // RoBERTa: positions count non-padding tokens from padding_idx + 1; padding gets padding_idx.
    Tensor not_pad = cast(ne(ids, full({}, static_cast<double>(config_.pad_token_id), ids.dtype(), dev)), DType::f32);
    Tensor idx = arange(T, DType::i64, dev);
    Tensor upper = cast(le(reshape(idx, {T, 1}), reshape(idx, {1, T})), DType::f32);  // [T,T], j >= i
    Tensor cumsum = matmul(not_pad, upper);                                           // [B,T]
    positions = cast(cumsum * not_pad, DType::i64) + config_.pad_token_id;
  } else {
    positions = broadcast_to(reshape(arange(T, DType::i64, dev), {1, T}), {B, T});
  }
  Tensor types = in.token_type_ids.defined() ? in.token_type_ids : zeros({B, T}, DType::i64, dev);
  Tensor x = embeddings->forward(ids, types, positions);

  Tensor mask;
  if (in.attention_mask.defined()) {
    // (1 - mask) · finfo(float32).min, broadcast over heads and queries: [B,1,1,T]
    Tensor m = cast(in.attention_mask, DType::f32);
    mask = reshape((1.0 - m) * static_cast<double>(std::numeric_limits<float>::lowest()), {B, 1, 1, T});
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool first = first_only && i + 1 == layers.size();
    x = run_layer(gradient_checkpointing, *this, *gen_,
                  [layer = layers[i], mask, first](const Tensor& h) { return layer->forward(h, mask, first); }, x);
  }
  Out out{x, {}};
  if (pooler) out.pooled = tanh(pooler->forward(squeeze(slice(x, 1, 0, 1), 1)));
  return out;
}

BertForTask::BertForTask(std::string architecture, const BertConfig& config, uint64_t seed, Device device)
    : PreTrainedModel(config.clone()), architecture_(std::move(architecture)), ctx_(make_context(config, seed, device)) {
  const std::string& a = architecture_;
  roberta_ = a.rfind("Roberta", 0) == 0;
  distil_ = a.rfind("DistilBert", 0) == 0;
  KILN_CHECK(a.rfind(config.class_prefix(), 0) == 0 && roberta_ == (config.model_type == "roberta") &&
                 distil_ == config.distilbert(),
             "architecture ", a, " does not match model_type '", config.model_type, "'");
  std::string kind = a.substr(config.class_prefix().size());  // after "Bert" / "Roberta" / "DistilBert"
  if (kind == "Model") head_ = Head::None;
  else if (kind == "ForSequenceClassification") head_ = Head::SequenceClassification;
  else if (kind == "ForTokenClassification") head_ = Head::TokenClassification;
  else if (kind == "ForQuestionAnswering") head_ = Head::QuestionAnswering;
  else if (kind == "ForMaskedLM") head_ = Head::MaskedLM;
  else if (kind == "ForMultipleChoice") head_ = Head::MultipleChoice;
  else throw Error("unsupported architecture '" + a + "'");
  auto& archs = config_ref().architectures;
  if (archs.empty()) archs = {a};
  else archs[0] = a;

  prefix_ = roberta_ ? "roberta" : distil_ ? "distilbert" : "bert";
  // RobertaForMultipleChoice keeps RobertaModel's pooler too; DistilBERT has none.
  bool pooling = !distil_ && ((!roberta_ && (head_ == Head::None || head_ == Head::SequenceClassification)) ||
                              head_ == Head::MultipleChoice);
  // BertModel's own parameters have no prefix.
  auto backbone = std::make_shared<BertBackbone>(ctx_, pooling);
  backbone_ = head_ == Head::None ? register_module("", backbone) : register_module(prefix_, backbone);
  const BertConfig& c = bert_config();
  const nn::Init& init = ctx_.init;
  double drop = c.classifier_dropout.value_or(c.hidden_dropout_prob);
  if (distil_) {
    build_distilbert_head();
    nn::materialize(parameters());
    return;
  }
  switch (head_) {
    case Head::None: break;
    case Head::SequenceClassification:
      head_dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(drop, ctx_.gen));
      if (roberta_) {
        classifier_dense_ = register_module("classifier.dense", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
        classifier_ = register_module("classifier.out_proj", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init));
      } else {
        classifier_ = register_module("classifier", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init));
      }
      break;
    case Head::TokenClassification:
      head_dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(drop, ctx_.gen));
      classifier_ = register_module("classifier", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init));
      break;
    case Head::QuestionAnswering:
      classifier_ = register_module("qa_outputs", std::make_shared<nn::Linear>(c.hidden_size, 2, init));
      break;
    case Head::MultipleChoice:  // one score per choice; RoBERTa's dropout ignores classifier_dropout
      head_dropout_ = register_module(
          "dropout", std::make_shared<nn::Dropout>(roberta_ ? c.hidden_dropout_prob : drop, ctx_.gen));
      classifier_ = register_module("classifier", std::make_shared<nn::Linear>(c.hidden_size, 1, init));
      break;
    case Head::MaskedLM:
      // The decoder's weight is the word embedding matrix (tied, as HF ties and saves it).
      if (roberta_) {
        lm_transform_ = register_module("lm_head.dense", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
        lm_norm_ = register_module("lm_head.layer_norm", std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps, init.device));
        lm_bias_ = register_parameter("lm_head.bias", zeros({c.vocab_size}, DType::f32, init.device));
      } else {
        lm_transform_ = register_module("cls.predictions.transform.dense",
                                        std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
        lm_norm_ = register_module("cls.predictions.transform.LayerNorm",
                                   std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps, init.device));
        lm_bias_ = register_parameter("cls.predictions.bias", zeros({c.vocab_size}, DType::f32, init.device));
      }
      break;
  }
  nn::materialize(parameters());
}

// DistilBERT's heads (modeling_distilbert.py): sequence classification and
// multiple choice read position 0 through pre_classifier, ReLU and dropout
// (seq_classif_dropout); question answering has a dropout (qa_dropout);
// the masked LM's vocab_projector is tied to the word embeddings.
void BertForTask::build_distilbert_head() {
  const BertConfig& c = bert_config();
  const nn::Init& init = ctx_.init;
  auto dropout = [&](double p) { return register_module("dropout", std::make_shared<nn::Dropout>(p, ctx_.gen)); };
  auto pre_classifier = [&] {
    classifier_dense_ = register_module("pre_classifier", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
  };
  switch (head_) {
    case Head::None: break;
    case Head::SequenceClassification:
    case Head::MultipleChoice:
      pre_classifier();
      classifier_ = register_module(
          "classifier", std::make_shared<nn::Linear>(c.hidden_size, head_ == Head::MultipleChoice ? 1 : c.num_labels(), init));
      head_dropout_ = dropout(c.seq_classif_dropout);
      break;
    case Head::TokenClassification:
      head_dropout_ = dropout(c.hidden_dropout_prob);
      classifier_ = register_module("classifier", std::make_shared<nn::Linear>(c.hidden_size, c.num_labels(), init));
      break;
    case Head::QuestionAnswering:
      classifier_ = register_module("qa_outputs", std::make_shared<nn::Linear>(c.hidden_size, 2, init));
      head_dropout_ = dropout(c.qa_dropout);
      break;
    case Head::MaskedLM:
      lm_transform_ = register_module("vocab_transform", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, init));
      lm_norm_ = register_module("vocab_layer_norm", std::make_shared<nn::LayerNorm>(c.hidden_size, 1e-12, init.device));
      lm_bias_ = register_parameter("vocab_projector.bias", zeros({c.vocab_size}, DType::f32, init.device));
      break;
  }
}

// The classifier input of a sequence: BERT's pooled output, RoBERTa's
// classification head before out_proj, DistilBERT's pre_classifier + ReLU.
Tensor BertForTask::classifier_input(const BertBackbone::Out& h) {
  if (!roberta_ && !distil_) return head_dropout_->forward(h.pooled);
  Tensor first = squeeze(slice(h.sequence, 1, 0, 1), 1);
  if (distil_) return head_dropout_->forward(relu(classifier_dense_->forward(first)));
  // RobertaClassificationHead: token 0 -> dropout -> dense -> tanh -> dropout -> out_proj
  Tensor z = tanh(classifier_dense_->forward(head_dropout_->forward(first)));
  return head_dropout_->forward(z);
}

// *ForMultipleChoice: [B, C, T] inputs read as B * C rows; each row's pooled
// output scores its choice, and the C scores of a question are its logits.
ModelOutputs BertForTask::forward_choices(const ModelInputs& in) {
  const Tensor& ids = in.input_ids;
  KILN_CHECK(ids.defined() && ids.rank() == 3, architecture_, ": input_ids must be [batch, choices, seq], got ",
             ids.defined() ? to_string(ids.shape()) : std::string("none"));
  const int64_t B = ids.dim(0), C = ids.dim(1), T = ids.dim(2);
  ModelInputs flat;
  auto rows = [&](const Tensor& t, const char* name) {
    if (!t.defined()) return t;
    KILN_CHECK(t.shape() == ids.shape(), architecture_, ": ", name, " ", to_string(t.shape()),
               " does not match input_ids ", to_string(ids.shape()));
    return reshape(t, {B * C, T});
  };
  flat.input_ids = rows(ids, "input_ids");
  flat.attention_mask = rows(in.attention_mask, "attention_mask");
  flat.token_type_ids = rows(in.token_type_ids, "token_type_ids");
  BertBackbone::Out h = backbone_->forward(flat, true);
  ModelOutputs out;
  Tensor pooled = distil_ ? classifier_input(h) : head_dropout_->forward(h.pooled);
  out.logits = reshape(classifier_->forward(pooled), {B, C});
  if (in.labels.defined()) {
    KILN_CHECK(in.labels.shape() == Shape{B}, architecture_, ": labels must be [batch] (the right choice of each), got ",
               to_string(in.labels.shape()));
    out.loss = cross_entropy(out.logits, in.labels);
  }
  return out;
}

ModelOutputs BertForTask::forward(const ModelInputs& in) {
  std::vector<std::string_view> takes = {"input_ids", "attention_mask"};
  if (!distil_) takes.push_back("token_type_ids");  // DistilBERT's forward has no token_type_ids
  if (head_ == Head::QuestionAnswering) takes.insert(takes.end(), {"start_positions", "end_positions"});
  else if (head_ != Head::None) takes.push_back("labels");
  check_accepts(in, takes);
  if (head_ == Head::MultipleChoice) return forward_choices(in);
  // A sequence classifier reads position 0 of the last layer only.
  BertBackbone::Out h = backbone_->forward(in, head_ == Head::SequenceClassification);
  ModelOutputs out;
  const Tensor& labels = in.labels;
  switch (head_) {
    case Head::None:
      out.last_hidden_state = h.sequence;
      out.pooler_output = h.pooled;
      return out;
    case Head::SequenceClassification: {
      out.logits = classifier_->forward(classifier_input(h));
      if (labels.defined()) out.loss = sequence_classification_loss(config(), out.logits, labels);
      return out;
    }
    case Head::TokenClassification: {
      out.logits = classifier_->forward(head_dropout_->forward(h.sequence));
      if (labels.defined()) {
        int64_t C = bert_config().num_labels();
        out.loss = cross_entropy(reshape(out.logits, {-1, C}), reshape(labels, {-1}));
      }
      return out;
    }
    case Head::QuestionAnswering: {
      Tensor seq = head_dropout_ ? head_dropout_->forward(h.sequence) : h.sequence;  // DistilBERT's qa_dropout
      Tensor logits = classifier_->forward(seq);  // [B,T,2]
      out.start_logits = squeeze(slice(logits, 2, 0, 1), 2);
      out.end_logits = squeeze(slice(logits, 2, 1, 2), 2);
      if (in.start_positions.defined() && in.end_positions.defined()) {
        // Positions outside the sequence are clamped to T and ignored (HF).
        int64_t T = out.start_logits.dim(1);
        auto clamp = [&](const Tensor& p) {
          Tensor zero = full({}, 0, p.dtype(), p.device()), top = full({}, static_cast<double>(T), p.dtype(), p.device());
          return minimum(maximum(reshape(p, {-1}), zero), top);
        };
        Tensor s = cross_entropy(out.start_logits, clamp(in.start_positions), T);
        Tensor e = cross_entropy(out.end_logits, clamp(in.end_positions), T);
        out.loss = (s + e) * 0.5;
      }
      return out;
    }
    case Head::MaskedLM: {
      Tensor z = lm_transform_->forward(h.sequence);
      z = roberta_ ? gelu(z) : nn::activation(bert_config().hidden_act, z);  // DistilBERT: its activation
      z = lm_norm_->forward(z);
      out.logits = backbone_->embeddings->word_embeddings->tied_logits(z, lm_bias_);  // the decoder is the table
      if (labels.defined()) out.loss = cross_entropy(reshape(out.logits, {-1, bert_config().vocab_size}), reshape(labels, {-1}));
      return out;
    }
    case Head::MultipleChoice: break;  // forward_choices() answered above
  }
  return out;
}

const ModelFamily& bert_family() {
  static const ModelFamily family{
      .model_types = {"bert", "roberta", "distilbert"},
      .architectures = class_names({"Bert", "Roberta", "DistilBert"},
                                   {"Model", "ForSequenceClassification", "ForTokenClassification",
                                    "ForQuestionAnswering", "ForMaskedLM", "ForMultipleChoice"}),
      .aliases = {},
      .presets = {"bert-tiny", "bert-mini", "bert-small", "bert-base", "roberta-base", "distilbert-base",
                  "distilbert-tiny"},
      .read_config = &read_config_as<BertConfig>,
      .preset = &preset_as<BertConfig>,
      .build = &build_as<BertForTask, BertConfig>};
  return family;
}

}  // namespace kiln::models
