// The fused Attention op (ops.h's fused_attention) on the CPU's kernel
// (backend/cpu/attention.cpp): the same values and gradients as the
// composite the models spell out (matmul, causal where, softmax with a mask,
// dropout, matmul), the same dropout masks, bf16 products under Autocast,
// sequences long enough for several blocks of query rows, heads read in
// place from a [B, T, H, D] projection, finite differences, and clear errors
// for operands it does not take. Heads of up to 256 × 256 scores keep their
// probabilities for the gradient (CompileOptions::attention_probabilities);
// longer ones (the 300-row and 260-row cases) recompute them: both paths run.
#include <cmath>
#include <limits>

#include "runtime/attention_result.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

constexpr double kMin = std::numeric_limits<float>::lowest();

std::vector<float> values(int64_t n, unsigned seed, float lo = -1.5f, float hi = 1.5f) {
  return testing::uniform_values(n, seed, lo, hi);
}

struct Case {
  int64_t B = 2, H = 3, Tq = 13, Tk = 13, D = 8;
  bool causal = false, mask = false, batch_mask = true;
  double dropout = 0.0;
  bool projected = false;  // q, k, v: [B, H, T, D] views of [B, T, H, D] tensors, as the models' heads
  std::vector<float> mask_values;  // if set: the mask, [1, 1, 1, Tk]
  int64_t window = 0;              // causal: a sliding window of that many keys
};

// The attention of GPT-2 / BERT as the models write it without the fused op.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Case& c, double scale,
                 Generator& gen) {
  Tensor scores = matmul(q, k, false, true) * scale;
  if (c.causal) {
    Tensor iq = reshape(arange(c.Tq, DType::i64), {c.Tq, 1}), ik = reshape(arange(c.Tk, DType::i64), {1, c.Tk});
    Tensor visible = le(ik, iq);
    if (c.window > 0) visible = logical_and(visible, gt(ik + static_cast<double>(c.window), iq));
    scores = where(reshape(visible, {1, 1, c.Tq, c.Tk}), scores, full({}, kMin, DType::f32));
  }
  return matmul(dropout(softmax(scores, -1, mask), c.dropout, gen, c.dropout > 0), v);
}

using Result = testing::AttentionResult;

Result run(const Case& c, bool fused, bool bf16) {
  Autocast autocast(bf16);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  auto operand = [&](int64_t T, unsigned seed) {
    if (!c.projected) return Tensor::from_vector(values(c.B * c.H * T * c.D, seed), {c.B, c.H, T, c.D}).requires_grad_();
    return Tensor::from_vector(values(c.B * c.H * T * c.D, seed), {c.B, T, c.H, c.D}).requires_grad_();
  };
  auto heads = [&](const Tensor& x) { return c.projected ? permute(x, {0, 2, 1, 3}) : x; };
  Tensor q0 = operand(c.Tq, 1), k0 = operand(c.Tk, 2), v0 = operand(c.Tk, 3);
  Tensor q = heads(q0), k = heads(k0), v = heads(v0);
  Tensor mask;
  if (!c.mask_values.empty()) {
    mask = Tensor::from_vector(c.mask_values, {1, 1, 1, c.Tk});
  } else if (c.mask) {  // the last keys of batch entry 1 are padding; some other entries get small biases
    const int64_t rows = c.batch_mask ? c.B : 1;
    std::vector<float> m(static_cast<size_t>(rows * c.Tk), 0.0f);
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t j = 0; j < c.Tk; ++j)
        m[b * c.Tk + j] = (b == rows - 1 && j >= c.Tk - 3) ? static_cast<float>(kMin) : 0.1f * static_cast<float>(j % 3);
    mask = Tensor::from_vector(m, {rows, 1, 1, c.Tk});
  }
  Generator gen(11);
  Tensor y = fused ? fused_attention(q, k, v, {mask, c.causal, scale, c.dropout, &gen, c.window})
                   : composite(q, k, v, mask, c, scale, gen);
  Tensor w = Tensor::from_vector(values(y.numel(), 4, 0.5f, 1.5f), y.shape());
  sum(y * w).backward();
  return {y.to_vector<double>(), q0.grad().to_vector<double>(), k0.grad().to_vector<double>(),
          v0.grad().to_vector<double>()};
}

void expect_matches_composite(const Case& c, bool bf16, double tol) {
  testing::expect_attention_close(run(c, true, bf16), run(c, false, bf16), tol);
}

TEST(FusedAttention, MatchesTheCompositeWithCausalMaskAndDropout) {
  for (bool causal : {false, true})
    for (bool mask : {false, true})
      for (double p : {0.0, 0.3}) {
        SCOPED_TRACE(::testing::Message() << "causal " << causal << " mask " << mask << " dropout " << p);
        Case c;
        c.causal = causal, c.mask = mask, c.dropout = p;
        expect_matches_composite(c, false, 1e-5);
      }
}

// The CPU kernel works on blocks of query rows (64 at 256 keys, 16 from
// 1024); causal blocks stop at their last row's key. Ragged last blocks,
// heads read in place from [B, T, H, D] tensors, dropout drawn per row.
TEST(FusedAttention, LongSequencesInBlocksOfRows) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    Case c;
    c.B = 2, c.H = 2, c.Tq = 300, c.Tk = 300, c.D = 16, c.causal = causal, c.mask = true, c.dropout = 0.1;
    c.projected = true;
    expect_matches_composite(c, false, 1e-5);
  }
  Case cross;  // more queries than one block, keys past 1024 (16-row blocks)
  cross.B = 1, cross.H = 2, cross.Tq = 37, cross.Tk = 1100, cross.mask = true, cross.dropout = 0.2;
  expect_matches_composite(cross, false, 1e-5);
}

// A sliding window (Mistral's, Gemma 2's): the kernel's blocks start at their
// first row's first key; the values, gradients and dropout masks are the
// composite's (which masks the keys before the window) in one block and in
// many, with padding, under Autocast, and with a window past the sequence.
TEST(FusedAttention, SlidingWindowsMatchTheComposite) {
  for (auto [T, window] : {std::pair<int64_t, int64_t>{13, 4}, {300, 37}, {300, 130}, {20, 64}})
    for (double p : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << "T " << T << " window " << window << " dropout " << p);
      Case c;
      c.B = 2, c.H = 2, c.Tq = T, c.Tk = T, c.D = 16, c.causal = true, c.mask = true, c.dropout = p;
      c.window = window;
      c.projected = T > 100;
      expect_matches_composite(c, false, 1e-5);
      if (p == 0.0) expect_matches_composite(c, true, 1e-4);
    }
  EXPECT_CONTAINS(error_of([] {
                    Tensor q = zeros({1, 1, 4, 8});
                    fused_attention(q, q, q, {Tensor(), false, 1.0, 0.0, nullptr, 3});
                  }),
                  "attention: a sliding window (3) needs causal attention");
}

// Rows whose visible keys are all masked (left padding under the causal
// rule, a padding mask of -inf) follow the composite: a causal row spreads
// its weight over the later keys, which get no gradient; dropped elements of
// a NaN row are 0; everything else stays NaN where the composite's is.
TEST(FusedAttention, RowsWithEveryVisibleKeyMaskedFollowTheComposite) {
  const float lowest = std::numeric_limits<float>::lowest(), inf = std::numeric_limits<float>::infinity();
  Case c;
  c.B = 1, c.H = 2, c.Tq = 200, c.Tk = 200, c.D = 4, c.causal = true;  // several blocks of rows
  c.mask_values.assign(200, 0.0f);
  c.mask_values[0] = -inf;
  expect_matches_composite(c, false, 1e-5);
  c.Tq = c.Tk = 260;  // past the kept probabilities' limit: the gradient redoes the block too
  c.mask_values.assign(260, 0.0f);
  c.mask_values[0] = -inf;
  expect_matches_composite(c, false, 1e-5);
  c.Tq = c.Tk = 3;
  c.mask_values = {lowest, 0.0f, 0.0f};
  expect_matches_composite(c, false, 1e-5);
  c.dropout = 0.3;
  expect_matches_composite(c, false, 1e-5);

  Case nan_rows;  // one key, masked with -inf: NaN rows, dropout zeroes what it drops
  nan_rows.B = 1, nan_rows.H = 1, nan_rows.Tq = 4, nan_rows.Tk = 1, nan_rows.D = 2, nan_rows.dropout = 0.5;
  nan_rows.mask_values = {-inf};
  const Result f = run(nan_rows, true, false), r = run(nan_rows, false, false);
  ASSERT_EQ(f.out.size(), r.out.size());
  int zeros = 0;
  for (size_t i = 0; i < f.out.size(); ++i) {
    EXPECT_EQ(std::isnan(f.out[i]), std::isnan(r.out[i])) << i;
    if (!std::isnan(r.out[i])) {
      EXPECT_EQ(f.out[i], r.out[i]) << i;
    }
    zeros += r.out[i] == 0.0;
  }
  EXPECT_GT(zeros, 0) << "some rows must be dropped";
}

TEST(FusedAttention, CrossAttentionAndABroadcastMask) {
  Case c;
  c.Tq = 5, c.Tk = 11, c.mask = true, c.batch_mask = false, c.dropout = 0.1;
  expect_matches_composite(c, false, 1e-5);
  c.Tq = 1;  // BERT's last layer for position 0 only
  expect_matches_composite(c, false, 1e-5);
}

// Under Autocast both round q, k, v, the dropped probabilities, the
// gradients of the products and of the probabilities to bf16 at the same
// points (they agree to the last bit here; 1e-4 leaves room for summation
// order). Without the probabilities' gradient rounded, these cases differ
// by 3e-3 and 6e-3.
TEST(FusedAttention, Bf16ProductsFollowAutocastsComposite) {
  Case c;
  c.causal = true, c.mask = true, c.dropout = 0.2, c.D = 16;
  expect_matches_composite(c, true, 1e-4);
  Case masked;  // a -inf key
  masked.B = 1, masked.H = 1, masked.Tq = 1, masked.Tk = 3, masked.D = 5;
  masked.mask_values = {-0.287f, 0.0f, -std::numeric_limits<float>::infinity()};
  expect_matches_composite(masked, true, 1e-4);
  Case plain;  // no dropout: the kept probabilities, rounded for the product with dy
  plain.causal = true, plain.D = 16;
  expect_matches_composite(plain, true, 1e-4);
  Case longer;  // 300 rows: over the kept size, the gradient recomputes them
  longer.B = 1, longer.H = 2, longer.Tq = 300, longer.Tk = 300, longer.mask = true, longer.dropout = 0.1;
  expect_matches_composite(longer, true, 1e-4);
  const Result bf = run(c, true, true), fp = run(c, true, false);
  const double moved = testing::relative_error(bf.out, fp.out);
  EXPECT_GT(moved, 1e-4) << "bf16 products must differ from f32 ones";
  EXPECT_LT(moved, 2e-2);
}

TEST(FusedAttention, DropoutDrawsTheCompositesMask) {
  // With dropout the output is not the no-dropout one, and it is the composite's exactly up to rounding.
  Case c;
  c.dropout = 0.5;
  const Result drop = run(c, true, false), none = run(Case{}, true, false);
  EXPECT_GT(testing::relative_error(drop.out, none.out), 0.1);
  EXPECT_LE(testing::relative_error(drop.out, run(c, false, false).out), 1e-5);
}

TEST(FusedAttention, GradientsMatchFiniteDifferences) {
  const int64_t B = 1, H = 2, T = 4, D = 3;
  const Tensor mask = Tensor::from_vector(std::vector<float>{0.0f, -0.5f, 0.0f, 0.25f}, {1, 1, 1, T});
  for (bool causal : {false, true})
    testing::gradcheck(
        [&](const std::vector<Tensor>& x) { return fused_attention(x[0], x[1], x[2], {mask, causal, 0.7}); },
        {values(B * H * T * D, 5), values(B * H * T * D, 6), values(B * H * T * D, 7)},
        {{B, H, T, D}, {B, H, T, D}, {B, H, T, D}}, 1e-2, 2e-2, 2e-3);
}

TEST(FusedAttention, OperandsItDoesNotTakeAreClearErrors) {
  Tensor q = Tensor::from_vector(values(2 * 2 * 4 * 8, 1), {2, 2, 4, 8});
  Tensor k5 = Tensor::from_vector(values(2 * 2 * 5 * 8, 2), {2, 2, 5, 8});
  Tensor k6 = Tensor::from_vector(values(2 * 2 * 5 * 6, 2), {2, 2, 5, 6});
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k6, k6, {}); }),
                  "attention: q [2,2,4,8] expects k and v of shape [2,2,5,8], got k [2,2,5,6] and v [2,2,5,6]");
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k5, k5, {{}, true}); }),
                  "causal attention needs as many queries as keys, got 4 and 5");
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, cast(q, DType::bf16), q, {}); }),
                  "q, k and v must be all f32 or all bf16, got f32, bf16, f32");
  Tensor bad_mask = zeros({2, 1, 4, 5});
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k5, k5, {bad_mask}); }),
                  "attention: mask must be [2 or 1,1,1,5], got [2,1,4,5]");
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k5, k5, {{}, false, 1.0, 0.1}); }),
                  "attention: dropout 0.1 needs a generator");
  Generator gen;
  EXPECT_CONTAINS(error_of([&] { fused_attention(q, k5, k5, {{}, false, 1.0, 1.0, &gen}); }),
                  "attention: dropout must be in [0, 1), got 1");
  Tensor learned = zeros({2, 1, 1, 5}).requires_grad_();
  Tensor qg = Tensor::from_vector(values(2 * 2 * 4 * 8, 1), {2, 2, 4, 8}).requires_grad_();
  EXPECT_CONTAINS(error_of([&] { sum(fused_attention(qg, k5, k5, {learned})).backward(); }),
                  "fused attention gives no gradient to its mask");
}

TEST(FusedAttention, ModelsUseItWhereItTakesTheOperands) {
  // KILN_ATTENTION=auto (the tests' setting): the CPU runs it for every head
  // size, with or without Autocast; masks it does not take keep the composite.
  Tensor q = zeros({2, 2, 4, 16}), q5 = zeros({2, 2, 4, 5}), mask = zeros({2, 1, 1, 4});
  EXPECT_TRUE(use_fused_attention(q, q, mask));
  EXPECT_TRUE(use_fused_attention(q5, q5, Tensor()));
  EXPECT_FALSE(use_fused_attention(q, q, zeros({2, 1, 4, 4})));
  EXPECT_FALSE(use_fused_attention(q, q, zeros({2, 1, 1, 4}).requires_grad_()));
  Autocast autocast;
  EXPECT_TRUE(use_fused_attention(q, q, mask));
}

}  // namespace
}  // namespace kiln
