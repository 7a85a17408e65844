// Compiler passes: CSE, fusion, view folding and the memory planner.
#include <algorithm>
#include <cmath>

#include <functional>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/profile.h"
#include "kiln/compiler/serialize.h"
#include "support/test_util.h"

namespace kiln {
namespace {

TEST(Compiler, CommonSubexpressionsAndIdentitiesAreRemoved) {
  Tensor x = Tensor::from_vector(std::vector<float>(6, 1.0f), {2, 3});
  Tensor a = exp(x) + exp(x);                      // exp(x) twice
  Tensor b = reshape(reshape(a, {3, 2}), {2, 3});  // identity reshape chain
  std::vector<ir::NodePtr> params;
  ir::Graph g = ir::flatten({b.node()}, &params);
  ir::Graph s = compiler::simplify(g);
  int exps = 0, reshapes = 0;
  for (const auto& n : s.nodes) {
    exps += n.op == ir::Op::Exp;
    reshapes += n.op == ir::Op::Reshape;
  }
  EXPECT_EQ(exps, 1) << s.dump();
  EXPECT_EQ(reshapes, 0) << s.dump();
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(6, 2.0f * std::exp(1.0f)));
}

TEST(Compiler, ElementwiseChainsFuseIntoOneLoop) {
  Tensor x = Tensor::from_vector(std::vector<float>(64, 0.5f), {8, 8});
  Tensor bias = Tensor::from_vector(std::vector<float>(8, 0.25f), {8});
  Tensor y = tanh(gelu(x + bias) * 2.0 - 1.0);  // add, gelu, mul, sub, tanh
  std::vector<ir::NodePtr> params;
  compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params));
  ASSERT_EQ(p.instrs.size(), 1u) << p.dump();
  EXPECT_TRUE(p.instrs[0].fused);
  EXPECT_EQ(p.arena_bytes, 0u);
}

// AdamW's update: the new moments are results and also feed the new
// parameter; the gradient feeds both moments. One pass computes all three,
// each written over the value it replaces.
TEST(Compiler, ResultsThatFeedOneGroupAreStoredByItInOnePass) {
  auto t = [](float v) { return Tensor::from_vector(std::vector<float>(6, v), {2, 3}); };
  Tensor p = t(1.0f), m = t(0.5f), v = t(0.25f), g = t(2.0f);
  Tensor m2 = m * 0.9 + g * 0.1;
  Tensor v2 = v * 0.999 + g * g * 0.001;
  Tensor p2 = p * 0.99 - m2 * 0.01 / (sqrt(v2) + 1e-8);
  std::vector<ir::NodePtr> params;
  ir::Graph graph = ir::flatten({m2.node(), v2.node(), p2.node()}, &params);
  graph.donated.assign(graph.num_params, true);
  compiler::Program prog = compiler::compile(graph);
  ASSERT_EQ(prog.instrs.size(), 1u) << prog.dump();
  EXPECT_TRUE(prog.instrs[0].fused);
  EXPECT_EQ(prog.instrs[0].extra_outputs.size(), 2u) << prog.dump();
  // Each result takes the memory of a parameter of its size.
  std::vector<int32_t> donors = prog.output_donor;
  std::sort(donors.begin(), donors.end());
  EXPECT_TRUE(std::adjacent_find(donors.begin(), donors.end()) == donors.end()) << prog.dump();
  EXPECT_GE(donors.front(), 0) << prog.dump();
  // Executed: the values of the three separate formulas.
  float em = 0.5f * 0.9f + 2.0f * 0.1f, ev = 0.25f * 0.999f + 4.0f * 0.001f;
  float ep = 0.99f - em * 0.01f / (std::sqrt(ev) + 1e-8f);
  for (float x : m2.to_vector<float>()) EXPECT_FLOAT_EQ(x, em);
  for (float x : v2.to_vector<float>()) EXPECT_FLOAT_EQ(x, ev);
  for (float x : p2.to_vector<float>()) EXPECT_FLOAT_EQ(x, ep);
}

// An output takes the memory of the parameter its writer reads element for
// element before any other free buffer of its size: here the matrix product,
// written last, would otherwise take x's memory and leave x's update none.
TEST(Compiler, AnUpdateTakesItsOwnParametersMemory) {
  Tensor x = Tensor::from_vector(std::vector<float>(16, 1.0f), {4, 4});
  Tensor y = Tensor::from_vector(std::vector<float>(16, 2.0f), {4, 4});
  Tensor product = matmul(y, y);
  Tensor x_new = x * 2.0;
  std::vector<ir::NodePtr> params;
  ir::Graph graph = ir::flatten({product.node(), x_new.node()}, &params);
  graph.donated.assign(graph.num_params, true);
  compiler::Program prog = compiler::compile(graph);
  int32_t x_index = -1;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i] == x.node()) x_index = static_cast<int32_t>(i);
  ASSERT_GE(x_index, 0);
  EXPECT_EQ(prog.output_donor[1], x_index) << prog.dump();
  EXPECT_EQ(prog.output_donor[0], -1) << prog.dump();  // y is read by the product, not element for element
}

// A value read by two different groups (or by a kernel) is computed once,
// into memory, not folded into either.
TEST(Compiler, AValueReadOutsideOneGroupStaysItsOwnResult) {
  Tensor x = Tensor::from_vector(std::vector<float>(16, 0.5f), {4, 4});
  Tensor e = exp(x);
  Tensor a = matmul(e, e);  // a kernel reads e
  Tensor b = e * 2.0;       // and an elementwise group
  std::vector<ir::NodePtr> params;
  compiler::Program prog = compiler::compile(ir::flatten({a.node(), b.node()}, &params));
  ASSERT_EQ(prog.instrs.size(), 3u) << prog.dump();
  for (const auto& ins : prog.instrs) EXPECT_TRUE(ins.extra_outputs.empty()) << prog.dump();
  for (float y : b.to_vector<float>()) EXPECT_FLOAT_EQ(y, 2.0f * std::exp(0.5f));
}

// GPT-2 cuts q, k and v from one projection: their gradients, zero-padded
// and added, become one concatenation.
TEST(Compiler, GradientsOfAdjacentSlicesBecomeOneConcatenation) {
  std::vector<float> xv(2 * 12);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1f * static_cast<float>(i);
  Tensor x = Tensor::from_vector(xv, {2, 12}).requires_grad_();
  Tensor q = slice(x, 1, 0, 4), k = slice(x, 1, 4, 8), v = slice(x, 1, 8, 12);
  Tensor loss = sum(exp(v) * 3.0) + sum(k * k) + sum(q * 2.0);  // v's gradient is added first
  loss.backward();
  std::vector<ir::NodePtr> params;
  ir::Graph s = compiler::simplify(ir::flatten({x.grad().node()}, &params));
  int slice_grads = 0, concats = 0;
  for (const auto& n : s.nodes) {
    slice_grads += n.op == ir::Op::SliceGrad;
    concats += n.op == ir::Op::Concat;
  }
  EXPECT_EQ(slice_grads, 0) << s.dump();
  EXPECT_EQ(concats, 1) << s.dump();
  std::vector<float> g = x.grad().to_vector<float>();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 12; ++c) {
      float xi = xv[r * 12 + c];
      float want = c < 4 ? 2.0f : c < 8 ? 2.0f * xi : 3.0f * std::exp(xi);
      EXPECT_FLOAT_EQ(g[r * 12 + c], want) << r << "," << c;
    }
}

// Constants, broadcast scalars and ops of those only are the same in every
// chunk of a fused loop: computed once per thread, they must still reach
// every chunk, the short last one included (70001 elements: many chunks on
// each thread).
TEST(Compiler, ChunkInvariantValuesReachEveryChunk) {
  const int64_t n = 70001;
  std::vector<float> xv(n);
  for (int64_t i = 0; i < n; ++i) xv[i] = static_cast<float>(i % 97);
  Tensor x = Tensor::from_vector(xv, {n});
  Tensor scale = Tensor::from_vector(std::vector<float>{0.5f}, {});
  Tensor y = x * (scale * 4.0 + 1.0) - sqrt(scale * 8.0);  // x * 3 - 2
  Tensor z = full({n}, 2.0) * scale + 1.0;                 // an invariant result: 2
  // A one-element loop: its scalar operand is a contiguous one-element view,
  // never to be read past its end (AddressSanitizer checks this).
  EXPECT_FLOAT_EQ((scale * 2.0 + 1.0).item(), 2.0f);
  std::vector<float> got_y = y.to_vector<float>(), got_z = z.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_FLOAT_EQ(got_y[i], xv[i] * 3.0f - 2.0f) << i;
    ASSERT_FLOAT_EQ(got_z[i], 2.0f) << i;
  }
}

TEST(Compiler, TransposesAreFoldedIntoGemm) {
  Tensor a = Tensor::from_vector(std::vector<float>(12, 1.0f), {3, 4});
  Tensor b = Tensor::from_vector(std::vector<float>(20, 1.0f), {5, 4});
  Tensor y = matmul(a, transpose(b, 0, 1));  // no copy of bᵀ
  std::vector<ir::NodePtr> params;
  compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params));
  ASSERT_EQ(p.instrs.size(), 1u) << p.dump();
  EXPECT_EQ(p.instrs[0].op, ir::Op::MatMul);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(15, 4.0f));
}

// `product + bias` whose product nothing else reads: the GEMM starts from
// the bias rows (one instruction, no pass over the product); the values
// equal the unfolded sum (eager mode runs op by op), for a plain product, a
// batched one against a shared weight, a transposed one, a one-row one and
// a bias seen through a reshape. A product read elsewhere keeps its add.
TEST(Compiler, BiasAddsFoldIntoTheirProducts) {
  auto vals = [](int64_t n, float s) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = s * std::sin(0.37f * static_cast<float>(i) + 0.2f);
    return v;
  };
  Tensor w = Tensor::from_vector(vals(5 * 6, 0.5f), {5, 6}), bias = Tensor::from_vector(vals(5, 1.0f), {5});
  struct Case {
    const char* name;
    std::function<Tensor()> f;
  };
  const std::vector<Case> cases = {
      {"linear", [&] { return linear(Tensor::from_vector(vals(4 * 6, 1.0f), {4, 6}), w, bias); }},
      {"batched", [&] { return linear(Tensor::from_vector(vals(2 * 3 * 6, 1.0f), {2, 3, 6}), w, bias); }},
      {"one_row", [&] { return linear(Tensor::from_vector(vals(6, 1.0f), {1, 6}), w, bias); }},
      {"transposed_reshaped_bias",
       [&] { return matmul(Tensor::from_vector(vals(6 * 4, 1.0f), {6, 4}), w, true, true) + reshape(bias, {1, 5}); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor y = c.f();
    std::vector<ir::NodePtr> params;
    compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params));
    ASSERT_EQ(p.instrs.size(), 1u) << p.dump();
    EXPECT_EQ(p.instrs[0].op, ir::Op::MatMul);
    EXPECT_EQ(p.instrs[0].inputs.size(), 3u);
    const std::vector<float> got = y.to_vector<float>();
    set_eager_mode(true);
    const std::vector<float> want = c.f().to_vector<float>();
    set_eager_mode(false);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
  // The product is also a result: it is stored, and the add reads it.
  Tensor x = Tensor::from_vector(vals(4 * 6, 1.0f), {4, 6});
  Tensor prod = matmul(x, w, false, true);
  std::vector<ir::NodePtr> params;
  compiler::Program p = compiler::compile(ir::flatten({prod.node(), (prod + bias).node()}, &params));
  for (const auto& ins : p.instrs) EXPECT_LE(ins.inputs.size(), 2u) << p.dump();
}

TEST(Compiler, MemoryPlanOfAnMlpTrainingStepReusesMemory) {
  auto param = [](Shape s) {
    std::vector<float> v(numel(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * std::sin(static_cast<float>(i));
    return Tensor::from_vector(v, s).requires_grad_();
  };
  std::vector<Tensor> ps{param({64, 32}), param({64}), param({64, 64}), param({64}), param({10, 64}), param({10})};
  std::vector<float> xv(16 * 32, 0.3f);
  Tensor x = Tensor::from_vector(xv, {16, 32});
  Tensor labels = Tensor::from_vector(std::vector<int64_t>(16, 3), {16});
  Tensor h = gelu(linear(x, ps[0], ps[1]));
  h = gelu(linear(h, ps[2], ps[3]));
  Tensor loss = cross_entropy(linear(h, ps[4], ps[5]), labels);
  loss.backward();
  std::vector<ir::NodePtr> outs{loss.node()};
  {
    NoGradGuard ng;
    for (auto& p : ps) outs.push_back((p - p.grad() * 0.1).node());
  }
  std::vector<ir::NodePtr> params;
  compiler::Program prog = compiler::compile(ir::flatten(outs, &params));
  EXPECT_GT(prog.temp_bytes_total, 0u);
  EXPECT_LT(prog.arena_bytes, prog.temp_bytes_total) << prog.dump();
  EXPECT_GT(prog.num_fused, 0);
}

TEST(Compiler, GraphHashIgnoresValuesButNotShapes) {
  auto graph_of = [](std::vector<float> v, Shape s) {
    Tensor x = Tensor::from_vector(v, s);
    Tensor y = sum(exp(x));
    return ir::flatten({y.node()}, nullptr);
  };
  ir::Graph a = graph_of({1, 2, 3, 4}, {2, 2}), b = graph_of({5, 6, 7, 8}, {2, 2}), c = graph_of({1, 2, 3, 4}, {4});
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_TRUE(a == b);
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_NE(a.dump().find("exp(%0)"), std::string::npos) << a.dump();
}

// fuse_sum_inputs (the CPU's): an elementwise group read only by a Sum over
// trailing axes runs inside it, so sum(g * g) of the gradient norm never
// stores the squares. Results, other readers and leading axes keep the group.
TEST(Compiler, ASumOfAnElementwiseGroupRunsItsProgram) {
  Generator gen(3);
  Tensor g = randn({300, 700}, gen), b = randn({700}, gen);
  mark_step();
  auto compiled = [](std::vector<Tensor> outs, bool fuse) {
    std::vector<ir::NodePtr> params;
    std::vector<ir::NodePtr> nodes;
    for (auto& t : outs) nodes.push_back(t.node());
    return compiler::compile(ir::flatten(nodes, &params), {.fuse_sum_inputs = fuse});
  };
  Tensor squares = g * g + b;
  Tensor total = sum(squares), rows = sum(squares, {1}), cols = sum(squares, {0});
  // How many instructions store a [300, 700] value (the squares).
  auto stored = [](const compiler::Program& p) {
    return std::count_if(p.instrs.begin(), p.instrs.end(),
                         [](const compiler::Instr& i) { return i.output.view.shape == Shape{300, 700}; });
  };
  const compiler::Program fused = compiled({total}, true);
  EXPECT_EQ(stored(fused), 0) << fused.dump();
  ASSERT_EQ(fused.instrs[0].op, ir::Op::Sum) << fused.dump();
  EXPECT_FALSE(fused.instrs[0].fused);
  EXPECT_EQ(fused.instrs[0].program_shape, (Shape{300, 700}));
  EXPECT_NE(fused.dump().find("sum of fused["), std::string::npos) << fused.dump();
  EXPECT_EQ(stored(compiled({total}, false)), 1);  // the CUDA backend's programs
  EXPECT_EQ(stored(compiled({rows}, true)), 0);
  EXPECT_EQ(stored(compiled({cols}, true)), 1);            // a leading axis: not fused
  EXPECT_EQ(stored(compiled({total, squares}, true)), 1);  // the squares are a result
  EXPECT_EQ(stored(compiled({total, rows}, true)), 1);     // read by two sums
  Tensor narrow = randn({1000, 2}, gen);  // rows of 2 values: a pass per row would cost more
  const compiler::Program short_rows = compiled({sum(narrow * narrow, {1})}, true);
  EXPECT_TRUE(std::none_of(short_rows.instrs.begin(), short_rows.instrs.end(),
                           [](const compiler::Instr& i) { return !i.fused && !i.program.empty(); }))
      << short_rows.dump();

  // The values: the fused sums (lazy, on the CPU) against the same ops one by one.
  const float lazy_total = total.item();
  const std::vector<float> lazy_rows = rows.to_vector<float>();
  set_eager_mode(true);
  Tensor e_squares = g * g + b;
  const float eager_total = sum(e_squares).item();
  const std::vector<float> eager_rows = sum(e_squares, {1}).to_vector<float>();
  set_eager_mode(false);
  EXPECT_NEAR(lazy_total, eager_total, 1e-6 * std::abs(eager_total));
  ASSERT_EQ(lazy_rows.size(), 300u);
  for (size_t r = 0; r < lazy_rows.size(); ++r) EXPECT_NEAR(lazy_rows[r], eager_rows[r], 1e-5 * std::abs(eager_rows[r]));
}

// strided_attention_operands (the CPU's): attention reads the heads of a
// [B, T, H, D] projection, and its output gradient, where they lie; without
// it (CUDA's kernels) each is copied out first.
TEST(Compiler, AttentionReadsProjectedHeadsInPlace) {
  const int64_t B = 2, H = 3, T = 5, D = 4;
  auto projection = [&](float x) {
    return Tensor::from_vector(std::vector<float>(B * T * H * D, x), {B, T, H, D}).requires_grad_();
  };
  Tensor q0 = projection(1), k0 = projection(2), v0 = projection(3);
  auto heads = [](const Tensor& x) { return permute(x, {0, 2, 1, 3}); };
  Tensor y = fused_attention(heads(q0), heads(k0), heads(v0), {Tensor(), true, 0.5});
  Tensor merged = reshape(heads(y), {B, T, H * D});
  sum(merged * merged).backward();
  std::vector<ir::NodePtr> params;
  const ir::Graph graph = ir::flatten({merged.node(), q0.grad().node()}, &params);
  // The attention instructions' operands that are copies made for them.
  auto copied = [](const compiler::Program& p) {
    int strided = 0, copies = 0;
    for (const auto& ins : p.instrs) {
      if (ins.op != ir::Op::Attention && ins.op != ir::Op::AttentionGrad) continue;
      for (const auto& op : ins.inputs) {
        if (!op.view.is_contiguous()) ++strided;
        for (const auto& other : p.instrs)
          if (other.fused && other.output.slot == op.slot && other.program.size() == 1) ++copies;
      }
    }
    return std::pair{strided, copies};
  };
  const compiler::Program cpu = compiler::compile(graph, {.strided_attention_operands = true});
  EXPECT_EQ(copied(cpu), (std::pair{7, 0})) << cpu.dump();  // q, k, v twice and dy
  const compiler::Program cuda = compiler::compile(graph, {});
  EXPECT_EQ(copied(cuda).first, 0) << cuda.dump();
  EXPECT_GE(copied(cuda).second, 3) << cuda.dump();
}

// attention_probabilities (the CPU's): an f32 Attention whose gradient
// follows keeps B·H·Tq·(Tk + 1) floats for it, which the gradient reads in
// place of the forward's result; not past 256 × 256 scores a head, not
// without the option. The on-disk cache's record keeps the extra output.
TEST(Compiler, AttentionKeepsItsProbabilitiesForTheGradient) {
  auto compiled = [](int64_t T, bool option) {
    const int64_t B = 2, H = 3, D = 4;
    auto head = [&](float x) {
      return Tensor::from_vector(std::vector<float>(B * H * T * D, x), {B, H, T, D}).requires_grad_();
    };
    Tensor q = head(1), k = head(2), v = head(3);
    Tensor y = fused_attention(q, k, v, {Tensor(), true, 0.5});
    sum(y * y).backward();
    std::vector<ir::NodePtr> params;
    ir::Graph graph = ir::flatten({y.node(), q.grad().node()}, &params);
    compiler::Program program = compiler::compile(graph, {.attention_probabilities = option});
    return std::pair{std::move(graph), std::move(program)};
  };
  const auto [graph, p] = compiled(256, true);
  const compiler::Instr* fwd = nullptr;
  const compiler::Instr* grad = nullptr;
  for (const auto& ins : p.instrs) {
    if (ins.op == ir::Op::Attention) fwd = &ins;
    if (ins.op == ir::Op::AttentionGrad) grad = &ins;
  }
  ASSERT_TRUE(fwd && grad) << p.dump();
  ASSERT_EQ(fwd->extra_outputs.size(), 1u) << p.dump();
  const compiler::Operand& kept = fwd->extra_outputs[0].out;
  EXPECT_EQ(fwd->extra_outputs[0].reg, -1);
  EXPECT_EQ(kept.view.shape, (Shape{2 * 3 * 256 * 257}));
  EXPECT_EQ(p.slots[kept.slot].nbytes, size_t{2 * 3 * 256 * 257} * sizeof(float));
  EXPECT_EQ(grad->inputs[grad->inputs.size() - 2], kept) << p.dump();
  EXPECT_EQ(fwd->attrs.ints, (std::vector<int64_t>{1, 0, 0, 0, 1}));
  EXPECT_EQ(grad->attrs.ints, (std::vector<int64_t>{1, 0, 0, 0, 1}));
  const auto back = compiler::deserialize_program(compiler::serialize_program(graph, p), graph);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->dump(), p.dump());
  for (const auto& [T, option] : {std::pair{257, true}, std::pair{256, false}})
    for (const auto& ins : compiled(T, option).second.instrs)
      if (ins.op == ir::Op::Attention || ins.op == ir::Op::AttentionGrad) {
        EXPECT_TRUE(ins.extra_outputs.empty()) << T;
        EXPECT_EQ(ins.attrs.ints.size(), 4u) << T;
      }
}

// strided_row_sums (the CPU's): a Sum down the rows of a column slice (a
// bias gradient cut from a wider one) reads the slice where it lies, and
// sums the right elements, through both of the CPU kernel's row paths (rows
// of 16+ values summed a block at a time, shorter ones column by column);
// without the option, and for views the kernel cannot walk (a step along
// the row, the summed axes not one stride apart), the operand is copied.
TEST(Compiler, RowSumsReadColumnSlicesInPlace) {
  const int64_t B = 2, T = 150, C = 60;
  std::vector<float> values(static_cast<size_t>(B * T * C));
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * static_cast<float>(i)) + 0.001f * (i % 7);
  Tensor a = Tensor::from_vector(values, {B, T, C});
  auto expected = [&](int64_t c0, int64_t c1, int64_t step) {
    std::vector<double> want;
    for (int64_t c = c0; c < c1; c += step) {
      double acc = 0;
      for (int64_t r = 0; r < B * T; ++r) acc += values[static_cast<size_t>(r * C + c)];
      want.push_back(acc);
    }
    return want;
  };
  // The program's Sum reads the parameter itself, not a copy of it.
  auto sums_in_place = [](const compiler::Program& p) {
    for (const auto& ins : p.instrs)
      if (ins.op == ir::Op::Sum) return p.slots[ins.inputs[0].slot].kind == compiler::SlotKind::Param;
    return false;
  };
  struct Case {
    int64_t c0, c1, step;
    bool in_place;
  };
  for (const Case& c : {Case{20, 40, 1, true}, Case{35, 40, 1, true}, Case{0, 60, 2, false}}) {
    Tensor y = sum(slice(a, 2, c.c0, c.c1, c.step), {0, 1});
    std::vector<ir::NodePtr> params;
    const ir::Graph graph = ir::flatten({y.node()}, &params);
    const compiler::Program cpu = compiler::compile(graph, {.strided_row_sums = true});
    EXPECT_EQ(sums_in_place(cpu), c.in_place) << cpu.dump();
    const compiler::Program other = compiler::compile(graph, {});
    EXPECT_FALSE(sums_in_place(other)) << other.dump();
    const std::vector<float> got = y.to_vector<float>();
    const std::vector<double> want = expected(c.c0, c.c1, c.step);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * (1 + std::abs(want[k]))) << k;
  }
  // One row broadcast down the summed axis (stride 0): copied, not read 300 rows apart.
  {
    Tensor row = Tensor::from_vector(std::vector<float>(values.begin(), values.begin() + 20), {20});
    Tensor y = sum(broadcast_to(row, {300, 20}), {0});
    std::vector<ir::NodePtr> params;
    const compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params), {.strided_row_sums = true});
    EXPECT_FALSE(sums_in_place(p)) << p.dump();
    const std::vector<float> got = y.to_vector<float>();
    for (size_t k = 0; k < 20; ++k) EXPECT_NEAR(got[k], 300.0 * values[k], 1e-4 * (1 + std::abs(300.0 * values[k]))) << k;
  }
  // The summed axes not one stride apart: [B, T, C] permuted to [T, B, C].
  Tensor y = sum(slice(permute(a, {1, 0, 2}), 2, 20, 40), {0, 1});
  std::vector<ir::NodePtr> params;
  const compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params), {.strided_row_sums = true});
  EXPECT_FALSE(sums_in_place(p)) << p.dump();
  const std::vector<float> got = y.to_vector<float>();
  const std::vector<double> want = expected(20, 40, 1);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * (1 + std::abs(want[k]))) << k;
}

// The profile's totals (kiln bench's "kernels a step" line): products with
// their 2·M·N·K operations (a transposed operand's K is its row count, a
// batch counts every matrix), the attention pair, the rest; reset empties
// them with the table.
TEST(Compiler, ProfileTotalsSplitProductsAttentionAndTheRest) {
  Tensor a = Tensor::from_vector(std::vector<float>(3 * 4 * 5, 1.0f), {3, 4, 5}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>(5 * 6, 1.0f), {5, 6}).requires_grad_();
  auto heads = [](float x) { return Tensor::from_vector(std::vector<float>(1 * 2 * 7 * 4, x), {1, 2, 7, 4}); };
  Tensor y = fused_attention(heads(1), heads(2), heads(3), {Tensor(), true, 0.5});
  Tensor c = matmul(a, b);
  sum(c * c).backward();
  std::vector<ir::NodePtr> params;
  const compiler::Program p = compiler::compile(ir::flatten({y.node(), c.node(), b.grad().node()}, &params), {});
  compiler::profile_reset();
  double flops = 0;
  int products = 0, attention = 0, others = 0;
  for (const auto& ins : p.instrs) {
    compiler::profile_add(ins, 1.0);
    if (ins.op == ir::Op::MatMul) {
      ++products;
      // [3,4,5]·[5,6] forward, 3·4·6 outputs of 5 terms; bᵀ's gradient [5,6] sums 12 rows.
      flops += 2.0 * numel(ins.output.view.shape) * (numel(ins.output.view.shape) == 30 ? 12 : 5);
    } else if (ins.op == ir::Op::Attention) {
      ++attention;
    } else {
      ++others;
    }
  }
  ASSERT_EQ(products, 2) << p.dump();
  ASSERT_EQ(attention, 1) << p.dump();
  const compiler::ProfileTotals t = compiler::profile_totals();
  EXPECT_EQ(t.product_seconds, 2.0);
  EXPECT_EQ(t.product_flops, 2.0 * 72 * 5 + 2.0 * 30 * 12);
  EXPECT_EQ(t.product_flops, flops);
  EXPECT_EQ(t.attention_seconds, 1.0);
  EXPECT_EQ(t.other_seconds, static_cast<double>(others));
  compiler::profile_reset();
  EXPECT_EQ(compiler::profile_totals().product_seconds, 0.0);
  EXPECT_EQ(compiler::profile_totals().product_flops, 0.0);
}

// concurrent_products (the CPU's): a linear layer's weight and input
// gradients become a pair (Instr::with_next), the second moved up over the
// weight gradient's square sum; the memory plan keeps everything either
// reads or writes apart, and the pairs survive the program record.
TEST(Compiler, IndependentProductsArePairedAndKeptApart) {
  Generator gen(4);
  Tensor x = randn({512, 256}, gen), w1 = randn({512, 256}, gen), b1 = randn({512}, gen);
  Tensor w2 = randn({256, 512}, gen), b2 = randn({256}, gen);
  mark_step();
  for (Tensor* t : {&w1, &b1, &w2, &b2}) t->requires_grad_();
  Tensor y = linear(gelu(linear(x, w1, b1)), w2, b2);
  sum(y * y).backward();
  std::vector<ir::NodePtr> outs, params;
  {
    NoGradGuard ng;
    Tensor norm = sum(w1.grad() * w1.grad()) + sum(w2.grad() * w2.grad());  // as clip_grad_norm's
    for (Tensor* t : {&w1, &b1, &w2, &b2}) outs.push_back((*t - t->grad() * norm).node());
  }
  const ir::Graph graph = ir::flatten(outs, &params);
  const compiler::Program plain = compiler::compile(graph, {.fuse_sum_inputs = true});
  const compiler::Program paired = compiler::compile(graph, {.fuse_sum_inputs = true, .concurrent_products = true});
  EXPECT_TRUE(std::none_of(plain.instrs.begin(), plain.instrs.end(), [](const auto& i) { return i.with_next; }));
  int pairs = 0;
  auto bytes = [&](const compiler::Operand& o) {  // a temporary's bytes in the arena, else none
    const compiler::Slot& s = paired.slots[o.slot];
    return s.kind == compiler::SlotKind::Temp ? std::pair<size_t, size_t>{s.offset, s.offset + s.nbytes}
                                              : std::pair<size_t, size_t>{0, 0};
  };
  auto apart = [&](const compiler::Operand& a, const compiler::Operand& b) {
    const auto [a0, a1] = bytes(a);
    const auto [b0, b1] = bytes(b);
    return a.slot != b.slot && (a1 <= b0 || b1 <= a0);
  };
  for (size_t k = 0; k + 1 < paired.instrs.size(); ++k) {
    if (!paired.instrs[k].with_next) continue;
    ++pairs;
    const compiler::Instr &a = paired.instrs[k], &b = paired.instrs[k + 1];
    EXPECT_EQ(a.op, ir::Op::MatMul);
    EXPECT_EQ(b.op, ir::Op::MatMul);
    EXPECT_FALSE(b.with_next) << "a product in two pairs";
    for (const auto& in : b.inputs) EXPECT_TRUE(apart(in, a.output)) << paired.dump();
    for (const auto& in : a.inputs) EXPECT_TRUE(apart(in, b.output)) << paired.dump();
    EXPECT_TRUE(apart(a.output, b.output)) << paired.dump();
  }
  EXPECT_EQ(pairs, 1) << paired.dump();  // two of the three products of the backward pass
  EXPECT_EQ(paired.instrs.size(), plain.instrs.size());
  const auto back = compiler::deserialize_program(compiler::serialize_program(graph, paired), graph);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->dump(), paired.dump());
  compiler::Program bad = paired;
  bad.instrs.back().with_next = true;  // paired with nothing
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
}

// The memory a pair's first product reads last is not its partner's result,
// as it would be one after the other.
TEST(Compiler, APairsPartnerDoesNotWriteWhatTheFirstReads) {
  Generator gen(5);
  Tensor x = randn({512, 512}, gen), w = randn({512, 512}, gen), y = randn({512, 512}, gen);
  mark_step();
  Tensor t = exp(x);  // a temporary read last by the first product
  Tensor out = matmul(t, w) + matmul(y, w, false, true);
  std::vector<ir::NodePtr> params;
  const ir::Graph graph = ir::flatten({out.node()}, &params);
  const compiler::Program plain = compiler::compile(graph, {});
  const compiler::Program paired = compiler::compile(graph, {.concurrent_products = true});
  auto offsets = [](const compiler::Program& p) {  // the exp's result and the second product's
    std::vector<size_t> o;
    for (const auto& ins : p.instrs)
      if (ins.op == ir::Op::MatMul) {
        o.push_back(p.slots[ins.inputs[0].slot].offset);
        o.push_back(p.slots[ins.output.slot].offset);
      }
    return o;
  };
  ASSERT_TRUE(paired.instrs.size() >= 3 && paired.instrs[1].with_next) << paired.dump();
  const auto po = offsets(plain), qo = offsets(paired);
  ASSERT_EQ(po.size(), 4u);
  EXPECT_EQ(po[0], po[3]) << "the plain plan reuses exp(x)'s memory:\n" << plain.dump();
  EXPECT_NE(qo[0], qo[3]) << paired.dump();
  EXPECT_GT(paired.arena_bytes, plain.arena_bytes);
}

// A program with a fused reduction survives the on-disk record (its shape too).
TEST(Compiler, FusedReductionsRoundTripThroughTheProgramRecord) {
  Tensor x = Tensor::from_vector(std::vector<float>(20000, 0.5f), {20, 1000});
  Tensor y = sum(exp(x) * x, {1});
  std::vector<ir::NodePtr> params;
  const ir::Graph graph = ir::flatten({y.node()}, &params);
  const compiler::Program p = compiler::compile(graph, {.fuse_sum_inputs = true});
  const auto back = compiler::deserialize_program(compiler::serialize_program(graph, p), graph);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->dump(), p.dump());
  ASSERT_EQ(back->instrs.size(), p.instrs.size());
  EXPECT_EQ(back->instrs[0].program_shape, (Shape{20, 1000})) << p.dump();
  // A damaged record whose shape does not match its output or axes is an
  // error (the cache reports it and compiles again).
  compiler::Program bad = p;
  bad.instrs[0].program_shape = {10, 2000};
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
  bad.instrs[0].program_shape = {20, 1000};
  bad.instrs[0].attrs.ints = {0};  // a leading axis
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
  // Extents whose products overflow int64_t are an error, not an overflow
  // in numel: the program's shape, and a view's, even where its strides are
  // 0 and it reaches no further for them (fuzz/corpus/program_cache).
  const int64_t big = int64_t{1} << 40;
  bad = p;
  bad.instrs[0].program_shape = {big, big, big};
  bad.instrs[0].attrs.ints = {2};
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
  bad = p;
  bad.instrs[0].output.view.shape = {big, big};
  bad.instrs[0].output.view.strides = {0, 0};
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
  // A load that names no operand: the executors would read inputs[-1].
  bad = p;
  for (auto& step : bad.instrs[0].program)
    if (step.op == ir::Op::Data) step.load = -1;
  EXPECT_THROW(compiler::deserialize_program(compiler::serialize_program(graph, bad), graph), Error);
}

}  // namespace
// A result nothing reads, much smaller than its operand (the loss), is
// computed as soon as its operand exists, not after the backward pass: the
// logits then die at their gradient, which takes their memory in place.
TEST(Compiler, TheLossIsComputedWhereItsLogitsAre) {
  Generator gen(6);
  Tensor x = randn({64, 32}, gen), w = randn({500, 32}, gen), w2 = randn({32, 32}, gen);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>(64, 3), {64});
  mark_step();
  for (Tensor* t : {&w, &w2}) t->requires_grad_();
  Tensor loss = cross_entropy(matmul(matmul(x, w2), w, false, true), labels);
  loss.backward();
  std::vector<ir::NodePtr> params;
  // The updates first, as a step's results are ordered (newest last, visited first).
  const ir::Graph graph = ir::flatten({loss.node(), (w - w.grad()).node(), (w2 - w2.grad()).node()}, &params);
  const compiler::Program p = compiler::compile(graph, {.in_place = true});
  int64_t forward = -1, grad = -1;
  for (size_t k = 0; k < p.instrs.size(); ++k) {
    if (p.instrs[k].op == ir::Op::CrossEntropy) forward = static_cast<int64_t>(k);
    if (p.instrs[k].op == ir::Op::CrossEntropyGrad) grad = static_cast<int64_t>(k);
  }
  ASSERT_GE(forward, 1) << p.dump();
  ASSERT_GT(grad, forward) << p.dump();
  EXPECT_EQ(p.instrs[forward - 1].output.slot, p.instrs[forward].inputs[0].slot) << "right after the logits\n" << p.dump();
  EXPECT_EQ(p.instrs[grad].output.slot, p.instrs[grad].inputs[0].slot) << "the gradient over the logits\n" << p.dump();
}

// A reshape of a strided view is a view where the strides allow it (the
// dimensions it merges are one stride apart: GPT-2's q, k and v heads split
// from a slice of their projection), and a copy where they do not (a
// transpose flattened).
TEST(Compiler, ReshapesOfStridedViewsAreViewsWhereTheStridesAllow) {
  std::vector<float> xv(2 * 5 * 12);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
  Tensor x = Tensor::from_vector(xv, {2, 5, 12});
  Tensor heads = reshape(slice(x, 2, 4, 8), {2, 5, 2, 2});  // a view: [60, 12, 2, 1] from offset 4
  Tensor rows = reshape(slice(x, 2, 4, 8), {10, 4});         // a view: [12, 1]
  Tensor flat = reshape(transpose(reshape(x, {10, 12}), 0, 1), {120});  // a copy
  const std::vector<Tensor> results{heads * 2.0, rows * 3.0, flat * 4.0};
  std::vector<ir::NodePtr> params, nodes;
  for (const auto& r : results) nodes.push_back(r.node());
  const compiler::Program p = compiler::compile(ir::flatten(nodes, &params), {});
  int copies = 0;
  for (const auto& ins : p.instrs) copies += ins.fused && ins.program.size() == 1;
  EXPECT_EQ(copies, 1) << p.dump();
  const std::vector<float> h = results[0].to_vector<float>(), r = results[1].to_vector<float>(),
                           f = results[2].to_vector<float>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t c = 0; c < 4; ++c) {
        const float want = xv[(b * 5 + t) * 12 + 4 + c];
        EXPECT_EQ(h[(b * 5 + t) * 4 + c], 2 * want);
        EXPECT_EQ(r[(b * 5 + t) * 4 + c], 3 * want);
      }
  for (int64_t c = 0; c < 12; ++c)
    for (int64_t row = 0; row < 10; ++row) EXPECT_EQ(f[c * 10 + row], 4 * xv[row * 12 + c]);
}

}  // namespace kiln
