// Replicas in one process: spawn(), rendezvous(), the all-reduce inside a
// compiled step, host sums, and the pieces that make a split batch behave
// like the whole one (dropout keyed by global sample, loader shards).
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/data/loader.h"
#include "kiln/optim/optimizer.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/replica.h"
#include "kiln/distributed/threads.h"
#include "kiln/distributed/timeout.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/metrics.h"
#include "kiln/runtime/ops.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

TEST(Spawn, EachReplicaHasItsOwnDeviceAndRank) {
  std::mutex mu;
  std::set<std::string> devices;
  std::set<int> ranks;
  spawn(
      [&](int i) {
        const ReplicaInfo& r = this_replica();
        EXPECT_EQ(r.local_index, i);
        EXPECT_EQ(r.local_count, 3);
        EXPECT_EQ(r.world_size(), 3);
        EXPECT_EQ(r.is_master(), i == 0);
        std::lock_guard<std::mutex> lock(mu);
        devices.insert(r.device.str());
        ranks.insert(r.global_rank());
      },
      3);
  EXPECT_EQ(devices, (std::set<std::string>{"cpu:0", "cpu:1", "cpu:2"}));
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  // Outside spawn(): the lone replica.
  EXPECT_EQ(this_replica().world_size(), 1);
  EXPECT_TRUE(this_replica().is_master());
}

TEST(Spawn, RendezvousWaitsForEveryReplica) {
  std::atomic<int> before{0};
  std::atomic<bool> all_arrived_first{true};
  spawn(
      [&](int) {
        ++before;
        rendezvous("ready");
        if (before.load() != 4) all_arrived_first = false;
      },
      4);
  EXPECT_TRUE(all_arrived_first);
}

// More replicas than cores still run (one thread each), with a warning that
// says so; as many as the cores, none.
TEST(Spawn, MoreReplicasThanCoresWarn) {
  const int cores = dist::default_threads();
  for (int n : {cores, cores + 1}) {
    ::testing::internal::CaptureStderr();
    std::atomic<int> ran{0};
    spawn([&](int) { ++ran; }, n);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(ran.load(), n);
    if (n > cores)
      EXPECT_CONTAINS(err, std::to_string(n) + " replicas share " + std::to_string(cores) +
                               " cores (one thread each): the cores are oversubscribed");
    else
      EXPECT_EQ(err.find("oversubscribed"), std::string::npos) << err;
  }
}

TEST(Spawn, DifferentRendezvousTagsAreAnErrorNotAHang) {
  std::string err = error_of([] { spawn([](int i) { rendezvous(i == 0 ? "save" : "eval"); }, 2); });
  EXPECT_CONTAINS(err, "rendezvous");
  EXPECT_CONTAINS(err, "'save'");
  EXPECT_CONTAINS(err, "'eval'");
}

TEST(Spawn, AFailingReplicaStopsTheOthersAndItsErrorIsRethrown) {
  std::string err = error_of([] {
    spawn(
        [](int i) {
          if (i == 1) throw Error("replica one broke");
          rendezvous("never complete");  // would wait forever without the abort
        },
        3);
  });
  EXPECT_CONTAINS(err, "replica one broke");
  EXPECT_CONTAINS(error_of([] { spawn([](int) {}, 0); }), "at least 1");
}

// A replica that stops answering (here: one that sleeps past a short
// ddp_timeout) fails the others, with an error that names it, instead of
// leaving them waiting forever.
class DdpTimeout : public ::testing::Test {
 protected:
  void SetUp() override { dist::set_timeout(0.3); }
  void TearDown() override { dist::set_timeout(1800); }

  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

TEST_F(DdpTimeout, ALateReplicaIsNamedAtARendezvous) {
  // Late, but within the timeout: no error.
  spawn(
      [](int i) {
        if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        rendezvous("early");
      },
      3);
  std::vector<std::string> seen(3);
  std::vector<double> when(3);
  const auto t0 = Clock::now();
  const std::string err = error_of([&] {
    spawn(
        [&](int i) {
          if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          try {
            rendezvous("checkpoint-6");
          } catch (const std::exception& e) {
            seen[i] = e.what();
            when[i] = seconds_since(t0);
            throw;
          }
        },
        3);
  });
  const std::string want =
      "ddp_timeout: replica 1 (global rank 1) did not reach rendezvous 'checkpoint-6' within 0.3 s";
  EXPECT_EQ(err, want);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(seen[i], want) << "replica " << i;
  // The punctual replicas gave up after the timeout, not when the late one came.
  EXPECT_LT(when[0], 1.2);
  EXPECT_LT(when[2], 1.2);
  EXPECT_GE(when[1], 1.5);  // the late one, when it came, found the group stopped
}

TEST_F(DdpTimeout, ALateReplicaIsNamedInAnAllReduce) {
  std::vector<std::string> seen(2);
  const std::string err = error_of([&] {
    spawn(
        [&](int i) {
          if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          Device d = this_replica().device;
          Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}, d);
          Tensor r = all_reduce({x});
          mark_step(d);
          try {
            r.to_vector<float>();
          } catch (const std::exception& e) {
            seen[i] = e.what();
            throw;
          }
        },
        2);
  });
  const std::string want = "ddp_timeout: replica 1 (global rank 1) did not reach an all-reduce within 0.3 s";
  EXPECT_CONTAINS(err, want);
  EXPECT_CONTAINS(seen[0], want);
  EXPECT_CONTAINS(seen[1], want);
}

TEST_F(DdpTimeout, LateReplicasAreNamedInAHostSum) {
  const std::string err = error_of([] {
    spawn(
        [](int i) {
          if (i >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          dist::all_reduce_host(1.0);
        },
        4);
  });
  EXPECT_EQ(err, "ddp_timeout: replicas 2, 3 (global ranks 2, 3) did not reach a host all-reduce within 0.3 s");
}

// A waiter that itself was frozen (a stopped process: here, a waiter that
// did not look for longer than its checks allow) does not count that time, so
// a process that comes back from a stop does not blame the others.
TEST_F(DdpTimeout, TimeSpentFrozenDoesNotCount) {
  dist::set_timeout(1);
  dist::Deadline deadline;
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // beyond the timeout, unchecked
  EXPECT_FALSE(deadline.passed());
  const auto t0 = Clock::now();
  while (!deadline.passed()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double waited = seconds_since(t0);  // the whole timeout again, from the thaw
  EXPECT_GT(waited, 0.8);
  EXPECT_LT(waited, 2.0);
}

TEST(AllReduce, SumsConcatenatedTensorsOverReplicasInsideTheStep) {
  const int n = 3;
  std::vector<std::vector<float>> got(n);
  spawn(
      [&](int i) {
        Device d = this_replica().device;
        float k = static_cast<float>(i + 1);
        Tensor a = Tensor::from_vector(std::vector<float>{k, 2 * k, 3 * k, 4 * k}, {2, 2}, d);
        Tensor b = Tensor::from_vector(std::vector<float>{10 * k}, {}, d);
        Tensor c = Tensor::from_vector(std::vector<float>{k, -k, 0.5f * k}, {3}, d);
        Tensor r = all_reduce({a, b * 2.0, c}, 0.5);  // an expression is reduced like a value
        EXPECT_EQ(r.shape(), (Shape{8}));
        mark_step(d);
        got[i] = r.to_vector<float>();
      },
      n);
  // sum over replicas of k = 6, times 0.5 = 3
  std::vector<float> want{3, 6, 9, 12, 60, 3, -3, 1.5};
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], want) << "replica " << i;
}

TEST(AllReduce, ManyBucketsAndUnevenSizesGiveBitIdenticalResultsEverywhere) {
  const int n = 2;
  std::vector<std::vector<float>> got(n);
  metrics::reset();
  spawn(
      [&](int i) {
        Device d = this_replica().device;
        std::vector<float> v(1001);
        for (size_t j = 0; j < v.size(); ++j) v[j] = 0.1f * static_cast<float>(j % 17) + static_cast<float>(i) / 3.0f;
        Tensor x = Tensor::from_vector(v, {1001}, d);
        Tensor total;
        for (int k = 0; k < 5; ++k) {
          Tensor r = all_reduce({x * static_cast<double>(k + 1)});
          total = total.defined() ? total + r : r;
        }
        mark_step(d);
        got[i] = total.to_vector<float>();
      },
      n);
  EXPECT_EQ(got[0], got[1]);
  EXPECT_NEAR(got[0][5], 15 * (0.5f + 0.5f + 1.0f / 3.0f), 1e-4);
  metrics::Snapshot m = metrics::snapshot();
  EXPECT_EQ(m.all_reduces, 5);  // once per collective, not per replica
  EXPECT_EQ(m.all_reduce_bytes, 5 * 1001 * 4);
}

TEST(AllReduce, AFailedStepOnOneReplicaFailsTheOthersInsteadOfHanging) {
  std::vector<std::string> errors(2);
  std::string err = error_of([&] {
    spawn(
        [&](int i) {
          Device d = this_replica().device;
          Tensor table = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, d);
          // Replica 1 looks up an id out of range: its step fails before the all-reduce.
          Tensor ids = Tensor::from_vector(std::vector<int64_t>{i == 1 ? 9 : 0}, {1}, d);
          Tensor r = all_reduce({embedding(ids, table)});
          mark_step(d);
          r.to_vector<float>();  // throws on both replicas
        },
        2);
  });
  EXPECT_FALSE(err.empty());
}

TEST(AllReduce, ReplicasWhoseGraphsDifferStillMeetInTraceOrder) {
  // Each replica consumes the two results in a different order (as replicas
  // that update different parameters do): the collectives still run in the
  // order they were traced, on both.
  std::vector<std::vector<float>> got(2);
  spawn(
      [&](int i) {
        Device d = this_replica().device;
        Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, d);
        Tensor y = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {5}, d);
        Tensor first, second;
        {
          Tensor a = all_reduce({x * static_cast<double>(i + 1)});
          Tensor b = all_reduce({y});
          if (i == 0) {
            first = a + 1.0;
            second = b + 1.0;
          } else {
            second = b + 1.0;
            first = a + 1.0;
          }
        }
        mark_step(d);
        got[i] = first.to_vector<float>();
        auto s = second.to_vector<float>();
        got[i].insert(got[i].end(), s.begin(), s.end());
      },
      2);
  std::vector<float> want{4, 7, 10, 3, 5, 7, 9, 11};
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

TEST(AllReduce, TheStepComputesWhileItRuns) {
  // y and its sum do not depend on the all-reduce: they are computed while
  // the reduction is in flight, and the result is only awaited where it is
  // read. (y alone would not do: an elementwise y joins z's fused group.)
  metrics::reset();
  std::vector<std::vector<float>> got(2);
  spawn(
      [&](int i) {
        Device d = this_replica().device;
        Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2}, d);
        Tensor r = all_reduce({x * static_cast<double>(i + 1)});
        Tensor y = exp(Tensor::from_vector(std::vector<float>{0, 0}, {2}, d) * 2.0);
        Tensor z = r + sum(y);
        mark_step(d);
        got[i] = z.to_vector<float>();
      },
      2);
  EXPECT_EQ(got[0], (std::vector<float>{5, 8}));
  EXPECT_EQ(got[1], got[0]);
  EXPECT_GE(metrics::snapshot().overlapped_kernels, 2);  // y's kernel on each replica
}

TEST(AllReduce, OutsideSpawnItIsTheValueTimesScale) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  EXPECT_EQ(all_reduce({x}, 3.0).to_vector<float>(), (std::vector<float>{3, 6}));
  EXPECT_CONTAINS(error_of([] {
                    spawn([](int) { all_reduce({Tensor::from_vector(std::vector<float>{1}, {1}, Device::cpu(5))}); }, 2);
                  }),
                  "cpu:5");
}

TEST(BroadcastFrom, EachSegmentComesFromItsRoot) {
  const int n = 3;
  std::vector<std::vector<float>> got(n);
  spawn(
      [&](int i) {
        Device d = this_replica().device;
        float k = static_cast<float>(10 * (i + 1));
        Tensor a = Tensor::from_vector(std::vector<float>{k, k + 1}, {2}, d);
        Tensor b = Tensor::from_vector(std::vector<float>{k + 2, k + 3, k + 4, k + 5}, {2, 2}, d);
        Tensor c = Tensor::from_vector(std::vector<float>{k + 6}, {}, d);
        Tensor r = broadcast_from({a, b, c}, {2, 0, 1});
        mark_step(d);
        got[i] = r.to_vector<float>();
      },
      n);
  std::vector<float> want{30, 31, 12, 13, 14, 15, 26};
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], want) << "replica " << i;
  EXPECT_CONTAINS(error_of([] {
                    spawn([](int) { broadcast_from({ones({2}, DType::f32, this_replica().device)}, {5}); }, 2);
                  }),
                  "root 5");
}

TEST(ShardOwners, BalancedAndTheSameEverywhere) {
  std::vector<Tensor> params;
  for (int64_t n : {100, 7, 50, 50, 3, 60, 40}) params.push_back(zeros({n}));
  auto owners = optim::shard_owners(params, 2);
  EXPECT_EQ(owners, optim::shard_owners(params, 2));
  int64_t load[2] = {0, 0};
  for (size_t k = 0; k < params.size(); ++k) load[owners[k]] += params[k].numel();
  EXPECT_EQ(load[0] + load[1], 310);
  EXPECT_LE(std::abs(load[0] - load[1]), 10);
  EXPECT_EQ(optim::shard_owners(params, 1), std::vector<int64_t>(params.size(), 0));
  // More replicas than parameters: some own nothing.
  auto many = optim::shard_owners({zeros({4})}, 3);
  EXPECT_EQ(many, std::vector<int64_t>{0});
}

TEST(AllReduceHost, SumsOverReplicas) {
  std::vector<double> got(4);
  spawn([&](int i) { got[i] = dist::all_reduce_host(i + 0.5); }, 4);
  for (double g : got) EXPECT_DOUBLE_EQ(g, 0.5 + 1.5 + 2.5 + 3.5);
}

TEST(Dropout, MasksAreKeyedByGlobalSampleSoASplitBatchDrawsTheSame) {
  Generator whole(11);
  Tensor x = ones({6, 3, 4});
  std::vector<float> full = dropout(x, 0.5, whole).to_vector<float>();
  // Rows [2, 6) of the same draw, from a generator positioned at sample 2.
  Generator part(11);
  part.set_sample_base(2);
  std::vector<float> tail = dropout(ones({4, 3, 4}), 0.5, part).to_vector<float>();
  EXPECT_EQ(tail, std::vector<float>(full.begin() + 2 * 12, full.end()));
  // Without a base the draw differs (the test can fail).
  Generator plain(11);
  EXPECT_NE(dropout(ones({4, 3, 4}), 0.5, plain).to_vector<float>(), tail);
}

std::shared_ptr<data::Features> rows(int n) {
  auto f = std::make_shared<data::Features>();
  for (int i = 0; i < n; ++i) {
    f->input_ids.push_back(std::vector<int64_t>(static_cast<size_t>(2 + i % 7), 5 + i));
    f->labels.push_back(i % 3);
  }
  return f;
}

TEST(LoaderShards, ShardsPartitionEachGlobalBatchAndPadLikeIt) {
  auto f = rows(10);
  data::LoaderOptions whole;
  whole.batch_size = 8;
  whole.seed = 3;
  data::CollatorOptions co;
  data::DataLoader all(f, whole, co);
  std::vector<std::unique_ptr<data::DataLoader>> shards;
  for (int s = 0; s < 3; ++s) {
    data::LoaderOptions o = whole;
    o.shard = s;
    o.num_shards = 3;
    shards.push_back(std::make_unique<data::DataLoader>(f, o, co));
  }
  for (int b = 0; b < 4; ++b) {  // crosses an epoch; the second batch of each epoch has 2 rows
    data::Batch g = all.next();
    std::vector<int64_t> joined;
    double weight = 0;
    for (int s = 0; s < 3; ++s) {
      data::Batch p = shards[s]->next();
      EXPECT_EQ(p.seq_len, g.seq_len) << "batch " << b << " shard " << s;
      if (p.weight == 0) {
        EXPECT_EQ(p.batch_size, 1);  // a placeholder row that counts for nothing
        continue;
      }
      EXPECT_EQ(p.first_sample, static_cast<int64_t>(joined.size()));
      joined.insert(joined.end(), p.indices.begin(), p.indices.end());
      weight += p.batch_size;
    }
    EXPECT_EQ(joined, g.indices) << "batch " << b;
  }
  data::LoaderOptions bad = whole;
  bad.shard = 3;
  bad.num_shards = 3;
  EXPECT_CONTAINS(error_of([&] { data::DataLoader l(f, bad, co); }), "shard 3 of 3");
}

}  // namespace
}  // namespace kiln
