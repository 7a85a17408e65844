#pragma once
// TrainingArguments: Hugging Face's (transformers 4.40) names, meanings and
// defaults, set from command-line flags or a JSON object, plus kiln's
// replica/debugging fields. parse() and from_json() apply HF's __post_init__
// defaults (resolve_defaults) and then validate(), so a returned value is
// ready to use; a struct filled in by hand should call both.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::train {

struct TrainingArguments {
  std::string output_dir = "trainer_output";  // transformers 5's default
  bool overwrite_output_dir = false;
  bool do_train = false, do_eval = false, do_predict = false;
  std::string eval_strategy = "no";    // "no" | "steps" | "epoch"; the older name "evaluation_strategy" is accepted too
  std::optional<double> eval_steps;    // defaults to logging_steps when eval_strategy == "steps" (HF); < 1: a ratio
  int64_t per_device_train_batch_size = 8, per_device_eval_batch_size = 8, gradient_accumulation_steps = 1;
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8,
         max_grad_norm = 1.0, num_train_epochs = 3.0;
  int64_t max_steps = -1;
  // linear, cosine, constant, constant_with_warmup, polynomial, cosine_with_restarts, inverse_sqrt,
  // cosine_with_min_lr
  std::string lr_scheduler_type = "linear";
  // The schedule's keyword arguments (HF's dict; a JSON object on the command line), e.g. {"num_cycles": 2},
  // {"lr_end": 1e-6, "power": 2}, {"min_lr_rate": 0.1}: see optim::LRSchedule.
  nlohmann::json lr_scheduler_kwargs = nlohmann::json::object();
  double warmup_ratio = 0.0;
  // transformers 5's float: >= 1 a number of steps (truncated), below 1 a fraction of them (4.x's warmup_ratio).
  double warmup_steps = 0;
  std::string logging_strategy = "steps";  // "no" | "steps" | "epoch"
  double logging_steps = 500;          // HF allows a float < 1 = ratio of total steps
  bool logging_first_step = false;
  // A step whose loss is NaN or inf counts as the mean of the logging
  // window's other steps in the logged loss and train_loss (HF's default).
  bool logging_nan_inf_filter = true;
  // Steps (eval_strategy steps) or epochs (epoch) before the first evaluation.
  double eval_delay = 0;
  bool eval_on_start = false;          // evaluate once before the first step
  // Move predictions and losses to the host every N evaluation batches
  // (unset: at the end of the evaluation).
  std::optional<int64_t> eval_accumulation_steps;
  std::string save_strategy = "steps"; // "no" | "steps" | "epoch"
  double save_steps = 500;             // float < 1 = ratio
  std::optional<int64_t> save_total_limit;
  // Checkpoints hold the model only: no optimizer state, no data position,
  // so they cannot be resumed (HF's save_only_model).
  bool save_only_model = false;
  uint64_t seed = 42;
  std::optional<uint64_t> data_seed;
  bool dataloader_drop_last = false;
  int64_t dataloader_num_workers = 0;
  // Batch rows of similar length together (HF's LengthGroupedSampler over the global batch times
  // gradient_accumulation_steps): less padding with dynamic padding; no effect with pad_to_max_length.
  bool group_by_length = false;
  bool load_best_model_at_end = false;
  std::optional<std::string> metric_for_best_model;  // default "loss" when load_best_model_at_end (HF)
  std::optional<bool> greater_is_better;             // default: false for names ending in "loss", else true (HF)
  std::string resume_from_checkpoint;                // "" | DIR | "latest" (HF's true: "latest"; false: "")
  // Resuming: start the checkpoint's epoch from its first batch instead of where the run stopped (HF's
  // ignore_data_skip; quicker to start with a slow data source, no longer an exact continuation).
  bool ignore_data_skip = false;
  double label_smoothing_factor = 0.0;
  // Recompute each transformer layer in the backward pass instead of keeping
  // its activations (model.gradient_checkpointing_enable()).
  bool gradient_checkpointing = false;
  // TF32 tensor-core math for f32 matrix products (CUDA devices only; HF's tf32).
  bool tf32 = false;
  // bf16 mixed precision (HF's bf16, torch.autocast): matrix products in
  // bf16 with f32 sums; weights, gradients and optimizer state in f32.
  bool bf16 = false;
  bool fp16 = false;  // HF's fp16 (CUDA AMP with a loss scaler): kiln has bf16 only, so true is an error
  // Train on the CPU even when a GPU is present (HF's use_cpu; the older no_cuda is accepted for it). kiln's
  // default device is the CPU already; use_cpu with --device cuda is an error.
  bool use_cpu = false;
  // Count input_ids tokens (padding included, every replica) in trainer_state.json's num_input_tokens_seen and
  // add it to every log entry (HF's include_num_input_tokens_seen).
  bool include_num_input_tokens_seen = false;
  double ddp_bucket_cap_mb = 25;  // gradient all-reduce buckets (HF: None means DDP's 25)
  // Seconds a replica waits for the others in a collective or a rendezvous
  // before the run fails, naming the replicas that did not arrive (HF's
  // ddp_timeout; see docs/distributed.md).
  int64_t ddp_timeout = 1800;
  // HF's integration fields. report_to: HF's names, "all", "none" (the
  // default, as in transformers 5), "tensorboard", or several comma-separated
  // (a list in JSON); kiln has only TensorBoard, so "all" means it and any
  // other integration (wandb, mlflow, ...) is an error. TensorBoard event
  // files go to logging_dir (unset: output_dir/runs/<%b%d_%H-%M-%S>_<host>,
  // HF's default_logdir, chosen when the run starts). run_name is recorded
  // and read by nothing. disable_tqdm turns off the progress line.
  std::string report_to = "none";
  std::optional<std::string> logging_dir, run_name;
  std::optional<bool> disable_tqdm;
  // The optimizer, as HF's Trainer builds it (optim::make_optimizer):
  // adamw_torch (the default) and adamw_torch_fused (the same AdamW, with
  // adam_beta1/2 and adam_epsilon), adafactor (HF's, with the scheduled
  // learning rate), sgd, adagrad, rmsprop (PyTorch's defaults). Others are
  // an error naming these.
  std::string optim = "adamw_torch";
  bool save_safetensors = true;  // kiln writes safetensors only: false is an error
  bool push_to_hub = false;      // no network: true is an error
  // Seq2SeqTrainingArguments' generation fields (kiln train --task seq2seq --do_predict, kiln eval): generate the
  // outputs (up to generation_max_length tokens, default --max_target_length; beam search with
  // generation_num_beams > 1, else the model's generation_config.json's num_beams) and score them.
  bool predict_with_generate = false;
  std::optional<int64_t> generation_max_length, generation_num_beams;
  // kiln additions (also flags): replicas and debugging
  int64_t num_replicas = 1;
  // With several replicas: each keeps the AdamW state of its share of the
  // parameters and updates only those (ZeRO-1).
  bool shard_optimizer_state = false;
  bool metrics_debug = false;
  std::string device = "cpu";
  // HF's EarlyStoppingCallback as flags: stop when metric_for_best_model has
  // not improved (by more than the threshold) on the best saved checkpoint's
  // for this many evaluations in a row.
  std::optional<int64_t> early_stopping_patience;
  double early_stopping_threshold = 0.0;

  // "--name value", "--name=value", and for bools "--name" alone or "--name true|false|1|0" (HF's yes/no/t/f/y/n
  // too). HF's dashed spellings (--per-device-train-batch-size) are accepted. Numbers/strings are validated (an
  // error names the flag, the bad value and what is expected). Unknown flags are errors that suggest the closest
  // valid name ("unknown flag '--learning_rat' (did you mean --learning_rate?)"). Flags that are not
  // TrainingArguments but are named in known_extra_flags (take a value) or known_extra_switches (bool-like: alone
  // -> "true", or followed by a bool word -> "true"/"false") are returned in `rest` (name without dashes -> value;
  // a repeated flag keeps its last value, as argparse does) — the caller validates those. With rest == nullptr no
  // extra flag is accepted.
  static TrainingArguments parse(const std::vector<std::string>& args, std::map<std::string, std::string>* rest,
                                 const std::vector<std::string>& known_extra_flags,
                                 const std::vector<std::string>& known_extra_switches);
  // A JSON object with the same field names (HF's TrainingArguments JSON); unknown keys are errors that suggest.
  // null sets an optional field to unset. `source` (a file name) prefixes every error.
  static TrainingArguments from_json(const nlohmann::json& j, const std::string& source);
  // read_json_file + from_json: parse errors name the file, line and column.
  static TrainingArguments from_json_file(const std::filesystem::path& path);
  nlohmann::json to_json() const;      // every field (training_args.json in checkpoints); unset optionals are null
  // HF's __post_init__ defaults: do_eval when eval_strategy != "no"; eval_steps = logging_steps when
  // eval_strategy == "steps" and eval_steps is unset or 0; metric_for_best_model = "loss" when load_best_model_at_end;
  // greater_is_better from the metric's name.
  void resolve_defaults();
  void validate() const;               // ranges: positive batch sizes, 0<=warmup_ratio<=1, valid strategy names, ...;
                                       // load_best_model_at_end requires eval_strategy == save_strategy (HF's rule)

  // Derived
  // Whether report_to names `integration` ("tensorboard"), "all" included.
  bool reports_to(const std::string& integration) const;
  int64_t train_batch_size() const { return per_device_train_batch_size * num_replicas; }
  int64_t num_warmup_steps(int64_t total_steps) const;
  std::map<std::string, double> schedule_kwargs() const;  // lr_scheduler_kwargs (validated: numbers)   // warmup_steps if > 0 else ceil(warmup_ratio * total) (HF)
  int64_t steps_from_ratio(double v, int64_t total_steps) const;  // v < 1 -> ceil(v * total) (HF), else v
  // Steps between logs / evaluations / saves for a run of total_steps (eval falls back to logging_steps).
  int64_t logging_interval(int64_t total_steps) const { return steps_from_ratio(logging_steps, total_steps); }
  int64_t eval_interval(int64_t total_steps) const;
  int64_t save_interval(int64_t total_steps) const { return steps_from_ratio(save_steps, total_steps); }

  // Every field's flag/JSON name, in declaration order (without the "evaluation_strategy" alias).
  static const std::vector<std::string>& field_names();
  // One line per flag: "  --name VALUE  (default: ...)", for --help.
  static std::string help();

  bool operator==(const TrainingArguments&) const = default;
};

// The candidate nearest to `word` by edit distance, or "" when none is close
// (distance > max(2, |word| / 3)). Used to suggest flag and key names.
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);

// HF's string_to_bool words, case-insensitive: true/false, 1/0, yes/no, t/f, y/n; nullopt for anything else.
std::optional<bool> parse_bool_word(std::string v);

}  // namespace kiln::train
