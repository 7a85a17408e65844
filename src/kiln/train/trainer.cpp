#include "kiln/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>

#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/mpi.h"
#include "kiln/distributed/replica.h"
#include "kiln/distributed/timeout.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/lora.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/metrics.h"
#include "kiln/train/decay.h"
#include "kiln/train/flow.h"
#include "kiln/train/label_smoothing.h"
#include "kiln/train/output_dir.h"
#include "kiln/train/progress.h"
#include "kiln/train/seqeval.h"
#include "kiln/train/stop_signals.h"
#include "kiln/train/tensorboard.h"

namespace kiln::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Forward passes under --bf16 run inside an Autocast; without the flag this
// is a no-op (HF's autocast_smart_context_manager), so an Autocast the
// caller opened stays on.
class Bf16Scope {
 public:
  explicit Bf16Scope(bool bf16) {
    if (bf16) on_.emplace();
  }

 private:
  std::optional<Autocast> on_;
};

// Accuracy and macro-F1 of predictions against labels over C classes.
std::pair<double, double> accuracy_f1(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold, int64_t C) {
  int64_t correct = 0;
  std::vector<int64_t> tp(C, 0), fp(C, 0), fn(C, 0);
  for (size_t i = 0; i < pred.size(); ++i) {
    if (pred[i] == gold[i]) {
      ++correct;
      ++tp[gold[i]];
    } else {
      if (pred[i] >= 0 && pred[i] < C) ++fp[pred[i]];
      if (gold[i] >= 0 && gold[i] < C) ++fn[gold[i]];
    }
  }
  double f1 = 0;
  for (int64_t c = 0; c < C; ++c) {
    double denom = 2.0 * tp[c] + fp[c] + fn[c];
    f1 += denom > 0 ? 2.0 * tp[c] / denom : 0.0;
  }
  return {pred.empty() ? 0.0 : static_cast<double>(correct) / pred.size(), C ? f1 / C : 0.0};
}

// Steps the host may have queued ahead of the device: enough to trace the
// next step while one runs, few enough that a stop signal or a failed step
// ends the run within a step or two, not after everything queued has run.
constexpr size_t kStepsInFlight = 2;

// HF's num_parameters(exclude_embeddings=True): the parameters outside nn.Embedding tables (word, position and
// token-type embeddings, T5's shared table and relative attention bias), each tied weight once.
int64_t non_embedding_parameters(const models::PreTrainedModel& model) {
  static const char* const kTables[] = {"word_embeddings.weight", "position_embeddings.weight",
                                        "token_type_embeddings.weight", "wte.weight", "wpe.weight",
                                        "embed_tokens.weight", "shared.weight", "relative_attention_bias.weight"};
  int64_t n = 0;
  for (const auto& named : model.named_parameters()) {
    const std::string& name = named.first;  // (a plain reference: clang 14 cannot capture a binding)
    if (std::none_of(std::begin(kTables), std::end(kTables), [&](const char* t) { return name.ends_with(t); }))
      n += named.second.numel();
  }
  return n;
}

}  // namespace

json TrainerState::to_json() const {
  json j{{"best_metric", best_metric ? json(*best_metric) : json(nullptr)},
         {"best_model_checkpoint", best_model_checkpoint.empty() ? json(nullptr) : json(best_model_checkpoint)},
         {"epoch", epoch},
         {"eval_steps", eval_steps},
         {"global_step", global_step},
         {"is_hyper_param_search", false},
         {"is_local_process_zero", true},
         {"is_world_process_zero", true},
         {"log_history", log_history},
         {"logging_steps", logging_steps},
         {"max_steps", max_steps},
         {"num_input_tokens_seen", num_input_tokens_seen},
         {"num_train_epochs", num_train_epochs},
         {"save_steps", save_steps},
         {"total_flos", total_flos},
         {"train_batch_size", train_batch_size},
         {"trial_name", nullptr},
         {"trial_params", nullptr}};
  // Only with early stopping: transformers 4.40's TrainerState has no such field and would refuse it.
  if (early_stopping_patience_counter)
    j["stateful_callbacks"] = {{"EarlyStoppingCallback",
                                {{"attributes", {{"early_stopping_patience_counter", *early_stopping_patience_counter}}}}}};
  return j;
}

TrainerState TrainerState::from_json(const json& j, const std::string& src) {
  TrainerState s;
  auto required = [&](const char* key) {
    KILN_CHECK(j.is_object() && j.contains(key), src, ": malformed trainer state: no '", key, "'");
  };
  required("global_step");
  required("epoch");
  required("log_history");
  s.global_step = json_value<int64_t>(j, "global_step", src);
  KILN_CHECK(s.global_step >= 0, src, ": 'global_step' must be >= 0, got ", s.global_step);
  s.epoch = json_value<double>(j, "epoch", 0, src);
  s.max_steps = json_value<int64_t>(j, "max_steps", 0, src);
  s.num_train_epochs = json_value<int64_t>(j, "num_train_epochs", 0, src);
  s.logging_steps = json_value<int64_t>(j, "logging_steps", 0, src);
  s.eval_steps = json_value<int64_t>(j, "eval_steps", 0, src);
  s.save_steps = json_value<int64_t>(j, "save_steps", 0, src);
  s.train_batch_size = json_value<int64_t>(j, "train_batch_size", 0, src);
  const json& history = j["log_history"];
  KILN_CHECK(history.is_array(), src, ": 'log_history' must be a list, got ", json_found(history));
  for (size_t i = 0; i < history.size(); ++i) {
    KILN_CHECK(history[i].is_object(), src, ": log_history[", i, "] must be an object, got ", json_found(history[i]));
    s.log_history.push_back(history[i]);
  }
  s.num_input_tokens_seen = json_value<int64_t>(j, "num_input_tokens_seen", 0, src);
  s.total_flos = json_value<double>(j, "total_flos", 0, src);
  if (j.contains("stateful_callbacks") && j["stateful_callbacks"].is_object() &&
      j["stateful_callbacks"].contains("EarlyStoppingCallback")) {
    const std::string where = src + ": stateful_callbacks.EarlyStoppingCallback";
    const json& cb = j["stateful_callbacks"]["EarlyStoppingCallback"];
    KILN_CHECK(cb.is_object() && cb.contains("attributes"), where, ": no 'attributes'");
    KILN_CHECK(cb["attributes"].is_object() && cb["attributes"].contains("early_stopping_patience_counter"), where,
               ": no 'attributes.early_stopping_patience_counter'");
    s.early_stopping_patience_counter =
        json_value<int64_t>(cb["attributes"], "early_stopping_patience_counter", 0, where + ".attributes");
  }
  if (j.contains("best_metric") && !j["best_metric"].is_null())
    s.best_metric = json_value<double>(j, "best_metric", 0, src);
  s.best_model_checkpoint = json_value<std::string>(j, "best_model_checkpoint", "", src);
  return s;
}

Device replica_device(const TrainingArguments& args) {
  const ReplicaInfo& r = this_replica();
  const Device wanted = Device::parse(args.device);
  if (r.local_count == 1)
    return args.device == "cuda" && r.process_count > 1 ? Device::cuda(dist::mpi::local_rank()) : wanted;
  KILN_CHECK(wanted.kind == DeviceKind::CPU, "TrainingArguments: device '", args.device, "' with num_replicas ",
             r.local_count, ": in-process replicas run on the CPU only (run one process per GPU)");
  return r.device;
}

Trainer::Trainer(models::PreTrainedModel& model, TrainingArguments args, Task task,
                 std::shared_ptr<const data::Features> train, std::shared_ptr<const data::Features> eval,
                 data::CollatorOptions collator)
    : model_(model),
      args_(std::move(args)),
      task_(task),
      train_(std::move(train)),
      eval_(std::move(eval)),
      collator_(std::move(collator)),
      replica_(this_replica()),
      device_(replica_device(args_)) {
  args_.validate();
  KILN_CHECK(args_.num_replicas == replica_.local_count, "Trainer: num_replicas is ", args_.num_replicas, " but ",
             replica_.local_count, " replica(s) run in this process: construct one Trainer per replica inside "
             "kiln::spawn(fn, num_replicas)");
  dist::set_timeout(static_cast<double>(args_.ddp_timeout));  // every replica passes the same
  progress_tty_ = ::isatty(STDERR_FILENO) && replica_.is_master() && !args_.disable_tqdm.value_or(false);
  flos_per_token_ = 6.0 * static_cast<double>(non_embedding_parameters(model_));
  progress_on_ = replica_.is_master() && (args_.disable_tqdm ? !*args_.disable_tqdm : progress_tty_);
  if (args_.gradient_checkpointing) model_.set_gradient_checkpointing(true);  // as HF's Trainer does
  smooth_labels_ = label_smoothing_applies(args_.label_smoothing_factor, model_, task_ == Task::QuestionAnswering,
                                          replica_.is_master());
  if (args_.tf32) set_allow_tf32(true);  // HF: torch.backends.cuda.matmul.allow_tf32 = True
  build_optimizer();
}

Trainer::~Trainer() {
  // Step closures reference this trainer: let them finish. Never throw from
  // here (a destructor runs while an error unwinds, e.g. a missing device):
  // whatever failed was reported to the caller already.
  try {
    wait_device_ops(device_);
  } catch (const std::exception&) {
  }
}

void Trainer::build_optimizer() {
  // HF's grouping (get_decay_parameter_names): decayed parameters first, then the others.
  std::vector<std::pair<std::string, Tensor>> no_decay;
  const std::unordered_set<std::string> exempt = no_decay_parameter_names(model_);
  params_.clear();
  param_names_.clear();
  for (auto& [name, p] : model_.named_parameters()) {
    if (!p.requires_grad()) continue;  // frozen (LoRA's base): no gradient, no optimizer state
    if (!exempt.count(name)) {
      params_.push_back(p);
      param_names_.push_back(name);
    } else {
      no_decay.emplace_back(name, p);
    }
  }
  const size_t decayed = params_.size();
  for (auto& [name, p] : no_decay) {
    params_.push_back(p);
    param_names_.push_back(name);
  }
  // With several replicas each parameter's optimizer state lives on one of
  // them (ZeRO-1): the owner updates it and sends the result to the others.
  const int world = replica_.world_size();
  owners_ = sharded() ? optim::shard_owners(params_, world) : std::vector<int64_t>(params_.size(), 0);
  optim::ParamGroup groups[2] = {{{}, args_.weight_decay}, {{}, 0.0}};
  std::vector<size_t> index[2];
  for (size_t k = 0; k < params_.size(); ++k)
    if (!sharded() || owners_[k] == replica_.global_rank()) {
      const int g = k < decayed ? 0 : 1;
      groups[g].params.push_back(params_[k]);
      index[g].push_back(k);
    }
  std::vector<optim::ParamGroup> used;
  opt_index_.clear();
  for (int g = 0; g < 2; ++g)
    if (!groups[g].params.empty()) {
      used.push_back(groups[g]);
      opt_index_.push_back(index[g]);
    }
  optimizer_ = optim::make_optimizer(args_.optim, used,
                                     {.lr = args_.learning_rate,
                                      .adam_beta1 = args_.adam_beta1,
                                      .adam_beta2 = args_.adam_beta2,
                                      .adam_epsilon = args_.adam_epsilon});
}

int64_t Trainer::optimizer_state_numel() const {
  int64_t n = 0;
  for (size_t g = 0; g < opt_index_.size(); ++g)
    for (size_t i = 0; i < opt_index_[g].size(); ++i)
      for (const auto& s : optimizer_->state(g, i)) n += s.value.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Trainer::optimizer_state() {
  // Every parameter's state in state_spec's order, then the names to match.
  std::vector<std::vector<Tensor>> state(params_.size());
  for (size_t g = 0; g < opt_index_.size(); ++g)
    for (size_t i = 0; i < opt_index_[g].size(); ++i)
      for (const auto& s : optimizer_->state(g, i)) state[opt_index_[g][i]].push_back(s.value);
  std::vector<std::vector<std::pair<std::string, Shape>>> spec(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) spec[k] = optimizer_->state_spec(params_[k].shape());
  if (sharded()) {
    // Every replica takes part; the owners' state arrives everywhere. A
    // replica passes zeros for the state it does not hold.
    std::vector<Tensor> flat;
    std::vector<int64_t> owners;
    for (size_t k = 0; k < params_.size(); ++k)
      for (size_t j = 0; j < spec[k].size(); ++j) {
        flat.push_back(state[k].empty() ? zeros(spec[k][j].second, DType::f32, device_) : state[k][j]);
        owners.push_back(owners_[k]);
      }
    flat = optim::gather_from_owners(flat, owners);
    mark_step(device_);
    size_t at = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      state[k].clear();
      for (size_t j = 0; j < spec[k].size(); ++j) state[k].push_back(flat[at++]);
    }
  }
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t k = 0; k < params_.size(); ++k)
    for (size_t j = 0; j < spec[k].size(); ++j)
      out.emplace_back("state." + param_names_[k] + "." + spec[k][j].first, state[k][j]);
  return out;
}

double Trainer::loss_items(const data::Batch& b) const {
  if (b.weight == 0) return 0;
  auto count = [](auto begin, auto end) { return static_cast<double>(std::count_if(begin, end, [](int64_t y) { return y != -100; })); };
  switch (task_) {
    case Task::TextClassification:
    case Task::QuestionAnswering:
    case Task::MultipleChoice: return static_cast<double>(b.batch_size);
    case Task::MaskedLM:
    case Task::Seq2Seq:
    case Task::TokenClassification: return count(b.labels.begin(), b.labels.end());
    case Task::CausalLM: {  // the model predicts token t+1 from t: the first label of a row is never a target
      double n = 0;
      for (int64_t i = 0; i < b.batch_size; ++i)
        n += count(b.labels.begin() + i * b.seq_len + 1, b.labels.begin() + (i + 1) * b.seq_len);
      return n;
    }
  }
  return static_cast<double>(b.batch_size);
}

namespace {
// A LoRA checkpoint resumes only into the adapter it was written by: the
// settings that shape the adapter or its training, compared as PEFT writes them.
void check_same_adapter(const fs::path& dir, const models::LoraConfig& run) {
  const std::string file = (dir / "adapter_config.json").string();
  const json saved = models::read_adapter_config(dir).to_json(), now = run.to_json();
  auto normal = [](json v) {
    if (v.is_array()) std::sort(v.begin(), v.end());  // PEFT writes its target set in any order
    return v;
  };
  for (const char* key : {"r", "lora_alpha", "lora_dropout", "use_rslora", "use_dora", "target_modules", "exclude_modules",
                          "modules_to_save", "rank_pattern", "alpha_pattern", "fan_in_fan_out", "bias", "lora_bias",
                          "trainable_token_indices"}) {
    const json a = normal(saved.value(key, json())), b = normal(now.value(key, json()));
    KILN_CHECK(a == b, "resume_from_checkpoint: ", file, ": '", key, "' is ", a.dump(), ", but this run's adapter has ",
               b.dump(), ": resume with the checkpoint's LoRA settings (--lora_r, --lora_alpha, --lora_dropout, ",
               "--lora_target_modules, --lora_modules_to_save, --use_rslora, --use_dora, --lora_train_bias, --lora_bias, --trainable_token_indices)");
  }
}

// The evaluation metric that picks the best checkpoint, as HF names it:
// metric_for_best_model (default "loss") with the "eval_" prefix.
std::string best_metric_name(const TrainingArguments& a) {
  const std::string m = a.metric_for_best_model.value_or("loss");
  return m.rfind("eval_", 0) == 0 ? m : "eval_" + m;
}
// Whether a larger best metric is better: greater_is_better, else HF's rule (not for names ending in "loss").
bool greater_is_better(const TrainingArguments& a) {
  const std::string name = best_metric_name(a);
  return a.greater_is_better.value_or(name.size() < 4 || name.substr(name.size() - 4) != "loss");
}
}  // namespace

models::ModelInputs Trainer::inputs_of(const data::DeviceBatch& b) const {
  auto get = [&](const char* k) {
    auto it = b.tensors.find(k);
    return it == b.tensors.end() ? Tensor() : it->second;
  };
  models::ModelInputs in;
  in.input_ids = get("input_ids");
  in.attention_mask = get("attention_mask");
  // As HF's tokenizers and Trainer: token types only for models whose
  // tokenizer gives them (a GPT-2 would add them to its embeddings).
  if (model_.tokenizer_gives_token_types()) in.token_type_ids = get("token_type_ids");
  in.labels = get("labels");
  in.position_ids = get("position_ids");
  in.start_positions = get("start_positions");
  in.end_positions = get("end_positions");
  return in;
}

Tensor Trainer::loss_of(const models::ModelOutputs& out, const models::ModelInputs& in) const {
  if (!smooth_labels_ || !in.labels.defined()) return out.loss;
  return smoothed_loss(out, in, args_.label_smoothing_factor, task_ == Task::CausalLM);
}

void Trainer::record_log(json entry, int64_t step) {
  std::lock_guard<std::mutex> lock(log_mu_);
  // Step closures bring the count of their step; the others log now.
  if (args_.include_num_input_tokens_seen && !entry.contains("num_input_tokens_seen"))
    entry["num_input_tokens_seen"] = state_.num_input_tokens_seen;
  entry["step"] = step;
  if (!replica_.is_master()) return;  // one replica speaks for all
  if (progress_tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", entry.dump().c_str());
  if (!reporter_) reporter_ = std::make_unique<Reporter>(args_, model_.config().to_json());
  reporter_->log(entry, step);
  state_.log_history.push_back(std::move(entry));
}

fs::path Trainer::checkpoint_dir(int64_t step) const {
  return fs::path(args_.output_dir) / ("checkpoint-" + std::to_string(step));
}

fs::path Trainer::find_checkpoint(const std::string& which) const {
  if (which != "latest") {
    KILN_CHECK(fs::is_directory(which), "resume_from_checkpoint: '", which, "' is not a checkpoint directory");
    return which;
  }
  std::map<int64_t, fs::path> steps;  // the checkpoint-N directories by N
  if (fs::is_directory(args_.output_dir))
    for (const auto& e : fs::directory_iterator(args_.output_dir)) {
      std::string n = e.path().filename().string();
      if (n.rfind("checkpoint-", 0) != 0 || !e.is_directory()) continue;
      char* end = nullptr;
      long long step = std::strtoll(n.c_str() + 11, &end, 10);
      if (*end == 0 && step >= 0) steps[step] = e.path();
    }
  KILN_CHECK(!steps.empty(), "resume_from_checkpoint latest: no checkpoint-N directory in ", args_.output_dir);
  // The newest complete one. kiln publishes and removes checkpoints whole;
  // one with files missing was copied or cut short by something else.
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string missing = missing_checkpoint_file(it->second);
    if (missing.empty()) return it->second;
    if (replica_.is_master())
      std::fprintf(stderr, "kiln train: warning: resume_from_checkpoint latest: skipping %s: %s is missing\n",
                   it->second.string().c_str(), missing.c_str());
  }
  throw Error("resume_from_checkpoint latest: no complete checkpoint-N directory in " + args_.output_dir);
}

void Trainer::save_model(const fs::path& dir) const {
  if (model_.lora_config())
    models::save_adapter(model_, dir);  // PEFT's files: the adapter, not the frozen base
  else
    model_.save_pretrained(dir);
  for (const auto& f : extra_files_) {
    std::error_code ec;
    fs::copy_file(f, dir / f.filename(), fs::copy_options::overwrite_existing, ec);
    KILN_CHECK(!ec, "cannot copy ", f.string(), " into ", dir.string(), ": ", ec.message());
  }
}

void Trainer::load_model_weights(const fs::path& dir) {
  if (model_.lora_config()) {
    models::load_adapter_weights(model_, dir);
    return;
  }
  auto weights = io::load_safetensors(dir / "model.safetensors", device_);
  nn::LoadReport report = model_.load_state_dict(weights, false);
  KILN_CHECK(report.ok(), "resume_from_checkpoint: ", (dir / "model.safetensors").string(),
             " does not match the model:\n", report.describe());
}

void Trainer::save_checkpoint(const std::vector<std::pair<std::string, Tensor>>& opt) {
  wait_device_ops(device_);  // values and log_history complete
  throw_if_step_failed();
  fs::path final_dir = checkpoint_dir(state_.global_step);
  fs::path tmp = fs::path(args_.output_dir) / ("tmp-checkpoint-" + std::to_string(state_.global_step));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  save_model(tmp);
  if (!args_.save_only_model) {  // what resuming needs besides the model
    // Optimizer state by parameter name.
    io::save_safetensors(tmp / "optimizer.safetensors", opt,
                         {{"step", std::to_string(optimizer_->steps_taken())}, {"optim", args_.optim}});
    json scheduler{{"type", args_.lr_scheduler_type}, {"last_epoch", state_.global_step}};
    if (plateau_) scheduler["reduce_lr_on_plateau"] = plateau_->state_dict();
    io::write_json_file_atomic(tmp / "scheduler.json", scheduler);
    Generator& gen = model_.dropout_generator();
    io::write_json_file_atomic(tmp / "rng_state.json",
                               json{{"dropout_seed", gen.seed()}, {"dropout_offset", gen.offset()},
                                    {"data_epoch", data_epoch_},
                                    {"data_position", data_position_},
                                    {"data_batch_size", loader_->options().batch_size},
                                    {"data_batches_per_epoch", loader_->batches_per_epoch()}});
  }
  io::write_json_file_atomic(tmp / "training_args.json", args_.to_json());
  io::write_json_file_atomic(tmp / "trainer_state.json", state_.to_json());
  // Publish: the directory appears whole or not at all.
  if (fs::exists(final_dir)) discard_checkpoint(final_dir);
  fs::rename(tmp, final_dir);
  rotate_checkpoints();
}

void Trainer::rotate_checkpoints() {
  if (!args_.save_total_limit || *args_.save_total_limit <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> cps;
  for (const auto& e : fs::directory_iterator(args_.output_dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("checkpoint-", 0) == 0 && e.is_directory()) cps.emplace_back(std::atoll(n.c_str() + 11), e.path());
  }
  std::sort(cps.begin(), cps.end());
  // The best checkpoint is never deleted (HF moves it to the end of the list).
  auto best = std::find_if(cps.begin(), cps.end(), [&](auto& c) {
    return !state_.best_model_checkpoint.empty() && fs::equivalent(c.second, state_.best_model_checkpoint);
  });
  if (best != cps.end()) std::rotate(best, best + 1, cps.end());
  int64_t limit = *args_.save_total_limit;
  if (!state_.best_model_checkpoint.empty() && limit == 1 && cps.size() > 1 && best != cps.end()) limit = 2;
  for (size_t i = 0; i + limit < cps.size(); ++i) discard_checkpoint(cps[i].second);
}

namespace {

// optimizer.safetensors' "step" metadata: the optimizer steps taken, a decimal integer >= 0.
int64_t metadata_step(const std::string& text, const std::string& file) {
  int64_t step = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  KILN_CHECK(ec == std::errc() && end == text.data() + text.size() && step >= 0, file,
             ": metadata 'step' must be an integer >= 0, got '", text, "'");
  return step;
}

}  // namespace

void Trainer::load_checkpoint(const fs::path& dir) {
  if (replica_.is_master()) std::fprintf(stderr, "kiln train: resuming from %s\n", dir.string().c_str());
  if (!fs::exists(dir / "optimizer.safetensors") && fs::exists(dir / "training_args.json")) {
    json saved = read_json_file(dir / "training_args.json");
    KILN_CHECK(!(saved.is_object() && saved.value("save_only_model", false)), "resume_from_checkpoint: ",
               dir.string(), " was saved with save_only_model: it holds the model but no optimizer state or data ",
               "position, so training cannot resume from it (start a new run with --model_name_or_path ",
               dir.string(), ")");
  }
  const bool adapter_checkpoint = fs::exists(dir / "adapter_config.json");
  KILN_CHECK(adapter_checkpoint == (model_.lora_config() != nullptr), "resume_from_checkpoint: ", dir.string(),
             adapter_checkpoint ? " holds a LoRA adapter (a --use_peft run): resume with the same --use_peft flags"
                                : " holds a full model, but this run trains a LoRA adapter (--use_peft): resume "
                                  "without --use_peft");
  if (adapter_checkpoint) check_same_adapter(dir, *model_.lora_config());
  const char* weights_file = model_.lora_config() ? "adapter_model.safetensors" : "model.safetensors";
  for (const char* f : {weights_file, "optimizer.safetensors", "trainer_state.json", "rng_state.json"})
    KILN_CHECK(fs::exists(dir / f), "resume_from_checkpoint: ", (dir / f).string(), " is missing: not a complete checkpoint");
  load_model_weights(dir);
  io::SafetensorsFile opt = io::SafetensorsFile::open(dir / "optimizer.safetensors");
  const std::string opt_file = (dir / "optimizer.safetensors").string();
  // Checkpoints from before the optimizer was recorded were all AdamW's.
  auto written_by = opt.metadata().find("optim");
  const std::string saved_optim = written_by == opt.metadata().end() ? "adamw_torch" : written_by->second;
  auto adamw = [](const std::string& o) { return o == "adamw_torch" || o == "adamw_torch_fused"; };
  KILN_CHECK(saved_optim == args_.optim || (adamw(saved_optim) && adamw(args_.optim)), "resume_from_checkpoint: ",
             opt_file, " holds the state of optim '", saved_optim, "', but this run uses optim '", args_.optim,
             "': resume with --optim ", saved_optim, ", or start a new run from the model with --model_name_or_path");
  NoGradGuard no_grad;
  for (size_t g = 0; g < opt_index_.size(); ++g)
    for (size_t i = 0; i < opt_index_[g].size(); ++i) {
      const size_t k = opt_index_[g][i];
      for (auto& s : optimizer_->state(g, i)) {
        std::string key = "state." + param_names_[k] + "." + s.name;
        KILN_CHECK(opt.find(key), opt_file, ": tensor '", key, "' is missing");
        Tensor t = opt.load(key, device_);
        KILN_CHECK(t.shape() == s.value.shape(), opt_file, ": tensor '", key, "' has shape ", to_string(t.shape()),
                   ", expected ", to_string(s.value.shape()));
        s.value.set_data(t);
      }
    }
  if (plateau_) {  // the one schedule with state beyond the step count
    const fs::path file = dir / "scheduler.json";
    KILN_CHECK(fs::exists(file), "resume_from_checkpoint: ", file.string(), " is missing: not a complete checkpoint");
    json scheduler = read_json_file(file);
    KILN_CHECK(scheduler.is_object() && scheduler.contains("reduce_lr_on_plateau"), file.string(),
               ": no reduce_lr_on_plateau state (the checkpoint was written with lr_scheduler_type '",
               scheduler.is_object() ? scheduler.value("type", std::string("?")) : std::string("?"), "')");
    plateau_->load_state_dict(scheduler["reduce_lr_on_plateau"], file.string());
  }
  auto meta = opt.metadata().find("step");
  KILN_CHECK(meta != opt.metadata().end(), (dir / "optimizer.safetensors").string(), ": no 'step' in metadata");
  optimizer_->set_steps_taken(metadata_step(meta->second, opt_file));
  state_ = TrainerState::from_json(read_json_file(dir / "trainer_state.json"), (dir / "trainer_state.json").string());
  const std::string rng_file = (dir / "rng_state.json").string();
  json rng = read_json_file(rng_file);
  try {
    model_.dropout_generator().set_state(json_value<uint64_t>(rng, "dropout_seed", rng_file),
                                         json_value<uint64_t>(rng, "dropout_offset", rng_file));
    data_epoch_ = json_value<int64_t>(rng, "data_epoch", rng_file);
    data_position_ = json_value<int64_t>(rng, "data_position", rng_file);
    // Every epoch begun after the first follows at least one optimizer step.
    KILN_CHECK(data_epoch_ >= 0 && data_epoch_ <= state_.global_step, rng_file, ": 'data_epoch' must be in [0, ",
               state_.global_step, "] (trainer_state.json's global_step), got ", data_epoch_);
    // Written with another global micro-batch (replicas x per-device batch):
    // the same place in the epoch, counted in rows.
    const int64_t saved_batch = json_value<int64_t>(rng, "data_batch_size", loader_->options().batch_size, rng_file);
    KILN_CHECK(saved_batch >= 1, rng_file, ": 'data_batch_size' must be >= 1, got ", saved_batch);
    if (saved_batch != loader_->options().batch_size) {
      const int64_t saved_per_epoch = json_value<int64_t>(rng, "data_batches_per_epoch", rng_file);
      KILN_CHECK(saved_per_epoch >= 1 && data_position_ >= 0 && data_position_ <= saved_per_epoch, rng_file,
                 ": 'data_position' ", data_position_, " must be in [0, 'data_batches_per_epoch' ", saved_per_epoch,
                 "], and that >= 1");
      const int64_t rows = data_position_ * saved_batch, now = loader_->options().batch_size;
      if (data_position_ == saved_per_epoch) data_position_ = loader_->batches_per_epoch();
      else {
        KILN_CHECK(rows % now == 0, (dir / "rng_state.json").string(), ": the run stopped ", rows,
                   " rows into epoch ", data_epoch_, ", not a whole number of global batches of ", now,
                   " (replicas x per_device_train_batch_size); resume with a global batch that divides it");
        data_position_ = rows / now;
      }
    }
    // HF's ignore_data_skip: an unfinished epoch again from its first batch (a finished one is done).
    if (args_.ignore_data_skip && data_position_ < loader_->batches_per_epoch()) data_position_ = 0;
    try {
      loader_->seek(data_epoch_, data_position_);
    } catch (const Error& e) {  // a position past this data set's epoch: name the file it came from
      throw Error((dir / "rng_state.json").string() + ": " + e.what());
    }
  } catch (const json::exception& e) {
    throw Error((dir / "rng_state.json").string() + ": malformed: " + e.what());
  }
}

// One train() call: its plan (batch sizes, the number of optimizer steps, the
// schedule), its data stream and the steps the host has queued.
struct Trainer::Run {
  int world = 1;
  int64_t global_batch = 0;      // rows of one micro-batch over every replica
  int64_t accum = 1;             // micro-batches per optimizer step
  int64_t samples_per_step = 0;  // global_batch x accum
  int64_t updates_per_epoch = 0, total = 0, start_step = 0;
  int64_t start_tokens = 0;  // num_input_tokens_seen when this train() call began
  // The examples a step takes on average, as HF's speed metrics count them:
  // num_train_samples (the examples of the epochs asked for, or max_steps
  // full batches) over the steps. Less than samples_per_step when the last
  // batch of an epoch is short or a batch is larger than the data set.
  double step_samples = 0;
  std::optional<optim::LRSchedule> schedule;
  std::optional<data::DeviceLoader> device_loader;
  std::shared_ptr<ProgressLine> progress;
  std::deque<std::future<void>> in_flight;  // one per queued step, ready once it has run
  std::chrono::steady_clock::time_point t0;
};

struct Trainer::StepBatches {
  std::vector<data::DeviceBatch> batches;
  std::vector<double> items;  // what each micro-batch's loss averages over (loss_items)
  double step_items = 0;      // their sum over every micro-batch of every replica
};

struct Trainer::StepResult {
  int64_t step = 0;  // the global step just taken
  double epoch = 0, lr = 0;
  int64_t tokens_seen = 0;
  Tensor loss_sum, grad_norm;
};

struct Trainer::EvalOutcome {
  std::map<std::string, double> metrics;
  bool stop_early = false;
};

// Checks the inputs; the master prepares and locks output_dir for the run, and
// clears what a killed run left there.
std::shared_ptr<OutputDirLock> Trainer::begin_run() {
  KILN_CHECK(train_ && train_->size() > 0, "train: the training set is empty");
  // HF's Trainer refuses this too: the evaluations would silently never happen.
  KILN_CHECK(args_.eval_strategy == "no" || (eval_ && eval_->size() > 0), "train: eval_strategy is '",
             args_.eval_strategy, "' but there is no evaluation set (--validation_file)");
  const fs::path out(args_.output_dir);
  std::shared_ptr<OutputDirLock> out_lock;
  if (replica_.is_master()) {
    prepare_output_dir(out);
    out_lock = OutputDirLock::acquire(out);
    remove_checkpoint_leftovers(out);
    // Here, not in a step closure: it may throw.
    if (!reporter_) reporter_ = std::make_unique<Reporter>(args_, model_.config().to_json());
  }
  take_step_failure(device_);  // a failure before this run is not its own
  stopped_by_signal_ = step_failed_ = false;
  return out_lock;
}

// Every replica walks the same global batches and takes its share of each.
void Trainer::make_loader(Run& run) {
  run.world = replica_.world_size();
  run.global_batch = args_.per_device_train_batch_size * run.world;
  run.accum = args_.gradient_accumulation_steps;
  run.samples_per_step = run.global_batch * run.accum;
  data::LoaderOptions lo;
  lo.batch_size = run.global_batch;
  lo.shuffle = true;
  lo.seed = args_.data_seed.value_or(args_.seed);
  lo.drop_last = args_.dataloader_drop_last;
  lo.num_workers = static_cast<int>(args_.dataloader_num_workers);
  lo.shard = replica_.global_rank();
  lo.num_shards = run.world;
  if (args_.group_by_length) lo.length_grouped_batch = run.global_batch * run.accum;
  loader_ = std::make_unique<data::DataLoader>(train_, lo, collator_);
}

// The number of optimizer steps, the learning-rate schedule, and the state's
// view of them (trainer_state.json's max_steps, num_train_epochs, *_steps).
void Trainer::plan_schedule(Run& run) {
  // HF's num_update_steps_per_epoch: an epoch's last step takes the micro-batches left (next_step_batches).
  const int64_t batches = loader_->batches_per_epoch();
  run.updates_per_epoch = std::max<int64_t>(batches / run.accum + (batches % run.accum > 0 ? 1 : 0), 1);
  const double epoch_steps = std::ceil(args_.num_train_epochs * static_cast<double>(run.updates_per_epoch));
  KILN_CHECK(args_.max_steps > 0 || epoch_steps < 1e18, "train: --num_train_epochs ", args_.num_train_epochs, " x ",
             run.updates_per_epoch, " optimizer steps an epoch is more steps than a run can count (at most 1e18)");
  const int64_t total = args_.max_steps > 0 ? args_.max_steps : static_cast<int64_t>(epoch_steps);
  KILN_CHECK(total > 0, "train: no optimizer steps to take (num_train_epochs ", args_.num_train_epochs, ", max_steps ",
             args_.max_steps, ")");
  run.total = total;
  run.step_samples = args_.max_steps > 0
                         ? static_cast<double>(run.samples_per_step)
                         : static_cast<double>(train_->size()) * args_.num_train_epochs / static_cast<double>(total);
  run.schedule.emplace(args_.lr_scheduler_type, args_.learning_rate, args_.num_warmup_steps(total), total,
                       args_.schedule_kwargs());
  if (!run.schedule->ignored_kwargs().empty() && replica_.is_master()) {
    std::fprintf(stderr, "kiln train: warning: lr_scheduler_kwargs %s ignored: HF builds the '%s' schedule without "
                 "keyword arguments\n", joined(run.schedule->ignored_kwargs()).c_str(), args_.lr_scheduler_type.c_str());
  }
  plateau_.reset();
  if (args_.lr_scheduler_type == "reduce_lr_on_plateau") {
    plateau_.emplace(args_.learning_rate, optim::ReduceLROnPlateau::parse(args_.lr_scheduler_kwargs));
    if (args_.num_warmup_steps(total) > 0 && replica_.is_master())
      std::fprintf(stderr, "kiln train: warning: no warmup with lr_scheduler_type reduce_lr_on_plateau (HF builds it "
                   "without one): warmup_steps / warmup_ratio ignored\n");
  }
  state_.max_steps = total;
  state_.num_train_epochs = args_.max_steps > 0 ? (total + run.updates_per_epoch - 1) / run.updates_per_epoch
                                                : static_cast<int64_t>(std::ceil(args_.num_train_epochs));
  state_.logging_steps = args_.steps_from_ratio(args_.logging_steps, total);
  state_.save_steps = args_.steps_from_ratio(args_.save_steps, total);
  state_.eval_steps = args_.eval_interval(total);
  state_.train_batch_size = run.global_batch;
}

void Trainer::resume_from_checkpoint() {
  if (args_.resume_from_checkpoint.empty()) return;
  TrainerState fresh = state_;
  load_checkpoint(find_checkpoint(args_.resume_from_checkpoint));
  // The run's shape comes from the current arguments; the history from the checkpoint.
  state_.max_steps = fresh.max_steps;
  state_.num_train_epochs = fresh.num_train_epochs;
}

// HF's eval_on_start: a sanity check, one evaluation before the first step.
void Trainer::evaluate_on_start() {
  if (!args_.eval_on_start) return;
  KILN_CHECK(eval_ && eval_->size() > 0, "--eval_on_start needs an evaluation set (--validation_file)");
  if (replica_.is_master()) {
    evaluate("eval");
    model_.train();
  }
}

// The step's batches first: each loss is weighted by its share of what the
// whole step counts (rows, or label tokens for language modelling) over
// every micro-batch of every replica, so the gradient is the mean over the
// global batch however it is split (HF's num_items_in_batch). As in HF, a
// step never crosses an epoch's end: when gradient_accumulation_steps does
// not divide the epoch's batches, its last step takes the ones left.
Trainer::StepBatches Trainer::next_step_batches(Run& run) {
  StepBatches s;
  double local_items = 0, local_tokens = 0;
  const int64_t per_epoch = loader_->batches_per_epoch();
  for (int64_t micro = 0; micro < run.accum; ++micro) {
    if (micro > 0 && s.batches.back().position + 1 >= per_epoch) break;
    s.batches.push_back(run.device_loader->next());
    s.items.push_back(loss_items(s.batches.back().host));
    local_items += s.items.back();
    const data::Batch& host = s.batches.back().host;
    if (host.weight != 0) local_tokens += static_cast<double>(host.input_ids.size());
  }
  s.step_items = run.world > 1 ? dist::all_reduce_host(local_items) : local_items;
  // HF: input_ids' elements, padding included, over every replica.
  const double step_tokens = run.world > 1 ? dist::all_reduce_host(local_tokens) : local_tokens;
  if (args_.include_num_input_tokens_seen) state_.num_input_tokens_seen += static_cast<int64_t>(step_tokens);
  state_.total_flos += flos_per_token_ * step_tokens;
  return s;
}

// Forward and backward over the step's micro-batches, the gradients summing
// in the parameters; returns the step's weighted loss, and sets `epoch` and
// the data position to just after its last batch.
Tensor Trainer::accumulate_gradients(Run& run, const StepBatches& s, double& epoch) {
  Generator& gen = model_.dropout_generator();
  Tensor loss_sum;
  // Dropout masks are keyed by the sample's place in the global batch, with
  // the same draws for every micro-batch of the step.
  const uint64_t step_offset = gen.offset();
  const int64_t micros = static_cast<int64_t>(s.batches.size());
  for (int64_t micro = 0; micro < micros; ++micro) {
    const data::DeviceBatch& batch = s.batches[micro];
    gen.set_state(gen.seed(), step_offset);
    gen.set_sample_base(micro * run.global_batch + batch.host.first_sample);
    Tensor loss;
    {
      Bf16Scope bf16(args_.bf16);
      const models::ModelInputs in = inputs_of(batch);
      loss = loss_of(model_.forward(in), in);
    }
    KILN_CHECK(loss.defined(), "train: the batch has no labels");
    const double w = s.step_items > 0 ? s.items[micro] / s.step_items : 0.0;
    loss = loss * Tensor::scalar(static_cast<float>(w), device_, "loss_weight");
    loss.backward();
    if (s.items[micro] > 0)  // a micro-batch with nothing to count has a NaN mean loss
      loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
    epoch = batch.epoch + static_cast<double>(batch.position + 1) / loader_->batches_per_epoch();
    data_epoch_ = batch.epoch;
    data_position_ = batch.position + 1;
    if (micro + 1 < micros) mark_step(device_);
  }
  gen.set_sample_base(0);
  if (!loss_sum.defined()) loss_sum = zeros({}, DType::f32, device_);
  if (run.world > 1)
    loss_sum = optim::all_reduce_gradients(model_.parameters(), 1.0, args_.ddp_bucket_cap_mb, {loss_sum})[0];
  return loss_sum;
}

// Clipping, the optimizer's update at `lr` and clearing the gradients; the
// gradient norm before clipping (HF logs it without clipping too).
Tensor Trainer::update_parameters(double lr) {
  const Tensor grad_norm = args_.max_grad_norm > 0 ? optim::clip_grad_norm(model_.parameters(), args_.max_grad_norm)
                                                   : optim::grad_norm(model_.parameters());
  optimizer_->set_lr(lr);
  optimizer_->step();
  if (sharded()) {
    // Each replica updated the parameters it owns; now everyone takes them.
    for (auto& p : params_) p.zero_grad();
    std::vector<Tensor> fresh = optim::gather_from_owners(params_, owners_, args_.ddp_bucket_cap_mb);
    for (size_t k = 0; k < params_.size(); ++k) params_[k].assign(fresh[k]);
  } else {
    optimizer_->zero_grad();
  }
  return grad_norm;
}

// One optimizer step, traced and queued: the device runs it while the host
// goes on (at most kStepsInFlight queued).
Trainer::StepResult Trainer::optimization_step(Run& run) {
  if (run.world > 1) dist::throw_if_aborted();
  for (; run.in_flight.size() >= kStepsInFlight; run.in_flight.pop_front()) run.in_flight.front().wait();
  throw_if_step_failed();
  const StepBatches batches = next_step_batches(run);
  StepResult r;
  r.tokens_seen = state_.num_input_tokens_seen;
  r.loss_sum = accumulate_gradients(run, batches, r.epoch);
  r.lr = plateau_ ? plateau_->lr() : run.schedule->lr(state_.global_step);
  r.grad_norm = update_parameters(r.lr);
  mark_step(device_);
  auto ran = std::make_shared<std::promise<void>>();
  run.in_flight.push_back(ran->get_future());
  add_step_closure([ran] { ran->set_value(); }, device_);
  ++state_.global_step;
  state_.epoch = r.epoch;
  r.step = state_.global_step;
  return r;
}

// Reads the step's loss once it has run, off the host's critical path.
void Trainer::queue_loss_readout(const Run& run, const StepResult& r) {
  add_step_closure(
      [this, loss_sum = r.loss_sum, grad_norm = r.grad_norm, lr = r.lr, step = r.step, epoch = r.epoch,
       progress = run.progress] {
        double l = 0, gn = 0;
        try {
          l = loss_sum.item();
          gn = grad_norm.defined() ? grad_norm.item() : 0.0;
        } catch (const Error&) {  // the step failed: the training loop reports it, once
          std::lock_guard<std::mutex> lock(log_mu_);
          step_failed_ = true;  // and nothing more is logged
          return;
        }
        std::lock_guard<std::mutex> lock(log_mu_);
        // HF's logging_nan_inf_filter: a NaN/inf step adds the window's loss so far over its steps + 1.
        const double counted = args_.logging_nan_inf_filter && !std::isfinite(l) ? loss_sum_ / (loss_count_ + 1) : l;
        loss_sum_ += counted;
        ++loss_count_;
        total_loss_ += counted;
        ++total_loss_count_;
        last_loss_ = l;
        last_grad_norm_ = gn;
        char detail[96];
        std::snprintf(detail, sizeof detail, "epoch %.2f | loss %.4f | lr %.3g", epoch, l, lr);
        progress->completed(step, detail);
      },
      device_);
}

// The log_history entry of a logging step: the mean loss since the last one.
void Trainer::queue_log_entry(const Run& run, const StepResult& r) {
  add_step_closure(
      [this, lr = r.lr, epoch = r.epoch, step = r.step, tokens_seen = r.tokens_seen, t0 = run.t0,
       start_tokens = run.start_tokens] {
        double avg;
        double gn;
        {
          std::lock_guard<std::mutex> lock(log_mu_);
          if (step_failed_) return;
          avg = loss_count_ ? loss_sum_ / loss_count_ : 0.0;
          gn = last_grad_norm_;
          loss_sum_ = 0;
          loss_count_ = 0;
        }
        // Unrounded, as transformers 5 logs them (4.x rounded the loss to 4 and the epoch to 2 decimals).
        json entry{{"loss", avg}, {"grad_norm", gn}, {"learning_rate", lr}, {"epoch", epoch}};
        if (args_.include_num_input_tokens_seen) {
          // HF's Trainer.log adds the run's speed in tokens: this train() call's tokens over its time so far.
          const double runtime = seconds_since(t0);
          entry["num_input_tokens_seen"] = tokens_seen;
          entry["train_runtime"] = runtime;
          entry["train_tokens_per_second"] = static_cast<double>(tokens_seen - start_tokens) / std::max(runtime, 1e-9);
        }
        record_log(std::move(entry), step);
      },
      device_);
}

// An evaluation step: the master evaluates the (identical) model for all;
// reduce_lr_on_plateau and early stopping then see its metric on every replica.
Trainer::EvalOutcome Trainer::evaluate_during_training(const Run& run) {
  EvalOutcome e;
  if (replica_.is_master()) {
    wait_device_ops(device_);
    e.metrics = evaluate("eval");
    model_.train();
    if (args_.metric_for_best_model) {  // as HF's Trainer: a metric the evaluation has not is an error
      const std::string name = best_metric_name(args_);
      std::string have;
      for (const auto& [k, v] : e.metrics) have += (have.empty() ? "" : ", ") + k;
      KILN_CHECK(e.metrics.count(name), "--metric_for_best_model '", *args_.metric_for_best_model,
                 "': the evaluation has no '", name, "' (its metrics: ", have, ")");
    }
    if (args_.early_stopping_patience) e.stop_early = early_stopping_says_stop(e.metrics);
  }
  if (plateau_) {  // HF: lr_scheduler.step(metrics[metric_for_best_model]) after the evaluation
    const std::string name = best_metric_name(args_);
    double metric = 0;
    if (replica_.is_master()) {
      KILN_CHECK(e.metrics.count(name), "lr_scheduler_type reduce_lr_on_plateau: the evaluation has no '", name,
                 "' (set --metric_for_best_model)");
      metric = e.metrics.at(name);
    }
    plateau_->step(run.world > 1 ? dist::all_reduce_host(metric) : metric);  // the master's metric, everywhere
  }
  // The master decides for every replica.
  if (args_.early_stopping_patience && run.world > 1)
    e.stop_early = dist::all_reduce_host(e.stop_early ? 1.0 : 0.0) > 0;
  return e;
}

// A save step: the best checkpoint so far (metric_for_best_model), then the
// checkpoint, written by the master once every replica has its optimizer state.
void Trainer::save_during_training(const Run& run, int64_t step, const std::map<std::string, double>& eval_metrics) {
  if (args_.metric_for_best_model || args_.load_best_model_at_end) {
    const std::string name = best_metric_name(args_);
    auto it = eval_metrics.find(name);
    if (it != eval_metrics.end()) {
      const bool greater = greater_is_better(args_);
      if (!state_.best_metric || (greater ? it->second > *state_.best_metric : it->second < *state_.best_metric)) {
        state_.best_metric = it->second;
        state_.best_model_checkpoint = checkpoint_dir(step).string();
      }
    }
  }
  auto opt_state = optimizer_state();
  if (replica_.is_master()) save_checkpoint(opt_state);
  if (run.world > 1) rendezvous("checkpoint-" + std::to_string(step));
}

// A run a stop signal ended: where its checkpoint is, and how to resume.
void Trainer::report_stop_signal(const Run& run) const {
  if (replica_.is_master()) {
    const std::string dir = checkpoint_dir(state_.global_step).string();
    const char* sig = signal_name(stop_requested());
    if (args_.save_only_model)
      std::fprintf(stderr, "kiln train: stopped by %s after step %lld; the model is saved in %s (save_only_model: "
                   "no optimizer state or data position, so the run cannot resume from it)\n",
                   sig, (long long)state_.global_step, dir.c_str());
    else
      std::fprintf(stderr, "kiln train: stopped by %s after step %lld; checkpoint saved in %s\n"
                   "kiln train: to resume, run the same command with --resume_from_checkpoint %s\n",
                   sig, (long long)state_.global_step, dir.c_str(), dir.c_str());
  }
  if (run.world > 1) rendezvous("train-stopped");
}

// The train metrics, the best model when asked, and the final model and
// state in output_dir.
std::map<std::string, double> Trainer::finish_training(Run& run) {
  metrics::record_data_wait(run.device_loader->wait_seconds());
  double runtime = seconds_since(run.t0);
  std::map<std::string, double> metrics;
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    metrics["train_loss"] = total_loss_count_ ? total_loss_ / total_loss_count_ : 0.0;
  }
  int64_t steps_run = state_.global_step - run.start_step;
  metrics["train_runtime"] = runtime;
  metrics["train_samples_per_second"] = static_cast<double>(steps_run) * run.step_samples / std::max(runtime, 1e-9);
  metrics["train_steps_per_second"] = steps_run / std::max(runtime, 1e-9);
  metrics["epoch"] = state_.epoch;
  metrics["train_samples"] = static_cast<double>(train_->size());
  metrics["total_flos"] = state_.total_flos;
  json summary = json::object();
  for (auto& [k, v] : metrics)
    if (k != "train_samples") summary[k] = v;  // HF's log entry; the example scripts add train_samples after it
  record_log(summary, state_.global_step);
  summary["train_samples"] = metrics["train_samples"];

  if (args_.load_best_model_at_end && !state_.best_model_checkpoint.empty()) {
    std::fprintf(stderr, "kiln train: loading the best model from %s (%s = %g)\n", state_.best_model_checkpoint.c_str(),
                 args_.metric_for_best_model.value_or("loss").c_str(), state_.best_metric.value_or(0));
    load_model_weights(state_.best_model_checkpoint);
  }
  if (replica_.is_master()) {
    const fs::path out(args_.output_dir);
    save_model(out);
    io::write_json_file_atomic(out / "training_args.json", args_.to_json());
    io::write_json_file_atomic(out / "trainer_state.json", state_.to_json());
    io::write_json_file_atomic(out / "train_results.json", summary);
    if (args_.metrics_debug) std::fprintf(stderr, "%s", metrics::report().c_str());
  }
  if (run.world > 1) rendezvous("train-end");
  return metrics;
}

std::map<std::string, double> Trainer::train() {
  const std::shared_ptr<OutputDirLock> out_lock = begin_run();  // held until train() returns
  Run run;
  make_loader(run);
  plan_schedule(run);
  resume_from_checkpoint();  // seeks the loader: before the device loader reads ahead
  run.device_loader.emplace(*loader_, device_);
  model_.train();

  run.t0 = std::chrono::steady_clock::now();
  run.start_step = state_.global_step;
  run.start_tokens = state_.num_input_tokens_seen;
  if (run.start_step >= run.total && run.start_step > 0 && replica_.is_master())
    std::fprintf(stderr, "kiln train: warning: the checkpoint's global_step %lld is at or past this run's %lld "
                 "optimizer steps: nothing is left to train\n", (long long)run.start_step, (long long)run.total);
  if (!progress_tty_ && replica_.is_master())
    std::fprintf(stderr, "kiln train: %lld optimizer steps (%lld per epoch), batch %lld, %lld examples\n",
                 (long long)run.total, (long long)run.updates_per_epoch, (long long)run.samples_per_step,
                 (long long)train_->size());
  evaluate_on_start();
  std::optional<StopListener> listening;  // a first SIGINT / SIGTERM ends the loop after its step
  listening.emplace();
  // Drawn by the step closures, when each step has run.
  run.progress = std::make_shared<ProgressLine>("", "step", run.total, run.step_samples,
                                                progress_on_, progress_tty_, run.start_step);
  const StepIntervals every{state_.logging_steps, state_.eval_steps, state_.save_steps};
  while (state_.global_step < run.total) {
    const StepResult r = optimization_step(run);
    if (replica_.is_master()) queue_loss_readout(run, r);
    const StepControl control = step_control(args_, every, r.step, r.epoch, eval_ != nullptr, r.step >= run.total);
    if (control.should_log && replica_.is_master()) queue_log_entry(run, r);
    const EvalOutcome evaluated = control.should_evaluate ? evaluate_during_training(run) : EvalOutcome{};
    // A stop signal makes this step the last, saved as a save step is.
    const bool stop_now = stop_signalled();
    if (stop_now || control.should_save) save_during_training(run, r.step, evaluated.metrics);
    if (stop_now) {
      stopped_by_signal_ = true;
      break;
    }
    if (evaluated.stop_early) {
      if (replica_.is_master())
        std::fprintf(stderr, "kiln train: early stopping at step %lld: %s did not improve for %lld evaluation%s\n",
                     (long long)r.step, best_metric_name(args_).c_str(), (long long)*args_.early_stopping_patience,
                     *args_.early_stopping_patience == 1 ? "" : "s");
      break;
    }
    if (stop_after_ >= 0 && state_.global_step >= stop_after_) break;
  }
  listening.reset();
  wait_device_ops(device_);
  throw_if_step_failed();
  run.progress->finish();
  if (stopped_by_signal_) {
    report_stop_signal(run);
    return {};
  }
  return finish_training(run);
}

void Trainer::throw_if_step_failed() {
  const std::string error = take_step_failure(device_);
  KILN_CHECK(error.empty(), "train: a step failed on ", device_.str(), ", so the run stops: ", error);
}

bool Trainer::stop_signalled() const {
  const bool mine = replica_.local_index == 0 && stop_requested() != 0;
  if (replica_.world_size() == 1) return mine;
  // In-process replicas would read the flag at different steps, and under
  // mpirun each process gets its own signal: every replica stops where the
  // first replica of any process saw one.
  return dist::all_reduce_host(mine ? 1.0 : 0.0) > 0;
}

bool Trainer::early_stopping_says_stop(const std::map<std::string, double>& eval_metrics) {
  auto it = eval_metrics.find(best_metric_name(args_));
  if (it == eval_metrics.end()) return false;  // checked by the caller: the metric exists
  const double value = it->second;
  const bool greater = greater_is_better(args_);
  const bool improved = !state_.best_metric ||
                        ((greater ? value > *state_.best_metric : value < *state_.best_metric) &&
                         std::abs(value - *state_.best_metric) > args_.early_stopping_threshold);
  state_.early_stopping_patience_counter = improved ? 0 : state_.early_stopping_patience_counter.value_or(0) + 1;
  return state_.early_stopping_patience_counter >= *args_.early_stopping_patience;
}

namespace {
// Question answering: each row of t [B, T] (the rows' features `rows`), cut to its feature's length, into out[row].
void logit_rows(const Tensor& t, const std::vector<int64_t>& rows, const data::Features& f,
                std::vector<std::vector<float>>& out) {
  const std::vector<float> v = t.to_vector<float>();
  const int64_t T = t.dim(1);
  out.resize(f.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto row = static_cast<size_t>(rows[r]);
    const auto len = static_cast<int64_t>(f.input_ids[row].size());
    out[row].assign(v.begin() + static_cast<int64_t>(r) * T, v.begin() + static_cast<int64_t>(r) * T + len);
  }
}
// run_ner's compute_metrics: seqeval over the labelled tokens (label -100 is
// not one), tags by the model's id2label name (LABEL_<id> where it has none);
// per entity type too with entity_level.
void add_seqeval_metrics(std::map<std::string, double>& m, const std::string& prefix, bool entity_level,
                         const std::map<int64_t, std::string>& names,
                         const std::vector<std::vector<int64_t>>& gold_rows,
                         const std::vector<std::vector<int64_t>>& pred_rows) {
  auto name = [&](int64_t id) {
    auto it = names.find(id);
    return it != names.end() ? it->second : "LABEL_" + std::to_string(id);
  };
  std::vector<std::vector<std::string>> refs, hyps;
  for (size_t r = 0; r < gold_rows.size(); ++r) {
    refs.emplace_back();
    hyps.emplace_back();
    for (size_t k = 0; k < gold_rows[r].size(); ++k)
      if (gold_rows[r][k] != -100) {
        refs.back().push_back(name(gold_rows[r][k]));
        hyps.back().push_back(name(pred_rows[r][k]));
      }
  }
  const SeqevalScores s = seqeval(refs, hyps);
  const std::string overall = prefix + (entity_level ? "_overall" : "");
  m[overall + "_precision"] = s.precision;
  m[overall + "_recall"] = s.recall;
  m[overall + "_f1"] = s.f1;
  m[overall + "_accuracy"] = s.accuracy;
  for (const auto& [type, t] : entity_level ? s.types : std::map<std::string, EntityScores>{}) {
    m[prefix + "_" + type + "_precision"] = t.precision;
    m[prefix + "_" + type + "_recall"] = t.recall;
    m[prefix + "_" + type + "_f1"] = t.f1;
    m[prefix + "_" + type + "_number"] = static_cast<double>(t.number);
  }
}
}  // namespace

std::shared_ptr<ProgressLine> Trainer::batch_progress(const std::string& label, int64_t batches) const {
  return std::make_shared<ProgressLine>(label, "batch", batches, static_cast<double>(args_.per_device_eval_batch_size),
                                        progress_on_, progress_tty_);
}

std::map<std::string, double> Trainer::evaluate(const std::string& prefix,
                                               std::shared_ptr<const data::Features> features) {
  if (!features) features = eval_;
  KILN_CHECK(features && features->size() > 0, "evaluate: the evaluation set is empty");
  model_.eval();
  data::LoaderOptions lo;
  lo.batch_size = args_.per_device_eval_batch_size;
  lo.shuffle = false;
  data::CollatorOptions co = collator_;
  data::DataLoader loader(features, lo, co);
  const int64_t batches = loader.batches_per_epoch();
  std::vector<Tensor> losses, preds;  // on the device until moved to the host
  std::vector<int64_t> sizes;
  std::vector<int64_t> gold, pred;
  std::vector<std::vector<int64_t>> gold_rows, pred_rows;  // token classification: a tag id per token
  const bool tokens = task_ == Task::TokenClassification, qa = task_ == Task::QuestionAnswering,
             choices = task_ == Task::MultipleChoice;
  std::vector<Tensor> spans;  // question answering: each batch's start and end logits
  std::vector<std::vector<int64_t>> span_rows;
  std::vector<std::vector<float>> starts, ends;
  double loss_total = 0;
  int64_t n = 0, samples = 0;
  auto to_host = [&] {  // HF's eval_accumulation_steps: every N batches, or at the end
    for (size_t i = 0; i < losses.size(); ++i) {
      loss_total += losses[i].item() * sizes[i];
      n += sizes[i];
    }
    for (auto& p : preds) {
      auto v = p.to_vector<int64_t>();
      if (tokens) {
        const int64_t T = p.dim(1);
        for (int64_t r = 0; r < p.dim(0); ++r) pred_rows.emplace_back(v.begin() + r * T, v.begin() + (r + 1) * T);
      } else {
        pred.insert(pred.end(), v.begin(), v.end());
      }
    }
    for (size_t i = 0; i < span_rows.size(); ++i) {
      logit_rows(spans[2 * i], span_rows[i], *features, starts);
      logit_rows(spans[2 * i + 1], span_rows[i], *features, ends);
    }
    losses.clear();
    sizes.clear();
    preds.clear();
    spans.clear();
    span_rows.clear();
  };
  auto t0 = std::chrono::steady_clock::now();
  auto progress = batch_progress(prefix, batches);
  {
    NoGradGuard no_grad;
    Bf16Scope bf16(args_.bf16);
    data::DeviceLoader dl(loader, device_);
    for (int64_t b = 0; b < batches; ++b) {
      data::DeviceBatch batch = dl.next();
      const models::ModelInputs in = inputs_of(batch);
      models::ModelOutputs out = model_.forward(in);
      out.loss = loss_of(out, in);
      // Question answering scores the answers; its loss needs answer positions, which unanswered test rows lack.
      KILN_CHECK(qa || out.loss.defined(), "evaluate: the evaluation set has no labels");
      if (out.loss.defined()) {
        losses.push_back(out.loss);
        sizes.push_back(batch.host.batch_size);
      }
      samples += batch.host.batch_size;
      if (qa) {
        spans.push_back(out.start_logits);
        spans.push_back(out.end_logits);
        span_rows.push_back(batch.host.indices);
      }
      const auto& problem = model_.config().problem_type;
      bool single_label = !problem || *problem == "single_label_classification";
      if (choices ||
          (task_ == Task::TextClassification && single_label && out.logits.defined() && out.logits.dim(-1) > 1)) {
        preds.push_back(argmax(out.logits, -1));
        gold.insert(gold.end(), batch.host.labels.begin(), batch.host.labels.end());
      } else if (tokens) {
        preds.push_back(argmax(out.logits, -1));  // [B, T]
        const auto& l = batch.host.labels;
        const int64_t T = batch.host.seq_len;
        for (int64_t r = 0; r < batch.host.batch_size; ++r) gold_rows.emplace_back(l.begin() + r * T, l.begin() + (r + 1) * T);
      }
      mark_step(device_);
      add_step_closure([progress, b] { progress->completed(b + 1); }, device_);
      if (args_.eval_accumulation_steps && (b + 1) % *args_.eval_accumulation_steps == 0) to_host();
    }
  }
  to_host();
  wait_device_ops(device_);
  progress->finish();
  std::map<std::string, double> m;
  if (n > 0 || !qa) m[prefix + "_loss"] = loss_total / std::max<int64_t>(n, 1);
  if (task_ != Task::TextClassification && !tokens && !qa && !choices) m["perplexity"] = std::exp(m[prefix + "_loss"]);
  if (qa) {  // run_qa: post-process into answers, write them, score them
    const QaPredictions answers = postprocess_qa_predictions(*features, starts, ends, qa_);
    if (features->examples->has_labels)
      for (const auto& [k, v] : qa_metrics(answers, *features->examples, qa_)) m[prefix + "_" + k] = v;
    if (replica_.is_master() && !args_.output_dir.empty()) {
      fs::create_directories(args_.output_dir);
      write_qa_predictions(answers, args_.output_dir, prefix, qa_);
    }
  }
  if (tokens) add_seqeval_metrics(m, prefix, entity_level_metrics_, model_.config().id2label, gold_rows, pred_rows);
  if (choices) {  // run_swag's compute_metrics: accuracy only
    int64_t right = 0;
    for (size_t i = 0; i < gold.size(); ++i) right += pred[i] == gold[i];
    m[prefix + "_accuracy"] = static_cast<double>(right) / static_cast<double>(std::max<size_t>(gold.size(), 1));
  } else if (!gold.empty()) {
    auto [acc, f1] = accuracy_f1(pred, gold, model_.config().num_labels());
    m[prefix + "_accuracy"] = acc;
    m[prefix + "_f1"] = f1;
  }
  if (extra_metrics_)
    for (const auto& [k, v] : extra_metrics_(*features, prefix)) m[k] = v;
  double runtime = seconds_since(t0);
  m[prefix + "_runtime"] = runtime;
  m[prefix + "_samples_per_second"] = static_cast<double>(samples) / std::max(runtime, 1e-9);
  // HF's speed_metrics: the batches of per_device_eval_batch_size rows per second.
  const double eval_batches = std::ceil(static_cast<double>(samples) / static_cast<double>(args_.per_device_eval_batch_size));
  m[prefix + "_steps_per_second"] = eval_batches / std::max(runtime, 1e-9);
  json entry = json::object();
  for (auto& [k, v] : m) entry[k] = v;
  // The example scripts add <prefix>_samples to the metrics they save, after the log entry.
  m[prefix + "_samples"] = static_cast<double>(samples);
  entry["epoch"] = state_.epoch;
  record_log(entry, state_.global_step);
  return m;
}

Predictions Trainer::predict(const data::Features& features) {
  model_.eval();
  auto shared = std::make_shared<const data::Features>(features);
  data::LoaderOptions lo;
  lo.batch_size = args_.per_device_eval_batch_size;
  lo.shuffle = false;
  data::DataLoader loader(shared, lo, collator_);
  std::vector<Tensor> outs;  // on the device until moved to the host
  std::vector<std::vector<int64_t>> out_rows;  // the feature rows of each
  Predictions p;
  const bool qa = task_ == Task::QuestionAnswering;
  auto to_host = [&] {  // HF's eval_accumulation_steps: every N batches, or at the end
    for (size_t o = 0; o < outs.size(); ++o) {
      const Tensor& t = outs[o];
      if (qa) {  // start and end logits, alternately
        logit_rows(t, out_rows[o], features, o % 2 ? p.end_logits : p.start_logits);
        continue;
      }
      if (t.rank() == 3) {  // token classification: [B, T, C] -> each row's argmax per token
        const int64_t T = t.dim(1), C = t.dim(2);
        auto v = t.to_vector<float>();
        for (int64_t r = 0; r < t.dim(0); ++r) {
          const auto len = static_cast<int64_t>(features.input_ids[static_cast<size_t>(out_rows[o][r])].size());
          std::vector<int64_t> tags;
          for (int64_t k = 0; k < len; ++k) {
            auto first = v.begin() + (r * T + k) * C;
            tags.push_back(std::max_element(first, first + C) - first);
          }
          p.token_labels.push_back(std::move(tags));
        }
        continue;
      }
      auto v = t.to_vector<float>();
      int64_t C = t.dim(-1), rows = t.numel() / C;
      for (int64_t r = 0; r < rows; ++r) {
        if (C == 1) {
          p.values.push_back(v[r]);
          continue;
        }
        std::vector<float> row(v.begin() + r * C, v.begin() + (r + 1) * C);
        p.labels.push_back(std::max_element(row.begin(), row.end()) - row.begin());
        p.probabilities.push_back(std::move(row));
      }
    }
    outs.clear();
    out_rows.clear();
  };
  auto progress = batch_progress("predict", loader.batches_per_epoch());
  {
    NoGradGuard no_grad;
    Bf16Scope bf16(args_.bf16);
    data::DeviceLoader dl(loader, device_);
    for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      data::DeviceBatch batch = dl.next();
      models::ModelInputs in = inputs_of(batch);
      in.labels = in.start_positions = in.end_positions = {};
      models::ModelOutputs out = model_.forward(in);
      if (qa) {
        outs.insert(outs.end(), {out.start_logits, out.end_logits});
        out_rows.insert(out_rows.end(), {batch.host.indices, batch.host.indices});
      } else {
        const Tensor& logits = out.logits;
        outs.push_back(logits.rank() == 3 ? logits : logits.dim(-1) > 1 ? softmax(logits, -1) : logits);
        out_rows.push_back(batch.host.indices);
      }
      mark_step(device_);
      add_step_closure([progress, b] { progress->completed(b + 1); }, device_);
      if (args_.eval_accumulation_steps && (b + 1) % *args_.eval_accumulation_steps == 0) to_host();
    }
  }
  to_host();
  wait_device_ops(device_);
  progress->finish();
  return p;
}

}  // namespace kiln::train
