#include "kiln/models/model.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/defer_init.h"
#include "kiln/models/bert.h"
#include "kiln/models/deberta.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "kiln/models/t5.h"

namespace kiln::models {

namespace fs = std::filesystem;

std::map<std::string, Tensor> ModelOutputs::named() const {
  std::map<std::string, Tensor> m;
  auto put = [&](const char* k, const Tensor& t) {
    if (t.defined()) m.emplace(k, t);
  };
  put("loss", loss);
  put("logits", logits);
  put("start_logits", start_logits);
  put("end_logits", end_logits);
  put("last_hidden_state", last_hidden_state);
  put("pooler_output", pooler_output);
  put("encoder_last_hidden_state", encoder_last_hidden_state);
  return m;
}

std::vector<std::string> ModelInputs::given() const {
  std::vector<std::string> names;
  auto put = [&](const char* k, const Tensor& t) {
    if (t.defined()) names.emplace_back(k);
  };
  put("input_ids", input_ids);
  put("attention_mask", attention_mask);
  put("token_type_ids", token_type_ids);
  put("labels", labels);
  put("position_ids", position_ids);
  put("start_positions", start_positions);
  put("end_positions", end_positions);
  put("decoder_input_ids", decoder_input_ids);
  put("decoder_attention_mask", decoder_attention_mask);
  return names;
}

void PreTrainedModel::check_accepts(const ModelInputs& inputs, std::span<const std::string_view> accepted) const {
  for (const std::string& name : inputs.given()) {
    if (std::find(accepted.begin(), accepted.end(), name) != accepted.end()) continue;
    std::string list;
    for (std::string_view a : accepted) list += (list.empty() ? "" : ", ") + std::string(a);
    KILN_CHECK(false, "forward: ", architecture(), " takes no ", name, " (its inputs: ", list, ")");
  }
}

void PreTrainedModel::save_pretrained(const fs::path& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, dir.string(), ": cannot create directory: ", ec.message());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : named_parameters()) tensors.emplace_back(name, t);
  // Weights first, config last: a directory with a config always has its weights.
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  io::write_json_file_atomic(dir / "config.json", config().to_json());
}

Tensor sequence_classification_loss(const PretrainedConfig& config, const Tensor& logits, const Tensor& labels) {
  const int64_t C = config.num_labels();
  std::string problem = config.problem_type.value_or(
      C == 1 ? "regression" : is_integral(labels.dtype()) ? "single_label_classification" : "multi_label_classification");
  if (problem == "regression") return mse_loss(reshape(logits, {-1}), reshape(cast(labels, DType::f32), {-1}));
  if (problem == "single_label_classification") return cross_entropy(reshape(logits, {-1, C}), reshape(labels, {-1}));
  KILN_CHECK(labels.shape() == logits.shape(), "multi-label classification: labels ", to_string(labels.shape()),
             " must match logits ", to_string(logits.shape()));
  return binary_cross_entropy_with_logits(logits, cast(labels, DType::f32));
}

std::vector<std::string> supported_architectures() {
  return {"BertModel",
          "BertForSequenceClassification",
          "BertForTokenClassification",
          "BertForQuestionAnswering",
          "BertForMaskedLM",
          "BertForMultipleChoice",
          "RobertaModel",
          "RobertaForSequenceClassification",
          "RobertaForTokenClassification",
          "RobertaForQuestionAnswering",
          "RobertaForMaskedLM",
          "RobertaForMultipleChoice",
          "DistilBertModel",
          "DistilBertForSequenceClassification",
          "DistilBertForTokenClassification",
          "DistilBertForQuestionAnswering",
          "DistilBertForMaskedLM",
          "DistilBertForMultipleChoice",
          "GPT2Model",
          "GPT2LMHeadModel",
          "GPT2ForSequenceClassification",
          "LlamaModel",
          "LlamaForCausalLM",
          "LlamaForSequenceClassification",
          "MistralModel",
          "MistralForCausalLM",
          "MistralForSequenceClassification",
          "Qwen2Model",
          "Qwen2ForCausalLM",
          "Qwen2ForSequenceClassification",
          "Qwen3Model",
          "Qwen3ForCausalLM",
          "Qwen3ForSequenceClassification",
          "GemmaModel",
          "GemmaForCausalLM",
          "GemmaForSequenceClassification",
          "Gemma2Model",
          "Gemma2ForCausalLM",
          "Gemma2ForSequenceClassification",
          "Phi3Model",
          "Phi3ForCausalLM",
          "Phi3ForSequenceClassification",
          "T5ForConditionalGeneration",
          "T5EncoderModel",
          "DebertaV2Model",
          "DebertaV2ForSequenceClassification",
          "DebertaV2ForTokenClassification"};
}

std::unique_ptr<PretrainedConfig> load_config(const fs::path& path) {
  return config_from_json(read_json_file(path), path.string());
}

std::unique_ptr<PretrainedConfig> config_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string type = json_value<std::string>(j, "model_type", "", source);
  std::unique_ptr<PretrainedConfig> config;
  if (type == "bert" || type == "roberta" || type == "distilbert")
    config = std::make_unique<BertConfig>(BertConfig::from_json(j, source));
  else if (type == "gpt2") config = std::make_unique<GPT2Config>(GPT2Config::from_json(j, source));
  else if (LlamaConfig::is_type(type))
    config = std::make_unique<LlamaConfig>(LlamaConfig::from_json(j, source));
  else if (type == "t5") config = std::make_unique<T5Config>(T5Config::from_json(j, source));
  else if (type == "deberta-v2") config = std::make_unique<DebertaV2Config>(DebertaV2Config::from_json(j, source));
  else
    throw Error(source + (type.empty() ? std::string(": no 'model_type'") : ": model_type '" + excerpt(type) + "' is not supported") +
                " (supported: bert, roberta, distilbert, gpt2, " + LlamaConfig::kTypes + ", t5, deberta-v2)");
  check_model_size(*config, source);
  return config;
}

std::string preset_names() {
  return "bert-tiny, bert-mini, bert-small, bert-base, roberta-base, distilbert-base, distilbert-tiny, gpt2, gpt2-tiny, "
         "llama-tiny, " + std::string(LlamaConfig::kPresets) + ", t5-small, t5-tiny, t5-v1_1-tiny, deberta-v3-tiny, deberta-v3-base";
}

std::unique_ptr<PretrainedConfig> preset_config(const std::string& name) {
  if (auto b = BertConfig::preset(name)) return std::make_unique<BertConfig>(*b);
  if (name == "gpt2" || name == "gpt2-tiny") {
    auto c = std::make_unique<GPT2Config>();
    if (name == "gpt2-tiny") {
      c->n_layer = 2;
      c->n_embd = 128;
      c->n_head = 2;
      c->n_positions = 256;
    }
    c->architectures = {"GPT2LMHeadModel"};
    return c;
  }
  if (auto l = LlamaConfig::preset(name)) return std::make_unique<LlamaConfig>(*l);
  if (auto d = DebertaV2Config::preset(name)) return std::make_unique<DebertaV2Config>(*d);
  if (name == "llama-tiny") {  // Llama's layout at a size that trains in seconds
    auto c = std::make_unique<LlamaConfig>();
    c->hidden_size = 128;
    c->intermediate_size = 352;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->max_position_embeddings = 512;
    c->architectures = {"LlamaForCausalLM"};
    return c;
  }
  if (name == "t5-small" || name == "t5-tiny" || name == "t5-v1_1-tiny") {
    auto c = std::make_unique<T5Config>();  // defaults are t5-small's
    if (name != "t5-small") {
      c->d_model = 64;
      c->d_kv = 16;
      c->d_ff = 128;
      c->num_layers = 2;
      c->num_heads = 4;
    }
    if (name == "t5-v1_1-tiny") {
      c->feed_forward_proj = "gated-gelu";
      c->tie_word_embeddings = false;
    }
    c->architectures = {"T5ForConditionalGeneration"};
    return c;
  }
  return nullptr;
}

namespace {
std::unique_ptr<PreTrainedModel> build_model(const std::string& architecture, const PretrainedConfig& config,
                                             uint64_t seed, Device device) {
  auto archs = supported_architectures();
  archs.push_back("T5WithLMHeadModel");  // the old name of T5ForConditionalGeneration
  if (std::find(archs.begin(), archs.end(), architecture) == archs.end()) {
    std::string list;
    for (const auto& a : archs) list += (list.empty() ? "" : ", ") + a;
    throw Error("unsupported architecture '" + architecture + "' (supported: " + list + ")");
  }
  if (architecture.rfind("GPT2", 0) == 0) {
    auto* c = dynamic_cast<const GPT2Config*>(&config);
    KILN_CHECK(c, "architecture ", architecture, " needs a gpt2 config, got model_type '", config.model_type, "'");
    return std::make_unique<GPT2ForTask>(architecture, *c, seed, device);
  }
  if (architecture.rfind("Llama", 0) == 0 || architecture.rfind("Mistral", 0) == 0 ||
      architecture.rfind("Qwen", 0) == 0 || architecture.rfind("Gemma", 0) == 0 || architecture.rfind("Phi3", 0) == 0) {
    auto* c = dynamic_cast<const LlamaConfig*>(&config);
    KILN_CHECK(c, "architecture ", architecture, " needs a config of model_type ", LlamaConfig::kTypes,
               ", got model_type '", config.model_type, "'");
    return std::make_unique<LlamaForTask>(architecture, *c, seed, device);
  }
  if (architecture.rfind("T5", 0) == 0) {
    auto* c = dynamic_cast<const T5Config*>(&config);
    KILN_CHECK(c, "architecture ", architecture, " needs a t5 config, got model_type '", config.model_type, "'");
    return std::make_unique<T5ForTask>(architecture, *c, seed, device);
  }
  if (architecture.rfind("DebertaV2", 0) == 0) {
    auto* c = dynamic_cast<const DebertaV2Config*>(&config);
    KILN_CHECK(c, "architecture ", architecture, " needs a deberta-v2 config, got model_type '", config.model_type, "'");
    return std::make_unique<DebertaV2ForTask>(architecture, *c, seed, device);
  }
  auto* c = dynamic_cast<const BertConfig*>(&config);
  KILN_CHECK(c, "architecture ", architecture, " needs a bert/roberta/distilbert config, got model_type '",
             config.model_type, "'");
  return std::make_unique<BertForTask>(architecture, *c, seed, device);
}
}  // namespace

std::unique_ptr<PreTrainedModel> create_model(const std::string& architecture, const PretrainedConfig& config,
                                              uint64_t seed, Device device) {
  check_model_size(config, architecture + "'s config");
  try {
    return build_model(architecture, config, seed, device);
  } catch (const std::bad_alloc&) {
    throw Error(detail::concat("out of memory while building ", architecture, " on ", device.str()));
  }
}

namespace {

// HF pre-trained checkpoints use several layouts for the same backbone: with
// or without the "bert." prefix, and the old LayerNorm gamma/beta names.
std::string canonical_key(std::string key) {
  auto replace_suffix = [&](const std::string& from, const std::string& to) {
    if (key.size() >= from.size() && key.compare(key.size() - from.size(), from.size(), from) == 0)
      key = key.substr(0, key.size() - from.size()) + to;
  };
  replace_suffix("LayerNorm.gamma", "LayerNorm.weight");
  replace_suffix("LayerNorm.beta", "LayerNorm.bias");
  return key;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// LoadOptions::keep_bf16: the parameters a bf16 matrix loads into stop
// requiring gradients, so load_state_dict shares the mapped bf16 bytes;
// 1-D bf16 tensors widen to f32 here, as a plain load does.
void keep_bf16_frozen(std::map<std::string, Tensor>& params, std::map<std::string, Tensor>& dict) {
  std::vector<Tensor> widened;
  for (auto& [key, t] : dict) {
    if (t.dtype() != DType::bf16) continue;
    auto p = params.find(key);
    if (t.rank() >= 2 && p != params.end() && p->second.shape() == t.shape()) {
      p->second.requires_grad_(false);
    } else {
      t = cast(t, DType::f32);
      widened.push_back(t);
    }
  }
  nn::materialize(widened);
}

}  // namespace

std::unique_ptr<PreTrainedModel> from_pretrained(const fs::path& dir, const LoadOptions& options) {
  KILN_CHECK(fs::is_directory(dir), dir.string(), ": not a model directory");
  std::unique_ptr<PretrainedConfig> config = load_config(dir / "config.json");
  std::string arch = options.architecture;
  if (arch.empty()) {
    KILN_CHECK(!config->architectures.empty(), (dir / "config.json").string(),
               ": no 'architectures'; name the architecture to build");
    arch = config->architectures[0];
  }
  if (options.num_labels > 0 && options.num_labels != config->num_labels()) {
    config->set_num_labels(options.num_labels);
    config->problem_type.reset();
  }
  std::unique_ptr<PreTrainedModel> model;
  {
    // keep_bf16: the checkpoint's values replace the initial ones unseen
    // (computed below only for tensors the checkpoint lacks).
    std::optional<nn::DeferInit> defer;
    if (options.keep_bf16) defer.emplace();
    model = create_model(arch, *config, options.seed, options.device);
  }
  std::map<std::string, Tensor> loaded = io::load_safetensors(dir, options.device, options.keep_bf16);

  const std::string prefix = model->base_model_prefix() + ".";
  auto params = model->state_dict();
  bool model_has_prefix = std::any_of(params.begin(), params.end(), [&](auto& p) { return starts_with(p.first, prefix); });
  bool ckpt_has_prefix = std::any_of(loaded.begin(), loaded.end(), [&](auto& p) { return starts_with(p.first, prefix); });
  std::map<std::string, Tensor> dict;
  for (auto& [k, t] : loaded) {
    std::string key = canonical_key(k);
    if (model_has_prefix && !ckpt_has_prefix && params.count(prefix + key)) key = prefix + key;  // base → head model
    if (!model_has_prefix && ckpt_has_prefix && starts_with(key, prefix)) key = key.substr(prefix.size());  // head → base
    dict[key] = t;
  }

  // Tied duplicates HF may have saved (decoder = word embeddings) are not separate parameters.
  for (const char* tied : {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "lm_head.decoder.weight",
                           "lm_head.decoder.bias", "vocab_projector.weight", "encoder.embed_tokens.weight",
                           "decoder.embed_tokens.weight"})
    dict.erase(tied);
  if (auto* llama = dynamic_cast<const LlamaConfig*>(&model->config()); llama && llama->tie_word_embeddings)
    dict.erase("lm_head.weight");  // tied to model.embed_tokens.weight
  // DeBERTa-v3 has no absolute positions: HF ignores a checkpoint's (_keys_to_ignore_on_load_unexpected).
  if (auto* deberta = dynamic_cast<const DebertaV2Config*>(&model->config()); deberta && !deberta->position_biased_input)
    for (const char* k : {"deberta.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"})
      dict.erase(k);

  std::set<std::string> resized;  // ignore_mismatched_sizes: tensors of another shape, left as initialised
  std::string resized_lines;
  if (options.ignore_mismatched_sizes)
    for (auto it = dict.begin(); it != dict.end();) {
      auto p = params.find(it->first);
      if (p == params.end() || p->second.shape() == it->second.shape()) {
        ++it;
        continue;
      }
      resized_lines += "  " + it->first + ": checkpoint " + to_string(it->second.shape()) + ", model " +
                       to_string(p->second.shape()) + "\n";
      resized.insert(it->first);
      it = dict.erase(it);
    }
  if (options.keep_bf16) keep_bf16_frozen(params, dict);
  nn::LoadReport report = model->load_state_dict(dict, false);
  if (options.keep_bf16) nn::materialize(model->parameters());  // those the checkpoint lacks
  std::string file = (dir / "model.safetensors").string();
  std::string errors;
  for (const auto& m : report.mismatched) errors += "  tensor " + m + "\n";
  std::vector<std::string> new_head;
  for (const auto& m : report.missing) {
    if (resized.count(m)) continue;
    bool in_backbone = model_has_prefix ? starts_with(m, prefix) : true;
    if (in_backbone) errors += "  missing tensor '" + m + "' " + to_string(params.at(m).shape()) + "\n";
    else new_head.push_back(m);
  }
  std::vector<std::string> other_heads;
  for (const auto& u : report.unexpected) {
    bool in_backbone = model_has_prefix ? starts_with(u, prefix) : !(starts_with(u, "cls.") || starts_with(u, "lm_head.") ||
                                                                    starts_with(u, "classifier") || starts_with(u, "qa_outputs") ||
                                                                    starts_with(u, "pre_classifier.") || starts_with(u, "vocab_") ||
                                                                    starts_with(u, "score.") ||
                                                                    // DeBERTa-v3's pre-training heads (deberta-v3-base)
                                                                    starts_with(u, "lm_predictions.") ||
                                                                    starts_with(u, "mask_predictions.") ||
                                                                    (model->architecture() == "T5EncoderModel" &&
                                                                     starts_with(u, "decoder.")));
    // Causal-mask buffers older GPT-2 checkpoints saved are not parameters.
    if (u.ends_with(".attn.bias") || u.ends_with(".attn.masked_bias")) continue;
    // A checkpoint's pooler is unused by heads that have none (as in HF).
    bool pooler = u.find("pooler.") != std::string::npos;
    if (in_backbone && !pooler) errors += "  unexpected tensor '" + u + "' " + to_string(dict.at(u).shape()) + "\n";
    else other_heads.push_back(u);
  }
  if (!errors.empty()) {
    // The first 20 problems: a config.json for another size gives one per tensor.
    size_t lines = 0, at = 0;
    while (at < errors.size() && lines < 20) at = errors.find('\n', at) + 1, ++lines;
    if (at < errors.size()) {
      const auto more = std::count(errors.begin() + static_cast<std::ptrdiff_t>(at), errors.end(), '\n');
      errors = errors.substr(0, at) + "  ... and " + std::to_string(more) +
               " more (does config.json describe this checkpoint?)\n";
    }
    if (!report.mismatched.empty())
      errors += "(a head of another size, e.g. for another number of labels: ignore_mismatched_sizes, kiln "
                "train's --ignore_mismatched_sizes, initialises it anew, as HF's does)\n";
    throw Error(file + " does not fit " + arch + " (" + (dir / "config.json").string() + "):\n" + errors);
  }
  if (!resized_lines.empty())
    std::fprintf(stderr,
                 "kiln: warning: some weights of %s were not initialized from %s because the shapes did not match "
                 "(ignore_mismatched_sizes); they are newly initialized:\n%s",
                 arch.c_str(), file.c_str(), resized_lines.c_str());
  if (!new_head.empty()) {
    std::string names;
    for (const auto& n : new_head) names += " " + n;
    std::fprintf(stderr,
                 "kiln: warning: some weights of %s were not in %s and are newly initialized:%s\n"
                 "kiln: warning: you should probably train this model on a downstream task before using it\n",
                 arch.c_str(), file.c_str(), names.c_str());
  }
  if (!other_heads.empty()) {
    std::string names;
    for (const auto& n : other_heads) names += " " + n;
    std::fprintf(stderr, "kiln: warning: some weights of %s were not used by %s:%s\n", file.c_str(), arch.c_str(),
                 names.c_str());
  }
  return model;
}

std::string causal_lm_types() { return std::string("gpt2, ") + LlamaConfig::kTypes; }

std::string causal_lm_architecture(const PretrainedConfig& config) {
  if (config.model_type == "gpt2") return "GPT2LMHeadModel";
  if (dynamic_cast<const LlamaConfig*>(&config)) return config.class_prefix() + "ForCausalLM";  // also Mistral, Qwen2/3, Gemma 1/2, Phi-3
  return "";
}

Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels, const Tensor& input_ids) {
  KILN_CHECK(labels.shape() == input_ids.shape(), "causal LM: labels ", to_string(labels.shape()),
             " must match input_ids ", to_string(input_ids.shape()));
  // The labels shift left and the last position gets the ignored label, so
  // the logits are read in place instead of copying logits[:, :-1]
  // (B·T·vocab floats) for the loss.
  const int64_t B = labels.dim(0), T = labels.dim(1);
  Tensor ignored = full({B, 1}, -100.0, labels.dtype(), labels.device());
  // (An empty sequence keeps its empty labels: no token, no loss term.)
  Tensor shifted = reshape(T > 1 ? concat({slice(labels, 1, 1, T), ignored}, 1) : T == 1 ? ignored : labels, {-1});
  return cross_entropy(reshape(logits, {-1, logits.dim(-1)}), shifted);
}

Tensor last_token_logits(const std::string& architecture, const Tensor& token_logits, const Tensor& input_ids,
                         std::optional<int64_t> pad_token_id) {
  const int64_t B = token_logits.dim(0), T = token_logits.dim(1), C = token_logits.dim(2);
  const Device dev = token_logits.device();
  Tensor last;
  if (pad_token_id) {
    Tensor is_pad = cast(eq(input_ids, full({}, static_cast<double>(*pad_token_id), input_ids.dtype(), dev)), DType::i64);
    Tensor before = argmax(is_pad, -1) - 1.0;  // argmax is 0 when there is no pad: -1, the last token
    last = where(lt(before, zeros({}, DType::i64, dev)), before + static_cast<double>(T), before);
  } else {
    KILN_CHECK(B == 1, architecture, ": batches larger than 1 need pad_token_id in the config (it marks where each ",
               "row ends; HF users often set it to the eos id)");
    last = full({B}, static_cast<double>(T - 1), DType::i64, dev);
  }
  Tensor index = broadcast_to(reshape(cast(last, DType::i64), {B, 1, 1}), {B, 1, C});
  return squeeze(gather(token_logits, 1, index), 1);
}

Tensor run_layer(bool on, const nn::Module& owner, Generator& gen, std::function<Tensor(const Tensor&)> layer,
                 const Tensor& x) {
  if (!on || !owner.is_training()) return layer(x);
  return checkpoint([layer = std::move(layer)](const std::vector<Tensor>& in) { return layer(in[0]); }, {x}, &gen);
}

}  // namespace kiln::models
