// The fused attention under Autocast (--bf16) on the CPU: with bf16
// products (AVX512-BF16, AMX) its block products read bf16 q, k, v and bf16
// probability, output-gradient and dS blocks as pair words
// (backend/cpu/bf16_tiles.h); with the emulation
// (set_native_bf16_products(false), as KILN_CPU_BF16=emulate) the same
// values widened for sgemm. Both sum the same exact products in f32, in
// another order, and both are checked against a reference that rounds at
// the same points and sums in double. Those roundings start from f32 values,
// so a value within f32 error of a bf16 rounding boundary rounds the other
// way, a whole bf16 step (and the gradients, rounded to bf16 again at
// autocast's casts and summed with cancellation, flip more): the bounds
// (1e-4, 6e-4) are those flips, against 2e-3 and more for a missed rounding
// point. The two paths flip different values, so they agree with each other
// within the same bounds, not to f32 summation error.
#include <cmath>
#include <limits>

#include "kiln/backend/cpu/executor.h"
#include "kiln/core/bf16.h"
#include "runtime/attention_result.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using Result = testing::AttentionResult;

struct Shape4 {
  int64_t B, H, T, D;
  bool causal;
  int64_t n() const { return B * H * T * D; }
};

std::vector<float> bf16_values(int64_t n, unsigned seed) {
  std::vector<float> v = testing::uniform_values(n, seed, -1.5f, 1.5f);
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

double bf16(double x) { return round_to_bf16(static_cast<float>(x)); }

// One head (q, k, v, dy rows of D at T·D apart) in double, rounded to bf16
// where the kernel (and autocast's composite) round: the probabilities for
// the product with v, the output gradient, the probabilities' gradient, dS.
void reference_head(const Shape4& s, const double* q, const double* k, const double* v, const double* dy,
                    double* y, double* dq, double* dk, double* dv) {
  const int64_t T = s.T, D = s.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(static_cast<size_t>(T * T), 0.0), ds(static_cast<size_t>(T * T), 0.0);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t keys = s.causal ? i + 1 : T;
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
      p[i * T + j] = dot * scale;
      m = std::max(m, p[i * T + j]);
    }
    for (int64_t j = 0; j < keys; ++j) z += (p[i * T + j] = std::exp(p[i * T + j] - m));
    double delta = 0;
    for (int64_t j = 0; j < keys; ++j) {
      p[i * T + j] /= z;
      double dp = 0;
      for (int64_t d = 0; d < D; ++d) dp += bf16(dy[i * D + d]) * v[j * D + d];
      ds[i * T + j] = bf16(dp);
      delta += ds[i * T + j] * p[i * T + j];
    }
    for (int64_t j = 0; j < keys; ++j) ds[i * T + j] = bf16(p[i * T + j] * (ds[i * T + j] - delta) * scale);
  }
  for (int64_t i = 0; i < T; ++i)
    for (int64_t d = 0; d < D; ++d) {
      double acc_y = 0, acc_dq = 0, acc_dk = 0, acc_dv = 0;
      for (int64_t j = 0; j < T; ++j) {
        acc_y += bf16(p[i * T + j]) * v[j * D + d];
        acc_dq += ds[i * T + j] * k[j * D + d];
        acc_dk += ds[j * T + i] * q[j * D + d];
        acc_dv += bf16(p[j * T + i]) * bf16(dy[j * D + d]);
      }
      // (the gradients of the f32 leaves pass autocast's casts to bf16: rounded)
      y[i * D + d] = acc_y, dq[i * D + d] = bf16(acc_dq), dk[i * D + d] = bf16(acc_dk), dv[i * D + d] = bf16(acc_dv);
    }
}

Result reference(const Shape4& s, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& dy) {
  auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const std::vector<double> qd = wide(q), kd = wide(k), vd = wide(v), dyd = wide(dy);
  const auto n = static_cast<size_t>(s.n());
  Result r{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  for (int64_t h = 0; h < s.B * s.H; ++h) {
    const int64_t o = h * s.T * s.D;
    reference_head(s, qd.data() + o, kd.data() + o, vd.data() + o, dyd.data() + o, r.out.data() + o,
                   r.dq.data() + o, r.dk.data() + o, r.dv.data() + o);
  }
  return r;
}

Result fused(const Shape4& s, const std::vector<float>& qv, const std::vector<float>& kv,
             const std::vector<float>& vv, const std::vector<float>& dy, bool bf16) {
  Autocast autocast(bf16);
  const Shape shape{s.B, s.H, s.T, s.D};
  Tensor q = Tensor::from_vector(qv, shape).requires_grad_(), k = Tensor::from_vector(kv, shape).requires_grad_(),
         v = Tensor::from_vector(vv, shape).requires_grad_();
  Generator gen(3);
  Tensor y = fused_attention(q, k, v, {Tensor(), s.causal, 1.0 / std::sqrt(static_cast<double>(s.D)), 0.0, &gen, 0});
  sum(y * Tensor::from_vector(dy, shape)).backward();
  return {y.to_vector<double>(), q.grad().to_vector<double>(), k.grad().to_vector<double>(),
          v.grad().to_vector<double>()};
}

// got against want within the bf16 flips' bounds.
void expect_within_flips(const Result& got, const Result& want) {
  EXPECT_LE(testing::relative_error(got.out, want.out), 1e-4) << "output";
  EXPECT_LE(testing::relative_error(got.dq, want.dq), 6e-4) << "dq";
  EXPECT_LE(testing::relative_error(got.dk, want.dk), 6e-4) << "dk";
  EXPECT_LE(testing::relative_error(got.dv, want.dv), 6e-4) << "dv";
}

// The native and emulated paths against the reference, and against f32.
void check(const Shape4& s) {
  const std::vector<float> q = bf16_values(s.n(), 1), k = bf16_values(s.n(), 2), v = bf16_values(s.n(), 3),
                           dy = testing::uniform_values(s.n(), 4, 0.5f, 1.5f);
  const Result want = reference(s, q, k, v, dy);
  const bool had = backend::cpu::native_bf16_products();
  std::vector<Result> results;
  for (bool native : {true, false}) {
    if (native && !backend::cpu::cpu_has_bf16_products()) continue;
    SCOPED_TRACE(native ? "bf16 products" : "emulated");
    backend::cpu::set_native_bf16_products(native);
    const Result got = fused(s, q, k, v, dy, true);
    expect_within_flips(got, want);
    results.push_back(got);
    EXPECT_GT(testing::relative_error(fused(s, q, k, v, dy, false).dq, got.dq), 1e-4)
        << "bf16 blocks must differ from f32 ones";
  }
  backend::cpu::set_native_bf16_products(had);
  if (results.size() == 2) {
    SCOPED_TRACE("bf16 products against the emulation");
    expect_within_flips(results[0], results[1]);
  }
}

// 100 and 77 rows keep their probabilities for the gradient; 300 rows
// recompute them, in several blocks of rows.
TEST(Bf16Attention, BlockProductsMatchRoundedOperandsSummedInDouble) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    check({2, 2, 100, 32, causal});
    check({1, 2, 300, 16, causal});
    check({1, 2, 77, 15, causal});  // odd rows and an odd head size: pairs padded with zeros
  }
}

}  // namespace
}  // namespace kiln
