// The fused Attention op with segment ids (packed rows, ops.h's
// AttentionSpec::segments) on the CPU's kernel: the values and gradients of
// the composite with the block-diagonal mask it replaces, of each segment run
// alone, with padding, dropout, a sliding window, bf16 products, heads read
// in place and rows long enough for many blocks; keys of blocks outside a
// query block's segments are never read; finite differences through the
// segmented path; clear errors for segment ids it does not take.
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/attention_result.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

constexpr float kLowest = std::numeric_limits<float>::lowest();

struct Case {
  int64_t B = 2, H = 2, D = 8;
  std::vector<std::vector<int64_t>> lengths = {{5, 3, 9}, {1, 12, 4}};  // each row's segments, in order
  bool causal = true, padding = false, projected = false;
  double dropout = 0.0;
  int64_t window = 0;
  int64_t T() const { return std::accumulate(lengths[0].begin(), lengths[0].end(), int64_t{0}); }
  // Segment ids [B, T]: runs of ids that neither rise nor start at 0 (only runs matter).
  std::vector<int64_t> ids() const {
    std::vector<int64_t> v;
    for (const auto& row : lengths) {
      int64_t id = 40;
      for (int64_t n : row) v.insert(v.end(), static_cast<size_t>(n), id -= 7);
    }
    return v;
  }
  // Padding [B, 1, 1, T]: the last two tokens of the last row, and small biases elsewhere.
  std::vector<float> pad() const {
    std::vector<float> m(static_cast<size_t>(B * T()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < T(); ++j)
        m[b * T() + j] = (b == B - 1 && j >= T() - 2) ? kLowest : 0.05f * static_cast<float>(j % 4);
    return m;
  }
};

using Result = testing::AttentionResult;

// The block-diagonal mask the models add without the fused op: the padding within a segment, f32 min across.
Tensor block_diagonal(const Case& c) {
  const int64_t T = c.T();
  const std::vector<int64_t> id = c.ids();
  const std::vector<float> pad = c.pad();
  std::vector<float> m(static_cast<size_t>(c.B * T * T));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        m[(b * T + i) * T + j] = id[b * T + i] != id[b * T + j] ? kLowest : c.padding ? pad[b * T + j] : 0.0f;
  return Tensor::from_vector(m, {c.B, 1, T, T});
}

Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Case& c, double scale, Generator& gen) {
  const int64_t T = c.T();
  Tensor scores = matmul(q, k, false, true) * scale;
  if (c.causal) {
    Tensor iq = reshape(arange(T, DType::i64), {T, 1}), ik = reshape(arange(T, DType::i64), {1, T});
    Tensor visible = le(ik, iq);
    if (c.window > 0) visible = logical_and(visible, gt(ik + static_cast<double>(c.window), iq));
    scores = where(reshape(visible, {1, 1, T, T}), scores, full({}, static_cast<double>(kLowest), DType::f32));
  }
  return matmul(dropout(softmax(scores, -1, block_diagonal(c)), c.dropout, gen, c.dropout > 0), v);
}

Result run(const Case& c, bool fused, bool bf16) {
  Autocast autocast(bf16);
  const int64_t T = c.T();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  auto operand = [&](unsigned seed) {
    const Shape s = c.projected ? Shape{c.B, T, c.H, c.D} : Shape{c.B, c.H, T, c.D};
    return Tensor::from_vector(testing::uniform_values(c.B * c.H * T * c.D, seed, -1.5f, 1.5f), s).requires_grad_();
  };
  auto heads = [&](const Tensor& x) { return c.projected ? permute(x, {0, 2, 1, 3}) : x; };
  Tensor q0 = operand(1), k0 = operand(2), v0 = operand(3);
  Generator gen(11);
  Tensor y;
  if (fused) {
    Tensor pad = c.padding ? Tensor::from_vector(c.pad(), {c.B, 1, 1, T}) : Tensor();
    AttentionSpec spec{pad, c.causal, scale, c.dropout, &gen, c.window};
    spec.segments = Tensor::from_vector(c.ids(), {c.B, T});
    y = fused_attention(heads(q0), heads(k0), heads(v0), spec);
  } else {
    y = composite(heads(q0), heads(k0), heads(v0), c, scale, gen);
  }
  Tensor w = Tensor::from_vector(testing::uniform_values(y.numel(), 4, 0.5f, 1.5f), y.shape());
  sum(y * w).backward();
  return {y.to_vector<double>(), q0.grad().to_vector<double>(), k0.grad().to_vector<double>(),
          v0.grad().to_vector<double>()};
}

void expect_matches_composite(const Case& c, bool bf16, double tol) {
  testing::expect_attention_close(run(c, true, bf16), run(c, false, bf16), tol);
}

TEST(PackedAttention, MatchesTheBlockDiagonalComposite) {
  for (bool causal : {true, false})
    for (bool padding : {false, true})
      for (double p : {0.0, 0.3}) {
        SCOPED_TRACE(::testing::Message() << "causal " << causal << " padding " << padding << " dropout " << p);
        Case c;
        c.causal = causal, c.padding = padding, c.dropout = p;
        expect_matches_composite(c, false, 1e-5);
      }
}

// Rows of 300 tokens are blocks of 54 query rows: blocks start within a
// segment, end within another, and lie wholly inside one; heads read in place.
TEST(PackedAttention, LongRowsInBlocksOfRows) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    Case c;
    c.lengths = {{10, 130, 7, 100, 53}, {300}};
    c.D = 16, c.causal = causal, c.padding = true, c.dropout = 0.1, c.projected = true;
    expect_matches_composite(c, false, 1e-5);
  }
}

TEST(PackedAttention, WithASlidingWindowAndBf16) {
  Case c;
  c.lengths = {{10, 130, 7, 100, 53}, {2, 298}};
  c.D = 16, c.window = 37, c.padding = true;
  expect_matches_composite(c, false, 1e-5);
  c.dropout = 0.2;
  expect_matches_composite(c, false, 1e-5);
  Case b;
  b.D = 16, b.padding = true;
  expect_matches_composite(b, true, 1e-4);
  b.lengths = {{60, 200, 40}, {300}};
  b.dropout = 0.1;
  expect_matches_composite(b, true, 1e-4);
}

// Each segment's rows of the output and of dq, dk and dv are what the segment computes alone.
TEST(PackedAttention, EachSegmentComputesWhatItComputesAlone) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    Case packed;
    packed.B = 1, packed.lengths = {{5, 70, 9, 1, 35}}, packed.causal = causal;
    const Result all = run(packed, true, false);
    int64_t at = 0;
    const int64_t T = packed.T(), D = packed.D;
    for (int64_t n : packed.lengths[0]) {
      // The segment's rows of q, k, v, and of the output weights, alone.
      auto rows = [&](const Tensor& x) { return slice(x, 2, at, at + n); };
      auto operand = [&](unsigned seed) {
        return Tensor::from_vector(testing::uniform_values(packed.H * T * D, seed, -1.5f, 1.5f), {1, packed.H, T, D});
      };
      Tensor q = rows(operand(1)).detach().requires_grad_(), k = rows(operand(2)).detach().requires_grad_(),
             v = rows(operand(3)).detach().requires_grad_();
      Tensor w = rows(Tensor::from_vector(testing::uniform_values(packed.H * T * D, 4, 0.5f, 1.5f), {1, packed.H, T, D}));
      Tensor y = fused_attention(q, k, v, {Tensor(), causal, 1.0 / std::sqrt(static_cast<double>(D))});
      sum(y * w).backward();
      auto part = [&](const std::vector<double>& x) {  // the segment's rows of a [1, H, T, D] result
        std::vector<double> out;
        for (int64_t h = 0; h < packed.H; ++h)
          out.insert(out.end(), x.begin() + (h * T + at) * D, x.begin() + (h * T + at + n) * D);
        return out;
      };
      SCOPED_TRACE(::testing::Message() << "segment at " << at << " of " << n);
      EXPECT_LE(testing::relative_error(part(all.out), y.to_vector<double>()), 1e-6);
      EXPECT_LE(testing::relative_error(part(all.dq), q.grad().to_vector<double>()), 1e-6);
      EXPECT_LE(testing::relative_error(part(all.dk), k.grad().to_vector<double>()), 1e-6);
      EXPECT_LE(testing::relative_error(part(all.dv), v.grad().to_vector<double>()), 1e-6);
      at += n;
    }
  }
}

// Keys of blocks wholly outside a query block's segments are skipped, not
// masked after reading: NaN keys and values in the first segment leave every
// block of rows that starts in a later segment finite (a block that starts
// within the first segment reads its keys, and 0 · NaN is NaN).
TEST(PackedAttention, SkipsTheKeysOfOtherSegments) {
  const int64_t T = 300, D = 4, first = 100;  // blocks of 54 rows: those from row 108 start past the first segment
  std::vector<float> kv = testing::uniform_values(T * D, 2, -1.0f, 1.0f);
  std::fill(kv.begin(), kv.begin() + first * D, std::numeric_limits<float>::quiet_NaN());
  Tensor q = Tensor::from_vector(testing::uniform_values(T * D, 1, -1.0f, 1.0f), {1, 1, T, D});
  Tensor k = Tensor::from_vector(kv, {1, 1, T, D});
  std::vector<int64_t> ids(T, 0);
  std::fill(ids.begin() + first, ids.end(), 1);
  for (bool causal : {true, false}) {
    AttentionSpec spec{Tensor(), causal, 0.5};
    spec.segments = Tensor::from_vector(ids, {1, T});
    const std::vector<float> y = fused_attention(q, k, k, spec).to_vector<float>();
    // Rows 100-107 lie in a block that starts in the first segment: they read its keys, masked after reading.
    for (int64_t i = 0; i < T * D; ++i)
      ASSERT_EQ(std::isfinite(y[static_cast<size_t>(i)]), i >= 108 * D) << "causal " << causal << " element " << i;
  }
}

TEST(PackedAttention, GradientsMatchFiniteDifferences) {
  const int64_t B = 2, H = 2, T = 6, D = 3;
  const Tensor mask = Tensor::from_vector(std::vector<float>{0.0f, -0.5f, 0.0f, 0.25f, 0.1f, 0.0f}, {1, 1, 1, T});
  const Tensor segments =  // (i32 ids: the kernel reads either width)
      cast(Tensor::from_vector(std::vector<int64_t>{0, 0, 1, 1, 1, 2, 4, 4, 4, 4, 3, 3}, {B, T}), DType::i32);
  for (bool causal : {false, true})
    testing::gradcheck(
        [&](const std::vector<Tensor>& x) {
          AttentionSpec spec{mask, causal, 0.7};
          spec.segments = segments;
          return fused_attention(x[0], x[1], x[2], spec);
        },
        {testing::uniform_values(B * H * T * D, 5, -1.5f, 1.5f), testing::uniform_values(B * H * T * D, 6, -1.5f, 1.5f),
         testing::uniform_values(B * H * T * D, 7, -1.5f, 1.5f)},
        {{B, H, T, D}, {B, H, T, D}, {B, H, T, D}}, 1e-2, 2e-2, 2e-3);
}

TEST(PackedAttention, SegmentIdsItDoesNotTakeAreClearErrors) {
  Tensor q = zeros({2, 2, 4, 8}), k5 = zeros({2, 2, 5, 8});
  auto with = [](const Tensor& segments) {
    AttentionSpec spec{Tensor(), false, 1.0};
    spec.segments = segments;
    return spec;
  };
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, q, q, with(zeros({1, 8}, DType::i64))); }),
                  "attention: segment ids must be i32 or i64 [2,4] with as many queries as keys (4), got i64 [1,8]");
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, q, q, with(zeros({2, 4}))); }),
                  "attention: segment ids must be i32 or i64 [2,4] with as many queries as keys (4), got f32 [2,4]");
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k5, k5, with(zeros({2, 5}, DType::i64))); }),
                  "with as many queries as keys (4)");
  // An id in two runs of a row: the kernel's blocks need each segment in one run.
  const Tensor split = Tensor::from_vector(std::vector<int64_t>{0, 0, 1, 1, 3, 5, 3, 3}, {2, 4});
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, q, q, with(split)).to_vector<float>(); }),
                  "attention: each segment id must lie in one run of a row (packed examples one after another); "
                  "row 1 has id 3 again at 2");
}

}  // namespace
}  // namespace kiln
