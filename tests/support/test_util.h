#pragma once
// Helpers shared by the tests: tolerant comparison of tensors with expected
// values, and finite-difference gradient checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

// The message of the exception f throws; "" when it throws nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Skips the test where a file it reads from ../shared (the real tokenizer
// files, not part of this repository) is absent.
#define SKIP_WITHOUT_SHARED(path)                                                        \
  if (const std::string shared_path_ = (path); !std::filesystem::exists(shared_path_))   \
  GTEST_SKIP() << "shared tokenizer files not found at " << shared_path_

#define EXPECT_CONTAINS(text, part)                                                      \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                             \
      << "\"" << std::string(text) << "\" does not contain \"" << (part) << "\""

// n uniform values in [lo, hi), the same for a seed on every machine.
inline std::vector<float> uniform_values(int64_t n, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// ‖a − b‖ / ‖b‖ over the whole vectors (‖a − b‖ when b is zero; infinite
// when the sizes differ).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want,
                                            double rtol, double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && !(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Checks d(sum(f(inputs) * w))/d(input k) from backward() against central
// differences, for every f32 input. f must be differentiable near inputs.
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      const std::vector<std::vector<float>>& values, const std::vector<Shape>& shapes,
                      double eps = 1e-2, double rtol = 2e-2, double atol = 2e-3) {
  auto make = [&](const std::vector<std::vector<float>>& vals, bool grad) {
    std::vector<Tensor> ts;
    for (size_t k = 0; k < vals.size(); ++k) {
      ts.push_back(Tensor::from_vector(vals[k], shapes[k]));
      if (grad) ts.back().requires_grad_();
    }
    return ts;
  };
  auto inputs = make(values, true);
  Tensor y = f(inputs);
  // A fixed, non-uniform weighting of the outputs.
  std::vector<float> w(static_cast<size_t>(y.numel()));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.37f * static_cast<float>((i * 7) % 5);
  Tensor wt = Tensor::from_vector(w, y.shape());
  sum(y * wt).backward();
  for (size_t k = 0; k < values.size(); ++k) {
    auto analytic = inputs[k].grad().to_vector<double>();
    for (size_t i = 0; i < values[k].size(); ++i) {
      auto plus = values, minus = values;
      plus[k][i] += static_cast<float>(eps);
      minus[k][i] -= static_cast<float>(eps);
      double fp = sum(f(make(plus, false)) * wt).item();
      double fm = sum(f(make(minus, false)) * wt).item();
      double numeric = (fp - fm) / (plus[k][i] - minus[k][i]);
      EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::abs(numeric))
          << "input " << k << " element " << i;
    }
  }
}

}  // namespace kiln::testing
