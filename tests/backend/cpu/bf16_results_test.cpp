// CompileOptions::bf16_results on the CPU executor (compiler/bf16_results.cpp):
// under Autocast the products, the cross-entropy gradient and the attention
// gradient write the bf16 values autocast rounds their results to, the
// rounding passes go, and GPT-2's dq, dk and dv reach the projection's
// products as views. The step's values stay the same bits, with bf16
// products and emulated ones, with the compiled loops and the interpreter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "kiln/compiler/serialize.h"
#include "kiln/runtime/autocast.h"
#include "backend/cpu/run_on_cpu.h"
#include "support/program_util.h"
#include "support/test_util.h"

namespace kiln {
namespace {

struct Executed {
  std::vector<std::vector<char>> outputs;
  size_t instructions = 0, rounding_passes = 0, widening_passes = 0, concats = 0;
  size_t narrowing_passes = 0;  // groups that only round a computed f32 value to a bf16 tensor
  size_t riding_roundings = 0;  // groups whose bf16 result is the rounding of a further f32 output
  std::vector<ir::Op> bf16_kernels;  // kernels (not fused groups) with a bf16 result
  bool bf16_attention_dout = false;  // the attention gradient reads the output's gradient as bf16
  std::string program;               // its dump
};

// A fused group that only widens its one bf16 operand to f32.
bool widens_only(const compiler::Instr& ins) {
  if (!ins.fused || ins.inputs.size() != 1 || ins.inputs[0].dtype != DType::bf16 || ins.output.dtype != DType::f32)
    return false;
  return std::all_of(ins.program.begin(), ins.program.end(),
                     [](const compiler::FusedStep& s) { return s.op == ir::Op::Data || s.op == ir::Op::Cast; });
}

// A fused group that only rounds its one f32 operand to bf16 values, kept
// as f32.
bool rounds_only(const compiler::Instr& ins) {
  if (!ins.fused || ins.inputs.size() != 1 || ins.inputs[0].dtype != DType::f32 || ins.output.dtype != DType::f32)
    return false;
  bool to_bf16 = false;
  for (const auto& s : ins.program) {
    if (s.op != ir::Op::Data && s.op != ir::Op::Cast) return false;
    to_bf16 = to_bf16 || (s.op == ir::Op::Cast && s.dtype == DType::bf16);
  }
  return to_bf16;
}

// A fused group that only rounds its one f32 operand to a bf16 tensor.
bool narrows_only(const compiler::Instr& ins) {
  return ins.fused && ins.inputs.size() == 1 && ins.inputs[0].dtype == DType::f32 &&
         ins.output.dtype == DType::bf16 &&
         std::all_of(ins.program.begin(), ins.program.end(),
                     [](const compiler::FusedStep& s) { return s.op == ir::Op::Data || s.op == ir::Op::Cast; });
}

// A fused group whose result is the bf16 rounding of a value it also stores in f32.
bool rounding_rides(const compiler::Instr& ins) {
  if (!ins.fused || ins.output.dtype != DType::bf16 || ins.program.back().op != ir::Op::Cast) return false;
  const int32_t rounded = ins.program.back().a;
  return std::any_of(ins.extra_outputs.begin(), ins.extra_outputs.end(), [&](const compiler::ExtraOutput& e) {
    return e.reg == rounded && e.out.dtype == DType::f32;
  });
}

Executed run(const std::vector<Tensor>& results, bool bf16_results, bool jit) {
  testing::TracedProgram traced = testing::trace_program(
      results, {.fuse_sum_inputs = true, .strided_attention_operands = true, .strided_row_sums = true,
                .concurrent_products = true, .in_place = true, .loss_with_gradient = true,
                .token_major_attention = true, .attention_probabilities = true, .bf16_results = bf16_results});
  // As the on-disk compile cache keeps and reads it.
  std::vector<ir::NodePtr> params;
  const ir::Graph graph = ir::flatten(traced.outputs, &params);
  std::optional<compiler::Program> back =
      compiler::deserialize_program(compiler::serialize_program(graph, traced.program), graph);
  EXPECT_TRUE(back.has_value());
  if (back) {
    EXPECT_EQ(back->dump(), traced.program.dump());
    traced.program = std::move(*back);
  }
  const compiler::Program& p = traced.program;
  Executed r;
  r.instructions = p.instrs.size();
  r.program = p.dump();
  for (const auto& ins : p.instrs) {
    r.rounding_passes += rounds_only(ins);
    r.narrowing_passes += narrows_only(ins) && p.slots[ins.inputs[0].slot].kind != compiler::SlotKind::Param;
    r.riding_roundings += rounding_rides(ins);
    r.widening_passes += widens_only(ins) && p.slots[ins.output.slot].kind != compiler::SlotKind::Output;
    r.concats += !ins.fused && ins.op == ir::Op::Concat;
    if (!ins.fused && ins.output.dtype == DType::bf16) r.bf16_kernels.push_back(ins.op);
    if (ins.op == ir::Op::AttentionGrad) r.bf16_attention_dout = ins.inputs.back().dtype == DType::bf16;
  }
  r.outputs = testing::run_on_cpu(p, traced.params, jit);
  return r;
}

bool has(const std::vector<ir::Op>& ops, ir::Op op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); }

// One GPT-2 block and its LM head under Autocast: the q, k, v projection
// sliced into heads, causal attention, the output projection, LayerNorm, a
// GELU MLP, logits over a tied embedding, cross-entropy; the gradients of
// every weight.
TEST(CpuBf16Results, AutocastStepKeepsItsBitsWithFewerPasses) {
  const int64_t B = 2, T = 24, H = 2, D = 16, C = H * D, V = 97;
  Generator gen(5);
  Tensor emb = randn({V, C}, gen) * 0.2, wqkv = randn({C, 3 * C}, gen) * 0.2, bqkv = randn({3 * C}, gen) * 0.1;
  Tensor wo = randn({C, C}, gen) * 0.2, w1 = randn({C, 4 * C}, gen) * 0.2, w2 = randn({4 * C, C}, gen) * 0.2;
  Tensor g = randn({C}, gen), beta = randn({C}, gen);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>(B * T, 3), {B, T});
  std::vector<int64_t> label_values(B * T);
  for (size_t i = 0; i < label_values.size(); ++i) label_values[i] = static_cast<int64_t>((i * 7) % V);
  Tensor labels = Tensor::from_vector(label_values, {B * T});
  mark_step();
  std::vector<Tensor*> weights{&emb, &wqkv, &bqkv, &wo, &w1, &w2, &g, &beta};
  for (Tensor* t : weights) t->requires_grad_();
  Tensor loss;
  {
    Autocast autocast(true);
    Tensor x = randn({B, T, C}, gen) + reshape(slice(emb, 0, 0, 1), {1, 1, C});
    Tensor qkv = matmul(x, wqkv) + bqkv;
    auto heads = [&](int64_t k) { return permute(reshape(slice(qkv, 2, k * C, (k + 1) * C), {B, T, H, D}), {0, 2, 1, 3}); };
    Tensor y = fused_attention(heads(0), heads(1), heads(2), {Tensor(), true, 0.25});
    Tensor a = x + matmul(reshape(permute(y, {0, 2, 1, 3}), {B, T, C}), wo);
    Tensor h = a + matmul(gelu(matmul(layer_norm(a, g, beta), w1)), w2);
    Tensor logits = matmul(reshape(h, {B * T, C}), emb, false, true);
    loss = cross_entropy(logits, labels);
  }
  loss.backward();
  std::vector<Tensor> results{loss};
  for (Tensor* t : weights) results.push_back(t->grad());

  const bool had = backend::cpu::native_bf16_products();
  for (bool native : {true, false})
    for (bool jit : {true, false}) {
      SCOPED_TRACE(std::string(native ? "bf16 products" : "emulated") + (jit ? ", compiled loops" : ", interpreter"));
      backend::cpu::set_native_bf16_products(native);
      const Executed before = run(results, false, jit), after = run(results, true, jit);
      ASSERT_EQ(before.outputs.size(), after.outputs.size());
      for (size_t o = 0; o < before.outputs.size(); ++o)
        EXPECT_EQ(std::memcmp(before.outputs[o].data(), after.outputs[o].data(), before.outputs[o].size()), 0)
            << "output " << o;
      // Only the loss's gradient is bf16 without the pass: autocast's loss
      // reads bf16 logits (runtime/ops.cpp), whose gradient is bf16.
      EXPECT_EQ(before.bf16_kernels, std::vector<ir::Op>{ir::Op::CrossEntropyGrad});
      EXPECT_TRUE(has(after.bf16_kernels, ir::Op::MatMul));
      EXPECT_TRUE(has(after.bf16_kernels, ir::Op::AttentionGrad));
      EXPECT_TRUE(has(after.bf16_kernels, ir::Op::CrossEntropyGrad));
      EXPECT_FALSE(before.bf16_attention_dout);
      EXPECT_TRUE(after.bf16_attention_dout);
      EXPECT_GE(before.rounding_passes, 8u);  // every input and weight gradient of a product
      EXPECT_EQ(after.rounding_passes, 0u);
      // Gradients widened for several readers (other than for a result):
      // widened in each elementwise one, summed from bf16 by the bias
      // gradients' Sums.
      EXPECT_EQ(after.widening_passes, 0u) << after.program;
      EXPECT_EQ(before.concats, 1u);  // dq, dk, dv into the projection's gradient
      EXPECT_EQ(after.concats, 0u);   // a view of the attention gradient
      EXPECT_LT(after.instructions + 10, before.instructions);
    }
  backend::cpu::set_native_bf16_products(had);
}

// A decode step's MLP input projection (one token): its result, which the
// GELU reads, is written in bf16 and keeps the bits of the one-row product
// (our gemv) rounded by a pass, on both paths. The weight's columns cancel
// (2^24, then ones, then -2^24), so sums in another order (oneDNN's matmul
// at one row) give other values, not only other roundings.
TEST(CpuBf16Results, OneRowProductWithABf16ResultKeepsItsBits) {
  const int64_t K = 768, N = 256;
  std::vector<float> wv(static_cast<size_t>(K * N), 1.0f);
  for (int64_t n = 0; n < N; ++n) {
    wv[static_cast<size_t>(n)] = 16777216.0f;
    wv[static_cast<size_t>((K - 1 - n % 7) * N + n)] = -16777216.0f;
  }
  const Tensor x = Tensor::from_vector(std::vector<float>(K, 1.0f), {1, 1, K});
  const Tensor w = Tensor::from_vector(wv, {K, N});
  mark_step();
  Tensor y;
  {
    Autocast autocast(true);
    y = gelu(matmul(x, w));
  }
  const bool had = backend::cpu::native_bf16_products();
  for (bool native : {true, false}) {
    SCOPED_TRACE(native ? "bf16 products" : "emulated");
    backend::cpu::set_native_bf16_products(native);
    const Executed before = run({y}, false, true), after = run({y}, true, true);
    EXPECT_TRUE(has(after.bf16_kernels, ir::Op::MatMul)) << after.program;
    ASSERT_EQ(before.outputs.size(), 1u);
    ASSERT_EQ(after.outputs.size(), 1u);
    EXPECT_EQ(std::memcmp(before.outputs[0].data(), after.outputs[0].data(), before.outputs[0].size()), 0);
  }
  backend::cpu::set_native_bf16_products(had);
}

// A BERT block: q, k and v from their own projections, a padding mask and
// attention dropout. The values are the same but for the q, k and v bias
// gradients, summed from the widened bf16 gradient rather than in place
// from the f32 one (CompileOptions::strided_row_sums): the same terms, added
// in another order.
TEST(CpuBf16Results, BertBlockKeepsItsValues) {
  const int64_t B = 2, T = 20, H = 2, D = 16, C = H * D;
  Generator gen(7);
  std::vector<Tensor> w, b;
  for (int i = 0; i < 4; ++i) w.push_back(randn({C, C}, gen) * 0.2), b.push_back(randn({C}, gen) * 0.1);
  std::vector<float> mask_values(B * T, 0.0f);
  for (int64_t t = 15; t < T; ++t) mask_values[static_cast<size_t>(T + t)] = -1e9f;  // the second row is padded
  Tensor mask = Tensor::from_vector(mask_values, {B, 1, 1, T});
  Tensor x = randn({B, T, C}, gen);
  mark_step();
  for (auto* v : {&w, &b})
    for (Tensor& t : *v) t.requires_grad_();
  Tensor loss;
  {
    Autocast autocast(true);
    auto heads = [&](int i) { return permute(reshape(linear(x, w[i], b[i]), {B, T, H, D}), {0, 2, 1, 3}); };
    Generator drop(3);
    Tensor y = fused_attention(heads(0), heads(1), heads(2), {mask, false, 0.25, 0.1, &drop});
    Tensor o = linear(reshape(permute(y, {0, 2, 1, 3}), {B, T, C}), w[3], b[3]);
    loss = sum(o * o);
  }
  loss.backward();
  std::vector<Tensor> results{loss};
  for (auto* v : {&w, &b})
    for (Tensor& t : *v) results.push_back(t.grad());
  const Executed before = run(results, false, true), after = run(results, true, true);
  EXPECT_TRUE(has(after.bf16_kernels, ir::Op::AttentionGrad));
  EXPECT_TRUE(after.bf16_attention_dout);
  EXPECT_EQ(after.rounding_passes, 0u);
  ASSERT_EQ(before.outputs.size(), after.outputs.size());
  for (size_t o = 0; o < before.outputs.size(); ++o) {
    std::vector<float> x0(before.outputs[o].size() / 4), x1(x0.size());
    std::memcpy(x0.data(), before.outputs[o].data(), before.outputs[o].size());
    std::memcpy(x1.data(), after.outputs[o].data(), after.outputs[o].size());
    const bool qkv_bias = o >= 5 && o <= 7;
    for (size_t i = 0; i < x0.size(); ++i) {
      if (qkv_bias) EXPECT_NEAR(x1[i], x0[i], 1e-5 * (1 + std::fabs(x0[i]))) << "output " << o << " element " << i;
      else ASSERT_EQ(x1[i], x0[i]) << "output " << o << " element " << i;
    }
  }
}

// Post-LN blocks (BERT's): a LayerNorm's output is read in f32 by the
// residual stream and rounded to bf16 for the next projection; in the
// backward a dropout's gradient is read in f32 by the bias gradient's sum
// and rounded for the products. The group that computes such a value
// stores its rounding too, a second output, instead of a pass that reads
// the value back; the values stay the same bits (but the bias gradients'
// order, as above), compiled or interpreted. (The first block's dropout
// gradient keeps its pass: the second block's weight gradient comes
// between the two, and the rounding is not moved ahead of a product.)
TEST(CpuBf16Results, RoundingsOfValuesWithF32ReadersAreStoredByTheirGroups) {
  const int64_t B = 2, T = 12, C = 32;
  Generator gen(9);
  Tensor x = randn({B, T, C}, gen);
  std::vector<Tensor> w, b;
  for (int i = 0; i < 2; ++i) w.push_back(randn({C, C}, gen) * 0.2), b.push_back(randn({C}, gen) * 0.1);
  Tensor g = 1.0 + randn({C}, gen) * 0.1, beta = randn({C}, gen) * 0.1;
  mark_step();
  for (auto* v : {&w, &b})
    for (Tensor& t : *v) t.requires_grad_();
  g.requires_grad_();
  beta.requires_grad_();
  Tensor loss;
  {
    Autocast autocast(true);
    Generator drop(4);
    Tensor h = layer_norm(x + dropout(linear(x, w[0], b[0]), 0.1, drop), g, beta);
    Tensor o = layer_norm(h + dropout(linear(h, w[1], b[1]), 0.1, drop), g, beta);
    loss = sum(o * o);
  }
  loss.backward();
  std::vector<Tensor> results{loss, g.grad(), beta.grad()};
  for (auto* v : {&w, &b})
    for (Tensor& t : *v) results.push_back(t.grad());
  for (bool jit : {true, false}) {
    SCOPED_TRACE(jit ? "compiled loops" : "interpreter");
    const Executed before = run(results, false, jit), after = run(results, true, jit);
    EXPECT_EQ(before.narrowing_passes, 3u) << before.program;  // h; both dropouts' gradients
    EXPECT_EQ(before.riding_roundings, 0u);
    EXPECT_EQ(after.narrowing_passes, 1u) << after.program;
    EXPECT_EQ(after.riding_roundings, 2u) << after.program;
    ASSERT_EQ(before.outputs.size(), after.outputs.size());
    for (size_t o = 0; o < before.outputs.size(); ++o) {
      std::vector<float> x0(before.outputs[o].size() / 4), x1(x0.size());
      std::memcpy(x0.data(), before.outputs[o].data(), before.outputs[o].size());
      std::memcpy(x1.data(), after.outputs[o].data(), after.outputs[o].size());
      const bool bias = o >= 5;
      for (size_t i = 0; i < x0.size(); ++i) {
        if (bias) EXPECT_NEAR(x1[i], x0[i], 1e-5 * (1 + std::fabs(x0[i]))) << "output " << o << " element " << i;
        else ASSERT_EQ(x1[i], x0[i]) << "output " << o << " element " << i;
      }
    }
  }
}

// Without Autocast nothing changes: an f32 step has no rounding to absorb.
TEST(CpuBf16Results, AnF32StepIsTheSameProgram) {
  Generator gen(6);
  Tensor x = randn({16, 24}, gen), w = randn({24, 40}, gen), labels = Tensor::from_vector(std::vector<int64_t>(16, 3), {16});
  mark_step();
  w.requires_grad_();
  Tensor loss = cross_entropy(matmul(x, w), labels);
  loss.backward();
  const compiler::CompileOptions off{}, on{.bf16_results = true};
  const testing::TracedProgram a = testing::trace_program({loss, w.grad()}, off),
                               b = testing::trace_program({loss, w.grad()}, on);
  EXPECT_EQ(a.program.dump(), b.program.dump());
}

}  // namespace
}  // namespace kiln
