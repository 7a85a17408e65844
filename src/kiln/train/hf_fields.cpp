#include "kiln/train/hf_fields.h"

#include <map>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::train {

using nlohmann::json;

namespace {

// The values of a field that ask for nothing.
enum class Quiet {
  Any,          // every value: a hint kiln has no use for, or one read only with a feature that is off
  Off,          // null, false, 0, "", [] or {}
  True,         // true (what kiln does anyway)
  MinusOne,     // -1
  Accelerator,  // accelerate's defaults
  // Activation checkpointing's arguments that change nothing but how torch recomputes: use_reentrant,
  // preserve_rng_state (kiln's recomputation is the same either way), every_n_layers 1, offload false.
  CheckpointKwargs,
};

struct Rule {
  Quiet quiet;
  const char* asks;  // what another value asks for
};

constexpr const char* kCheckpointKwargs =
    "activation checkpointing arguments other than use_reentrant, preserve_rng_state, every_n_layers 1 and offload "
    "false";

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = {
      // Logging, hub and launcher settings, and speed hints: nothing that changes the run's numbers.
      {"log_level", {Quiet::Any, ""}},
      {"log_level_replica", {Quiet::Any, ""}},
      {"log_on_each_node", {Quiet::Any, ""}},
      {"project", {Quiet::Any, ""}},
      {"trackio_space_id", {Quiet::Any, ""}},
      {"trackio_bucket_id", {Quiet::Any, ""}},
      {"trackio_static_space_id", {Quiet::Any, ""}},
      {"hub_token", {Quiet::Any, ""}},
      {"hub_model_id", {Quiet::Any, ""}},
      {"hub_strategy", {Quiet::Any, ""}},
      {"hub_private_repo", {Quiet::Any, ""}},
      {"hub_always_push", {Quiet::Any, ""}},
      {"hub_revision", {Quiet::Any, ""}},
      {"push_to_hub_model_id", {Quiet::Any, ""}},
      {"push_to_hub_organization", {Quiet::Any, ""}},
      {"push_to_hub_token", {Quiet::Any, ""}},
      {"local_rank", {Quiet::Any, ""}},
      {"dataloader_pin_memory", {Quiet::Any, ""}},
      {"dataloader_persistent_workers", {Quiet::Any, ""}},
      {"dataloader_prefetch_factor", {Quiet::Any, ""}},
      {"dataloader_multiprocessing_context", {Quiet::Any, ""}},
      {"dataloader_in_order", {Quiet::Any, ""}},
      {"remove_unused_columns", {Quiet::Any, ""}},
      {"length_column_name", {Quiet::Any, ""}},
      {"skip_memory_metrics", {Quiet::Any, ""}},
      {"save_on_each_node", {Quiet::Any, ""}},
      {"eval_do_concat_batches", {Quiet::Any, ""}},
      {"ddp_find_unused_parameters", {Quiet::Any, ""}},
      {"ddp_broadcast_buffers", {Quiet::Any, ""}},
      {"ddp_static_graph", {Quiet::Any, ""}},
      {"ddp_backend", {Quiet::Any, ""}},
      {"xpu_backend", {Quiet::Any, ""}},
      {"use_cache", {Quiet::Any, ""}},
      {"torch_empty_cache_steps", {Quiet::Any, ""}},
      {"fp16_opt_level", {Quiet::Any, ""}},
      {"half_precision_backend", {Quiet::Any, ""}},
      {"fp16_backend", {Quiet::Any, ""}},
      {"ray_scope", {Quiet::Any, ""}},
      {"fsdp_config", {Quiet::Any, ""}},  // read only with fsdp, below
      {"mp_parameters", {Quiet::Any, ""}},
      // Features kiln does not have: only their off value is accepted.
      {"torch_compile", {Quiet::Off, "torch.compile"}},
      {"torch_compile_backend", {Quiet::Off, "torch.compile"}},
      {"torch_compile_mode", {Quiet::Off, "torch.compile"}},
      {"torchdynamo", {Quiet::Off, "torch.compile"}},
      {"deepspeed", {Quiet::Off, "DeepSpeed"}},
      {"fsdp", {Quiet::Off, "FSDP (kiln shards optimizer state only: --shard_optimizer_state)"}},
      {"fsdp_min_num_params", {Quiet::Off, "FSDP"}},
      {"fsdp_transformer_layer_cls_to_wrap", {Quiet::Off, "FSDP"}},
      {"sharded_ddp", {Quiet::Off, "FairScale sharded DDP"}},
      {"parallelism_config", {Quiet::Off, "accelerate's parallelism config"}},
      {"optim_args", {Quiet::Off, "optimizer arguments"}},
      {"optim_target_modules", {Quiet::Off, "GaLore / APOLLO target modules"}},
      {"bf16_full_eval", {Quiet::Off, "evaluation with bf16 weights"}},
      {"fp16_full_eval", {Quiet::Off, "evaluation with fp16 weights"}},
      {"gradient_checkpointing_kwargs", {Quiet::CheckpointKwargs, kCheckpointKwargs}},
      {"activation_checkpointing_kwargs", {Quiet::CheckpointKwargs, kCheckpointKwargs}},
      {"use_liger_kernel", {Quiet::Off, "Liger kernels"}},
      {"liger_kernel_config", {Quiet::Off, "Liger kernels"}},
      {"neftune_noise_alpha", {Quiet::Off, "NEFTune embedding noise"}},
      {"auto_find_batch_size", {Quiet::Off, "searching for a batch size that fits"}},
      {"prediction_loss_only", {Quiet::Off, "evaluation with the loss only"}},
      {"eval_use_gather_object", {Quiet::Off, "gathering Python objects"}},
      {"include_for_metrics", {Quiet::Off, "inputs or losses passed to compute_metrics"}},
      {"include_inputs_for_metrics", {Quiet::Off, "inputs passed to compute_metrics"}},
      {"batch_eval_metrics", {Quiet::Off, "metrics computed per batch"}},
      {"enable_jit_checkpoint", {Quiet::Off, "checkpoints on a preemption signal (kiln saves on SIGTERM anyway)"}},
      {"restore_callback_states_from_checkpoint", {Quiet::Off, "callbacks' states restored"}},
      {"full_determinism", {Quiet::Off, "torch's deterministic algorithms"}},
      {"label_names", {Quiet::Off, "label columns by name (kiln: --label_column)"}},
      {"debug", {Quiet::Off, "torch debugging modes"}},
      {"use_ipex", {Quiet::Off, "Intel Extension for PyTorch"}},
      {"jit_mode_eval", {Quiet::Off, "TorchScript evaluation"}},
      {"use_mps_device", {Quiet::Off, "Apple's MPS device"}},
      {"tpu_num_cores", {Quiet::Off, "TPUs"}},
      {"tpu_metrics_debug", {Quiet::Off, "TPUs"}},
      {"split_batches", {Quiet::Off, "accelerate's split_batches"}},
      {"dispatch_batches", {Quiet::Off, "accelerate's dispatch_batches"}},
      {"include_tokens_per_second", {Quiet::Off, "a tokens-per-second metric"}},
      {"use_legacy_prediction_loop", {Quiet::Off, "HF's legacy prediction loop"}},
      {"sortish_sampler", {Quiet::Off, "a sortish sampler"}},
      {"generation_config", {Quiet::Off, "a generation config file (kiln: --generation_max_length)"}},
      {"average_tokens_across_devices", {Quiet::True, "a loss averaged per device (kiln averages over every replica's tokens)"}},
      {"past_index", {Quiet::MinusOne, "past hidden states fed back (Transformer-XL, XLNet)"}},
      {"accelerator_config", {Quiet::Accelerator, "accelerate settings other than its defaults"}},
  };
  return table;
}

bool off(const json& v) {
  return v.is_null() || v == false || v == 0 || v == "" || (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

// accelerate's AcceleratorConfig as HF writes it by default; use_seedable_sampler only orders the data.
bool accelerator_defaults(const json& v) {
  if (off(v)) return true;
  if (!v.is_object()) return false;
  for (const auto& [k, x] : v.items()) {
    const bool fine = k == "use_seedable_sampler" || (k == "even_batches" && x == true) ||
                      ((k == "split_batches" || k == "dispatch_batches" || k == "non_blocking" ||
                        k == "gradient_accumulation_kwargs") && off(x));
    if (!fine) return false;
  }
  return true;
}

bool plain_checkpointing(const json& v) {
  if (off(v)) return true;
  if (!v.is_object()) return false;
  for (const auto& [k, x] : v.items()) {
    const bool fine = k == "use_reentrant" || k == "preserve_rng_state" || (k == "every_n_layers" && x == 1) ||
                      (k == "offload" && off(x));
    if (!fine) return false;
  }
  return true;
}

}  // namespace

void resolve_hf_aliases(json& args) {
  if (!args.is_object()) return;
  for (const auto& [old_name, new_name] : {std::pair{"gradient_checkpointing", "activation_checkpointing"},
                                           std::pair{"gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"}}) {
    if (!args.contains(new_name)) continue;
    args.erase(args[new_name].is_null() ? new_name : old_name);
  }
}

HfField classify_hf_field(const std::string& key, const json& value, std::string* why) {
  auto it = rules().find(key);
  if (it == rules().end()) return HfField::NotHf;
  const Rule& r = it->second;
  const bool quiet = r.quiet == Quiet::Any || (r.quiet == Quiet::Off && off(value)) ||
                     (r.quiet == Quiet::True && value == true) || (r.quiet == Quiet::MinusOne && value == -1) ||
                     (r.quiet == Quiet::Accelerator && accelerator_defaults(value)) ||
                     (r.quiet == Quiet::CheckpointKwargs && plain_checkpointing(value));
  if (quiet) return HfField::Ignored;
  if (why) *why = r.asks;
  return HfField::Lacking;
}

std::optional<std::pair<std::string, json>> translate_hf_field(const std::string& key, const json& value,
                                                              const std::string& source) {
  if (key == "report_to" && (value.is_array() || value.is_null())) {  // HF writes a list; null is "none"
    std::string names;
    for (const auto& n : value.is_null() ? json::array() : value) {
      KILN_CHECK(n.is_string(), source, ": key 'report_to': expected a list of strings, found ", json_found(n));
      names += (names.empty() ? "" : ",") + n.get<std::string>();
    }
    return std::pair{key, json(names.empty() ? "none" : names)};
  }
  if (key == "include_num_input_tokens_seen" && value.is_string()) {  // transformers 5: "no", "all", "non_padding"
    const std::string v = value.get<std::string>();
    KILN_CHECK(v == "no" || v == "all", source, ": key 'include_num_input_tokens_seen': '", v,
               "' is not available (kiln counts every input token, padding included: expected \"all\" or \"no\")");
    return std::pair{key, json(v == "all")};
  }
  if (key == "train_sampling_strategy") {  // transformers 5's name for the sampler
    KILN_CHECK(value == "random" || value == "group_by_length", source, ": key 'train_sampling_strategy': ",
               value.dump(), " is not available (expected \"random\" or \"group_by_length\")");
    return std::pair{std::string("group_by_length"), json(value == "group_by_length")};
  }
  return std::nullopt;
}

}  // namespace kiln::train
