// DataLoader (per-epoch shuffling, drop_last, workers, seek) and DeviceLoader.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <set>
#include <string>

#include "data/util.h"
#include "kiln/data/loader.h"

using namespace kiln::data;
using kiln::testing::error_of;

namespace {
// Row r is [2, 100 + r, 3] plus r % 4 extra tokens, labeled r % 3.
std::shared_ptr<const Features> rows(int n) {
  auto f = std::make_shared<Features>();
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> ids{2, 100 + r};
    for (int k = 0; k < r % 4; ++k) ids.push_back(7);
    ids.push_back(3);
    f->token_type_ids.emplace_back(ids.size(), 0);
    f->input_ids.push_back(std::move(ids));
    f->labels.push_back(r % 3);
  }
  return f;
}

std::vector<Batch> take(DataLoader& dl, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(dl.next());
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].indices, b[i].indices) << "batch " << i;
    EXPECT_EQ(a[i].input_ids, b[i].input_ids) << "batch " << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << "batch " << i;
  }
}
}  // namespace

TEST(DataLoaderTest, EpochsArePermutationsReproducibleAndDifferent) {
  auto f = rows(10);
  DataLoader dl(f, {.batch_size = 4, .shuffle = true, .seed = 1}, {});
  EXPECT_EQ(dl.batches_per_epoch(), 3);
  std::vector<std::vector<int64_t>> epochs(2);
  for (int e = 0; e < 2; ++e)
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(dl.epoch(), e);
      EXPECT_EQ(dl.position(), b);
      Batch batch = dl.next();
      EXPECT_EQ(batch.batch_size, b < 2 ? 4 : 2);  // the last batch is partial
      epochs[e].insert(epochs[e].end(), batch.indices.begin(), batch.indices.end());
    }
  EXPECT_EQ(dl.epoch(), 2);
  for (auto& e : epochs) {
    auto sorted = e;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_EQ(epochs[0], epoch_permutation(10, 1, 0, true));
  // A new loader with the same seed: the same batches; another seed: others.
  DataLoader again(f, {.batch_size = 4, .shuffle = true, .seed = 1}, {});
  std::vector<int64_t> first;
  for (int b = 0; b < 3; ++b) {
    auto idx = again.next().indices;
    first.insert(first.end(), idx.begin(), idx.end());
  }
  EXPECT_EQ(first, epochs[0]);
  EXPECT_NE(epoch_permutation(10, 2, 0, true), epochs[0]);
  // Without shuffle: in order.
  DataLoader ordered(f, {.batch_size = 4, .shuffle = false}, {});
  EXPECT_EQ(ordered.next().indices, (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(DataLoaderTest, PermutationIsUniformEnough) {
  // Each row lands in the first slot about equally often over many epochs.
  std::vector<int> first(8, 0);
  for (int e = 0; e < 8000; ++e) ++first[static_cast<size_t>(epoch_permutation(8, 42, e, true)[0])];
  for (int c : first) EXPECT_NEAR(c, 1000, 150);
}

TEST(DataLoaderTest, DropLast) {
  auto f = rows(10);
  DataLoader dl(f, {.batch_size = 4, .drop_last = true}, {});
  EXPECT_EQ(dl.batches_per_epoch(), 2);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dl.next().batch_size, 4);
  EXPECT_EQ(dl.epoch(), 3);
  EXPECT_CONTAINS(error_of([&] { DataLoader(rows(3), {.batch_size = 4, .drop_last = true}, {}); }),
                  "3 rows make no batch of 4 with drop_last");
}

TEST(DataLoaderTest, WorkerCountDoesNotChangeBatches) {
  auto f = rows(37);
  CollatorOptions c;
  c.pad_to_multiple_of = 4;
  auto run = [&](int workers) {
    DataLoader dl(f, {.batch_size = 5, .seed = 9, .num_workers = workers}, c);
    return take(dl, 3 * dl.batches_per_epoch() + 2);  // crosses epoch boundaries
  };
  auto serial = run(0);
  expect_same(serial, run(1));
  expect_same(serial, run(3));
}

TEST(DataLoaderTest, SeekResumesExactly) {
  auto f = rows(23);
  for (int workers : {0, 2}) {
    LoaderOptions o{.batch_size = 4, .seed = 5, .num_workers = workers};
    DataLoader straight(f, o, {});
    auto all = take(straight, 20);
    // Interrupted after 9 batches (epoch 1, position 3), resumed in a new loader.
    DataLoader first(f, o, {});
    take(first, 9);
    EXPECT_EQ(first.epoch(), 1);
    EXPECT_EQ(first.position(), 3);
    DataLoader resumed(f, o, {});
    resumed.seek(first.epoch(), first.position());
    auto rest = take(resumed, 11);
    expect_same(std::vector<Batch>(all.begin() + 9, all.end()), rest);
    // Seeking back in the same loader discards what it had prefetched.
    straight.seek(0, 2);
    expect_same(std::vector<Batch>(all.begin() + 2, all.begin() + 5), take(straight, 3));
    // position == batches_per_epoch is the start of the next epoch.
    straight.seek(1, straight.batches_per_epoch());
    EXPECT_EQ(straight.epoch(), 2);
    EXPECT_EQ(straight.position(), 0);
  }
  DataLoader dl(f, {.batch_size = 4}, {});
  EXPECT_CONTAINS(error_of([&] { dl.seek(0, 7); }), "position 7 is out of range (6 batches per epoch)");
}

TEST(DataLoaderTest, LengthGroupedAsHfsLengthGroupedSampler) {
  // 10 rows, batch 2: megabatches of min(10 / 8, 50) = 1 batch. Each sorted
  // longest first (ties keep their order); the longest row of all (row 4,
  // length 9) swaps places with the first row.
  const std::vector<int64_t> lengths{1, 5, 3, 3, 9, 2, 4, 4, 7, 0};
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(length_grouped(order, lengths, 2), (std::vector<int64_t>{4, 0, 2, 3, 1, 5, 6, 7, 8, 9}));
  // 100 rows, batch 2: megabatches of min(100 / 8, 50) = 12 batches (24 rows).
  std::vector<int64_t> many(100);
  for (int64_t i = 0; i < 100; ++i) many[i] = (i * 37) % 100;
  std::vector<int64_t> len(100);
  for (int64_t i = 0; i < 100; ++i) len[i] = (i * 13) % 29;
  auto grouped = length_grouped(many, len, 2);
  EXPECT_TRUE(std::is_permutation(grouped.begin(), grouped.end(), many.begin()));
  EXPECT_EQ(len[grouped[0]], 28);  // the longest first
  for (int64_t begin = 0; begin < 100; begin += 24) {
    std::set<int64_t> was(many.begin() + begin, many.begin() + std::min<int64_t>(begin + 24, 100));
    for (int64_t i = begin + 1; i < std::min<int64_t>(begin + 24, 100); ++i) {
      EXPECT_TRUE(was.count(grouped[i])) << "row " << grouped[i] << " left its megabatch";
      if (i > begin + 1) {
        EXPECT_GE(len[grouped[i - 1]], len[grouped[i]]) << i;
      }
    }
  }
  EXPECT_CONTAINS(error_of([&] { length_grouped(many, len, 0); }), "batch_size must be positive");
}

TEST(DataLoaderTest, LengthGroupingPadsLessAndResumesExactly) {
  // Rows of 3 to 6 tokens: dynamic padding pads each batch to its longest row.
  auto f = rows(64);
  auto padded_tokens = [&](int64_t grouped) {
    DataLoader dl(f, {.batch_size = 4, .seed = 3, .length_grouped_batch = grouped}, {});
    int64_t tokens = 0;
    std::set<int64_t> seen;
    for (int b = 0; b < dl.batches_per_epoch(); ++b) {
      Batch batch = dl.next();
      tokens += static_cast<int64_t>(batch.input_ids.size());
      seen.insert(batch.indices.begin(), batch.indices.end());
    }
    EXPECT_EQ(seen.size(), 64u);  // still every row once an epoch
    return tokens;
  };
  EXPECT_LT(padded_tokens(4), padded_tokens(0));
  // A pure function of (seed, epoch), so seek() resumes it exactly.
  LoaderOptions o{.batch_size = 4, .seed = 5, .length_grouped_batch = 8};
  DataLoader straight(f, o, {});
  auto all = take(straight, 30);
  DataLoader resumed(f, o, {});
  resumed.seek(1, 5);
  expect_same(std::vector<Batch>(all.begin() + 21, all.end()), take(resumed, 9));
}

TEST(DataLoaderTest, WorkerErrorsReachTheCaller) {
  auto f = rows(8);
  CollatorOptions c;
  c.pad_to_max_length = true;
  c.max_length = 4;  // rows 2, 3, 6, 7 are longer
  for (int workers : {0, 2}) {
    DataLoader dl(f, {.batch_size = 8, .shuffle = false, .num_workers = workers}, c);
    EXPECT_CONTAINS(error_of([&] { dl.next(); }), "more than max_length 4");
    EXPECT_EQ(dl.position(), 0);
  }
}

// Workers the system cannot start (here: address space for their stacks runs
// out) are an error naming the option, not std::terminate over the threads
// already started.
TEST(DataLoaderTest, WorkersThatCannotStartAreAnError) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit below leaves";
#else
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  ASSERT_TRUE(statm >> pages);
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &before), 0);
  rlimit tight = before;
  tight.rlim_cur = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + (size_t{256} << 20);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  std::string error;
  try {
    DataLoader dl(rows(8), {.batch_size = 4, .num_workers = 100000}, {});
  } catch (const kiln::Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_AS, &before);
  EXPECT_NE(error.find("could not start data-loading worker"), std::string::npos) << error;
  EXPECT_NE(error.find("of 100000"), std::string::npos) << error;
  EXPECT_NE(error.find("--dataloader_num_workers"), std::string::npos) << error;
#endif
}

TEST(DeviceLoaderTest, SameOrderAsTheHostLoaderWithNamedTensors) {
  auto f = rows(13);
  LoaderOptions o{.batch_size = 4, .seed = 3, .num_workers = 1};
  DataLoader reference(f, o, {});
  auto want = take(reference, 9);
  DataLoader host(f, o, {});
  DeviceLoader dev(host, kiln::Device::cpu(), 2);
  for (int i = 0; i < 9; ++i) {
    DeviceBatch b = dev.next();
    EXPECT_EQ(b.epoch, i / 4);
    EXPECT_EQ(b.position, i % 4);
    EXPECT_EQ(b.host.indices, want[i].indices);
    ASSERT_EQ(b.tensors.size(), 4u);
    const kiln::Tensor& ids = b.tensors.at("input_ids");
    EXPECT_EQ(ids.name(), "input_ids");
    EXPECT_EQ(ids.shape(), (kiln::Shape{want[i].batch_size, want[i].seq_len}));
    EXPECT_EQ(ids.dtype(), kiln::DType::i64);
    EXPECT_EQ(ids.to_vector<int64_t>(), want[i].input_ids);
    EXPECT_EQ(b.tensors.at("attention_mask").to_vector<int64_t>(), want[i].attention_mask);
    EXPECT_EQ(b.tensors.at("token_type_ids").shape(), ids.shape());
    EXPECT_EQ(b.tensors.at("labels").shape(), (kiln::Shape{want[i].batch_size}));
    EXPECT_EQ(b.tensors.at("labels").to_vector<int64_t>(), want[i].labels);
  }
  EXPECT_GE(dev.wait_seconds(), 0.0);
}

TEST(DeviceLoaderTest, RegressionAndMlmLabelShapes) {
  auto reg = std::make_shared<Features>(*rows(4));
  reg->labels.clear();
  reg->float_labels = {0.5f, 1.5f, 2.5f, 3.5f};
  Batch b = collate(*reg, {0, 1}, {}, 0);
  auto t = to_device(b, kiln::Device::cpu());
  EXPECT_EQ(t.at("labels").dtype(), kiln::DType::f32);
  EXPECT_EQ(t.at("labels").to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));
  CollatorOptions mlm;
  mlm.mlm = true;
  mlm.vocab_size = 200;
  Batch m = collate(*rows(4), {0, 1, 2}, mlm, 0);
  EXPECT_EQ(to_device(m, kiln::Device::cpu()).at("labels").shape(), (kiln::Shape{3, m.seq_len}));
}

// One-token rows: per-token labels of [B, 1] have B values, as [B] labels do, and stay [B, 1].
TEST(DeviceLoaderTest, OneTokenRowsKeepPerTokenLabelShapes) {
  Features f;
  f.input_ids = {{5}, {6}};
  CollatorOptions causal;
  causal.causal_lm = true;
  EXPECT_EQ(to_device(collate(f, {0, 1}, causal, 0), kiln::Device::cpu()).at("labels").shape(), (kiln::Shape{2, 1}));
  f.token_labels = {{5}, {-100}};
  EXPECT_EQ(to_device(collate(f, {0, 1}, {}, 0), kiln::Device::cpu()).at("labels").shape(), (kiln::Shape{2, 1}));
}

TEST(DeviceLoaderTest, ErrorsReachNextAndDestructionWhileFullIsClean) {
  auto f = rows(8);
  CollatorOptions c;
  c.pad_to_max_length = true;
  c.max_length = 4;
  DataLoader bad(f, {.batch_size = 8, .shuffle = false}, c);
  DeviceLoader dev(bad, kiln::Device::cpu(), 1);
  EXPECT_CONTAINS(error_of([&] { dev.next(); }), "more than max_length 4");
  // A loader destroyed with a full queue and a thread waiting on it.
  DataLoader good(f, {.batch_size = 2}, {});
  { DeviceLoader idle(good, kiln::Device::cpu(), 3); }
}
