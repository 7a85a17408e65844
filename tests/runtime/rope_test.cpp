// kiln::rope (Op::Rope's kernel) against the composite it replaces in the
// models, x·cos + rotate_half(x)·sin built from slices, a concat and a fused
// loop: the same bits forward and backward (each product rounded before the
// sum), for shared and per-batch tables, bf16 x (whose gradient the
// composite rounds per branch), and a head size whose half crosses the CPU's
// vector widths and their tails.
#include "support/test_util.h"

namespace kiln {
namespace {

Tensor composite(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t D = x.shape().back(), axis = x.rank() - 1;
  const Tensor half = concat({neg(slice(x, axis, D / 2, D)), slice(x, axis, 0, D / 2)}, axis);
  return x * cos + half * sin;
}

struct Case {
  Shape x, tables;
  DType dtype = DType::f32;
};

// The output and the gradients of x, cos and sin under a fixed weighting.
std::vector<std::vector<float>> run(const Case& c, bool op) {
  Tensor x = Tensor::from_vector(testing::uniform_values(numel(c.x), 3), c.x);
  if (c.dtype == DType::bf16) x = cast(x, DType::bf16).detach();
  Tensor cos = Tensor::from_vector(testing::uniform_values(numel(c.tables), 4), c.tables);
  Tensor sin = Tensor::from_vector(testing::uniform_values(numel(c.tables), 5), c.tables);
  Tensor xf = cast(x, DType::f32).detach();
  xf.requires_grad_(), cos.requires_grad_(), sin.requires_grad_();
  Tensor in = c.dtype == DType::bf16 ? cast(xf, DType::bf16) : xf;
  Tensor y = op ? rope(in, cos, sin) : composite(in, cos, sin);
  Tensor w = Tensor::from_vector(testing::uniform_values(numel(c.x), 6), c.x);
  sum(y * w).backward();
  return {y.to_vector<float>(), xf.grad().to_vector<float>(), cos.grad().to_vector<float>(),
          sin.grad().to_vector<float>()};
}

TEST(Rope, GivesTheCompositesBitsForwardAndBackward) {
  const std::vector<Case> cases = {
      {{2, 3, 5, 8}, {1, 1, 5, 8}},
      {{2, 3, 5, 8}, {2, 1, 5, 8}},
      {{1, 4, 7, 70}, {1, 1, 7, 70}},  // half 35: 16 + 16 + a tail of 3
      {{2, 2, 64, 64}, {1, 1, 64, 64}},  // enough rows for the threads
      {{2, 3, 5, 8}, {1, 1, 5, 8}, DType::bf16},
      {{3, 4, 6}, {4, 6}},  // not [B,H,T,D]: the tables broadcast to x
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.x) + " " + to_string(c.tables) + " " + dtype_name(c.dtype));
    const auto want = run(c, false), got = run(c, true);
    const char* names[] = {"y", "dx", "dcos", "dsin"};
    for (size_t k = 0; k < want.size(); ++k) {
      // bf16 x: the composite rounds each branch's gradient to bf16 before adding them, the op their sum.
      if (k == 1 && c.dtype == DType::bf16)
        EXPECT_TRUE(testing::all_close(std::vector<double>(got[k].begin(), got[k].end()),
                                       std::vector<double>(want[k].begin(), want[k].end()), 1e-2, 1e-2));
      else
        EXPECT_EQ(got[k], want[k]) << names[k];
    }
  }
}

TEST(Rope, BadOperandsNameTheShapes) {
  const Tensor x = zeros({2, 3, 5, 7}, DType::f32, Device::cpu());
  EXPECT_CONTAINS(testing::error_of([&] { rope(x, x, x); }),
                  "rope: x must end in a positive, even head_dim, got [2,3,5,7]");
  const Tensor y = zeros({2, 3, 5, 8}, DType::f32, Device::cpu()), t = zeros({3, 8}, DType::f32, Device::cpu());
  EXPECT_CONTAINS(testing::error_of([&] { rope(y, t, t); }), "[3,8]");
  const Tensor ids = zeros({2, 3, 5, 8}, DType::i64, Device::cpu());
  const Tensor c = zeros({1, 1, 5, 8}, DType::f32, Device::cpu());
  EXPECT_CONTAINS(testing::error_of([&] { rope(ids, c, c); }), "rope: x must be f32 or bf16, got i64");
}

}  // namespace
}  // namespace kiln
