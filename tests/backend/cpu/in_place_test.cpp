// CompileOptions::in_place on the CPU executor: results written over the
// operands they read last (fused groups, LayerNorm and its gradient, the
// cross-entropy gradient over its logits) give the same bits as the plan that
// keeps every temporary apart, with the compiled loops and the interpreter.
#include <omp.h>

#include <cstring>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "kiln/compiler/serialize.h"
#include "backend/cpu/run_on_cpu.h"
#include "support/program_util.h"
#include "support/test_util.h"

namespace kiln {
namespace {

struct Executed {
  std::vector<std::vector<char>> outputs;
  size_t arena = 0;
  std::vector<ir::Op> overwrote;  // instructions whose result took an operand's slot
  size_t copies = 0, concats = 0;  // fused instructions that only copy, Concat instructions
};

Executed run(const std::vector<Tensor>& results, bool in_place, bool jit, bool loss_with_gradient = false,
             bool token_major_attention = false) {
  const testing::TracedProgram traced = testing::trace_program(
      results, {.fuse_sum_inputs = true, .strided_attention_operands = true, .concurrent_products = true,
                .in_place = in_place, .loss_with_gradient = loss_with_gradient,
                .token_major_attention = token_major_attention});
  const compiler::Program& p = traced.program;
  Executed r;
  r.arena = p.arena_bytes;
  for (const auto& ins : p.instrs) {
    r.copies += ins.fused && ins.program.size() == 1 && ins.program[0].op == ir::Op::Data;
    r.concats += !ins.fused && ins.op == ir::Op::Concat;
  }
  for (const auto& ins : p.instrs)
    for (const auto& in : ins.inputs)
      if (in.slot == ins.output.slot) {
        r.overwrote.push_back(ins.fused ? ir::Op::Add : ins.op);  // Add stands for "a fused group"
        break;
      }
  r.outputs = testing::run_on_cpu(p, traced.params, jit);
  return r;
}

size_t count(const std::vector<ir::Op>& ops, ir::Op op) { return static_cast<size_t>(std::count(ops.begin(), ops.end(), op)); }

// A small language-model training step: linear, GELU, LayerNorm, a
// vocabulary projection and cross-entropy, with its gradients.
TEST(CpuInPlace, ResultsOverTheirOperandsGiveTheSameBits) {
  Generator gen(11);
  Tensor x = randn({64, 96}, gen), w1 = randn({192, 96}, gen) * 0.1, b1 = randn({192}, gen);
  Tensor g = randn({192}, gen), beta = randn({192}, gen), emb = randn({300, 192}, gen) * 0.1;
  Tensor labels = Tensor::from_vector(std::vector<int64_t>(64, 7), {64});
  mark_step();
  for (Tensor* t : {&w1, &b1, &g, &beta, &emb}) t->requires_grad_();
  Tensor h = layer_norm(gelu(linear(x, w1, b1)), g, beta);
  Tensor loss = cross_entropy(matmul(h, emb, false, true), labels);
  loss.backward();
  std::vector<Tensor> results{loss};
  for (Tensor* t : {&w1, &b1, &g, &beta, &emb}) results.push_back(t->grad());

  for (bool jit : {true, false}) {
    SCOPED_TRACE(jit ? "compiled loops" : "interpreter");
    const Executed apart = run(results, false, jit), shared = run(results, true, jit);
    EXPECT_TRUE(apart.overwrote.empty());
    EXPECT_GE(count(shared.overwrote, ir::Op::Add), 1u) << "a fused group (the GELU's gradient)";
    EXPECT_EQ(count(shared.overwrote, ir::Op::Normalize), 0u) << "its input is kept for the gradient";
    EXPECT_EQ(count(shared.overwrote, ir::Op::NormalizeGrad), 1u);
    EXPECT_EQ(count(shared.overwrote, ir::Op::CrossEntropyGrad), 1u);
    EXPECT_LT(shared.arena, apart.arena);
    ASSERT_EQ(shared.outputs.size(), apart.outputs.size());
    for (size_t o = 0; o < apart.outputs.size(); ++o)
      EXPECT_TRUE(shared.outputs[o] == apart.outputs[o]) << "output " << o << " differs";
  }
}

// Without a backward pass, LayerNorm's input dies where it is normalized.
TEST(CpuInPlace, InferenceNormalizesInPlace) {
  Generator gen(14);
  Tensor x = randn({64, 96}, gen), w = randn({192, 96}, gen) * 0.1, b = randn({192}, gen);
  Tensor g = randn({192}, gen), beta = randn({192}, gen), w2 = randn({32, 192}, gen);
  mark_step();
  const std::vector<Tensor> results{linear(layer_norm(gelu(linear(x, w, b)), g, beta), w2)};
  const Executed apart = run(results, false, true), shared = run(results, true, true);
  EXPECT_EQ(count(shared.overwrote, ir::Op::Normalize), 1u);
  EXPECT_TRUE(shared.outputs[0] == apart.outputs[0]);
}

// An operand read again later, or read here in another order (transposed),
// keeps its memory.
TEST(CpuInPlace, OperandsReadLaterOrOutOfOrderKeepTheirMemory) {
  Generator gen(12);
  Tensor a = randn({64, 64}, gen), b = randn({64, 64}, gen);
  mark_step();
  Tensor p = matmul(a, b);                 // a temporary
  Tensor t = exp(p) + transpose(p, 0, 1); // reads p transposed: not in place
  Tensor q = matmul(b, a);
  Tensor u = exp(q);                       // q is read again below: not in place
  Tensor v = matmul(u, q);
  for (bool in_place : {false, true}) {
    const Executed r = run({t, v}, in_place, true);
    EXPECT_TRUE(r.overwrote.empty()) << (in_place ? "in place" : "apart");
  }
  const Executed apart = run({t, v}, false, true), shared = run({t, v}, true, true);
  for (size_t o = 0; o < apart.outputs.size(); ++o) EXPECT_TRUE(shared.outputs[o] == apart.outputs[o]);
}

// A chain of groups shares one slot: exp over a product's result, then a
// group reading that (after a Sum that also reads it) over it again.
TEST(CpuInPlace, ChainsShareOneSlot) {
  Generator gen(13);
  Tensor a = randn({128, 128}, gen), w = randn({128, 128}, gen) * 0.05;
  mark_step();
  Tensor y = exp(matmul(a, w));  // a group over the product's result
  Tensor s = sum(y);              // a kernel that reads y, not last
  Tensor z = y * s + 1.0;         // a second group, after the sum: it reads y last
  const std::vector<Tensor> results{s, matmul(z, w)};
  const testing::TracedProgram traced = testing::trace_program(results, {.in_place = true});
  const compiler::Program& p = traced.program;
  ASSERT_FALSE(p.instrs.empty());
  const int32_t product = p.instrs[0].output.slot;
  int groups = 0;
  for (const auto& ins : p.instrs)
    if (ins.fused && ins.output.view.shape == Shape{128, 128}) {
      ++groups;
      EXPECT_EQ(ins.output.slot, product) << p.dump();
    }
  EXPECT_EQ(groups, 2) << p.dump();
  const Executed apart = run(results, false, true), shared = run(results, true, true);
  for (size_t o = 0; o < apart.outputs.size(); ++o) EXPECT_TRUE(shared.outputs[o] == apart.outputs[o]);
}

// Tied embeddings: the lookup's gradient (an IndexAdd of its rows) added to
// the output projection's gradient is one IndexAdd onto the projection's
// gradient (the compiler's fold), in place. The values are those of the two
// gradients apart, added: repeated ids, a padding id, untouched rows.
TEST(CpuInPlace, TiedEmbeddingRowsAreAddedOntoTheProjectionsGradient) {
  std::vector<int64_t> ids(240);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i * 7 + i * 3) % 97);
  ids[5] = 4;  // the padding id
  Generator gen(15);
  const std::vector<float> table_values = randn({300, 33}, gen).to_vector<float>();
  Tensor h = randn({240, 33}, gen), w_lookup = randn({240, 33}, gen), w_logits = randn({240, 300}, gen);
  mark_step();
  auto grad = [&](bool lookup, bool projection) {
    Tensor table = Tensor::from_vector(table_values, {300, 33}).requires_grad_();
    Tensor loss = Tensor::scalar(0.0f);
    if (lookup) loss = loss + sum(embedding(Tensor::from_vector(ids, {240}), table, /*padding_idx=*/4) * w_lookup);
    if (projection) loss = loss + sum(matmul(h, table, false, true) * w_logits);
    loss.backward();
    return table.grad();
  };
  // Its program (the gradient read by a further step, as by the optimizer),
  // in place and apart (the base copied first).
  const Tensor tied = grad(true, true) * 2.0;
  const Executed apart = run({tied}, false, true), shared = run({tied}, true, true);
  EXPECT_TRUE(apart.outputs[0] == shared.outputs[0]);
  const testing::TracedProgram traced = testing::trace_program({tied}, {.in_place = true});
  const compiler::Program& p = traced.program;
  int folded = 0;
  for (const auto& ins : p.instrs) {
    if (ins.op != ir::Op::IndexAdd) continue;
    ASSERT_EQ(ins.inputs.size(), 3u) << p.dump();
    EXPECT_EQ(ins.output.slot, ins.inputs[2].slot) << "onto the projection's gradient, in place\n" << p.dump();
    ++folded;
  }
  mark_step();
  const std::vector<float> both = grad(true, true).to_vector<float>(), rows = grad(true, false).to_vector<float>(),
                           projected = grad(false, true).to_vector<float>();
  ASSERT_EQ(both.size(), rows.size());
  for (size_t i = 0; i < both.size(); ++i) ASSERT_EQ(both[i], projected[i] + rows[i]) << "at " << i;
  EXPECT_EQ(folded, 1) << p.dump();
}

// CompileOptions::loss_with_gradient: the cross-entropy gradient's pass also
// writes the loss (an extra output of its instruction), with the bits of the
// loss computed alone: label smoothing, ignored rows, in place or not. The
// merged program survives the program record.
TEST(CpuLossWithGradient, TheGradientsPassWritesTheLossWithTheSameBits) {
  Generator gen(16);
  Tensor h = randn({96, 40}, gen);
  const std::vector<float> wv = (randn({700, 40}, gen) * 0.2).to_vector<float>();
  std::vector<int64_t> ids(96);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 37 % 700);
  ids[3] = ids[50] = -100;
  for (double smoothing : {0.0, 0.1}) {
    SCOPED_TRACE(smoothing);
    Tensor w = Tensor::from_vector(wv, {700, 40}).requires_grad_();
    Tensor loss = cross_entropy(matmul(h, w, false, true), Tensor::from_vector(ids, {96}), -100, smoothing);
    loss.backward();
    const std::vector<Tensor> results{loss, w.grad()};
    const Executed apart = run(results, false, true, false);
    for (bool in_place : {false, true}) {
      const Executed merged = run(results, in_place, true, true);
      ASSERT_EQ(merged.outputs.size(), 2u);
      EXPECT_TRUE(merged.outputs[0] == apart.outputs[0]) << "the loss";
      EXPECT_TRUE(merged.outputs[1] == apart.outputs[1]) << "the weight's gradient";
    }
    const testing::TracedProgram traced = testing::trace_program(results, {.loss_with_gradient = true});
    const compiler::Program& p = traced.program;
    int losses = 0, merged = 0;
    for (const auto& ins : p.instrs) {
      losses += ins.op == ir::Op::CrossEntropy;
      merged += ins.op == ir::Op::CrossEntropyGrad && ins.extra_outputs.size() == 1;
    }
    EXPECT_EQ(losses, 0) << p.dump();
    EXPECT_EQ(merged, 1) << p.dump();
    std::vector<ir::NodePtr> params;
    const ir::Graph graph = ir::flatten(traced.outputs, &params);
    const auto back = compiler::deserialize_program(compiler::serialize_program(graph, p), graph);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->dump(), p.dump());
    compiler::Program bad = p;  // a register on a kernel's extra output
    for (auto& ins : bad.instrs)
      for (auto& e : ins.extra_outputs) e.reg = 0;
    EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
  }
}

// CompileOptions::token_major_attention: GPT-2's attention block (heads cut
// from one projection, merged back for the output projection) gives the
// same bits with the attention's result token-major and its gradient
// interleaved, without the copies of the heads out of the result and of
// their gradients, and without the concatenation of those gradients.
TEST(CpuTokenMajorAttention, GivesTheSameBitsWithoutCopyingHeads) {
  const int64_t B = 2, T = 40, H = 3, D = 8, C = H * D;
  for (bool jit : {true, false}) {
    SCOPED_TRACE(jit ? "compiled loops" : "interpreter");
    Generator gen(5);
    Tensor x = randn({B, T, C}, gen), w = randn({C, 3 * C}, gen) * 0.2, wo = randn({C, C}, gen) * 0.2;
    Tensor dy = randn({B, T, C}, gen);
    mark_step();
    w.requires_grad_();
    wo.requires_grad_();
    Tensor qkv = matmul(x, w);
    auto heads = [&](int64_t i) { return permute(reshape(slice(qkv, 2, i * C, (i + 1) * C), {B, T, H, D}), {0, 2, 1, 3}); };
    Tensor y = fused_attention(heads(0), heads(1), heads(2), {Tensor(), true, 0.35, 0.1, &gen});
    Tensor loss = sum(matmul(reshape(permute(y, {0, 2, 1, 3}), {B, T, C}), wo) * dy);
    loss.backward();
    const std::vector<Tensor> results{loss, w.grad(), wo.grad()};
    const Executed apart = run(results, true, jit, true, false), tokens = run(results, true, jit, true, true);
    EXPECT_EQ(apart.concats, 1u);
    EXPECT_EQ(tokens.concats, 0u);
    EXPECT_EQ(tokens.copies + 4, apart.copies) << "the result's heads, and dq, dk and dv";
    EXPECT_LT(tokens.arena, apart.arena);
    ASSERT_EQ(tokens.outputs.size(), apart.outputs.size());
    for (size_t o = 0; o < apart.outputs.size(); ++o)
      EXPECT_TRUE(tokens.outputs[o] == apart.outputs[o]) << "output " << o << " differs";
  }
}

}  // namespace
}  // namespace kiln
