// The lazy device layer: compile once and replay, recompile reasons,
// asynchronous execution, buffer donation, failed steps, eager mode.
#include "support/test_util.h"

namespace kiln {
namespace {

// A two-layer MLP trained with AdamW: forward + backward + update in one step.
struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(int64_t in = 8, int64_t hidden = 16, int64_t out = 4) {
    auto init = [](Shape s, float scale, const char* name) {
      std::vector<float> v(numel(s));
      for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::cos(0.7f * static_cast<float>(i) + 0.1f);
      return Tensor::from_vector(v, s, Device::cpu(), name).requires_grad_();
    };
    w1 = init({hidden, in}, 0.3f, "w1");
    b1 = init({hidden}, 0.1f, "b1");
    w2 = init({out, hidden}, 0.3f, "w2");
    b2 = init({out}, 0.1f, "b2");
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor forward(const Tensor& x) const { return linear(gelu(linear(x, w1, b1)), w2, b2); }
};

Tensor batch_x(int64_t b, int64_t in, int step) {
  std::vector<float> v(b * in);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(step));
  return Tensor::from_vector(v, {b, in}, Device::cpu(), "x");
}
Tensor batch_y(int64_t b, int step) {
  std::vector<int64_t> v(b);
  for (int64_t i = 0; i < b; ++i) v[i] = (i + step) % 4;
  return Tensor::from_vector(v, {b}, Device::cpu(), "labels");
}

float train_step(Mlp& m, optim::Optimizer& opt, int64_t b, int step) {
  opt.zero_grad();
  Tensor loss = cross_entropy(m.forward(batch_x(b, 8, step)), batch_y(b, step));
  loss.backward();
  opt.step();
  mark_step();
  return loss.item();
}

TEST(Lazy, TenStepsCompileOnceAndNewShapeNamesTheInput) {
  Mlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  metrics::reset();
  float first = 0, last = 0;
  for (int s = 0; s < 10; ++s) {
    float l = train_step(m, opt, 8, s);
    if (s == 0) first = l;
    last = l;
  }
  auto snap = metrics::snapshot();
  // One compile for the step; reading loss.item() after mark_step is a cache-free read.
  EXPECT_EQ(snap.compiles, 1) << metrics::report();
  EXPECT_EQ(snap.cache_hits, 9);
  EXPECT_LT(last, first);

  train_step(m, opt, 6, 10);  // a new batch shape
  snap = metrics::snapshot();
  ASSERT_EQ(snap.compiles, 2) << metrics::report();
  EXPECT_NE(snap.compile_reasons.back().find("input 'x' changed shape [8,8]→[6,8]"), std::string::npos)
      << snap.compile_reasons.back();
  auto j = metrics::to_json();
  EXPECT_EQ(j["compiles"], 2);
  EXPECT_EQ(j["compile_reasons"].size(), 2u);
}

TEST(Lazy, MarkStepReturnsBeforeExecution) {
  Tensor a = Tensor::from_vector(std::vector<float>(1000, 1.5f), {10, 100});
  Tensor b = sum(a * a);
  auto& stream = runtime::DeviceContext::get(Device::cpu()).stream();
  wait_device_ops();  // nothing left from earlier tests in this process
  stream.pause();
  mark_step();
  // mark_step() queued the step and returned while the stream is held.
  EXPECT_EQ(stream.pending(), 1u);
  EXPECT_FALSE(b.is_ready());
  // The host can trace the next step meanwhile.
  Tensor c = b * 2.0;
  stream.resume();
  EXPECT_FLOAT_EQ(c.item(), 4500.0f);
  EXPECT_TRUE(b.is_ready());
}

TEST(Lazy, DonatesParameterBuffersToTheirUpdates) {
  Mlp m;
  optim::SGD opt(m.params(), {.lr = 0.1});
  train_step(m, opt, 4, 0);
  wait_device_ops();
  const void* before = m.w1.node()->data->storage->data();
  train_step(m, opt, 4, 1);
  // The updated weight lives in the old weight's memory.
  EXPECT_EQ(m.w1.node()->data->storage->data(), before);
}

// A decode step's cache write: an index_copy whose result replaces the cache
// it reads takes the old cache's memory and writes only its slices there;
// read while the old value is still needed, it writes a copy. Both give
// torch.index_copy's values, in f32 and bf16.
TEST(Lazy, AnIndexCopyThatReplacesItsInputWritesOnlyItsSlicesThere) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> expected(2 * 4 * 3);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = 0.25f * static_cast<float>(i);
    Tensor cache = cast(Tensor::from_vector(expected, {2, 4, 3}), dtype);
    mark_step();
    const void* memory = nullptr;
    for (int64_t slot : {2, 0, 3}) {
      std::vector<float> row(2 * 3);
      for (size_t i = 0; i < row.size(); ++i) row[i] = -1.0f - static_cast<float>(slot * 10 + i);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t d = 0; d < 3; ++d) expected[(b * 4 + slot) * 3 + d] = row[b * 3 + d];
      // Read first, without the step: a copy, and the cache keeps its value.
      Tensor slot_ids = Tensor::from_vector(std::vector<int64_t>{slot}, {1});
      Tensor update = Tensor::from_vector(row, {2, 1, 3});
      std::vector<float> before = cast(cache, DType::f32).to_vector<float>();
      EXPECT_EQ(cast(index_copy(cache, 1, slot_ids, cast(update, dtype)), DType::f32).to_vector<float>(), expected);
      EXPECT_EQ(cast(cache, DType::f32).to_vector<float>(), before);
      cache.assign(index_copy(cache, 1, slot_ids, cast(update, dtype)));
      mark_step();
      wait_device_ops();
      EXPECT_EQ(cast(cache, DType::f32).to_vector<float>(), expected);
      const void* now = cache.node()->data->storage->data();
      if (memory) {
        EXPECT_EQ(now, memory) << "the update took new memory";
      }
      memory = now;
    }
  }
}

TEST(Lazy, IndexCopyIdsOutOfRangeOrRepeatedAreErrors) {
  Tensor cache = Tensor::from_vector(std::vector<float>(24, 1.0f), {2, 4, 3});
  Tensor rows = Tensor::from_vector(std::vector<float>(12, 2.0f), {2, 2, 3});
  auto copy_at = [&](std::vector<int64_t> slots) {
    return testing::error_of([&] { index_copy(cache, 1, Tensor::from_vector(slots, {2}), rows).to_vector<float>(); });
  };
  EXPECT_CONTAINS(copy_at({0, 4}), "index_copy: id 4 at position 1 out of range [0, 4) along dim 1");
  EXPECT_CONTAINS(copy_at({-1, 2}), "index_copy: id -1 at position 0 out of range [0, 4) along dim 1");
  EXPECT_CONTAINS(copy_at({2, 2}), "index_copy: id 2 at positions 0 and 1 (the ids must be distinct)");
  Tensor one_slot = Tensor::from_vector(std::vector<int64_t>{0}, {1});
  EXPECT_CONTAINS(testing::error_of([&] { index_copy(cache, 1, one_slot, rows); }),
                  "index_copy: src f32[2,2,3] must be f32[2,1,3] (x [2,4,3] with dim 1 as long as index)");
  take_step_failure();
}

TEST(Lazy, ReadingAValueFromAFailedStepIsAnError) {
  take_step_failure();  // what earlier tests left
  Tensor table = Tensor::from_vector(std::vector<float>(12, 1.0f), {4, 3});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 7}, {2}, Device::cpu(), "ids");
  Tensor rows = index_select(table, ids);
  Tensor total = sum(rows);
  mark_step();
  std::string first;
  try {
    total.item();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    first = e.what();
    EXPECT_NE(first.find("index_select: id 7 at position 1 out of range [0, 4)"), std::string::npos) << first;
  }
  EXPECT_EQ(take_step_failure(), "index_select: id 7 at position 1 out of range [0, 4)");
  EXPECT_EQ(take_step_failure(), "");  // taken
  // Later steps consuming the failed value fail too, with the same error: it
  // does not grow a layer with every step (a training loop would log each).
  Tensor more = total;
  for (int step = 0; step < 3; ++step) {
    more = more + 1.0;
    mark_step();
  }
  try {
    more.item();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), first);
  }
  EXPECT_EQ(take_step_failure(), "");  // only a step that fails to run counts
  auto snap = metrics::snapshot();
  EXPECT_GE(snap.failed_executions, 4);
}

TEST(Lazy, ShapeAndDtypeErrorsNameOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  try {
    add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: shapes [2,3] and [4,5] cannot be broadcast together");
  }
  try {
    matmul(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: inner dimensions differ"), std::string::npos) << e.what();
  }
  Tensor ids = arange(3);
  EXPECT_THROW(exp(ids), Error);                // exp of i64
  EXPECT_THROW(matmul(ids, ids), Error);        // rank 1
  EXPECT_THROW(reshape(a, {4, 2}), Error);      // 6 vs 8 elements
  EXPECT_THROW(cross_entropy(a, a), Error);     // float labels
  EXPECT_THROW(layer_norm(a, zeros({2}), zeros({3})), Error);
  EXPECT_THROW(Tensor().shape(), Error);
}

// Products with an empty side give empty results (oneDNN refuses such a
// call; the backend skips it), and with K = 0 zeros, as PyTorch's.
TEST(Lazy, ProductsWithAnEmptySideAreEmptyOrZero) {
  Tensor a = ones({0, 3}), b = ones({3, 4}), c = ones({2, 3}), d = ones({3, 0});
  Tensor rows = matmul(a, b), cols = matmul(c, d), inner = matmul(ones({2, 0}), ones({0, 4}));
  Tensor biased = linear(a, ones({4, 3}), ones({4}));
  mark_step();
  EXPECT_EQ(rows.shape(), (Shape{0, 4}));
  EXPECT_TRUE(rows.to_vector<float>().empty());
  EXPECT_EQ(cols.shape(), (Shape{2, 0}));
  EXPECT_TRUE(cols.to_vector<float>().empty());
  EXPECT_EQ(inner.to_vector<float>(), std::vector<float>(8, 0.0f));
  EXPECT_EQ(biased.shape(), (Shape{0, 4}));
}

TEST(Lazy, EagerModeGivesTheSameTraining) {
  std::vector<float> lazy_losses, eager_losses;
  for (bool eager : {false, true}) {
    set_eager_mode(eager);
    Mlp m;
    optim::AdamW opt(m.params(), {.lr = 1e-2, .weight_decay = 0.01});
    for (int s = 0; s < 3; ++s) (eager ? eager_losses : lazy_losses).push_back(train_step(m, opt, 8, s));
  }
  set_eager_mode(false);
  EXPECT_TRUE(testing::all_close({lazy_losses.begin(), lazy_losses.end()},
                                 {eager_losses.begin(), eager_losses.end()}, 1e-5, 1e-6));
}

TEST(Lazy, BackwardAfterReadingTheLossRecomputes) {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  Tensor loss = sum(w * w);
  EXPECT_FLOAT_EQ(loss.item(), 14.0f);  // runs the step
  loss.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

TEST(Lazy, RandomStreamsAreReproducibleAndKeyedByOffset) {
  Generator g1(42), g2(42);
  auto a = rand({1000}, g1).to_vector<float>();
  auto b = rand({1000}, g2).to_vector<float>();
  EXPECT_EQ(a, b);
  auto c = rand({1000}, g1).to_vector<float>();
  EXPECT_NE(a, c);
  // A large draw as a step result (regression: the key was read per chunk).
  auto big = rand({300000}, g1).to_vector<float>();
  EXPECT_TRUE(std::all_of(big.begin(), big.end(), [](float v) { return v >= 0.0f && v < 1.0f; }));
  double mean = 0;
  for (float v : a) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / a.size(), 0.5, 0.05);
  auto n = randn({4000}, g1).to_vector<float>();
  double m2 = 0, s2 = 0;
  for (float v : n) m2 += v;
  m2 /= n.size();
  for (float v : n) s2 += (v - m2) * (v - m2);
  EXPECT_NEAR(m2, 0.0, 0.06);
  EXPECT_NEAR(std::sqrt(s2 / n.size()), 1.0, 0.06);
  // Dropout keeps about 1-p, scales kept values by 1/(1-p), and draws no
  // recompiles when the key changes.
  Tensor x = ones({10000});
  metrics::reset();
  for (int i = 0; i < 3; ++i) {
    auto d = dropout(x, 0.25, g1).to_vector<float>();
    size_t kept = 0;
    for (float v : d) {
      if (v != 0.0f) {
        EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
        ++kept;
      }
    }
    EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  }
  EXPECT_EQ(metrics::snapshot().compiles, 1);
}

TEST(Lazy, DonatedValuesAreReportedNotReused) {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).requires_grad_();
  Tensor loss = sum(w * w);
  EXPECT_FLOAT_EQ(loss.item(), 14.0f);
  {
    NoGradGuard ng;
    w.assign(w * 0.5);
  }
  mark_step();  // the new w takes the old w's memory
  try {
    loss.backward();
    w.grad().to_vector<float>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer exists"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
