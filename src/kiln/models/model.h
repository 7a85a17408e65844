#pragma once
// The Hugging Face model interface: inputs and outputs by HF's names,
// from_pretrained / save_pretrained directories that Python's transformers
// opens, and AutoModel-style dispatch.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kiln/models/config.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct LoraConfig;  // models/lora.h

struct ModelInputs {
  Tensor input_ids;       // i64 [B, T]
  Tensor attention_mask;  // [B, T], 1 = token, 0 = padding (optional)
  Tensor token_type_ids;  // i64 [B, T] (optional)
  Tensor labels;          // task-dependent (optional)
  Tensor start_positions, end_positions;  // question answering (optional)
  Tensor decoder_input_ids, decoder_attention_mask;  // encoder-decoder (optional: derived from labels)
  // i64 [B, T] (optional; decoder-only models): each token's position. Packed rows restart at 0 for every
  // example, and attention stays within an example (models/packing.h). Last, so that aggregate
  // initialisation in the order above is unchanged.
  Tensor position_ids;
  // The given (defined) fields, by HF's argument names.
  std::vector<std::string> given() const;
};

struct ModelOutputs {
  Tensor loss;  // [] when labels were given
  Tensor logits;
  Tensor start_logits, end_logits;
  Tensor last_hidden_state, pooler_output;
  Tensor encoder_last_hidden_state;
  std::map<std::string, Tensor> named() const;  // the defined ones, by HF's names
};

class PreTrainedModel : public nn::Module {
 public:
  explicit PreTrainedModel(std::unique_ptr<PretrainedConfig> config) : config_(std::move(config)) {}
  virtual ModelOutputs forward(const ModelInputs& inputs) = 0;
  // Whether the model's HF tokenizer returns token_type_ids (its
  // model_input_names: BERT's do; GPT-2's and T5's do not), so the Trainer
  // passes the data's token types to this model only.
  virtual bool tokenizer_gives_token_types() const { return false; }
  // An error naming any given input outside `accepted`: HF's forward has no
  // such argument and refuses it, and ignoring it would hide the mistake.
  void check_accepts(const ModelInputs& inputs, std::span<const std::string_view> accepted) const;
  void check_accepts(const ModelInputs& inputs, std::initializer_list<std::string_view> accepted) const {
    check_accepts(inputs, std::span<const std::string_view>(accepted.begin(), accepted.size()));
  }
  virtual std::string architecture() const = 0;
  // Whether it has a head that generates text (a causal or seq2seq LM head).
  virtual bool can_generate() const { return false; }
  // Prefixes of the heads' tensor names ("cls.", "classifier", "lm_head."):
  // a checkpoint's tensors under them belong to another head, not to the
  // backbone, when a base model (no base_model_prefix in its names) loads it.
  virtual std::vector<std::string> head_prefixes() const = 0;
  // The backbone's attribute name ("bert", "roberta"); keys under it belong to the base model.
  virtual std::string base_model_prefix() const = 0;
  // The stream dropout draws from (saved in checkpoints so a resumed run repeats the same masks).
  virtual Generator& dropout_generator() = 0;
  // HF's gradient_checkpointing_enable() / _disable(): while training, each
  // transformer layer keeps only its input for the backward pass, which
  // recomputes the layer — less activation memory for one more forward.
  virtual void set_gradient_checkpointing(bool on) = 0;
  const PretrainedConfig& config() const { return *config_; }
  PretrainedConfig& config() { return *config_; }
  // transformers' save_pretrained(dir, max_shard_size=...) after model.to(dtype).
  struct SaveOptions {
    std::optional<DType> dtype;                   // each weight cast as it is written; none: as it is
    uint64_t max_shard_size = 50'000'000'000ULL;  // transformers' default "50GB": larger writes shards
  };
  // Writes config.json and model.safetensors, or shards and their index
  // (atomically, in HF's layout). Weights are computed one at a time as they
  // are written, so a model built under nn::DeferInit is saved without ever
  // holding all its weights in memory.
  void save_pretrained(const std::filesystem::path& dir, const SaveOptions& options) const;
  void save_pretrained(const std::filesystem::path& dir) const { save_pretrained(dir, SaveOptions{}); }
  // The LoRA adapter apply_lora attached (models/lora.h); null when none.
  const LoraConfig* lora_config() const { return lora_.get(); }
  void set_lora_config(std::shared_ptr<const LoraConfig> lora) { lora_ = std::move(lora); }

 protected:
  PretrainedConfig& config_ref() { return *config_; }

 private:
  std::unique_ptr<PretrainedConfig> config_;
  std::shared_ptr<const LoraConfig> lora_;
};

struct LoadOptions {
  Device device = Device::cpu();
  uint64_t seed = 42;  // initialises weights the checkpoint lacks (a new head), and dropout
  // Architecture to build; empty: config.json's first architecture.
  std::string architecture;
  int64_t num_labels = 0;  // > 0: override (a new classification head)
  // HF's ignore_mismatched_sizes: a checkpoint tensor whose shape differs
  // from the model's (a head with another number of labels) is left as
  // initialised, with a warning, instead of failing the load.
  bool ignore_mismatched_sizes = false;
  // A bf16 checkpoint's weight matrices and tables stay bf16, memory-mapped
  // and frozen (requires_grad off), instead of widening to f32: a base that
  // does not train (LoRA) costs half the memory. 1-D tensors (norms,
  // biases) widen as usual. Products widen a bf16 weight per use, or take it
  // directly under --bf16 (runtime/autocast.h).
  bool keep_bf16 = false;
};

// The loss of a sequence-classification head, as HF picks it from
// problem_type (or, when unset, from num_labels and the labels' dtype):
// regression MSE, single-label cross-entropy, multi-label BCE with logits.
// logits [B, num_labels].
Tensor sequence_classification_loss(const PretrainedConfig& config, const Tensor& logits, const Tensor& labels);

// A decoder-only language model (GPT-2, Llama): what generation needs from it.
// One token per row is fed per step against per-layer key/value caches
// [B, kv_heads, L, head_dim] of a fixed capacity L, so the step's graph
// depends only on L.
class CausalLM : public PreTrainedModel {
 public:
  using PreTrainedModel::PreTrainedModel;
  struct CacheShape {
    int64_t layers, kv_heads, head_dim;
  };
  // Whether it has its language-model head (GPT2LMHeadModel, LlamaForCausalLM).
  bool can_generate() const override = 0;
  virtual int64_t vocab_size() const = 0;
  // The ids that end a generated sequence (Llama 3 configs list several).
  virtual std::vector<int64_t> eos_token_ids() const = 0;
  virtual CacheShape cache_shape() const = 0;
  // Logits [B,1,V] of token `last` (an i64 scalar in [0, T), a graph input;
  // undefined: the last) of T tokens per row ([B,T] ids) at positions
  // pos .. pos + T - 1 (`pos` an i64 scalar, a graph input), which attend to
  // the caches' slots up to their own and write their keys and values into
  // their slots in place. T > 1 reads a prompt at once, as transformers'
  // first forward does (a step's graph depends on L and T only); tokens
  // after `last` pad it to a length that other prompts share (their slots
  // are written again before anything reads them: decode_prompt).
  // prefill_length: the tokens are read as part of a whole sequence of that
  // length (a prompt, or a cache computed again); rotary scaling that depends
  // on the length (dynamic, longrope) rotates them with that sequence's
  // frequencies. nullopt: generated tokens, each rotated with those of the
  // sequence it ends (its position + 1).
  virtual Tensor decode_step(const Tensor& token, const Tensor& pos, std::vector<Tensor>& k_cache,
                             std::vector<Tensor>& v_cache, std::optional<int64_t> prefill_length,
                             const Tensor& last) = 0;
  // The position at which generation with the cache computes the cache again
  // from the start (every token so far read as one sequence), as
  // transformers' Phi3ForCausalLM does when a sequence first passes
  // original_max_position_embeddings and longrope switches from its short to
  // its long factors. nullopt: never.
  virtual std::optional<int64_t> cache_recompute_position() const { return std::nullopt; }
};

// A key or value cache of zeros for generation: bf16 under Autocast on the
// CPU, else f32. Every reader of a cache is a matrix product, which autocast
// rounds to bf16 anyway: the same values in half the bytes, which a decode
// step reads and writes whole.
Tensor zero_kv_cache(const Shape& shape, Device device, const std::string& name);
// The cache [B,H,L,D] with T tokens' keys or values [B,H,T,D] in slots
// `slots` (i64 [T]), rounded to the cache's dtype: an index_copy, which
// writes only those slots when the step's result takes the old cache's
// memory (as a decode step's does), not the whole cache.
Tensor with_slot(const Tensor& cache, const Tensor& slots, const Tensor& value);
// The logits [B,1,V] of the last of each row's P prompt tokens (ids: B rows
// of P, row-major) read in one step from position 0 (prefill_length P), the
// caches written, the step queued (mark_step): the rows padded with their
// last token to prompt_step_length(P, capacity), so that prompts of many
// lengths share a few compiled steps. The padding's keys and values land in slots after the
// prompt, which each generated token writes before it reads them.
Tensor decode_prompt(CausalLM& model, const std::vector<int64_t>& ids, int64_t B, int64_t P,
                     std::vector<Tensor>& k_cache, std::vector<Tensor>& v_cache);
// One decode step of `ids` (B rows of T tokens, row-major) at positions from
// .. from + T - 1, queued (mark_step) while its inputs are held: the logits
// [B,1,V] of token `last` (nullopt: the last), the caches written.
Tensor decode_ids(CausalLM& model, const std::vector<int64_t>& ids, int64_t B, int64_t from,
                  std::optional<int64_t> prefill_length, std::vector<Tensor>& k_cache, std::vector<Tensor>& v_cache,
                  std::optional<int64_t> last = std::nullopt);
// The length a prompt of P tokens is read at: the next power of two up to
// 64, then the next multiple of 64, at most the cache's capacity L.
int64_t prompt_step_length(int64_t P, int64_t L);
// x [B,T,C] at token `last` (an i64 scalar; undefined, or T = 1: the last
// one): [B,1,C].
Tensor token_at(const Tensor& x, const Tensor& last);
// A decode step's T positions pos .. pos + T - 1 (i64 [T]; pos an i64 scalar).
Tensor step_positions(const Tensor& pos, int64_t T);
// Whether slot j is visible to the step's query i ([T, L] bool): j <= its
// position, and with a window, j > its position - window.
Tensor visible_slots(const Tensor& positions, int64_t L, std::optional<int64_t> window = std::nullopt);

// The causal-LM class of a config's model type ("GPT2LMHeadModel",
// "LlamaForCausalLM"), or empty when the type has none.
std::string causal_lm_architecture(const PretrainedConfig& config);
// The model types that have one, for messages ("gpt2, llama, mistral, ...").
std::string causal_lm_types();

// The causal-LM loss of logits [B,T,V] against labels [B,T] (input_ids, -100
// ignored): position t predicts label t+1, as transformers' ForCausalLMLoss.
Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels, const Tensor& input_ids);
// A decoder-only sequence classifier's logits: token_logits [B,T,C] at each
// row's last token before its first pad (the last token when it has none),
// as GPT2/LlamaForSequenceClassification pick it. Without a pad id only a
// batch of one is accepted.
Tensor last_token_logits(const std::string& architecture, const Tensor& token_logits, const Tensor& input_ids,
                         std::optional<int64_t> pad_token_id);

// One transformer layer: layer(x), or, when `on` and `owner` trains, under
// gradient checkpointing (see kiln::checkpoint; dropout replays `gen`).
// `layer` holds what it reads by value: the recomputation runs in backward(),
// after the model's forward() has returned.
Tensor run_layer(bool on, const nn::Module& owner, Generator& gen, std::function<Tensor(const Tensor&)> layer,
                 const Tensor& x);

// Builds an architecture by HF class name ("BertForSequenceClassification") with fresh weights.
std::unique_ptr<PreTrainedModel> create_model(const std::string& architecture, const PretrainedConfig& config,
                                              uint64_t seed = 42, Device device = Device::cpu());
// Architectures kiln can build.
std::vector<std::string> supported_architectures();

// transformers' resize_token_embeddings(vocab) with its mean_resizing: the
// model rebuilt with `vocab` ids (config vocab_size), every tensor of the
// same shape copied, the input embeddings and an untied output head (and a
// bias over the vocabulary) keeping their first rows, new rows starting at
// the mean of the old ones (transformers draws them from N(mean,
// 1e-9 · covariance): the mean, to within a thousandth of the rows' spread).
std::unique_ptr<PreTrainedModel> resize_token_embeddings(const PreTrainedModel& model, int64_t vocab);

// AutoModel.from_pretrained: reads DIR/config.json and the safetensors
// weights. Mis-shaped tensors and missing backbone tensors are errors that
// name them; missing head tensors are initialised with a warning (as HF does
// when fine-tuning from a base model); unexpected tensors of other heads are
// reported in a warning, unexpected tensors inside the backbone are errors.
std::unique_ptr<PreTrainedModel> from_pretrained(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace kiln::models
