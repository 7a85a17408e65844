#pragma once
// What the attention tests compare: one run's output and the gradients of
// q, k and v, fused against the composite it must equal.
#include <gtest/gtest.h>

#include <vector>

#include "support/test_util.h"

namespace kiln::testing {

struct AttentionResult {
  std::vector<double> out, dq, dk, dv;
};

inline void expect_attention_close(const AttentionResult& got, const AttentionResult& want, double tol) {
  EXPECT_LE(relative_error(got.out, want.out), tol) << "output";
  EXPECT_LE(relative_error(got.dq, want.dq), tol) << "dq";
  EXPECT_LE(relative_error(got.dk, want.dk), tol) << "dk";
  EXPECT_LE(relative_error(got.dv, want.dv), tol) << "dv";
}

}  // namespace kiln::testing
