// bf16 storage and torch.autocast-style mixed precision (--bf16): casts
// round to nearest even, products of bf16 operands are exact with f32 sums,
// and under Autocast the gradients of matrix products are bf16 products too.
#include "kiln/core/bf16.h"

#include <cmath>
#include <memory>

#include "kiln/optim/optimizer.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/tensor_impl.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

std::vector<float> values(int64_t n, unsigned seed) { return testing::uniform_values(n, seed); }

std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

bool all_bf16(const std::vector<float>& v) {
  for (float x : v)
    if (round_to_bf16(x) != x) return false;
  return true;
}

TEST(Bf16, CastsRoundAndWideningBackIsExact) {
  const std::vector<float> v = values(1000, 1);
  Tensor h = cast(Tensor::from_vector(v, {10, 100}), DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  EXPECT_EQ(h.to_vector<float>(), rounded(v));
  EXPECT_EQ(cast(h, DType::f32).to_vector<float>(), rounded(v));
  EXPECT_FALSE(all_bf16(v));
  // A strided view of bf16 storage, copied out.
  Tensor t = transpose(h, 0, 1);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.to_vector<float>()[1], round_to_bf16(v[100]));
}

TEST(Bf16, ArithmeticPromotesToF32AndFusedKernelsReject) {
  Tensor h = cast(Tensor::from_vector(values(6, 2), {2, 3}), DType::bf16);
  EXPECT_EQ((h * 2.0).dtype(), DType::f32);
  EXPECT_EQ((h + h).dtype(), DType::f32);
  EXPECT_EQ(sum(h).dtype(), DType::f32);
  EXPECT_CONTAINS(error_of([&] { softmax(h); }), "expected an f32 tensor, got bf16");
  Tensor f = Tensor::from_vector(values(6, 3), {3, 2});
  // Outside Autocast a product widens a bf16 operand (a frozen bf16 weight) to f32: exact.
  EXPECT_EQ(matmul(h, f).dtype(), DType::f32);
  EXPECT_EQ(matmul(h, f).to_vector<float>(), matmul(cast(h, DType::f32), f).to_vector<float>());
}

// A bf16 product is the f32 product of the rounded operands: exact products
// summed in f32 (oneDNN's bf16 matmul where the CPU has bf16 instructions,
// the operands widened for sgemm elsewhere), so within f32 summation error
// of the rounded values' f32 product (tests/backend/cpu/bf16_gemm_test.cpp
// bounds it against double).
TEST(Bf16, ProductsOfBf16OperandsAreTheProductsOfTheRoundedValues) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : {Case{{5, 33}, {33, 7}, false, false}, Case{{33, 5}, {7, 33}, true, true},
                        Case{{3, 4, 9}, {3, 9, 6}, false, false}, Case{{2, 3, 4, 9}, {9, 6}, false, false},
                        Case{{3, 9, 4}, {6, 9}, true, true}}) {
    const std::vector<float> av = values(numel(c.a), 4), bv = values(numel(c.b), 5);
    Tensor a = Tensor::from_vector(av, c.a), b = Tensor::from_vector(bv, c.b);
    const std::vector<float> got =
        matmul(cast(a, DType::bf16), cast(b, DType::bf16), c.ta, c.tb).to_vector<float>();
    const std::vector<float> want =
        matmul(Tensor::from_vector(rounded(av), c.a), Tensor::from_vector(rounded(bv), c.b), c.ta, c.tb)
            .to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << to_string(c.a) << " x " << to_string(c.b);
    EXPECT_NE(got, matmul(a, b, c.ta, c.tb).to_vector<float>());
  }
}

// Ops that move bf16 elements (2 bytes: embedding rows, slices, concat,
// gather) give the rounded values, argmax compares them, and gradients come
// back through them (the row kernels sum in f32 and round).
TEST(Bf16, RowAndMovementOpsMoveBf16Elements) {
  const std::vector<float> tv = values(10 * 6, 21);
  Tensor table = Tensor::from_vector(tv, {10, 6}).requires_grad_();
  Tensor h = cast(table, DType::bf16);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 2, 2, 9}, {4});
  Tensor rows = embedding(ids, h);
  Tensor part = concat({slice(h, 1, 1, 6, 2), h}, 1);
  Tensor picked = gather(h, 1, Tensor::from_vector(std::vector<int64_t>(10 * 2, 5), {10, 2}));
  EXPECT_EQ(rows.dtype(), DType::f32);  // embedding rows are activations: widened (exactly), as under autocast
  EXPECT_EQ(picked.dtype(), DType::bf16);
  const std::vector<float> tr = rounded(tv), r = rows.to_vector<float>(), p = part.to_vector<float>(),
                           g = picked.to_vector<float>();
  for (int64_t j = 0; j < 6; ++j) {
    EXPECT_EQ(r[0 * 6 + j], tr[3 * 6 + j]);
    EXPECT_EQ(r[3 * 6 + j], tr[9 * 6 + j]);
  }
  EXPECT_EQ(p[0], tr[1]);
  EXPECT_EQ(p[3], tr[0]);
  EXPECT_EQ(g[2], tr[6 + 5]);
  const std::vector<int64_t> am = argmax(h, 1).to_vector<int64_t>();
  for (int64_t i = 0; i < 10; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < 6; ++j)
      if (tr[i * 6 + j] > tr[i * 6 + best]) best = j;
    EXPECT_EQ(am[i], best) << "row " << i;
  }
  sum(cast(rows, DType::f32) * 0.5).backward();
  const std::vector<float> dt = table.grad().to_vector<float>();
  EXPECT_EQ(dt[2 * 6], 1.0f);  // id 2 twice
  EXPECT_EQ(dt[3 * 6], 0.5f);
  EXPECT_EQ(dt[0], 0.0f);
}

TEST(Bf16, AutocastCastsAnF32OperandMetWithABf16One) {
  const std::vector<float> av = values(12, 22), bv = values(12, 23);
  Tensor a = cast(Tensor::from_vector(av, {3, 4}), DType::bf16), b = Tensor::from_vector(bv, {4, 3});
  Autocast bf16;
  EXPECT_EQ(matmul(a, b).to_vector<float>(), matmul(a, cast(b, DType::bf16)).to_vector<float>());
}

TEST(Bf16, AutocastScopesNestAndCanBeTurnedOff) {
  EXPECT_FALSE(Autocast::active());
  {
    Autocast on;
    EXPECT_TRUE(Autocast::active());
    {
      Autocast off(false);
      EXPECT_FALSE(Autocast::active());
    }
    EXPECT_TRUE(Autocast::active());
  }
  EXPECT_FALSE(Autocast::active());
}

// y = x Wᵀ + b under Autocast: the product of the rounded operands (the bias
// is added in f32); backward multiplies the rounded output gradient with
// the rounded operands and rounds the operands' gradients to bf16, which
// reach the f32 weights as f32.
TEST(Bf16, AutocastLinearForwardAndGradients) {
  const int64_t n = 6, in = 40, out = 5;
  const std::vector<float> xv = values(n * in, 7), wv = values(out * in, 8), bv = values(out, 9), cv = values(n * out, 10);
  Tensor x = Tensor::from_vector(xv, {n, in}).requires_grad_();
  Tensor w = Tensor::from_vector(wv, {out, in}).requires_grad_();
  Tensor b = Tensor::from_vector(bv, {out}).requires_grad_();
  Tensor y;
  {
    Autocast bf16;
    y = linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  sum(y * Tensor::from_vector(cv, {n, out})).backward();
  const std::vector<float> xr = rounded(xv), wr = rounded(wv), gr = rounded(cv);
  const std::vector<double> yv = y.to_vector<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(xr[i * in + k]) * wr[o * in + k];
      EXPECT_NEAR(yv[i * out + o], acc + bv[o], 1e-5) << i << "," << o;
    }
  ASSERT_EQ(w.grad().dtype(), DType::f32);
  const std::vector<float> dw = w.grad().to_vector<float>(), dx = x.grad().to_vector<float>();
  EXPECT_TRUE(all_bf16(dw));
  EXPECT_TRUE(all_bf16(dx));
  auto near_bf16 = [](double got, double want) { return std::abs(got - want) <= std::ldexp(std::abs(want), -7) + 1e-6; };
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) {
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(gr[i * out + o]) * xr[i * in + k];
      EXPECT_PRED2(near_bf16, dw[o * in + k], acc) << "dW " << o << "," << k;
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < in; ++k) {
      double acc = 0;
      for (int64_t o = 0; o < out; ++o) acc += static_cast<double>(gr[i * out + o]) * wr[o * in + k];
      EXPECT_PRED2(near_bf16, dx[i * in + k], acc) << "dx " << i << "," << k;
    }
  // The bias gradient is an f32 sum of the f32 output gradient.
  const std::vector<float> db = b.grad().to_vector<float>();
  for (int64_t o = 0; o < out; ++o) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += cv[i * out + o];
    EXPECT_NEAR(db[o], acc, 1e-5);
  }
}

// A cast's gradient is the incoming gradient in the input's dtype.
TEST(Bf16, CastGradientIsTheGradientInTheInputsDtype) {
  const std::vector<float> v = values(8, 11), c = values(8, 12);
  Tensor x = Tensor::from_vector(v, {8}).requires_grad_();
  sum(cast(cast(x, DType::bf16), DType::f32) * Tensor::from_vector(c, {8})).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), rounded(c));
}

// Batched products against a shared weight (attention-free layers of a
// model): the weight's gradient sums over the batch in f32 before rounding.
TEST(Bf16, AutocastBatchedProductAgainstASharedWeight) {
  const std::vector<float> xv = values(2 * 3 * 16, 13), wv = values(16 * 4, 14);
  Tensor x = Tensor::from_vector(xv, {2, 3, 16});
  Tensor w = Tensor::from_vector(wv, {16, 4}).requires_grad_();
  {
    Autocast bf16;
    sum(matmul(x, w)).backward();
  }
  const std::vector<float> xr = rounded(xv), dw = w.grad().to_vector<float>();
  for (int64_t k = 0; k < 16; ++k)
    for (int64_t o = 0; o < 4; ++o) {
      double acc = 0;
      for (int64_t r = 0; r < 6; ++r) acc += xr[r * 16 + k];
      EXPECT_NEAR(dw[k * 4 + o], round_to_bf16(static_cast<float>(acc)), std::ldexp(std::abs(acc), -8) + 1e-6);
    }
}

// Under Autocast the loss takes the logits rounded to bf16, as torch's
// autocast products return them (the loss widening them): the loss of the
// rounded values, and their gradient rounded to bf16, also with ignored
// rows and label smoothing, in rows shorter and longer than the kernel's
// pieces of 512 logits.
TEST(Bf16, AutocastLossReadsTheLogitsAsBf16) {
  const int64_t n = 7;
  for (int64_t c : {11, 1300})
  for (double smoothing : {0.0, 0.1}) {
    const std::vector<float> lv = values(n * c, 31);
    std::vector<float> scaled = lv;
    for (float& v : scaled) v *= 9.0f;  // logits of a trained model's spread, so rounding matters
    const Tensor labels = Tensor::from_vector(std::vector<int64_t>{3, -100, 0, 10, 5, 5, -100}, {n});
    Tensor x = Tensor::from_vector(scaled, {n, c}).requires_grad_();
    Tensor loss;
    {
      Autocast bf16;
      loss = cross_entropy(x, labels, -100, smoothing);
    }
    loss.backward();
    Tensor xr = Tensor::from_vector(rounded(scaled), {n, c}).requires_grad_();
    Tensor want = cross_entropy(xr, labels, -100, smoothing);
    want.backward();
    EXPECT_EQ(loss.item(), want.item()) << c << " classes, smoothing " << smoothing;
    EXPECT_EQ(x.grad().to_vector<float>(), rounded(xr.grad().to_vector<float>()))
        << c << " classes, smoothing " << smoothing;
  }
}

// GELU under Autocast reads its input rounded to bf16 (the bf16 a product
// gives under torch's autocast); its output stays f32.
TEST(Bf16, AutocastGeluReadsItsInputAsBf16) {
  const std::vector<float> v = values(300, 32);
  for (const char* form : {"none", "tanh"}) {
    Tensor y;
    {
      Autocast bf16;
      y = gelu(Tensor::from_vector(v, {300}), form);
    }
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(y.to_vector<float>(), gelu(Tensor::from_vector(rounded(v), {300}), form).to_vector<float>()) << form;
  }
}

// A training step under Autocast leaves each trained weight that a product
// read with its bf16 copy, made with the optimizer's update; the next
// step's products read the copy. The copy is the cast, so the steps give
// the same bits as steps that cast every weight again; a weight changed
// after the update (loaded, assigned) is cast anew, and one no product
// read (a bias) gets no copy.
TEST(Bf16, AutocastStepsReadTheOptimizersBf16Copies) {
  struct Net {
    Tensor w1, b1, w2;
    std::unique_ptr<optim::AdamW> opt;
    Net() {
      w1 = Tensor::from_vector(values(32 * 24, 41), {32, 24}).requires_grad_();
      b1 = Tensor::from_vector(values(32, 42), {32}).requires_grad_();
      w2 = Tensor::from_vector(values(8 * 32, 43), {8, 32}).requires_grad_();
      opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{w1, b1, w2}, optim::AdamWOptions{.lr = 0.01});
    }
    float step(const Tensor& x, const Tensor& labels, bool autocast = true) {
      Tensor loss;
      {
        Autocast bf16(autocast);
        loss = cross_entropy(reshape(linear(gelu(linear(x, w1, b1)), w2), {-1, 8}), labels);
      }
      loss.backward();
      opt->step();
      opt->zero_grad();
      mark_step();
      return loss.item();
    }
  };
  const Tensor x = Tensor::from_vector(values(4 * 16 * 24, 44), {4, 16, 24});
  std::vector<int64_t> lv(64);
  for (size_t i = 0; i < lv.size(); ++i) lv[i] = static_cast<int64_t>((i * 5) % 8);
  const Tensor labels = Tensor::from_vector(lv, {64});
  Net kept, cast_again;
  auto drop_copies = [](Net& net) {
    for (Tensor* p : {&net.w1, &net.b1, &net.w2}) p->impl()->bf16_copy.reset();
  };
  auto same = [](const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); };
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(kept.step(x, labels), cast_again.step(x, labels)) << "step " << s;
    drop_copies(cast_again);
    for (Tensor* p : {&kept.w1, &kept.w2}) {
      const auto& copy = p->impl()->bf16_copy;
      ASSERT_TRUE(copy) << "step " << s;
      EXPECT_EQ(Tensor(copy->node).to_vector<float>(), rounded(p->to_vector<float>())) << "step " << s;
    }
    EXPECT_FALSE(kept.b1.impl()->bf16_copy) << "the bias is not a product's operand";
  }
  EXPECT_TRUE(same(kept.w1, cast_again.w1) && same(kept.w2, cast_again.w2) && same(kept.b1, cast_again.b1));
  // An evaluation (no gradients) reads the copies too; the steps after it
  // still give the weights their gradients through them.
  for (Net* net : {&kept, &cast_again}) {
    NoGradGuard no_grad;
    Autocast bf16;
    (void)sum(linear(gelu(linear(x, net->w1, net->b1)), net->w2)).item();
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(kept.step(x, labels), cast_again.step(x, labels)) << "after the evaluation, step " << s;
    drop_copies(cast_again);
  }
  EXPECT_TRUE(same(kept.w1, cast_again.w1) && same(kept.w2, cast_again.w2));
  // A weight assigned after the update: its copy no longer stands for it.
  for (Net* net : {&kept, &cast_again}) net->w1.assign(net->w1 * 0.5);
  EXPECT_EQ(kept.step(x, labels), cast_again.step(x, labels));
  EXPECT_TRUE(same(kept.w1, cast_again.w1) && same(kept.w2, cast_again.w2));
  // A step without Autocast reads no copy, and its update keeps none.
  EXPECT_EQ(kept.step(x, labels, false), cast_again.step(x, labels, false));
  EXPECT_FALSE(kept.w1.impl()->bf16_copy);
  EXPECT_TRUE(same(kept.w1, cast_again.w1) && same(kept.w2, cast_again.w2));
}

// Inference under Autocast (kiln generate --bf16 with an f32
// checkpoint): a weight marked with keep_bf16_copy gets its copy from the
// first product to read it, computed with that step; the later steps read
// the same copy, not a cast of their own, and give the bits of steps that
// cast every weight again. A new value (assign) drops the copy and the next
// read makes another; a bias (not a product's operand) and steps without
// Autocast make none. Frozen weights and ones that would train alike.
TEST(Bf16, AutocastInferenceKeepsTheBf16CopiesOfItsWeights) {
  for (bool trainable : {false, true}) {
    SCOPED_TRACE(trainable ? "weights that would train" : "frozen weights");
    struct Net {
      Tensor w1, b1, w2;
      Net(bool trainable) {
        w1 = Tensor::from_vector(values(32 * 24, 51), {32, 24}).requires_grad_(trainable);
        b1 = Tensor::from_vector(values(32, 52), {32}).requires_grad_(trainable);
        w2 = Tensor::from_vector(values(8 * 32, 53), {8, 32}).requires_grad_(trainable);
      }
      std::vector<float> run(const Tensor& x, bool autocast = true) const {
        NoGradGuard no_grad;
        Tensor y;
        {
          Autocast bf16(autocast);
          y = linear(gelu(linear(x, w1, b1)), w2);
        }
        mark_step();
        return y.to_vector<float>();
      }
    };
    const Tensor x = Tensor::from_vector(values(4 * 24, 54), {4, 24});
    Net kept(trainable), cast_again(trainable);
    for (const Tensor* p : {&kept.w1, &kept.b1, &kept.w2}) keep_bf16_copy(*p);
    std::shared_ptr<TensorImpl> first;
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(kept.run(x), cast_again.run(x)) << "step " << s;
      for (const Tensor* p : {&kept.w1, &kept.w2}) {
        const auto& copy = p->impl()->bf16_copy;
        ASSERT_TRUE(copy) << "step " << s;
        EXPECT_EQ(copy->node->op, ir::Op::Data) << "computed with the step that made it";
        EXPECT_EQ(Tensor(copy->node).to_vector<float>(), rounded(p->to_vector<float>())) << "step " << s;
      }
      if (s == 0) first = kept.w1.impl()->bf16_copy;
      EXPECT_EQ(kept.w1.impl()->bf16_copy, first) << "step " << s << " made another copy";
      EXPECT_FALSE(kept.b1.impl()->bf16_copy) << "the bias is not a product's operand";
      EXPECT_FALSE(cast_again.w1.impl()->bf16_copy);
    }
    for (Net* net : {&kept, &cast_again}) {
      NoGradGuard no_grad;
      net->w1.assign(net->w1 * 0.5);
    }
    EXPECT_EQ(kept.run(x), cast_again.run(x)) << "after a new value";
    ASSERT_TRUE(kept.w1.impl()->bf16_copy);
    EXPECT_NE(kept.w1.impl()->bf16_copy, first);
    EXPECT_EQ(Tensor(kept.w1.impl()->bf16_copy->node).to_vector<float>(), rounded(kept.w1.to_vector<float>()));
    Net plain(trainable), unmarked(trainable);
    keep_bf16_copy(plain.w1);
    EXPECT_EQ(plain.run(x, false), unmarked.run(x, false));
    EXPECT_FALSE(plain.w1.impl()->bf16_copy) << "a step without Autocast";
  }
}

}  // namespace
}  // namespace kiln
