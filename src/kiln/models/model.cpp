#include "kiln/models/model.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <optional>
#include <set>

#include "kiln/core/error.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/generation_config.h"
#include "kiln/models/registry.h"
#include "kiln/nn/defer_init.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/context.h"

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

void PreTrainedModel::save_pretrained(const fs::path& dir, const SaveOptions& options) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, dir.string(), ": cannot create directory: ", ec.message());
  std::vector<Tensor> tensors;
  std::vector<io::TensorSpec> specs;
  for (auto& [name, t] : named_parameters()) {
    tensors.push_back(t);
    // As model.to(dtype): floating-point tensors only.
    specs.push_back({name, options.dtype && is_floating(t.dtype()) ? *options.dtype : t.dtype(), t.shape()});
  }
  // A weight still pending (deferred init) is computed through a new node,
  // so the model does not keep its value once it is written.
  auto produce = [&](size_t i) {
    NoGradGuard no_grad;
    const Tensor& t = tensors[i];
    if (t.dtype() != specs[i].dtype) return cast(t, specs[i].dtype);
    return t.node()->op == ir::Op::Data ? t : t.detach();
  };
  // Weights first, config last: a directory with a config always has its weights.
  io::save_pretrained_weights(dir, specs, produce, options.max_shard_size);
  io::write_json_file_atomic(dir / "config.json", config().to_json());
  // As transformers' save_pretrained: a model that generates gets its generation_config.json.
  if (const nlohmann::json g = default_generation_config(*this); !g.is_null())
    io::write_json_file_atomic(dir / "generation_config.json", g);
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
  std::vector<std::string> archs;
  for (const ModelFamily* f : model_families()) archs.insert(archs.end(), f->architectures.begin(), f->architectures.end());
  return archs;
}

std::unique_ptr<PretrainedConfig> load_config(const fs::path& path) {
  return config_from_json(read_json_file(path), path.string());
}

std::unique_ptr<PretrainedConfig> config_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string type = json_value<std::string>(j, "model_type", "", source);
  const ModelFamily* family = family_of_type(type);
  if (!family) {
    std::vector<std::string> types;
    for (const ModelFamily* f : model_families()) types.insert(types.end(), f->model_types.begin(), f->model_types.end());
    throw Error(source + (type.empty() ? std::string(": no 'model_type'") : ": model_type '" + excerpt(type) + "' is not supported") +
                " (supported: " + joined(types) + ")");
  }
  std::unique_ptr<PretrainedConfig> config = family->read_config(j, source);
  check_model_size(*config, source, 2);  // how it will be held is not known yet: at least as bf16
  return config;
}

std::string preset_names() {
  std::vector<std::string> names;
  for (const ModelFamily* f : model_families()) names.insert(names.end(), f->presets.begin(), f->presets.end());
  return joined(names);
}

std::unique_ptr<PretrainedConfig> preset_config(const std::string& name) {
  for (const ModelFamily* f : model_families())
    if (std::find(f->presets.begin(), f->presets.end(), name) != f->presets.end()) return f->preset(name);
  return nullptr;
}

namespace {

// `old` [rows, ...] with `rows` rows: its first ones, then the mean of all of them.
Tensor resized_rows(const Tensor& old, int64_t rows) {
  const int64_t have = old.dim(0);
  if (rows <= have) return slice(old, 0, 0, rows);
  Shape grown = old.shape();
  grown[0] = rows - have;
  const Tensor mean_row = mean(cast(old, DType::f32), {0}, true);
  return concat({old, cast(broadcast_to(mean_row, grown), old.dtype())}, 0);
}

}  // namespace

std::unique_ptr<PreTrainedModel> resize_token_embeddings(const PreTrainedModel& model, int64_t vocab) {
  const int64_t old_vocab = model.config().vocabulary_size();
  KILN_CHECK(vocab > 0, "resize_token_embeddings: the vocabulary must have at least one id, got ", vocab);
  nlohmann::json j = model.config().to_json();
  j["vocab_size"] = vocab;
  const std::string where = "resize_token_embeddings(" + std::to_string(vocab) + ")";
  std::unique_ptr<PretrainedConfig> config = config_from_json(j, where);
  check_model_size(*config, where);
  const std::map<std::string, Tensor> old = model.state_dict();
  const Device device = old.empty() ? Device::cpu() : old.begin()->second.device();
  std::unique_ptr<PreTrainedModel> m;
  {
    nn::DeferInit defer;  // every tensor is replaced below
    m = create_model(model.architecture(), *config, 42, device);
  }
  std::map<std::string, Tensor> dict;
  std::vector<Tensor> resized;
  NoGradGuard no_grad;
  for (auto& [name, p] : m->named_parameters()) {
    auto it = old.find(name);
    KILN_CHECK(it != old.end(), where, ": the rebuilt ", model.architecture(), " has a tensor '", name,
               "' the model lacks");
    const Tensor& t = it->second;
    // A frozen tensor keeps its dtype (a bf16 base stays bf16): load_state_dict then shares it.
    if (!t.requires_grad()) p.requires_grad_(false);
    if (t.shape() == p.shape()) {
      dict.emplace(name, t);
      continue;
    }
    Shape rest = t.shape();
    rest[0] = vocab;
    KILN_CHECK(t.dim(0) == old_vocab && rest == p.shape(), where, ": tensor '", name, "' ", to_string(t.shape()),
               " is not indexed by the vocabulary of ", old_vocab, " (the rebuilt model's is ", to_string(p.shape()), ")");
    resized.push_back(resized_rows(t, vocab));
    dict.emplace(name, resized.back());
  }
  nn::materialize(resized);
  m->load_state_dict(dict, false);
  nn::materialize(m->parameters());
  m->train(model.is_training());
  return m;
}

std::unique_ptr<PreTrainedModel> create_model(const std::string& architecture, const PretrainedConfig& config,
                                              uint64_t seed, Device device) {
  // Built under nn::DeferInit, no f32 weights are computed: a bf16 checkpoint's fill it (or a streamed save).
  check_model_size(config, architecture + "'s config", nn::init_deferred() ? 2 : 4);
  const ModelFamily* family = family_of_architecture(architecture);
  if (!family) {
    std::vector<std::string> archs = supported_architectures();
    for (const ModelFamily* f : model_families()) archs.insert(archs.end(), f->aliases.begin(), f->aliases.end());
    throw Error("unsupported architecture '" + architecture + "' (supported: " + joined(archs) + ")");
  }
  KILN_CHECK(std::find(family->model_types.begin(), family->model_types.end(), config.model_type) !=
                 family->model_types.end(),
             "architecture ", architecture, " needs a config of model_type ", joined(family->model_types),
             ", got model_type '", config.model_type, "'");
  try {
    return family->build(architecture, config, seed, device);
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

// transformers 5 ties the output head to the word embeddings only where the
// checkpoint does not hold both with different values: a T5 v1.1 it saved
// says tie_word_embeddings true (scale_decoder_outputs false) beside its own
// lm_head.weight, which it keeps. So does kiln.
void untie_distinct_head(PretrainedConfig& config, const std::map<std::string, Tensor>& loaded) {
  const auto tied = config.tied_output_head();
  if (!tied) return;
  const auto head = loaded.find(tied->first), embeddings = loaded.find(tied->second);
  if (head == loaded.end() || embeddings == loaded.end() || head->second.shape() != embeddings->second.shape()) return;
  NoGradGuard no_grad;
  const Tensor diff = amax(abs(cast(head->second, DType::f32) - cast(embeddings->second, DType::f32)));
  if (!(diff.item() == 0.0f)) config.untie_output_head();
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
  std::map<std::string, Tensor> loaded = io::load_safetensors(dir, options.device, options.keep_bf16);
  untie_distinct_head(*config, loaded);
  std::unique_ptr<PreTrainedModel> model;
  {
    // The checkpoint's values replace the initial ones unseen: those are
    // computed below only for the tensors the checkpoint lacks (a new head).
    nn::DeferInit defer;
    model = create_model(arch, *config, options.seed, options.device);
  }

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
  for (const std::string& ignored : model->config().ignored_checkpoint_keys()) dict.erase(ignored);

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
  nn::materialize(model->parameters());  // those the checkpoint lacks
  std::string file = (dir / "model.safetensors").string();
  std::string errors;
  for (const auto& m : report.mismatched) errors += "  tensor " + m + "\n";
  std::vector<std::string> new_head;
  for (const auto& m : report.missing) {
    if (resized.count(m)) continue;
    // A masked-LM checkpoint has no pooler (HF's BertForMaskedLM builds none):
    // a classifier made from it initialises one, as transformers does.
    const bool pooler = starts_with(m, prefix + "pooler.") || starts_with(m, "pooler.");
    bool in_backbone = model_has_prefix ? starts_with(m, prefix) && !pooler : !pooler;
    if (in_backbone) errors += "  missing tensor '" + m + "' " + to_string(params.at(m).shape()) + "\n";
    else new_head.push_back(m);
  }
  std::vector<std::string> other_heads;
  const std::vector<std::string> heads = model->head_prefixes();
  for (const auto& u : report.unexpected) {
    bool in_backbone = model_has_prefix ? starts_with(u, prefix)
                                        : std::none_of(heads.begin(), heads.end(),
                                                       [&](const std::string& h) { return starts_with(u, h); });
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

std::string causal_lm_types() {
  std::vector<std::string> types;
  for (const ModelFamily* f : model_families())
    for (const std::string& type : f->model_types)
      if (!f->read_config({{"model_type", type}}, type)->architecture_for(ModelTask::CausalLM).empty())
        types.push_back(type);
  return joined(types);
}

Tensor zero_kv_cache(const Shape& shape, Device device, const std::string& name) {
  const bool bf16 = Autocast::active() && device.kind == DeviceKind::CPU;
  const std::vector<char> zeros(static_cast<size_t>(numel(shape)) * (bf16 ? 2 : 4), 0);
  return Tensor::from_data(zeros.data(), bf16 ? DType::bf16 : DType::f32, shape, device, name);
}

Tensor with_slot(const Tensor& cache, const Tensor& slots, const Tensor& value) {
  return index_copy(cache, 2, slots, cast(value, cache.dtype()));
}

int64_t prompt_step_length(int64_t P, int64_t L) {
  const int64_t T = P <= 64 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(P))) : (P + 63) / 64 * 64;
  return std::max(P, std::min(T, L));
}

Tensor decode_prompt(CausalLM& model, const std::vector<int64_t>& ids, int64_t B, int64_t P,
                     std::vector<Tensor>& k_cache, std::vector<Tensor>& v_cache) {
  const int64_t L = k_cache.at(0).dim(2);
  KILN_CHECK(B >= 1 && P >= 1 && static_cast<int64_t>(ids.size()) == B * P, "decode_prompt: ", ids.size(),
             " ids are not ", B, " rows of ", P);
  KILN_CHECK(P <= L, "decode_prompt: a prompt of ", P, " tokens does not fit a cache of ", L, " slots");
  const int64_t T = prompt_step_length(P, L);
  std::vector<int64_t> padded;
  padded.reserve(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    padded.insert(padded.end(), ids.begin() + b * P, ids.begin() + (b + 1) * P);
    padded.insert(padded.end(), static_cast<size_t>(T - P), ids[(b + 1) * P - 1]);
  }
  return decode_ids(model, padded, B, 0, P, k_cache, v_cache, P - 1);
}

Tensor decode_ids(CausalLM& model, const std::vector<int64_t>& ids, int64_t B, int64_t from,
                  std::optional<int64_t> prefill_length, std::vector<Tensor>& k_cache, std::vector<Tensor>& v_cache,
                  std::optional<int64_t> last) {
  const Device dev = k_cache.at(0).device();
  const auto T = static_cast<int64_t>(ids.size()) / B;
  Tensor tokens = Tensor::from_vector(ids, {B, T}, dev, "tokens");
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{from}, {}, dev, "position");
  Tensor index = last ? Tensor::from_vector(std::vector<int64_t>{*last}, {}, dev, "last") : Tensor();
  Tensor logits = model.decode_step(tokens, pos, k_cache, v_cache, prefill_length, index);
  // Queued while its inputs are held: the graph records which inputs it may
  // overwrite, so a step queued after they die would be a graph of its own.
  mark_step(dev);
  return logits;
}

Tensor token_at(const Tensor& x, const Tensor& last) {
  const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
  if (!last.defined() || T == 1) return slice(x, 1, T - 1, T);  // (a one-token prompt: the decode step's graph)
  return gather(x, 1, broadcast_to(reshape(last, {1, 1, 1}), {B, 1, C}));
}

Tensor step_positions(const Tensor& pos, int64_t T) { return arange(T, DType::i64, pos.device()) + pos; }

Tensor visible_slots(const Tensor& positions, int64_t L, std::optional<int64_t> window) {
  const int64_t T = positions.dim(0);
  Tensor slot = reshape(arange(L, DType::i64, positions.device()), {1, L}), at = reshape(positions, {T, 1});
  Tensor visible = le(slot, at);
  if (window) visible = logical_and(visible, gt(slot + static_cast<double>(*window), at));
  return visible;
}

std::string causal_lm_architecture(const PretrainedConfig& config) {
  return config.architecture_for(ModelTask::CausalLM);  // also Mistral, Qwen2/3, Gemma 1/2, Phi-3
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
