// Data-parallel training gives one result however the global batch is split:
// 1 replica, 2 replicas in this process, or gradient accumulation, and a
// checkpoint written with one replica count resumes on another.
#include <filesystem>
#include <mutex>

#include "kiln/distributed/replica.h"
#include "kiln/io/json_file.h"
#include "kiln/models/model.h"
#include "kiln/runtime/metrics.h"
#include "kiln/train/trainer.h"
#include "support/temp_dir.h"
#include "tiny_bert.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using Params = std::map<std::string, std::vector<float>>;

models::BertConfig tiny() { return testing::tiny_bert(2); }

// 30 rows of different lengths: global batches of 8 end each epoch with 6.
std::shared_ptr<data::Features> features() {
  auto f = std::make_shared<data::Features>();
  for (int i = 0; i < 30; ++i) {
    int len = 3 + i % 6;
    std::vector<int64_t> ids{1};
    for (int t = 0; t < len; ++t) ids.push_back(5 + (i * 7 + t * 3) % 30);
    ids.push_back(2);
    f->input_ids.push_back(ids);
    f->token_type_ids.push_back(std::vector<int64_t>(ids.size(), 0));
    f->labels.push_back((i / 3) % 2);
  }
  return f;
}

struct Split {
  int replicas = 1, per_device = 8, accum = 1;
  // Rows pad to max_length rather than to the longest of the (global)
  // micro-batch: accumulation splits a step into micro-batches that would
  // otherwise pad differently, and dropout masks follow the padded layout.
  bool fixed_padding = false;
  bool shard = false;  // ZeRO-1
  double bucket_mb = 25;
  int64_t stop_after = -1;
  std::string resume;
  bool bf16 = false;
  std::string optim = "adamw_torch";
};

Split split(int replicas, int per_device, int accum = 1, bool fixed_padding = false) {
  Split s;
  s.replicas = replicas;
  s.per_device = per_device;
  s.accum = accum;
  s.fixed_padding = fixed_padding;
  return s;
}

struct Result {
  Params params;
  std::vector<int64_t> state_numel;  // optimizer state each replica holds
  std::vector<double> losses;  // logged every step
  bool replicas_identical = true;
};

Params params_of(const models::PreTrainedModel& m) {
  Params out;
  for (auto& [n, p] : m.named_parameters()) out[n] = p.to_vector<float>();
  return out;
}

Result train(const fs::path& out, const Split& run) {
  Result result;
  std::mutex mu;
  std::vector<Params> per_replica(run.replicas);
  auto feats = features();
  spawn(
      [&](int i) {
        auto model = models::create_model("BertForSequenceClassification", tiny(), 1, this_replica().device);
        train::TrainingArguments a;
        a.output_dir = out.string();
        a.max_steps = 10;
        a.save_steps = 5;
        a.logging_steps = 1;
        a.learning_rate = 2e-3;
        a.weight_decay = 0.01;
        a.warmup_steps = 2;
        a.max_grad_norm = 1.0;
        a.seed = 7;
        a.num_replicas = run.replicas;
        a.shard_optimizer_state = run.shard;
        a.ddp_bucket_cap_mb = run.bucket_mb;
        a.per_device_train_batch_size = run.per_device;
        a.bf16 = run.bf16;
        a.optim = run.optim;
        a.gradient_accumulation_steps = run.accum;
        a.resume_from_checkpoint = run.resume;
        data::CollatorOptions co;
        co.max_length = 12;
        co.pad_to_max_length = run.fixed_padding;
        train::Trainer t(*model, a, train::Task::TextClassification, feats, nullptr, co);
        if (run.stop_after > 0) t.stop_after_step(run.stop_after);
        t.train();
        std::lock_guard<std::mutex> lock(mu);
        per_replica[i] = params_of(*model);
        if (result.state_numel.empty()) result.state_numel.assign(run.replicas, 0);
        result.state_numel[i] = t.optimizer_state_numel();
        if (i == 0)
          for (const auto& e : t.state().log_history)
            if (e.contains("loss")) result.losses.push_back(e["loss"].get<double>());
      },
      run.replicas);
  result.params = per_replica[0];
  for (int i = 1; i < run.replicas; ++i) result.replicas_identical &= per_replica[i] == per_replica[0];
  return result;
}

// ||a - b|| / ||b|| per tensor. BERT's attention key bias is left out: it
// adds the same amount to every score of a query, which softmax ignores, so
// its true gradient is zero and what the backward pass computes is rounding
// noise; Adam scales that noise to full-size steps, so its values are noise
// too, and differ between any two summation orders.
struct Worst {
  double value = 0;
  std::string name;
};
Worst worst_relative(const Params& a, const Params& b) {
  Worst worst;
  for (const auto& [name, want] : b) {
    if (name.find("attention.self.key.bias") != std::string::npos) continue;
    const auto& got = a.at(name);
    double num = 0, den = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      num += (got[k] - want[k]) * double(got[k] - want[k]);
      den += want[k] * double(want[k]);
    }
    double rel = std::sqrt(num / std::max(den, 1e-30));
    if (rel > worst.value) worst = {rel, name};
  }
  return worst;
}

TEST(DataParallel, OneReplicaTwoReplicasAndAccumulationAgree) {
  TempDir d1, d2, d3, d4;
  Result one = train(d1.path(), split(1, 8));
  metrics::reset();
  Split sharded = split(2, 4);
  sharded.shard = true;
  Result two = train(d2.path(), sharded);
  metrics::Snapshot m = metrics::snapshot();
  TempDir d5;
  Split small_buckets = split(2, 4);
  small_buckets.bucket_mb = 0.005;  // ~1250 floats: several buckets for this model
  metrics::reset();
  Result two_unsharded = train(d5.path(), small_buckets);
  metrics::Snapshot mu = metrics::snapshot();
  Result one_fixed = train(d3.path(), split(1, 8, 1, true));
  Result accum = train(d4.path(), split(1, 4, 2, true));
  ASSERT_EQ(one.losses.size(), 10u);
  EXPECT_TRUE(two.replicas_identical) << "replicas drifted apart";
  for (const Result* r : {&two, &two_unsharded}) {
    Worst w = worst_relative(r->params, one.params);
    EXPECT_LT(w.value, 1e-5) << w.name;
  }
  EXPECT_TRUE(two_unsharded.replicas_identical);
  {
    Worst w = worst_relative(accum.params, one_fixed.params);
    EXPECT_LT(w.value, 1e-5) << w.name;
  }
  for (size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(two.losses[s], one.losses[s], 2e-4) << "step " << s + 1;
    EXPECT_NEAR(accum.losses[s], one_fixed.losses[s], 2e-4) << "step " << s + 1;
  }
  // The parameters moved (the comparison is not between untrained models).
  auto fresh = params_of(*models::create_model("BertForSequenceClassification", tiny(), 1));
  EXPECT_GT(worst_relative(one.params, fresh).value, 1e-3);
  // Gradients were all-reduced inside the steps: 10 steps, at least one bucket each.
  EXPECT_GE(m.all_reduces, 10);
  EXPECT_GT(m.all_reduce_bytes, 0);
  // Each bucket is reduced while the backward pass of earlier layers computes.
  EXPECT_GE(mu.all_reduces, 10 * 5);  // several buckets a step
  EXPECT_GT(mu.overlapped_kernels, 10 * 10);
  // The optimizer state is sharded (ZeRO-1): each replica holds a share, the
  // shares add up to one full copy, and the biggest is at most ~60 %.
  const int64_t full = one.state_numel[0];
  ASSERT_EQ(two.state_numel.size(), 2u);
  EXPECT_EQ(two.state_numel[0] + two.state_numel[1], full);
  for (int64_t share : two.state_numel) EXPECT_LT(share, full * 0.6);
  EXPECT_EQ(two_unsharded.state_numel[0], full);
  // Only the master wrote: one model, one set of checkpoints.
  EXPECT_TRUE(fs::exists(d2.path() / "model.safetensors"));
  EXPECT_TRUE(fs::exists(d2.path() / "checkpoint-5" / "optimizer.safetensors"));
  auto state = read_json_file(d2.path() / "trainer_state.json");
  EXPECT_EQ(state["train_batch_size"].get<int64_t>(), 8);
}

// --bf16 with replicas: every replica thread runs its products in bf16 (the
// autocast state is per thread), the replicas stay identical, and the loss
// curve is one replica's up to bf16 rounding of the partial gradient sums.
TEST(DataParallel, TwoReplicasInBf16FollowOne) {
  TempDir d1, d2;
  Split one_run = split(1, 8), two_run = split(2, 4);
  one_run.bf16 = two_run.bf16 = true;
  Result one = train(d1.path(), one_run), two = train(d2.path(), two_run);
  EXPECT_TRUE(two.replicas_identical);
  ASSERT_EQ(two.losses.size(), one.losses.size());
  for (size_t s = 0; s < one.losses.size(); ++s)
    EXPECT_NEAR(two.losses[s], one.losses[s], 0.01 * one.losses[s]) << "step " << s + 1;
  Worst w = worst_relative(two.params, one.params);
  EXPECT_LT(w.value, 5e-2) << w.name;
}

TEST(DataParallel, CheckpointsResumeOnAnotherReplicaCount) {
  TempDir straight_dir;
  Result straight = train(straight_dir.path(), split(1, 8));
  for (auto [first, second] : {std::pair{2, 1}, std::pair{1, 2}}) {
    TempDir dir;
    Split a = split(first, 8 / first);
    a.stop_after = 5;
    a.shard = true;  // the checkpoint gathers the sharded state
    train(dir.path(), a);
    ASSERT_TRUE(fs::exists(dir.path() / "checkpoint-5"));
    Split b = split(second, 8 / second);
    b.shard = true;
    b.resume = (dir.path() / "checkpoint-5").string();
    Result resumed = train(dir.path(), b);
    SCOPED_TRACE(std::to_string(first) + " replica(s) then " + std::to_string(second));
    // The resumed run's log holds steps 1..10 (history from the checkpoint).
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (size_t s = 0; s < 10; ++s) EXPECT_NEAR(resumed.losses[s], straight.losses[s], 2e-4) << "step " << s + 1;
    {
    Worst w = worst_relative(resumed.params, straight.params);
    EXPECT_LT(w.value, 1e-5) << w.name;
  }
  }
}

// Adafactor's state is not shaped like its parameters (a row and a column
// per matrix): sharded over two replicas, gathered into the checkpoint, it
// resumes on one, and the two-replica run follows the one-replica run.
TEST(DataParallel, ShardedAdafactorStateResumesOnAnotherReplicaCount) {
  TempDir straight_dir, two_dir, dir;
  Split one_run = split(1, 8);
  one_run.optim = "adafactor";
  Result straight = train(straight_dir.path(), one_run);
  Split two_run = split(2, 4);
  two_run.optim = "adafactor";
  two_run.shard = true;
  Result two = train(two_dir.path(), two_run);
  EXPECT_TRUE(two.replicas_identical);
  EXPECT_LT(two.state_numel[0], straight.state_numel[0]);  // each holds a share
  EXPECT_LT(two.state_numel[1], straight.state_numel[0]);
  EXPECT_EQ(two.state_numel[0] + two.state_numel[1], straight.state_numel[0]);
  EXPECT_LT(worst_relative(two.params, straight.params).value, 1e-4);
  Split a = two_run;
  a.stop_after = 5;
  train(dir.path(), a);
  ASSERT_TRUE(fs::exists(dir.path() / "checkpoint-5"));
  Split b = one_run;
  b.resume = (dir.path() / "checkpoint-5").string();
  Result resumed = train(dir.path(), b);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (size_t s = 0; s < 10; ++s) EXPECT_NEAR(resumed.losses[s], straight.losses[s], 2e-4) << "step " << s + 1;
  Worst w = worst_relative(resumed.params, straight.params);
  EXPECT_LT(w.value, 1e-4) << w.name;
}

TEST(DataParallel, NumReplicasMustMatchTheSpawn) {
  auto model = models::create_model("BertForSequenceClassification", tiny(), 1);
  train::TrainingArguments a;
  a.output_dir = "unused";
  a.num_replicas = 2;
  EXPECT_CONTAINS(testing::error_of([&] {
                    train::Trainer t(*model, a, train::Task::TextClassification, features(), nullptr, {});
                  }),
                  "kiln::spawn");
}

}  // namespace
}  // namespace kiln
