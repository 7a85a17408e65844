// kiln bench --model PRESET_OR_DIR [--task text-classification|masked-lm|causal-lm|seq2seq]
//            [--batch 8] [--seq 128] [--target_len T] [--steps 10] [--warmup 2] [--device cpu|cuda:N]
//            [--gradient_checkpointing] [--tf32] [--bf16] [--json]
// Times training steps (forward, backward, gradient clipping, AdamW; fp32, or
// with --bf16 bf16 matrix products as under HF's --bf16) of a
// model on synthetic tokens and prints the median step time, tokens/s, model
// FLOP/s (6 x parameters x tokens per second) and its fraction of the best
// single-GEMM FLOP/s measured at the model's own GEMM shapes, the compile
// time and the peak resident memory. Under KILN_PROFILE=1 it also splits the
// measured steps' kernel time into matrix products (and their GFLOP/s),
// attention and the rest.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "command.h"
#include "flags.h"
#include "kiln/backend/cpu/bf16_tiles.h"
#include "kiln/backend/cpu/executor.h"
#include "kiln/compiler/profile.h"
#include "kiln/core/error.h"
#include "kiln/kiln.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/backend/cuda/cuda.h"
#endif

namespace {

using namespace kiln;
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: kiln bench --model PRESET_DIR_OR_CONFIG [--task text-classification|masked-lm|causal-lm|seq2seq]\n"
    "                  [--batch 8] [--seq 128] [--target_len T] [--steps 10] [--warmup 2] [--device cpu|cuda:N]\n"
    "                  [--gradient_checkpointing] [--tf32] [--bf16] [--gemm_shapes] [--sync] [--json]\n"
    "                  [--lora_r R [--lora_target_modules all-linear]]\n"
    "  --lora_r: a LoRA step (alpha 2R, dropout 0; see docs/lora.md): the base frozen, AdamW on the adapter\n"
    "  --gemm_shapes: also print the GFLOP/s of every GEMM shape the peak was measured at, without and with a bias\n"
    "  --sync: read each step's loss before tracing the next (by default step N+1 is traced while step N runs,\n"
    "          as the Trainer does)";

// A JSON number, or null for NaN and infinities (which JSON cannot hold).
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string architecture_for(const std::string& task, const models::PretrainedConfig& c) {
  if (task == "causal-lm") {
    std::string arch = models::causal_lm_architecture(c);
    KILN_CHECK(!arch.empty(), "bench: --task causal-lm needs a model of type ", models::causal_lm_types(),
               ", got '", c.model_type, "'");
    return arch;
  }
  if (task == "seq2seq") {
    KILN_CHECK(c.model_type == "t5", "bench: --task seq2seq needs a t5 model, got '", c.model_type, "'");
    return "T5ForConditionalGeneration";
  }
  KILN_CHECK(c.model_type != "t5", "bench: a t5 model trains with --task seq2seq");
  return c.class_prefix() + (task == "masked-lm" ? "ForMaskedLM" : "ForSequenceClassification");
}

// Best GFLOP/s of one [M, K] x [K, N] product (of f32 or bf16 operands) over
// a few runs; with_bias: plus a bias row [N] (which the compiler folds into
// the product, as it does a layer's).
double gemm_gflops(int64_t M, int64_t K, int64_t N, Device device, DType dtype, bool with_bias = false) {
  Generator g(3);
  Tensor a = cast(randn({M, K}, g, device), dtype), b = cast(randn({K, N}, g, device), dtype);
  Tensor bias = randn({N}, g, device);
  mark_step(device);
  wait_device_ops(device);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor c = with_bias ? matmul(a, b) + bias : matmul(a, b);
    mark_step(device);
    wait_device_ops(device);
    double dt = seconds_since(t0);
    if (rep > 0) best = std::max(best, 2.0 * M * K * N / dt / 1e9);  // rep 0 compiles
  }
  return best;
}

// How this device runs --bf16's products (the CPU: oneDNN's bf16 kernel, or
// the emulation where the CPU has no bf16 instructions).
std::string bf16_products(Device device) {
  if (device.kind != DeviceKind::CPU) return "bf16 GEMMs on the device";
  if (!backend::cpu::native_bf16_products()) return "emulated (operands widened to f32 for sgemm)";
  return "oneDNN " + backend::cpu::bf16_matmul_implementation() + ", attention tiles " +
         (backend::cpu::amx_tiles() ? "AMX" : "AVX512-BF16");
}

// What one bench run measures, from its flags.
struct BenchOptions {
  std::string task;
  int64_t B = 8, T = 128, Tt = 128, steps = 10, warmup = 2;
  Device device = Device::cpu();
  bool bf16 = false, sync = false, gemm_shapes = false, json = false;
  bool lora = false;  // --lora_r: a LoRA step, whose frozen base stays bf16 as loaded
};

BenchOptions bench_options(const cli::Flags& flags) {
  auto integer = [&](const char* k, int64_t fallback) { return flags.integer(k, fallback, 1); };
  BenchOptions o;
  o.task = flags.has("task") ? flags.get("task") : "text-classification";
  KILN_CHECK(o.task == "text-classification" || o.task == "masked-lm" || o.task == "causal-lm" || o.task == "seq2seq",
             "bench: --task must be text-classification, masked-lm, causal-lm or seq2seq, got '", o.task, "'");
  o.B = integer("batch", 8);
  o.T = integer("seq", 128);
  o.Tt = integer("target_len", o.T);
  o.steps = integer("steps", 10);
  o.warmup = integer("warmup", 2);
  o.device = Device::parse(flags.has("device") ? flags.get("device") : "cpu");
  o.bf16 = flags.has("bf16");
  o.sync = flags.has("sync");
  o.gemm_shapes = flags.has("gemm_shapes");
  o.json = flags.has("json");
  o.lora = flags.has("lora_r");
  return o;
}

// The model: a directory (from_pretrained), or a preset or config.json with fresh weights.
std::unique_ptr<models::PreTrainedModel> bench_model(const std::string& source, const BenchOptions& o) {
  if (fs::is_directory(source)) {
    auto config = models::load_config(fs::path(source) / "config.json");
    models::LoadOptions lo;
    lo.architecture = architecture_for(o.task, *config);
    if (o.task == "text-classification") lo.num_labels = 2;
    lo.device = o.device;
    lo.keep_bf16 = o.lora;
    return models::from_pretrained(source, lo);
  }
  auto config = models::preset_config(source);
  if (!config && fs::is_regular_file(source)) config = models::load_config(source);
  KILN_CHECK(config, "bench: --model '", source, "' is neither a model directory, a config file nor a preset (",
             models::preset_names(), ")");
  if (o.task == "text-classification") config->set_num_labels(2);
  return models::create_model(architecture_for(o.task, *config), *config, 0, o.device);
}

// A synthetic batch: fixed ids below the vocabulary size V, labels as the task wants them.
models::ModelInputs synthetic_batch(const BenchOptions& o, int64_t V) {
  const int64_t B = o.B, T = o.T, Tt = o.Tt;
  const Device device = o.device;
  std::vector<int64_t> ids(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = 5 + (i * 7919) % (V - 5);
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {B, T}, device, "input_ids");
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>(B * T, 1), {B, T}, device, "attention_mask");
  if (o.task == "text-classification") {
    std::vector<int64_t> y(B);
    for (int64_t i = 0; i < B; ++i) y[i] = i % 2;
    in.labels = Tensor::from_vector(y, {B}, device, "labels");
  } else if (o.task == "masked-lm") {
    std::vector<int64_t> y(B * T, -100);
    for (int64_t i = 0; i < B * T; i += 7) y[i] = ids[i];  // ~15 % of the positions
    for (int64_t i = 3; i < B * T; i += 13) y[i] = ids[i];
    in.labels = Tensor::from_vector(y, {B, T}, device, "labels");
  } else if (o.task == "causal-lm") {
    in.labels = in.input_ids;
  } else {
    std::vector<int64_t> y(B * Tt);
    for (int64_t i = 0; i < B * Tt; ++i) y[i] = 5 + (i * 104729) % (V - 5);
    in.labels = Tensor::from_vector(y, {B, Tt}, device, "labels");
  }
  return in;
}

// Embedding tables: a lookup, no matrix product.
bool is_table(const std::string& name) {
  for (const char* t : {"embeddings", "embed_tokens", "wte", "wpe", "shared", "relative_attention_bias"})
    if (name.find(t) != std::string::npos) return true;
  return false;
}

struct FlopCount {
  int64_t num_params = 0, flop_params = 0;
  double step_flops = 0;  // the model's FLOPs a step, 6 a parameter and token
};

// FLOPs count the parameters that take part in matrix products: not the
// embedding tables (a lookup), but the vocabulary projection of a language
// model head (tied or not) once. Each such parameter does 6 FLOPs a token
// it sees (forward 2, backward 4): B x T tokens, but for a sequence-to-
// sequence model the decoder's weights and the head see the B x Tt target
// tokens (the cross-attention's keys and values still the encoder's B x T).
FlopCount count_flops(const models::PreTrainedModel& model, const BenchOptions& o, int64_t V) {
  const bool seq2seq = o.task == "seq2seq";
  auto tokens_seen = [&](const std::string& name, bool head) {
    const bool target = seq2seq && (head || (name.rfind("decoder.", 0) == 0 &&
                                             name.find("EncDecAttention.k.") == std::string::npos &&
                                             name.find("EncDecAttention.v.") == std::string::npos));
    return static_cast<double>(o.B * (target ? o.Tt : o.T));
  };
  FlopCount f;
  bool has_head = false;
  for (const auto& [name, p] : model.named_parameters()) {
    f.num_params += p.numel();
    const bool head = p.shape().size() == 2 && p.shape()[0] == V && !is_table(name);
    if (!is_table(name)) {
      f.flop_params += p.numel();
      f.step_flops += 6.0 * static_cast<double>(p.numel()) * tokens_seen(name, head);
    }
    has_head = has_head || head;
  }
  if (o.task != "text-classification" && !has_head)  // tied: the table is also the head
    for (const auto& [name, p] : model.named_parameters())
      if (p.shape().size() == 2 && p.shape()[0] == V) {
        f.flop_params += p.numel();
        f.step_flops += 6.0 * static_cast<double>(p.numel()) * tokens_seen(name, true);
        break;
      }
  return f;
}

// --gradient_checkpointing, --tf32 and --lora_r on the model about to train.
void prepare_training(models::PreTrainedModel& model, const cli::Flags& flags, const BenchOptions& o) {
  model.train();
  if (flags.has("gradient_checkpointing")) model.set_gradient_checkpointing(true);
  if (flags.has("tf32")) {
    KILN_CHECK(o.device.kind == DeviceKind::CUDA, "bench: --tf32 needs --device cuda");
    set_allow_tf32(true);
  }
  if (flags.has("lora_r")) {
    models::LoraConfig lora;
    lora.r = flags.integer("lora_r", 16, 1);
    lora.lora_alpha = 2.0 * static_cast<double>(lora.r);
    lora.target_modules.clear();
    std::istringstream names(flags.get("lora_target_modules", "all-linear"));
    for (std::string name; std::getline(names, name, ',');) lora.target_modules.push_back(name);
    models::apply_lora(model, lora);
  }
}

struct StepTimes {
  std::vector<double> times, trace_times;  // of the measured steps
  double loss = 0;                         // the last step's
};

// Runs warm-up and measured training steps (AdamW, gradient clipping). As the
// Trainer does, step s + 1 is traced while step s runs (unless --sync): a
// step's time is from one loss being ready to the next.
StepTimes time_steps(models::PreTrainedModel& model, const models::ModelInputs& in, const BenchOptions& o) {
  std::vector<Tensor> trained;
  for (const auto& p : model.parameters())
    if (p.requires_grad()) trained.push_back(p);
  optim::AdamW opt(trained, {.lr = 5e-5, .weight_decay = 0.01});
  metrics::reset();
  StepTimes r;
  Tensor pending;
  auto last_done = std::chrono::steady_clock::now();
  auto finish = [&](int64_t s) {  // step s's loss is read
    r.loss = pending.item();
    const auto now = std::chrono::steady_clock::now();
    if (s >= o.warmup) r.times.push_back(std::chrono::duration<double>(now - last_done).count());
    last_done = now;
  };
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) {  // the measured steps start from an idle device
      if (pending.defined()) finish(s - 1);
      pending = Tensor();
      wait_device_ops(o.device);
      if (compiler::profiling()) compiler::profile_reset();  // KILN_PROFILE: the measured steps only
      last_done = std::chrono::steady_clock::now();
    }
    auto t0 = std::chrono::steady_clock::now();
    Tensor l;
    {
      Autocast autocast(o.bf16);
      l = model.forward(in).loss;
    }
    l.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    mark_step(o.device);
    if (s >= o.warmup) r.trace_times.push_back(seconds_since(t0));  // mark_step returns before the step runs
    if (pending.defined()) finish(s - 1);
    pending = l;
    if (o.sync) {
      finish(s);
      pending = Tensor();
    }
  }
  if (pending.defined()) finish(o.warmup + o.steps - 1);
  return r;
}

struct GemmPeak {
  double gflops = 0, fp32_gflops = 0;
  std::string shape;        // where the peak was
  std::string every_shape;  // --gemm_shapes: a line a shape
};

// The GEMM peak at the model's own shapes: its distinct linear-layer weights
// (and the vocabulary projection of language-model heads) with M = B x T.
GemmPeak gemm_peak(const models::PreTrainedModel& model, const BenchOptions& o, int64_t V) {
  const int64_t M = o.B * o.T;
  const DType dtype = o.bf16 ? DType::bf16 : DType::f32;
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const auto& [name, p] : model.named_parameters())
    if (p.shape().size() == 2 && !is_table(name)) shapes.insert({p.shape()[0], p.shape()[1]});
  if (o.task != "text-classification")
    for (const auto& [name, p] : model.named_parameters())
      if (p.shape().size() == 2 && p.shape()[0] == V) shapes.insert({p.shape()[1], V});
  GemmPeak peak;
  for (auto [k, n] : shapes) {
    double g = gemm_gflops(M, k, n, o.device, dtype);
    if (o.bf16) peak.fp32_gflops = std::max(peak.fp32_gflops, gemm_gflops(M, k, n, o.device, DType::f32));
    const std::string shape = "[" + std::to_string(M) + "x" + std::to_string(k) + "] x [" + std::to_string(k) + "x" +
                              std::to_string(n) + "]";
    if (o.gemm_shapes) {
      const double gb = gemm_gflops(M, k, n, o.device, dtype, true);
      peak.every_shape += "  GEMM shape       " + shape + ": " + std::to_string(static_cast<int64_t>(g)) +
                          " GFLOP/s, with a bias " + std::to_string(static_cast<int64_t>(gb)) + " GFLOP/s\n";
    }
    if (g > peak.gflops) {
      peak.gflops = g;
      peak.shape = shape;
    }
  }
  return peak;
}

// Everything a report prints.
struct BenchResult {
  std::string architecture;
  FlopCount flops;
  StepTimes steps;
  double median = 0, median_trace = 0;
  compiler::ProfileTotals kernels;
  metrics::Snapshot metrics;
  double peak_rss_mb = 0;
  GemmPeak peak;
};

void print_report(const BenchResult& r, const BenchOptions& o) {
  const double tokens = static_cast<double>(o.B * o.T), median = r.median;
  const double model_gflops = r.flops.step_flops / median / 1e9;
  const bool seq2seq = o.task == "seq2seq";
  std::printf("kiln bench: %s, %s, batch %lld x %lld, %lld parameters (%lld in matrix products), %s, %d threads\n",
              r.architecture.c_str(), o.task.c_str(), (long long)o.B, (long long)o.T, (long long)r.flops.num_params,
              (long long)r.flops.flop_params, o.bf16 ? "bf16 products" : "fp32", omp_get_max_threads());
  std::printf("  median step      %.4f s (fastest %.4f; %lld steps after %lld warm-up; loss %.4f)\n", median,
              *std::min_element(r.steps.times.begin(), r.steps.times.end()), (long long)o.steps, (long long)o.warmup,
              r.steps.loss);
  std::printf("  host tracing     %.4f s of the step (median; %s)\n", r.median_trace,
              o.sync ? "before the step runs" : "while the step before runs");
  if (seq2seq)
    std::printf("  tokens/s         %.1f (source; target %.1f)\n", tokens / median, static_cast<double>(o.B * o.Tt) / median);
  else
    std::printf("  tokens/s         %.1f\n", tokens / median);
  std::printf("  model FLOP/s     %.1f GFLOP/s (6 x parameters in matrix products x tokens/s%s)\n", model_gflops,
              seq2seq ? ": the decoder's and the head's target tokens" : "");
  std::printf("  GEMM peak        %.1f GFLOP/s at %s%s -> model FLOP/s is %.0f %% of it\n", r.peak.gflops,
              r.peak.shape.c_str(), o.bf16 ? " (bf16)" : "", 100.0 * model_gflops / std::max(r.peak.gflops, 1e-9));
  if (o.bf16)
    std::printf("  fp32 GEMM peak   %.1f GFLOP/s; bf16 products: %s\n", r.peak.fp32_gflops, bf16_products(o.device).c_str());
  if (o.gemm_shapes) std::printf("%s", r.peak.every_shape.c_str());
  if (compiler::profiling()) {  // where the step's time goes: products against the peak, and the rest
    const compiler::ProfileTotals& k = r.kernels;
    const double n = static_cast<double>(o.steps), product_gflops = k.product_flops / std::max(k.product_seconds, 1e-12) / 1e9;
    std::printf("  kernels a step   products %.3f s (%.1f GFLOP/s, %.0f %% of the peak), attention %.3f s, "
                "other kernels %.3f s (KILN_PROFILE)\n",
                k.product_seconds / n, product_gflops, 100.0 * product_gflops / std::max(r.peak.gflops, 1e-9),
                k.attention_seconds / n, k.other_seconds / n);
  }
  std::printf("  compile          %.3f s (%lld compiles, %lld from the disk cache); step arena %.0f MB\n",
              r.metrics.compile_seconds, (long long)r.metrics.compiles, (long long)r.metrics.compiles_from_disk,
              static_cast<double>(r.metrics.arena_bytes) / 1e6);
  std::printf("  peak memory      %.0f MB resident\n", r.peak_rss_mb);
  if (o.device.kind == DeviceKind::CUDA) {
#ifdef KILN_HAVE_CUDA
    const auto mem = backend::cuda::memory_stats(o.device);
    std::printf("  device           %s: %s\n", o.device.str().c_str(), backend::cuda::device_description(o.device).c_str());
    std::printf("  device memory    %.0f MB peak in use, %.0f MB reserved\n", mem.peak_in_use / 1048576.0,
                mem.reserved / 1048576.0);
    std::printf("  fused kernels    %s\n", backend::cuda::generated_kernels_summary().c_str());
#endif
  }
}

void print_json(const BenchResult& r, const BenchOptions& o) {
  const double tokens = static_cast<double>(o.B * o.T), median = r.median;
  const double model_gflops = r.flops.step_flops / median / 1e9;
  std::printf(
      "{\"model\": \"%s\", \"task\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"parameters\": %lld, \"flop_parameters\": %lld, \"model_flops_per_step\": %.0f, \"median_step_s\": %.6f, \"host_tracing_s\": %.6f, "
      "\"tokens_per_s\": %.2f, \"model_gflops\": %.2f, \"gemm_peak_gflops\": %.2f, \"fraction_of_gemm_peak\": %.4f, "
      "\"compile_s\": %.4f, \"compiles\": %lld, \"compiles_from_disk\": %lld, \"peak_rss_mb\": %.1f, \"bf16\": %s, "
      "\"fp32_gemm_peak_gflops\": %s, \"loss\": %s}\n",
      r.architecture.c_str(), o.task.c_str(), (long long)o.B, (long long)o.T, (long long)r.flops.num_params,
      (long long)r.flops.flop_params, r.flops.step_flops, median, r.median_trace, tokens / median, model_gflops,
      r.peak.gflops, model_gflops / std::max(r.peak.gflops, 1e-9), r.metrics.compile_seconds,
      (long long)r.metrics.compiles, (long long)r.metrics.compiles_from_disk, r.peak_rss_mb, o.bf16 ? "true" : "false",
      o.bf16 ? json_number(r.peak.fp32_gflops).c_str() : "null", json_number(r.steps.loss).c_str());
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench(const std::vector<std::string>& args) {
  cli::Flags flags("bench",
                   {{"model", true, true}, {"task"}, {"batch"}, {"seq"}, {"target_len"}, {"steps"}, {"warmup"},
                    {"device"}, {"gradient_checkpointing", false}, {"tf32", false}, {"bf16", false},
                    {"gemm_shapes", false}, {"sync", false}, {"json", false}, {"lora_r"}, {"lora_target_modules"}},
                   kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const BenchOptions o = bench_options(flags);
  std::unique_ptr<models::PreTrainedModel> model = bench_model(flags.get("model"), o);
  const int64_t V = model->config().vocabulary_size();
  const models::ModelInputs in = synthetic_batch(o, V);
  BenchResult r;
  r.architecture = model->architecture();
  r.flops = count_flops(*model, o, V);
  prepare_training(*model, flags, o);
  r.steps = time_steps(*model, in, o);
  r.kernels = compiler::profile_totals();  // (read before the peak's products below add to the table)
  r.median = median_of(r.steps.times);
  r.median_trace = median_of(r.steps.trace_times);
  r.metrics = metrics::snapshot();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  r.peak_rss_mb = ru.ru_maxrss / 1024.0;
  r.peak = gemm_peak(*model, o, V);
  print_report(r, o);
  if (o.json) print_json(r, o);
  return 0;
}

}  // namespace

KILN_COMMAND(bench, "time training steps: step time, tokens/s, model FLOP/s vs the GEMM peak, memory", run_bench);
