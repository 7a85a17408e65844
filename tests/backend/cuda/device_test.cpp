// The CUDA backend on a GPU, against the CPU backend: every op of ops.h
// forward and backward, fused programs (extra outputs, both register files,
// integer groups), Philox streams bit for bit, matrix products over views,
// and tiny BERT / GPT-2 / T5 training steps. Every test skips with "no CUDA
// device" where none is visible (CI, the developers' machines): run them
// with bench/gpu_check.sh on a GPU machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "kiln/io/safetensors.h"
#include "kiln/kiln.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/model.h"
#include "kiln/runtime/context.h"
#include "support/op_goldens.h"
#include "support/test_util.h"
#include "train/tiny_bert.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/backend/cuda/cuda.h"
#endif

namespace kiln {
namespace {

#ifndef KILN_HAVE_CUDA
TEST(CudaDevice, GpuTestsNeedACudaBuild) { GTEST_SKIP() << "no CUDA device: this build has no CUDA backend"; }
#else

using testing::error_of;

#define KILN_REQUIRE_GPU()                                                                \
  do {                                                                                    \
    if (backend::cuda::device_count() == 0)                                               \
      GTEST_SKIP() << "no CUDA device (" << backend::cuda::no_device_reason() << ")";     \
  } while (0)

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

std::vector<float> values(int64_t n, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  return testing::uniform_values(n, seed, lo, hi);
}

// |got - want| <= atol * max|want| + rtol * |want| for every element (or equal).
::testing::AssertionResult close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                                 double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size() << " elements";
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::isfinite(w) ? std::abs(w) : 0.0);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    if (got[i] == want[i]) continue;  // equal infinities too (bf16 overflow)
    if (!(std::abs(got[i] - want[i]) <= atol * scale + rtol * std::abs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": cuda " << got[i] << ", cpu " << want[i]
                                           << " (max |cpu| " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  OpFn f;
  bool differentiable = true;
};

// f on both devices from the same values: the result, then (when
// differentiable) the gradient of sum(f · w) for every input.
void compare_op(const OpCase& c, double rtol = 1e-4, double atol = 1e-5) {
  SCOPED_TRACE(c.name);
  std::map<Device, std::vector<std::vector<double>>> got;
  for (Device d : {kCpu, kGpu}) {
    std::vector<Tensor> ins;
    for (size_t k = 0; k < c.shapes.size(); ++k) {
      ins.push_back(Tensor::from_vector(values(numel(c.shapes[k]), 100 + k), c.shapes[k], d));
      if (c.differentiable) ins.back().requires_grad_();
    }
    Tensor y = c.f(ins);
    ASSERT_EQ(y.device(), d);
    auto& out = got[d];
    out.push_back(y.to_vector<double>());
    if (c.differentiable && y.dtype() == DType::f32) {
      Tensor w = Tensor::from_vector(values(y.numel(), 7, 0.5f, 1.5f), y.shape(), d);
      sum(y * w).backward();
      for (const auto& t : ins) out.push_back(t.grad().defined() ? t.grad().to_vector<double>() : std::vector<double>{});
    }
  }
  ASSERT_EQ(got[kCpu].size(), got[kGpu].size());
  for (size_t k = 0; k < got[kCpu].size(); ++k)
    EXPECT_TRUE(close(got[kGpu][k], got[kCpu][k], rtol, atol)) << (k == 0 ? "forward" : "gradient of input " + std::to_string(k - 1));
}

Tensor ids_on(const std::vector<Tensor>& x, std::vector<int64_t> v, Shape s) {
  return Tensor::from_vector(v, std::move(s), x[0].device());
}

std::vector<OpCase> op_cases() {
  using V = const std::vector<Tensor>&;
  return {
      {"add_broadcast", {{4, 6}, {6}}, [](V x) { return x[0] + x[1]; }},
      {"sub_mul_div", {{4, 6}, {4, 1}}, [](V x) { return (x[0] - x[1]) * x[0] / (x[1] * x[1] + 1.0); }},
      {"pow", {{3, 5}, {3, 5}}, [](V x) { return pow(abs(x[0]) + 0.5, x[1]) + pow(x[0], 3.0); }},
      {"maximum_minimum", {{5, 4}, {5, 4}}, [](V x) { return maximum(x[0], x[1]) * 2.0 + minimum(x[0], x[1]); }},
      {"unary", {{7, 9}}, [](V x) {
         return exp(x[0]) + log(abs(x[0]) + 1.0) + tanh(x[0]) + erf(x[0]) + sqrt(abs(x[0]) + 0.1) +
                rsqrt(abs(x[0]) + 0.1) + sigmoid(x[0]) + relu(x[0]) - neg(x[0]);
       }},
      {"gelu", {{33}}, [](V x) { return gelu(x[0]) + gelu(x[0] * 0.7, "tanh"); }},
      {"comparisons", {{6, 5}, {5}}, [](V x) {
         return cast(lt(x[0], x[1]), DType::f32) + cast(le(x[0], x[1]), DType::f32) * 2.0 +
                cast(gt(x[0], scalar_like(0.5, x[0])), DType::f32) * 4.0 + cast(ge(x[0], x[1]), DType::f32) * 8.0 +
                cast(eq(x[0], x[0]), DType::f32) * 16.0 + cast(ne(x[0], x[1]), DType::f32) * 32.0 +
                cast(logical_and(lt(x[0], x[1]), gt(x[0], scalar_like(-1.0, x[0]))), DType::f32) * 64.0 +
                cast(logical_or(logical_not(lt(x[0], x[1])), gt(x[0], scalar_like(1.0, x[0]))), DType::f32) * 128.0;
       }, false},
      {"where", {{4, 4}, {4, 4}}, [](V x) { return where(gt(x[0], x[1]), x[0] * 2.0, x[1]); }},
      {"casts", {{3, 8}}, [](V x) { return cast(cast(x[0] * 5.0, DType::i64), DType::f32) + x[0]; }},
      {"integers", {{2, 5}}, [](V x) {
         Tensor i = ids_on(x, {7, -3, 12, 0, 5, 9, -11, 4, 100, 1}, {2, 5});
         return cast(div(i * 7, full({}, 3, DType::i64, x[0].device())) + i - i * i, DType::f32) + x[0];
       }},
      {"sum_rows", {{8, 1000}}, [](V x) { return sum(x[0], {1}); }},
      {"sum_columns", {{300, 70}}, [](V x) { return sum(x[0], {0}); }},
      {"sum_middle", {{4, 50, 3}}, [](V x) { return sum(x[0], {1}) + mean(x[0], {1}); }},
      {"sum_all", {{17, 13}}, [](V x) { return sum(x[0]) + mean(x[0]); }},
      {"amax", {{6, 40}, {40, 6}}, [](V x) { return amax(x[0], {1}) + amax(x[1], {0}); }},
      {"integer_sum_max", {{3, 4}}, [](V x) {
         Tensor i = ids_on(x, {1, -2, 3, 4, 5, 6, -7, 8, 9, 10, 11, -12}, {3, 4});
         return cast(sum(i, {1}) * 10 + amax(i, {1}), DType::f32) + sum(x[0], {1});
       }},
      // Long axes with few outputs split the axis over blocks (reduce_parts): a full sum, a bias gradient's column
      // sums, maxima over a long axis, an integer sum.
      {"sum_all_long", {{3000000}}, [](V x) { return sum(x[0]) + mean(x[0]) + amax(x[0]); }},
      {"sum_columns_long", {{20000, 768}}, [](V x) { return sum(x[0], {0}); }},
      {"amax_long", {{5000, 3}}, [](V x) { return amax(x[0], {0}) + amax(x[0] * -1.0, {0}); }},
      {"integer_sum_long", {{4, 9000}}, [](V x) {
         return cast(sum(cast(x[0] * 1000.0, DType::i64), {1}), DType::f32) + sum(x[0], {1});
       }},
      {"argmax", {{5, 37}}, [](V x) { return cast(argmax(x[0], 1), DType::f32); }, false},
      {"movement", {{2, 3, 4}}, [](V x) {
         Tensor first = broadcast_to(unsqueeze(squeeze(slice(x[0], 0, 0, 1), 0), 0), {2, 3, 4});
         return reshape(permute(x[0], {2, 0, 1}), {4, 6}) * 2.0 + reshape(first, {4, 6});
       }},
      {"transpose_broadcast", {{3, 5}, {5}}, [](V x) { return transpose(x[0], 0, 1) * unsqueeze(x[1], 1); }},
      {"slice_step", {{4, 11}}, [](V x) { return slice(x[0], 1, 1, 10, 3) * 3.0; }},
      {"concat", {{3, 2}, {3, 5}}, [](V x) { return concat({x[0], x[1] * 2.0, x[0]}, 1); }},
      {"concat_rows", {{2, 3}, {4, 3}}, [](V x) { return concat({x[1], x[0]}, 0); }},
      {"embedding_padding", {{10, 6}}, [](V x) {
         return embedding(ids_on(x, {3, 2, 2, 9, 0, 3, 2}, {7}), x[0], 2);
       }},
      {"index_select", {{10, 4}}, [](V x) { return index_select(x[0], ids_on(x, {9, 0, 0, 4}, {4})); }},
      {"gather", {{4, 6}}, [](V x) {
         return gather(x[0], 1, ids_on(x, {5, 0, 1, 1, 2, 3, 3, 3, 0, 4, 5, 5}, {4, 3}));
       }},
      {"scatter_add", {{4, 6}, {4, 3}}, [](V x) {
         return scatter_add(x[0], 1, ids_on(x, {5, 0, 5, 1, 2, 1, 3, 3, 3, 0, 4, 5}, {4, 3}), x[1]);
       }},
      {"index_copy", {{2, 5, 3}, {2, 2, 3}}, [](V x) {
         return index_copy(x[0], 1, ids_on(x, {4, 1}, {2}), x[1]) * x[0];
       }},
      {"matmul", {{5, 7}, {7, 3}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_transposed", {{7, 5}, {3, 7}}, [](V x) { return matmul(x[0], x[1], true, true); }},
      {"matmul_batched", {{2, 3, 5, 7}, {2, 3, 7, 4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_broadcast", {{2, 1, 5, 7}, {1, 3, 7, 4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_shared_b", {{4, 5, 7}, {7, 6}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_permuted", {{2, 5, 3, 8}, {2, 6, 3, 8}}, [](V x) {
         return matmul(permute(x[0], {0, 2, 1, 3}), permute(x[1], {0, 2, 1, 3}), false, true);
       }},
      {"matvec", {{1, 64}, {64, 9}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_large", {{96, 256}, {256, 160}}, [](V x) { return matmul(x[0], x[1]); }},
      {"linear", {{3, 4, 6}, {5, 6}, {5}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"softmax_mask", {{2, 3, 9}, {2, 1, 9}}, [](V x) { return softmax(x[0], -1, x[1].detach() * 3.0); }},
      {"softmax_axis0", {{7, 5}}, [](V x) { return softmax(x[0], 0); }},
      {"softmax_long", {{3, 3000}}, [](V x) { return softmax(x[0] * 4.0, -1); }},
      {"log_softmax", {{6, 11}}, [](V x) { return log_softmax(x[0], -1); }},
      {"log_softmax_axis1", {{3, 11, 4}}, [](V x) { return log_softmax(x[0], 1); }},
      {"layer_norm", {{5, 32}, {32}, {32}}, [](V x) { return layer_norm(x[0], x[1], x[2], 1e-5); }},
      {"layer_norm_wide", {{3, 1000}, {1000}, {1000}}, [](V x) { return layer_norm(x[0], x[1], x[2], 1e-12); }},
      {"cross_entropy", {{6, 10}}, [](V x) {
         return cross_entropy(x[0], ids_on(x, {3, -100, 9, 0, 0, -100}, {6}), -100, 0.1);
       }},
      {"cross_entropy_wide", {{4, 5000}}, [](V x) { return cross_entropy(x[0], ids_on(x, {4999, 0, 17, 2500}, {4})); }},
      {"mse", {{4, 5}, {4, 5}}, [](V x) { return mse_loss(x[0], x[1]); }},
      {"bce_with_logits", {{4, 5}, {4, 5}}, [](V x) { return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]).detach()); }},
      {"arange_full", {{6}}, [](V x) {
         Device d = x[0].device();
         return x[0] + cast(arange(6, DType::i64, d), DType::f32) + full({6}, 0.5, DType::f32, d) +
                arange(0.5, 3.5, 0.5, DType::f32, d) + cast(arange(0, 6, 1, DType::i32, d), DType::f32) + ones({6}, DType::f32, d);
       }},
      // bf16 storage (--bf16): exact round-to-nearest-even on both devices (ties, inf, NaN, overflow), and
      // the kernels that move bf16 elements (2 bytes) with their gradients.
      {"bf16_cast_exact", {{8}}, [](V x) {
         const float ulp = std::ldexp(1.0f, -7);
         Tensor special = Tensor::from_vector(std::vector<float>{1.0f + ulp / 2, 1.0f + 1.5f * ulp, -3.0f - 3 * ulp,
                                                                 0.1f, 3.4e38f, INFINITY, -INFINITY, NAN},
                                              {8}, x[0].device());
         return cast(cast(special + x[0] * 0.0, DType::bf16), DType::f32) + cast(cast(x[0], DType::bf16), DType::f32);
       }},
      {"bf16_embedding", {{10, 6}}, [](V x) {
         return cast(embedding(ids_on(x, {3, 2, 2, 9, 0, 3, 2}, {7}), cast(x[0], DType::bf16), 2), DType::f32);
       }},
      {"bf16_slice_concat", {{4, 11}, {4, 3}}, [](V x) {
         Tensor h = cast(x[0], DType::bf16);
         return cast(concat({slice(h, 1, 1, 10, 3), cast(x[1], DType::bf16), h}, 1), DType::f32) * 2.0;
       }},
      {"bf16_gather_argmax", {{4, 6}}, [](V x) {
         Tensor h = cast(x[0] * 3.0, DType::bf16);
         return cast(gather(h, 1, ids_on(x, {5, 0, 1, 1, 2, 3, 3, 3, 0, 4, 5, 5}, {4, 3})), DType::f32) +
                cast(unsqueeze(argmax(h, 1), 1), DType::f32);
       }},
      {"bf16_matmul", {{2, 5, 7}, {7, 3}}, [](V x) {
         return matmul(cast(x[0], DType::bf16), cast(x[1], DType::bf16));
       }},
      {"long_chain", {{1000}}, [](V x) {  // many live values: the large register file
         std::vector<Tensor> t{x[0]};
         for (int k = 1; k < 24; ++k) t.push_back(tanh(t.back() * (0.3 + 0.01 * k)) + t.back() * 0.5);
         Tensor acc = t[0];
         for (size_t k = 1; k < t.size(); ++k) acc = acc + t[k] * static_cast<double>(k);
         return acc;
       }},
  };
}

TEST(CudaOps, EveryOpForwardAndBackwardMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  for (const auto& c : op_cases()) compare_op(c);
}

// Every PyTorch golden case (tests/goldens/op_goldens.json) on the GPU, values
// and gradients, as tests/runtime/op_goldens_test.cpp runs them on the CPU:
// an op's golden cases check its CUDA kernel too. (Not CudaOps.*: the checks
// that force every fused program through NVRTC would compile each case's.)
TEST(CudaGoldens, EveryOpMatchesPyTorch) {
  KILN_REQUIRE_GPU();
  for (const auto& c : testing::op_goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    testing::check_op_golden(c, kGpu);
  }
}

TEST(CudaOps, RandomStreamsAreBitIdenticalToTheCpu) {
  KILN_REQUIRE_GPU();
  std::map<Device, std::vector<std::vector<float>>> got;
  for (Device d : {kCpu, kGpu}) {
    Generator g(20240917);
    Tensor x = ones({64, 1000}, DType::f32, d);
    g.set_sample_base(3);
    std::vector<Tensor> draws{rand({1 << 20}, g, d), randn({1 << 20}, g, d), bernoulli({1000, 33}, 0.3, g, d),
                              dropout(x, 0.1, g), rand({7}, g, d)};
    for (auto& t : draws) got[d].push_back(t.to_vector<float>());
  }
  for (size_t k = 0; k < got[kCpu].size(); ++k) {
    const auto &a = got[kGpu][k], &b = got[kCpu][k];
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "draw " << k << ": " << differ << " of " << a.size() << " elements differ, first at "
                          << first << " (cuda " << a[first] << ", cpu " << b[first] << ")";
  }
}

TEST(CudaOps, BadIdsFailTheStepWithTheCpuMessage) {
  KILN_REQUIRE_GPU();
  Tensor table = Tensor::from_vector(values(40, 1), {10, 4}, kGpu);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 50, 2}, {3}, kGpu);
  EXPECT_CONTAINS(error_of([&] { index_select(table, ids).to_vector<float>(); }),
                  "index_select: id 50 at position 1 out of range [0, 10)");
  Tensor logits = Tensor::from_vector(values(12, 2), {3, 4}, kGpu);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 4, -100}, {3}, kGpu);
  EXPECT_CONTAINS(error_of([&] { cross_entropy(logits, labels).item(); }),
                  "cross_entropy: label 4 at row 1 out of range [0, 4) (ignore_index is -100)");
  Tensor cache = Tensor::from_vector(values(24, 3), {2, 4, 3}, kGpu);
  Tensor rows = Tensor::from_vector(values(12, 4), {2, 2, 3}, kGpu);
  auto copy_at = [&](std::vector<int64_t> slots) {
    return error_of([&] { index_copy(cache, 1, Tensor::from_vector(slots, {2}, kGpu), rows).to_vector<float>(); });
  };
  EXPECT_CONTAINS(copy_at({0, 4}), "index_copy: id 4 at position 1 out of range [0, 4) along dim 1");
  EXPECT_CONTAINS(copy_at({2, 2}), "index_copy: id 2 at positions 0 and 1 (the ids must be distinct)");
  // The device is fine afterwards.
  EXPECT_FLOAT_EQ((Tensor::scalar(2.0f, kGpu) * 3.0).item(), 6.0f);
}

// The embedding gradient (index_add) sums each id's rows in position order,
// as the CPU does: bit-identical results, with many repeats, a padding id and
// ids far apart.
TEST(CudaOps, EmbeddingGradientsSumInPositionOrderAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  std::vector<int64_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i * 7 + i * 3) % 997) % 300;
  ids[17] = 299;
  std::map<Device, std::vector<float>> grads;
  for (Device d : {kCpu, kGpu}) {
    Tensor table = Tensor::from_vector(values(300 * 33, 1), {300, 33}, d).requires_grad_();
    Tensor y = embedding(Tensor::from_vector(ids, {50, 100}, d), table, /*padding_idx=*/4);
    sum(y * Tensor::from_vector(values(y.numel(), 2), y.shape(), d)).backward();
    grads[d] = table.grad().to_vector<float>();
  }
  EXPECT_EQ(grads[kGpu], grads[kCpu]);
}

// Tied embeddings: the compiler folds the lookup's gradient onto the output
// projection's (an IndexAdd with a base, ir/op.h); the GPU adds each id's
// sum to its base row as the CPU does.
TEST(CudaOps, TiedEmbeddingGradientsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::vector<int64_t> ids(2000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i * 7 + i * 3) % 997) % 300;
  std::map<Device, std::vector<float>> grads;
  for (Device d : {kCpu, kGpu}) {
    Tensor table = Tensor::from_vector(values(300 * 32, 1), {300, 32}, d).requires_grad_();
    Tensor h = Tensor::from_vector(values(2000 * 32, 2), {2000, 32}, d);
    Tensor y = embedding(Tensor::from_vector(ids, {20, 100}, d), table, /*padding_idx=*/4);
    Tensor loss = sum(y * Tensor::from_vector(values(y.numel(), 3), y.shape(), d)) +
                  sum(matmul(h, table, false, true) * Tensor::from_vector(values(2000 * 300, 4), {2000, 300}, d));
    loss.backward();
    grads[d] = table.grad().to_vector<float>();
  }
  ASSERT_EQ(grads[kGpu].size(), grads[kCpu].size());
  for (size_t i = 0; i < grads[kCpu].size(); ++i)  // the products may round differently (TF32 is off: 1e-4)
    ASSERT_NEAR(grads[kGpu][i], grads[kCpu][i], 1e-4 * (1.0 + std::abs(grads[kCpu][i]))) << "at " << i;
}

TEST(CudaDevice, TensorsAndSafetensorsRoundTrip) {
  KILN_REQUIRE_GPU();
  const std::vector<float> v = values(1000, 3);
  EXPECT_EQ(Tensor::from_vector(v, {10, 100}, kGpu).to_vector<float>(), v);
  const std::vector<int64_t> ids{1, -2, 3, 1LL << 40};
  EXPECT_EQ(Tensor::from_vector(ids, {4}, kGpu).to_vector<int64_t>(), ids);
  const std::string path = ::testing::TempDir() + "/kiln_cuda_roundtrip.safetensors";
  io::save_safetensors(path, {{"w", Tensor::from_vector(v, {10, 100})}, {"i", Tensor::from_vector(ids, {4})}});
  auto f = io::SafetensorsFile::open(path);
  Tensor w = f.load("w", kGpu);
  EXPECT_EQ(w.device(), kGpu);
  EXPECT_EQ(w.to_vector<float>(), v);
  EXPECT_EQ(f.load("i", kGpu).to_vector<int64_t>(), ids);
  std::remove(path.c_str());
  EXPECT_CONTAINS(backend::cuda::device_description(kGpu), "compute capability");
  EXPECT_GT(backend::cuda::memory_stats(kGpu).reserved, 0u);
}

// ---- fused programs run through prepare/execute directly ----

compiler::FusedStep fstep(ir::Op op, DType t, int a = -1, int b = -1, int load = -1, double v = 0) {
  compiler::FusedStep f{op, t, a, b, -1, load, {}};
  if (op == ir::Op::Constant) f.attrs.floats = {v};
  return f;
}

TEST(CudaFused, ExtraOutputsAndIntegerGroupsOnTheDevice) {
  KILN_REQUIRE_GPU();
  // Slots: 0 x (f32), 1 ids (i64); outputs 2 out (f32), 3 x+1 (f32), 4 ids*3 (i64).
  const Shape s{5, 200};
  const int64_t n = numel(s);
  compiler::Program p;
  p.num_params = 2;
  const size_t f32 = static_cast<size_t>(n) * 4, i64 = static_cast<size_t>(n) * 8;
  p.slots = {{compiler::SlotKind::Param, 0, f32}, {compiler::SlotKind::Param, 1, i64},
             {compiler::SlotKind::Output, 0, f32}, {compiler::SlotKind::Output, 1, f32},
             {compiler::SlotKind::Output, 2, i64}};
  p.output_nbytes = {f32, f32, i64};
  compiler::Instr ins;
  ins.fused = true;
  ins.inputs = {{0, compiler::View::contiguous(s), DType::f32}, {1, compiler::View::contiguous(s), DType::i64}};
  ins.program = {fstep(ir::Op::Data, DType::f32, -1, -1, 0), fstep(ir::Op::Data, DType::i64, -1, -1, 1),
                 fstep(ir::Op::Constant, DType::f32, -1, -1, -1, 1.0), fstep(ir::Op::Add, DType::f32, 0, 2),
                 fstep(ir::Op::Constant, DType::i64, -1, -1, -1, 3.0), fstep(ir::Op::Mul, DType::i64, 1, 4),
                 fstep(ir::Op::Cast, DType::f32, 5), fstep(ir::Op::Mul, DType::f32, 3, 6)};
  ins.output = {2, compiler::View::contiguous(s), DType::f32};
  ins.extra_outputs = {{3, {3, compiler::View::contiguous(s), DType::f32}}, {5, {4, compiler::View::contiguous(s), DType::i64}}};
  p.instrs = {ins};
  const auto x = values(n, 4);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i * 7919) % 100001 - 50000 + (int64_t{1} << 35);
  std::vector<std::shared_ptr<Storage>> mem;
  for (size_t b : {f32, i64, f32, f32, i64})
    mem.push_back(std::make_shared<Storage>(kGpu, b));
  mem[0]->copy_from_host(x.data(), n * 4);
  mem[1]->copy_from_host(ids.data(), n * 8);
  auto plan = backend::cuda::prepare(p, kGpu);
  std::vector<void*> params{mem[0]->data(), mem[1]->data()}, outs{mem[2]->data(), mem[3]->data(), mem[4]->data()};
  backend::cuda::execute(*plan, params, outs, nullptr);
  std::vector<float> out(n), plus(n);
  std::vector<int64_t> tripled(n);
  mem[2]->copy_to_host(out.data(), n * 4);
  mem[3]->copy_to_host(plus.data(), n * 4);
  mem[4]->copy_to_host(tripled.data(), n * 8);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(tripled[i], ids[i] * 3) << i;  // exact in double
    ASSERT_EQ(plus[i], x[i] + 1.0f) << i;
    ASSERT_EQ(out[i], (x[i] + 1.0f) * static_cast<float>(ids[i] * 3)) << i;
  }
}

// set_allow_tf32: f32 products on tensor cores keep ~10 bits of the inputs'
// mantissa (an error near 1e-3 relative on K = 1024), and off again is fp32.
TEST(CudaOps, Tf32ProductsAreTf32AndOffIsFp32) {
  KILN_REQUIRE_GPU();
  const int64_t n = 1024;
  auto product = [&](Device d) {
    Tensor a = Tensor::from_vector(values(n * n, 31), {n, n}, d), b = Tensor::from_vector(values(n * n, 32), {n, n}, d);
    return matmul(a, b).to_vector<double>();
  };
  const std::vector<double> want = product(kCpu);
  auto error = [&](const std::vector<double>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
  };
  set_allow_tf32(true);
  const double tf32 = error(product(kGpu));
  set_allow_tf32(false);
  const double fp32 = error(product(kGpu));
  EXPECT_GT(tf32, 1e-5);
  EXPECT_LT(tf32, 5e-3);
  EXPECT_LT(fp32, 1e-5);
}

// bf16 operands (--bf16): cuBLAS's bf16 GEMM (exact products, f32 sums)
// gives the CPU's widened sgemm up to summation order, for plain, transposed
// and batched products.
TEST(CudaOps, Bf16ProductsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : {Case{{256, 512}, {512, 128}, false, false}, Case{{512, 256}, {128, 512}, true, true},
                        Case{{4, 3, 64, 32}, {4, 3, 32, 64}, false, false}, Case{{2, 64, 96}, {96, 80}, false, false}}) {
    auto product = [&](Device d) {
      Tensor a = Tensor::from_vector(values(numel(c.a), 41), c.a, d), b = Tensor::from_vector(values(numel(c.b), 42), c.b, d);
      return matmul(cast(a, DType::bf16), cast(b, DType::bf16), c.ta, c.tb).to_vector<double>();
    };
    const std::vector<double> want = product(kCpu), got = product(kGpu);
    ASSERT_EQ(got.size(), want.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    EXPECT_LT(std::sqrt(num / den), 1e-5) << to_string(c.a) << " x " << to_string(c.b);
  }
}

// Large products with extents that are not multiples of 8 (GPT-2's
// 50257-word LM head) run on padded copies: a linear layer of 777 inputs
// and 1001 outputs, forward (the bias folded in: the padded result starts as
// the bias) and both gradients (the odd operand plain and transposed, odd
// inner extents padded with zeros), in f32 and with bf16 operands (whose
// gradients are rounded to bf16: one bf16 step of difference allowed).
TEST(CudaOps, LargeProductsWithUnalignedRowsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    compare_op({"linear_777_1001", {{512, 777}, {1001, 777}, {1001}},
                [bf16](const std::vector<Tensor>& x) {
                  Autocast autocast(bf16);
                  return linear(x[0], x[1], x[2]);
                }},
               bf16 ? 8e-3 : 1e-4, bf16 ? 1e-4 : 1e-5);
  }
}

// ---- models: forward, gradients and ten AdamW steps, CUDA against the CPU ----

struct Run {
  std::vector<std::string> names;
  std::vector<double> losses;
  std::vector<double> logits;
  std::vector<std::vector<double>> grads, params;
};

using ModelFactory = std::function<std::unique_ptr<models::PreTrainedModel>(Device)>;
using InputFactory = std::function<models::ModelInputs(Device)>;

Run train(const ModelFactory& make_model, const InputFactory& make_inputs, Device d, bool bf16 = false) {
  Run r;
  auto model = make_model(d);
  model->train();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  for (int s = 0; s < 10; ++s) {
    models::ModelOutputs out;
    {
      Autocast autocast(bf16);
      out = model->forward(make_inputs(d));
    }
    out.loss.backward();
    if (s == 0) {
      r.logits = out.logits.to_vector<double>();
      for (const auto& [name, p] : model->named_parameters()) r.grads.push_back(p.grad().to_vector<double>());
    }
    opt.step();
    opt.zero_grad();
    mark_step(d);
    r.losses.push_back(out.loss.item());
  }
  for (const auto& [name, p] : model->named_parameters()) {
    r.names.push_back(name);
    r.params.push_back(p.to_vector<double>());
  }
  return r;
}

using testing::relative_error;

double norm(const std::vector<double>& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

// Key-projection biases have a zero gradient in exact arithmetic (softmax
// ignores a constant added to a whole row of scores), so both backends give
// rounding noise with different digits there, and AdamW turns noise into
// full lr-sized steps of random sign: BERT's key.bias and the middle third of
// GPT-2's c_attn.bias are compared as gradients (below) but not after
// training.
bool key_bias(const std::string& name, size_t i, size_t n) {
  auto ends_with = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  if (ends_with("attention.self.key.bias")) return true;
  return ends_with("attn.c_attn.bias") && i >= n / 3 && i < 2 * n / 3;
}

// Gradients are compared relative to max(their norm, 1e-2 of the largest
// gradient norm): some are nearly zero by cancellation (a two-label
// classifier's bias over one example per label) or exactly zero (key biases).
void compare_training(const ModelFactory& make_model, const InputFactory& make_inputs) {
  const Run cpu = train(make_model, make_inputs, kCpu), gpu = train(make_model, make_inputs, kGpu);
  EXPECT_LE(relative_error(gpu.logits, cpu.logits), 1e-4) << "logits";
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  ASSERT_EQ(cpu.names.size(), cpu.params.size());
  double largest_norm = 0;
  for (const auto& g : cpu.grads) largest_norm = std::max(largest_norm, norm(g));
  ASSERT_GT(largest_norm, 0);
  for (size_t k = 0; k < cpu.grads.size(); ++k) {
    ASSERT_EQ(gpu.grads[k].size(), cpu.grads[k].size());
    std::vector<double> diff(cpu.grads[k].size());
    for (size_t i = 0; i < diff.size(); ++i) diff[i] = gpu.grads[k][i] - cpu.grads[k][i];
    EXPECT_LE(norm(diff) / std::max(norm(cpu.grads[k]), 1e-2 * largest_norm), 1e-4)
        << "gradient of " << cpu.names[k] << " (norm " << norm(cpu.grads[k]) << ", largest " << largest_norm << ")";
  }
  for (size_t s = 0; s < cpu.losses.size(); ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-4 * std::abs(cpu.losses[s])) << "loss of step " << s;
  size_t skipped = 0;
  for (size_t k = 0; k < cpu.params.size(); ++k) {
    std::vector<double> a, b;
    const size_t n = cpu.params[k].size();
    for (size_t i = 0; i < n; ++i) {
      if (key_bias(cpu.names[k], i, n)) {
        ++skipped;
        continue;
      }
      a.push_back(gpu.params[k][i]);
      b.push_back(cpu.params[k][i]);
    }
    EXPECT_LE(relative_error(a, b), 1e-4) << cpu.names[k] << " after training";
  }
  ::testing::Test::RecordProperty("key_bias_elements_skipped", static_cast<int>(skipped));
  EXPECT_LT(cpu.losses.back(), cpu.losses.front());
}

// A test model of tests/goldens, loaded onto the device.
ModelFactory pretrained(const std::string& dir) {
  return [dir](Device d) {
    models::LoadOptions lo;
    lo.device = d;
    // KILN_TEST_DATA_DIR in the environment: a binary built elsewhere (bench/gpu_bundle.sh).
    const char* data = std::getenv("KILN_TEST_DATA_DIR");
    return models::from_pretrained(std::string(data ? data : KILN_TEST_DATA_DIR) + "/" + dir, lo);
  };
}

TEST(CudaModels, TinyBertTrainsAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  compare_training(
      [](Device d) { return models::create_model("BertForSequenceClassification", testing::tiny_bert(2), 5, d); },
      [](Device d) {
        models::ModelInputs in;
        in.input_ids = Tensor::from_vector(std::vector<int64_t>{2, 5, 9, 13, 1, 0, 7, 7, 30, 4, 0, 0}, {2, 6}, d);
        in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 6}, d);
        in.labels = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2}, d);
        return in;
      });
}

TEST(CudaModels, TinyGpt2TrainsAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  compare_training(
      pretrained("gpt2/gpt2_lm"),
      [](Device d) {
        models::ModelInputs in;
        in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 17, 42, 8, 61, 23, 9, 1, 3, 70, 2, 33, 11, 1, 4, 4},
                                           {2, 8}, d);
        in.labels = in.input_ids;
        return in;
      });
}

TEST(CudaModels, TinyT5TrainsAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  compare_training(
      pretrained("t5/t5_relu_tied"),
      [](Device d) {
        models::ModelInputs in;
        in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 17, 42, 8, 61, 23, 9, 1, 3, 70, 2, 33}, {2, 6}, d);
        in.labels = Tensor::from_vector(std::vector<int64_t>{8, 61, 1, -100, 9, 4, 11, 1}, {2, 4}, d);
        return in;
      });
}

// The Llama family on the GPU: grouped-query heads with padding (llama_lm),
// and Qwen2's q/k/v biases with tied embeddings (qwen2_lm_tied).
TEST(CudaModels, TinyLlamaAndQwen2TrainAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  for (const char* dir : {"llama/llama_lm", "llama/qwen2_lm_tied"}) {
    SCOPED_TRACE(dir);
    compare_training(pretrained(dir), [](Device d) {
      models::ModelInputs in;
      in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 17, 42, 8, 61, 23, 9, 11, 3, 70, 12, 33, 11, 0, 0, 0},
                                         {2, 8}, d);
      in.attention_mask =
          Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, {2, 8}, d);
      in.labels = Tensor::from_vector(
          std::vector<int64_t>{5, 17, 42, 8, 61, 23, 9, 11, 3, 70, 12, 33, 11, -100, -100, -100}, {2, 8}, d);
      return in;
    });
  }
}

// --bf16 on the GPU (bf16 tensor-core products): the loss curve of ten steps
// follows the fp32 one within 2 % (the criterion) and the CPU's bf16
// run closely (the same rounded operands; sums in another order).
TEST(CudaModels, Bf16TrainingFollowsTheFp32CurveAndTheCpu) {
  KILN_REQUIRE_GPU();
  const ModelFactory gpt2 = pretrained("gpt2/gpt2_lm");
  const InputFactory batch = [](Device d) {
    models::ModelInputs in;
    in.input_ids =
        Tensor::from_vector(std::vector<int64_t>{5, 17, 42, 8, 61, 23, 9, 1, 3, 70, 2, 33, 11, 1, 4, 4}, {2, 8}, d);
    in.labels = in.input_ids;
    return in;
  };
  const auto fp32 = train(gpt2, batch, kCpu), cpu = train(gpt2, batch, kCpu, true), gpu = train(gpt2, batch, kGpu, true);
  for (size_t s = 0; s < fp32.losses.size(); ++s) {
    EXPECT_NEAR(gpu.losses[s], fp32.losses[s], 0.02 * std::abs(fp32.losses[s])) << "step " << s;
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 2e-3 * std::abs(cpu.losses[s])) << "step " << s;
  }
  EXPECT_NE(gpu.losses[0], fp32.losses[0]);
  EXPECT_LE(relative_error(gpu.logits, cpu.logits), 1e-3);
}

// The fused attention kernels (bf16 tensor cores, no score matrix in
// memory) against the CPU's kernel of the same op, forward and
// gradients, on tile-ragged lengths: causal, padding masks, dropout (the
// same Philox elements are dropped), cross-attention, one query.
TEST(CudaOps, FusedAttentionMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t B, H, Tq, Tk, D;
    bool causal, mask;
    double dropout;
  };
  const std::vector<Case> cases = {
      {2, 3, 100, 100, 64, true, true, 0.1}, {2, 3, 100, 100, 64, false, false, 0.0},
      {2, 2, 130, 130, 32, true, false, 0.0}, {1, 2, 70, 130, 16, false, true, 0.2},
      {3, 2, 1, 77, 64, false, true, 0.1},    {1, 1, 64, 64, 64, true, false, 0.5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " H " << c.H << " Tq " << c.Tq << " Tk " << c.Tk << " D " << c.D
                                      << " causal " << c.causal << " mask " << c.mask << " dropout " << c.dropout);
    std::map<Device, std::vector<std::vector<double>>> got;
    for (Device d : {kCpu, kGpu}) {
      Autocast autocast;
      Tensor q = Tensor::from_vector(values(c.B * c.H * c.Tq * c.D, 1), {c.B, c.H, c.Tq, c.D}, d).requires_grad_();
      Tensor k = Tensor::from_vector(values(c.B * c.H * c.Tk * c.D, 2), {c.B, c.H, c.Tk, c.D}, d).requires_grad_();
      Tensor v = Tensor::from_vector(values(c.B * c.H * c.Tk * c.D, 3), {c.B, c.H, c.Tk, c.D}, d).requires_grad_();
      Tensor mask;
      if (c.mask) {
        std::vector<float> m(static_cast<size_t>(c.B * c.Tk), 0.0f);
        for (int64_t j = c.Tk - 9; j < c.Tk; ++j) m[(c.B - 1) * c.Tk + j] = std::numeric_limits<float>::lowest();
        mask = Tensor::from_vector(m, {c.B, 1, 1, c.Tk}, d);
      }
      Generator gen(5);
      Tensor y = fused_attention(q, k, v, {mask, c.causal, 1.0 / std::sqrt(double(c.D)), c.dropout, &gen});
      Tensor w = Tensor::from_vector(values(y.numel(), 7, 0.5f, 1.5f), y.shape(), d);
      sum(y * w).backward();
      got[d] = {y.to_vector<double>(), q.grad().to_vector<double>(), k.grad().to_vector<double>(),
                v.grad().to_vector<double>()};
    }
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (size_t k = 0; k < 4; ++k) EXPECT_LE(relative_error(got[kGpu][k], got[kCpu][k]), 1e-2) << what[k];
  }
}

// Models whose head size the fused kernels take (16, 32, 64) use them under
// --bf16 on CUDA (KILN_ATTENTION=auto), as the CPU uses its own. Ten
// AdamW steps of a GPT-2 (head size 32) and a BERT (16) with dropout on.
TEST(CudaModels, FusedAttentionTrainingFollowsTheCpuComposite) {
  KILN_REQUIRE_GPU();
  auto gpt2 = models::GPT2Config::from_json(
      {{"model_type", "gpt2"}, {"vocab_size", 80}, {"n_embd", 64}, {"n_head", 2}, {"n_layer", 2}, {"n_positions", 128}},
      "test");
  const ModelFactory make_gpt2 = [gpt2](Device d) { return models::create_model("GPT2LMHeadModel", gpt2, 3, d); };
  const InputFactory gpt2_batch = [](Device d) {
    std::vector<int64_t> ids(2 * 100);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 11) % 80);
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(ids, {2, 100}, d);
    std::vector<int64_t> am(ids.size(), 1);
    for (size_t i = 190; i < am.size(); ++i) am[i] = 0;
    in.attention_mask = Tensor::from_vector(am, {2, 100}, d);
    in.labels = in.input_ids;
    return in;
  };
  models::BertConfig bert = testing::tiny_bert(2);
  bert.hidden_size = 64, bert.num_attention_heads = 4, bert.intermediate_size = 128, bert.max_position_embeddings = 80;
  const ModelFactory make_bert = [bert](Device d) {
    return models::create_model("BertForSequenceClassification", bert, 4, d);
  };
  const InputFactory bert_batch = [](Device d) {
    std::vector<int64_t> ids(4 * 70), am(4 * 70, 1);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 13 + 5) % 40);
    for (size_t i = 3 * 70 + 50; i < am.size(); ++i) am[i] = 0;
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(ids, {4, 70}, d);
    in.attention_mask = Tensor::from_vector(am, {4, 70}, d);
    in.labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}, d);
    return in;
  };
  for (const auto& [name, make, batch] : {std::tuple{"gpt2", make_gpt2, gpt2_batch}, {"bert", make_bert, bert_batch}}) {
    SCOPED_TRACE(name);
    const auto cpu = train(make, batch, kCpu, true), gpu = train(make, batch, kGpu, true);
    for (size_t s = 0; s < cpu.losses.size(); ++s)
      EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-2 * std::abs(cpu.losses[s])) << "step " << s;
    EXPECT_LE(relative_error(gpu.logits, cpu.logits), 1e-2);
    EXPECT_LT(gpu.losses.back(), gpu.losses.front());
  }
}

#endif  // KILN_HAVE_CUDA

}  // namespace
}  // namespace kiln
