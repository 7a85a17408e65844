#pragma once
// Hugging Face config.json for the BERT family (BERT, RoBERTa, DistilBERT): HF's field
// names and defaults. Unknown fields are kept and written back unchanged.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::models {

// One part of a model's weights, for the size check before anything is
// allocated: "word embeddings (vocab_size 30522 x hidden_size 768)" and its
// parameter count (long double: hostile configs overflow int64).
struct SizeTerm {
  std::string what;
  long double parameters = 0;
};

// What a model is trained for: picks the architecture HF's example scripts build.
enum class ModelTask {
  SequenceClassification,
  TokenClassification,
  QuestionAnswering,
  MultipleChoice,
  MaskedLM,
  CausalLM,
  Seq2SeqLM
};

// The tokenizer a new model (from a preset or a config file, no weights) is
// trained with: its size, its padding id and its end token, if it has one.
struct TokenizerIds {
  int64_t vocab_size = 0;
  int64_t pad_id = 0;
  std::optional<int64_t> eos_id;
};

// What every Hugging Face config has (PretrainedConfig): the model type, the
// architectures, labels for classification heads, and the fields kiln does
// not interpret (kept and written back). Token ids live in each model's
// config: BERT's pad_token_id is an id, GPT-2's may be absent.
struct PretrainedConfig {
  virtual ~PretrainedConfig() = default;
  std::string model_type;
  std::vector<std::string> architectures;
  std::map<int64_t, std::string> id2label = {{0, "LABEL_0"}, {1, "LABEL_1"}};
  std::optional<std::string> problem_type;  // regression, single_label_classification, multi_label_classification
  nlohmann::json extra = nlohmann::json::object();

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  // The most labels a classification head may have: far past a
  // classification data set's label count, and id2label holds a name for
  // each, so a config's "num_labels" cannot ask for 10^12 of them.
  static constexpr int64_t kMaxLabels = int64_t{1} << 16;
  void set_num_labels(int64_t n);  // LABEL_0.. LABEL_{n-1}
  virtual nlohmann::json to_json() const = 0;
  virtual std::unique_ptr<PretrainedConfig> clone() const = 0;
  // The HF class-name prefix of this model type: "Bert", "Roberta", "GPT2".
  virtual std::string class_prefix() const = 0;
  // The longest sequence the model's position embeddings cover (none for
  // relative positions: T5).
  virtual std::optional<int64_t> max_positions() const { return std::nullopt; }
  // The model's weights by part, naming the config fields each comes from.
  virtual std::vector<SizeTerm> size_terms() const = 0;
  // The number of token ids the embeddings hold (vocab_size).
  virtual int64_t vocabulary_size() const = 0;
  // The id batches must be padded with when the model finds each row's end
  // by it (GPT-2's and Llama's sequence classifiers: their pad_token_id); none
  // when the tokenizer's own pad id serves.
  virtual std::optional<int64_t> batch_pad_id() const { return std::nullopt; }
  // Encoder-decoder (T5): a prompt is the encoder's input, not continued text.
  virtual bool is_encoder_decoder() const { return false; }
  // The HF class this model type has for `task` ("BertForTokenClassification",
  // "GPT2LMHeadModel"), or empty when it has none.
  virtual std::string architecture_for(ModelTask task) const = 0;
  // Fits a config without weights to the tokenizer a run trains with: the
  // vocabulary size, the padding id and (T5) the ids generation starts and ends with.
  virtual void adapt_to_tokenizer(const TokenizerIds& ids) = 0;
  // Keys a checkpoint may hold that are not parameters of this model: tied
  // copies HF saved (a decoder equal to the word embeddings) and tensors HF
  // ignores on loading. from_pretrained drops them.
  virtual std::vector<std::string> ignored_checkpoint_keys() const { return {}; }
  // While the output head is tied to the word embeddings: the checkpoint keys
  // of the head and of the embeddings (from_pretrained unties them when a
  // checkpoint holds both with different values, as transformers 5 does).
  virtual std::optional<std::pair<std::string, std::string>> tied_output_head() const { return std::nullopt; }
  // Gives the output head its own weight (tie_word_embeddings false).
  virtual void untie_output_head() {}
};

// Throws when the weights `c` describes would not fit in this machine's
// memory at bytes_per_parameter (4: f32; 2: bf16, the least a checkpoint
// loads as), before anything is allocated: the error names `src`, the
// total and the largest parts with their fields and values.
void check_model_size(const PretrainedConfig& c, const std::string& src, int bytes_per_parameter = 4);

// AutoConfig: reads config.json and builds the config of its model_type
// (bert, roberta, distilbert, gpt2, llama, t5); errors name the file and key.
std::unique_ptr<PretrainedConfig> load_config(const std::filesystem::path& path);
// The same from config.json's parsed contents; `source` names it in errors.
std::unique_ptr<PretrainedConfig> config_from_json(const nlohmann::json& j, const std::string& source);
// Presets by name ("bert-tiny", "bert-base", "roberta-base", "gpt2", "gpt2-tiny"...), or null.
std::unique_ptr<PretrainedConfig> preset_config(const std::string& name);
// The presets' names, comma-separated, for messages and usage lines.
std::string preset_names();

// The encoder's size fields that BERT's and DeBERTa's configs share, under
// BertConfig's names and defaults (bert-base); config_json::encoder_fields
// is their one field table.
struct EncoderConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

struct BertConfig : PretrainedConfig, EncoderConfig {
  BertConfig() { model_type = "bert"; }
  int64_t pad_token_id = 0;
  std::optional<int64_t> bos_token_id, eos_token_id;
  std::string position_embedding_type = "absolute";
  std::optional<double> classifier_dropout;
  // DistilBERT (model_type "distilbert", DistilBertConfig): the same fields
  // under its own names (dim, n_layers, n_heads, hidden_dim, dropout,
  // attention_dropout, activation), no token types, LayerNorm eps 1e-12,
  // and its heads' dropouts. Read and written with DistilBERT's names.
  double qa_dropout = 0.1;
  double seq_classif_dropout = 0.2;

  bool distilbert() const { return model_type == "distilbert"; }
  std::vector<SizeTerm> size_terms() const override;

  // `source` names the file in errors ("model/config.json: 'hidden_size' must be an integer, got "x"").
  static BertConfig from_json(const nlohmann::json& j, const std::string& source);
  static BertConfig from_file(const std::filesystem::path& path);
  // Presets: "bert-tiny" (2 layers, hidden 128), "bert-mini", "bert-small", "bert-base", "roberta-base",
  // "distilbert-base" (distilbert-base-uncased's), "distilbert-tiny" (2 layers, dim 128).
  static std::optional<BertConfig> preset(const std::string& name);
  nlohmann::json to_json() const override;
  std::unique_ptr<PretrainedConfig> clone() const override { return std::make_unique<BertConfig>(*this); }
  std::string class_prefix() const override {
    return model_type == "roberta" ? "Roberta" : distilbert() ? "DistilBert" : "Bert";
  }
  // RoBERTa's positions start past padding_idx.
  std::optional<int64_t> max_positions() const override {
    return max_position_embeddings - (model_type == "roberta" ? pad_token_id + 1 : 0);
  }
  void validate(const std::string& source) const;
  int64_t vocabulary_size() const override { return vocab_size; }
  std::string architecture_for(ModelTask task) const override;
  void adapt_to_tokenizer(const TokenizerIds& ids) override;
  std::vector<std::string> ignored_checkpoint_keys() const override;
};

}  // namespace kiln::models
