#pragma once
// Trainer: Hugging Face's training loop on kiln's compiled device layer.
// Forward, backward, gradient clipping and the AdamW update of one optimizer
// step trace into one graph (the learning rate is a graph input, so it
// compiles once); losses reach the host through step closures, so logging
// never stalls the pipeline; checkpoints are HF's layout, written atomically,
// and resume exactly.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/data/loader.h"
#include "kiln/distributed/replica.h"
#include "kiln/models/model.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/schedule.h"
#include "kiln/train/question_answering.h"
#include "kiln/train/training_args.h"

namespace kiln::train {

class Reporter;       // tensorboard.h
class ProgressLine;   // progress.h
class OutputDirLock;  // output_dir.h

enum class Task { TextClassification, MaskedLM, CausalLM, Seq2Seq, TokenClassification, QuestionAnswering, MultipleChoice };

// trainer_state.json, with HF's field names.
struct TrainerState {
  int64_t global_step = 0;
  double epoch = 0;
  int64_t max_steps = 0;
  int64_t num_train_epochs = 0;
  int64_t logging_steps = 0, eval_steps = 0, save_steps = 0;
  int64_t train_batch_size = 0;
  std::vector<nlohmann::json> log_history;
  std::optional<double> best_metric;
  std::string best_model_checkpoint;
  int64_t num_input_tokens_seen = 0;
  // HF's estimate of the training's floating-point operations: 6 x the input_ids tokens (padding included,
  // every replica) x the parameters outside embedding tables, summed over the steps run.
  double total_flos = 0;
  // HF's EarlyStoppingCallback state (stateful_callbacks in trainer_state.json):
  // evaluations in a row without improvement; set once early stopping has judged an evaluation.
  std::optional<int64_t> early_stopping_patience_counter;
  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j, const std::string& source);
};

struct Predictions {
  std::vector<int64_t> labels;                 // argmax per row (classification)
  std::vector<std::vector<float>> probabilities;  // softmax per row
  std::vector<float> values;                   // regression outputs
  // Token classification: per row, the argmax tag of each of its tokens (specials included).
  std::vector<std::vector<int64_t>> token_labels;
  // Question answering: per row, a start and an end logit for each of its tokens.
  std::vector<std::vector<float>> start_logits, end_logits;
};

// The device of the calling replica under `args`: args.device for a lone
// replica in its process -- "cuda" without an index under mpirun is
// cuda:<the process's rank on its host>, one GPU per process, as torchrun's
// LOCAL_RANK -- and cpu:i for the i-th of several in-process replicas.
// Several in-process replicas with a CUDA device are an error (one GPU per
// process for now). Use it to place the model the Trainer will train.
Device replica_device(const TrainingArguments& args);

class Trainer {
 public:
  Trainer(models::PreTrainedModel& model, TrainingArguments args, Task task,
          std::shared_ptr<const data::Features> train, std::shared_ptr<const data::Features> eval,
          data::CollatorOptions collator);
  ~Trainer();

  // Trains (resuming when args.resume_from_checkpoint is set), evaluates as
  // eval_strategy says, saves checkpoints and the final model in output_dir.
  // Returns the train metrics (train_loss, train_runtime, ...). The master
  // holds output_dir's lock (OutputDirLock) meanwhile. The first step that
  // fails to run ends it with that step's error. A stop signal
  // (stop_signals.h) ends it after the steps in flight (the host queues at
  // most two ahead of the device), saved as a checkpoint:
  // it then returns no metrics, writes no final model, and
  // stopped_by_signal() is true.
  std::map<std::string, double> train();
  bool stopped_by_signal() const { return stopped_by_signal_; }
  // Metrics on the eval set, or on `features` when given, prefixed
  // ("eval_loss", "eval_accuracy", "eval_f1"; "predict_loss" for a test set;
  // multiple choice: run_swag's eval_accuracy only).
  // Question answering (run_qa's QuestionAnsweringTrainer): the windows'
  // logits become one answer per example (set_question_answering's options),
  // written to output_dir as <prefix>_predictions.json and
  // <prefix>_nbest_predictions.json; the metrics are squad's (exact_match,
  // f1) or squad_v2's when the examples have answers, and the loss is
  // reported when the windows have answer positions.
  std::map<std::string, double> evaluate(const std::string& prefix = "eval",
                                         std::shared_ptr<const data::Features> features = nullptr);
  Predictions predict(const data::Features& features);

  // Question answering's post-processing (run_qa's n_best_size, max_answer_length, ...).
  void set_question_answering(QaOptions options) { qa_ = options; }
  // run_ner's --return_entity_level_metrics: token classification reports
  // seqeval's scores per entity type (<prefix>_<TYPE>_precision, _recall,
  // _f1, _number) and the overall ones as <prefix>_overall_precision,
  // _recall, _f1, _accuracy instead of <prefix>_precision, ...
  void set_entity_level_metrics(bool on) { entity_level_metrics_ = on; }
  // Metrics every evaluate() adds to its own, computed from the evaluated rows and the prefix, inside its
  // runtime (Seq2SeqTrainer's predict_with_generate: the generated outputs' ROUGE, BLEU and gen_len). They
  // reach the log history, the report_to integrations and metric_for_best_model as the others do.
  using ExtraMetrics = std::function<std::map<std::string, double>(const data::Features&, const std::string& prefix)>;
  void set_extra_metrics(ExtraMetrics metrics) { extra_metrics_ = std::move(metrics); }

  // Files copied into every checkpoint and the final model (tokenizer files).
  void set_extra_files(std::vector<std::filesystem::path> files) { extra_files_ = std::move(files); }
  const TrainerState& state() const { return state_; }
  // Ends train() after this global step, as if the run stopped there (HF's
  // control.should_training_stop); the schedule still spans the whole run.
  void stop_after_step(int64_t step) { stop_after_ = step; }
  const TrainingArguments& args() const { return args_; }
  // Elements of optimizer state (AdamW: exp_avg + exp_avg_sq) this replica holds:
  // its share of the parameters when several replicas train (ZeRO-1).
  int64_t optimizer_state_numel() const;
  // Saves config.json, model.safetensors and the extra files into dir.
  void save_model(const std::filesystem::path& dir) const;

 private:
  // train()'s steps, in HF's _inner_training_loop order. Run: what the steps
  // of one train() call share (the plan, the loader, the queue of steps in
  // flight); StepBatches: one optimizer step's micro-batches; StepResult: what
  // that step computed, read once it has run.
  struct Run;
  struct StepBatches;
  struct StepResult;
  struct EvalOutcome;
  std::shared_ptr<OutputDirLock> begin_run();
  void make_loader(Run& run);
  void plan_schedule(Run& run);
  void resume_from_checkpoint();
  void evaluate_on_start();
  StepResult optimization_step(Run& run);
  StepBatches next_step_batches(Run& run);
  Tensor accumulate_gradients(Run& run, const StepBatches& batches, double& epoch);
  Tensor update_parameters(double lr);
  void queue_loss_readout(const Run& run, const StepResult& r);
  void queue_log_entry(const Run& run, const StepResult& r);
  EvalOutcome evaluate_during_training(const Run& run);
  void save_during_training(const Run& run, int64_t step, const std::map<std::string, double>& eval_metrics);
  void report_stop_signal(const Run& run) const;
  std::map<std::string, double> finish_training(Run& run);

  models::ModelInputs inputs_of(const data::DeviceBatch& b) const;
  // The model's loss on `in`, or the label-smoothed one with label_smoothing_factor (label_smoothing.h).
  Tensor loss_of(const models::ModelOutputs& out, const models::ModelInputs& in) const;
  // What the loss of batch b averages over: rows, or label tokens.
  double loss_items(const data::Batch& b) const;
  bool sharded() const { return replica_.world_size() > 1 && args_.shard_optimizer_state; }
  void build_optimizer();
  // The optimizer state of every parameter by name (gathered from their
  // owners when the state is sharded: every replica must call it).
  std::vector<std::pair<std::string, Tensor>> optimizer_state();
  void save_checkpoint(const std::vector<std::pair<std::string, Tensor>>& optimizer_state);
  void load_checkpoint(const std::filesystem::path& dir);
  // The model's weights from a checkpoint: model.safetensors, or a LoRA run's adapter.
  void load_model_weights(const std::filesystem::path& dir);
  void rotate_checkpoints();
  void record_log(nlohmann::json entry, int64_t step);
  // HF's EarlyStoppingCallback.on_evaluate: true when training should stop.
  bool early_stopping_says_stop(const std::map<std::string, double>& eval_metrics);
  std::filesystem::path checkpoint_dir(int64_t step) const;
  std::filesystem::path find_checkpoint(const std::string& which) const;
  // Throws the error of a step that failed to run on this replica's device.
  void throw_if_step_failed();
  // Whether a stop signal ends the run after this step: the same answer on
  // every replica (the first replica of each process reads the signal).
  bool stop_signalled() const;

  models::PreTrainedModel& model_;
  TrainingArguments args_;
  Task task_;
  QaOptions qa_;
  bool entity_level_metrics_ = false;
  ExtraMetrics extra_metrics_;
  std::shared_ptr<const data::Features> train_, eval_;
  data::CollatorOptions collator_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::optional<optim::ReduceLROnPlateau> plateau_;  // lr_scheduler_type reduce_lr_on_plateau
  std::vector<Tensor> params_;            // HF's order: decayed parameters, then the others
  std::vector<std::string> param_names_;  // their names
  std::vector<int64_t> owners_;           // the replica (global rank) that updates each
  std::vector<std::vector<size_t>> opt_index_;  // optimizer group, position -> index into params_
  std::unique_ptr<data::DataLoader> loader_;
  TrainerState state_;
  std::unique_ptr<Reporter> reporter_;  // report_to's integrations (the master's): made by train(), or by evaluate()'s log
  std::vector<std::filesystem::path> extra_files_;
  ReplicaInfo replica_;  // this trainer's replica (data shard, who logs and writes)
  Device device_;

  // Filled by step closures on the stream thread.
  std::mutex log_mu_;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  double last_loss_ = 0, last_grad_norm_ = 0, total_loss_ = 0;
  int64_t total_loss_count_ = 0;
  bool step_failed_ = false;  // a step's loss could not be read (the loop then stops)
  bool progress_tty_ = false;
  // The progress line is drawn: on a terminal, or anywhere with --disable_tqdm false (HF's tqdm).
  bool progress_on_ = false;
  bool smooth_labels_ = false;  // label_smoothing_factor applies to this model
  double flos_per_token_ = 0;  // 6 x the non-embedding parameters (TrainerState::total_flos)
  // The progress line of an evaluation or prediction over `batches` batches.
  std::shared_ptr<ProgressLine> batch_progress(const std::string& label, int64_t batches) const;
  int64_t stop_after_ = -1;
  bool stopped_by_signal_ = false;
  // Where the data stream resumes: the batch after the last one trained on.
  int64_t data_epoch_ = 0, data_position_ = 0;
};

}  // namespace kiln::train
