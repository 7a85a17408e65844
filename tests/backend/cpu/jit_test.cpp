// The CPU backend's compiled fused loops (backend/cpu/jit.h) against its
// interpreter: the same program, executed both ways, must give the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "kiln/backend/cpu/philox.h"
#include "kiln/compiler/profile.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/context.h"
#include "support/program_util.h"
#include "support/test_util.h"

namespace kiln {
namespace {

struct Executed {
  std::vector<std::vector<char>> outputs;
  int32_t compiled = 0;  // instructions that ran as compiled loops
  int32_t fused = 0;     // fused elementwise instructions in the program
};

// The results' program, executed with the compiled loops or the interpreter.
// (Compiled as for CPU devices: fused reductions on.)
Executed execute(const std::vector<Tensor>& results, bool jit) {
  const testing::TracedProgram traced = testing::trace_program(results, {.fuse_sum_inputs = true});
  const compiler::Program& p = traced.program;
  testing::HostMemory mem;
  std::vector<void*> out_ptrs;
  for (size_t o = 0; o < p.output_nbytes.size(); ++o) out_ptrs.push_back(mem.get(p.output_nbytes[o]));
  const bool was = backend::cpu::jit_enabled();
  backend::cpu::set_jit_enabled(jit);
  std::shared_ptr<backend::cpu::Plan> plan = backend::cpu::prepare(p);
  backend::cpu::set_jit_enabled(was);
  backend::cpu::execute(p, plan.get(), traced.params, out_ptrs, mem.get(p.arena_bytes));
  Executed run;
  run.compiled = plan->compiled();
  for (const auto& ins : p.instrs) run.fused += ins.fused && ins.op != ir::Op::Sum;
  for (size_t o = 0; o < out_ptrs.size(); ++o) {
    const char* b = static_cast<const char*>(out_ptrs[o]);
    run.outputs.emplace_back(b, b + p.output_nbytes[o]);
  }
  return run;
}

// Both ways, output by output, byte for byte — except that a NaN equals any
// NaN: x86 returns the first operand's NaN, and the compiler may swap the
// operands of a commutative + or * in the interpreter's loops.
// (A bf16 value is the top half of an f32: compared as that f32.)
bool same_bits(const std::vector<char>& a, const std::vector<char>& b, size_t at, DType t) {
  if (t != DType::f32 && t != DType::bf16) return a[at] == b[at];
  const size_t n = t == DType::f32 ? 4 : 2, high = 4 - n;
  float x = 0, y = 0;
  std::memcpy(reinterpret_cast<char*>(&x) + high, &a[at], n);
  std::memcpy(reinterpret_cast<char*>(&y) + high, &b[at], n);
  return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
}

void expect_same_bits(const std::vector<Tensor>& results, const char* what) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  const Executed jit = execute(results, true), interpreted = execute(results, false);
  EXPECT_GT(jit.compiled, 0) << what << ": nothing was compiled";
  EXPECT_EQ(interpreted.compiled, 0);
  ASSERT_EQ(jit.outputs.size(), interpreted.outputs.size());
  for (size_t o = 0; o < jit.outputs.size(); ++o) {
    const auto& a = jit.outputs[o];
    const auto& b = interpreted.outputs[o];
    ASSERT_EQ(a.size(), b.size()) << what << " output " << o;
    const DType t = results[o].dtype();
    const size_t step = dtype_size(t) >= 2 ? dtype_size(t) : 1;
    size_t first = 0;
    while (first < a.size() && same_bits(a, b, first, t)) first += step;
    EXPECT_EQ(first, a.size()) << what << ": output " << o << " differs from byte " << first << " of " << a.size();
  }
}

// n values with every awkward float among them: NaN, infinities, signed
// zeros, subnormals, the largest finite values.
std::vector<float> awkward_values(int64_t n, uint64_t seed) {
  std::vector<float> v = testing::uniform_values(n, seed, -3.0f, 3.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-40f, -1e-40f,
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1.0f, -1.0f};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = specials[(i / 7 + seed) % std::size(specials)];
  return v;
}

TEST(CpuJit, EveryOpMatchesTheInterpreterBitForBit) {
  // 8: one iteration; 13 and 1037: ragged ends run by the interpreter;
  // 24 and 31: one 16-value iteration (jit_wide_enabled) and an end of 8
  // values or more; 40000: several threads.
  for (int64_t n : {8, 13, 24, 31, 1037, 40000}) {
    Tensor x = Tensor::from_vector(awkward_values(n, 1), {n});
    Tensor y = Tensor::from_vector(awkward_values(n, 2), {n});
    Tensor z = Tensor::from_vector(awkward_values(n, 3), {n});
    const std::string what = "n = " + std::to_string(n);
    expect_same_bits({x + y, x - y, x * y, x / y, maximum(x, y), minimum(x, y), maximum(y, x), minimum(y, x)},
                     (what + ", arithmetic").c_str());
    expect_same_bits({-x, abs(x), sqrt(x), rsqrt(y), relu(x), sqrt(abs(x)) * 2.0 + 1.0}, (what + ", unary").c_str());
    expect_same_bits({eq(x, y), ne(x, y), lt(x, y), le(x, y), gt(x, y), ge(x, y), eq(x, x), ne(x, x)},
                     (what + ", comparisons").c_str());
    Tensor bx = cast(x, DType::b8), by = cast(y, DType::b8);  // NaN -> true, ±0 -> false
    // exp's inputs reach below -87.34 (libmvec's scalar fallback) and -104 (0).
    Tensor wide = x * 40.0;
    expect_same_bits({exp(x), exp(wide), exp(-wide), log(x), tanh(wide), erf(x), sigmoid(wide), gelu(x),
                      gelu(wide, "tanh"), exp(x) * y + erf(y)},
                     (what + ", transcendental").c_str());
    expect_same_bits({logical_and(bx, by), logical_or(bx, lt(y, z)), logical_not(bx), where(gt(x, y), x, z),
                      where(bx, y, z), cast(lt(x, z), DType::f32) * y},
                     (what + ", logic").c_str());
  }
}

// bf16 tensors (--bf16's activations and product operands) are read and
// written by the compiled loops: loads widen exactly, casts and stores round
// to nearest even (ties, NaN, infinities, values rounding up to infinity),
// as the interpreter does, including rows read row by row.
TEST(CpuJit, Bf16LoadsStoresAndCastsMatchTheInterpreterBitForBit) {
  for (int64_t n : {8, 13, 24, 31, 1037, 40000}) {
    std::vector<float> v = awkward_values(n, 21);
    // Ties to even both ways, and the largest finite floats below and above
    // bf16's largest finite value.
    const float ties[] = {1.00390625f, 1.01171875f, -1.00390625f, 3.3961775e38f, 3.3895314e38f};
    for (size_t i = 3; i < v.size(); i += 11) v[i] = ties[(i / 11) % std::size(ties)];
    Tensor x = Tensor::from_vector(v, {n});
    Tensor y = Tensor::from_vector(awkward_values(n, 22), {n});
    Tensor xb = cast(x, DType::bf16);  // a stored bf16 input of the programs below
    mark_step();
    const std::string what = "n = " + std::to_string(n);
    expect_same_bits({cast(x, DType::bf16), cast(x * y, DType::bf16), cast(cast(x, DType::bf16), DType::f32) * y,
                      cast(xb, DType::f32) + y, xb * y, cast(xb * 3.0, DType::bf16), cast(gelu(cast(xb, DType::f32)), DType::bf16)},
                     (what + ", bf16").c_str());
  }
  const int64_t B = 3, T = 23, L = 128;  // a bf16 input read row by row
  Tensor wide = cast(Tensor::from_vector(awkward_values(B * T * (L + 16), 23), {B, T, L + 16}), DType::bf16);
  Tensor y = Tensor::from_vector(awkward_values(B * T * L, 24), {B, T, L});
  mark_step();
  const std::vector<Tensor> rows = {cast(slice(wide, 2, 8, 8 + L) * y, DType::bf16)};
  expect_same_bits(rows, "bf16 rows");
  if (backend::cpu::jit_enabled()) {
    const Executed run = execute(rows, true);
    EXPECT_EQ(run.compiled, run.fused) << "a bf16 group was interpreted";
  }
}

// With AVX-512 a loop whose steps call transcendental functions takes 16
// values an iteration and calls their 16-lane forms once (the same bits:
// every test here compares with the interpreter); loops without calls, and
// loops with inputs read row by row in rows that are not whole 16-value
// steps, keep 8.
TEST(CpuJit, CallingLoopsTakeSixteenValuesWithAvx512) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  if (!backend::cpu::jit_wide_enabled()) GTEST_SKIP() << "no AVX-512 in this build or CPU (or KILN_JIT_WIDE=0)";
  // The step of each compiled loop (fused elementwise instructions and
  // reductions), in program order.
  auto steps = [](const std::vector<Tensor>& results) {
    const testing::TracedProgram traced = testing::trace_program(results, {.fuse_sum_inputs = true});
    std::vector<int64_t> out;
    for (const auto& ins : traced.program.instrs)
      if (const auto kernel = !ins.program.empty() ? backend::cpu::jit_compile(ins) : nullptr)
        out.push_back(backend::cpu::jit_values_an_iteration(*kernel));
    return out;
  };
  const int64_t n = 4104;
  Tensor x = Tensor::from_vector(awkward_values(n, 31), {n});
  Tensor y = Tensor::from_vector(awkward_values(n, 32), {n});
  EXPECT_EQ(steps({exp(x) * y + 1.0}), std::vector<int64_t>{16});
  EXPECT_EQ(steps({x * y + 1.0}), std::vector<int64_t>{8});
  // A fused reduction (then a copy of its one value to the result).
  EXPECT_EQ(steps({sum(erf(x) * y)}), (std::vector<int64_t>{16, 8}));
  expect_same_bits({sum(erf(x) * y), sum(exp(x * 0.1), {0})}, "sums of calls");
  // The steps of a GELU's gradient with dy the same for every element: the
  // call's second operand is one value, read into both halves.
  Tensor xg = Tensor::from_vector(awkward_values(n, 33), {n}).requires_grad_();
  sum(gelu(xg * 3.0, "tanh")).backward();
  expect_same_bits({xg.grad()}, "a GELU gradient with a broadcast dy");
  // A bias row broadcast over rows of 264 values (8-value steps) and of 272.
  for (int64_t cols : {264, 272}) {
    Tensor m = Tensor::from_vector(testing::uniform_values(5 * cols, 34), {5, cols});
    Tensor bias = Tensor::from_vector(testing::uniform_values(cols, 35), {cols});
    EXPECT_EQ(steps({gelu(m + bias, "tanh")}), std::vector<int64_t>{cols % 16 == 0 ? 16 : 8}) << cols;
    expect_same_bits({gelu(m + bias, "tanh"), sigmoid(m * 4.0 + bias)}, ("rows of " + std::to_string(cols)).c_str());
  }
}

TEST(CpuJit, BroadcastScalarsAndStoredMasksAreInputs) {
  const int64_t n = 4099;
  Tensor x = Tensor::from_vector(awkward_values(n, 4), {n});
  Tensor y = Tensor::from_vector(awkward_values(n, 5), {n});
  Tensor s = Tensor::from_vector(std::vector<float>{0.375f}, {});
  Tensor mask = gt(x, y);  // computed first: a stored bool input of the programs below
  mark_step();
  expect_same_bits({x * s + s, where(mask, x * s, y), cast(mask, DType::f32) + x, logical_not(mask)},
                   "scalars and masks");
}

// Inputs whose rows along the last axis are contiguous but not the whole
// (a broadcast scale and shift, heads transposed out of a projection, a
// slice of the last axis, a broadcast mask) run compiled, a call per row,
// when rows are a whole number of 8-value steps and at least 64 values
// long; shorter rows stay interpreted. The same bits either way.
TEST(CpuJit, RowStridedInputsRunCompiled) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  for (int64_t L : {13, 40, 64, 256, 768}) {
    const int64_t B = 3, T = 23;  // B·T·L over 32768 at 768: several threads
    Tensor x = Tensor::from_vector(awkward_values(B * T * L, 6), {B, T, L});
    Tensor y = Tensor::from_vector(awkward_values(B * T * L, 7), {B, T, L});
    Tensor gamma = Tensor::from_vector(awkward_values(L, 8), {L});
    Tensor beta = Tensor::from_vector(awkward_values(L, 9), {L});
    Tensor wide = Tensor::from_vector(awkward_values(B * T * (L + 24), 11), {B, T, L + 24});
    Tensor row_mask = gt(gamma, beta);
    mark_step();
    const std::vector<Tensor> results = {x * gamma + beta, slice(wide, 2, 16, 16 + L) - x,
                                         where(row_mask, x, y) + gamma, x * 2.0};
    const std::string what = "rows of " + std::to_string(L);
    expect_same_bits(results, what.c_str());
    const Executed run = execute(results, true);
    if (L >= 64 && L % 8 == 0) EXPECT_EQ(run.compiled, run.fused) << what << ": a fused group was interpreted";
    else EXPECT_EQ(run.compiled, 1) << what << ": only x * 2 runs compiled";
    // Heads of 8 values transposed into rows of L: the copy's rows are 8 long.
    if (L % 8 == 0) {
      Tensor heads = Tensor::from_vector(awkward_values(B * T * L, 10), {B, L / 8, T, 8});
      expect_same_bits({reshape(permute(heads, {0, 2, 1, 3}), {B, T, L}) * y + gamma, x * 3.0},
                       (what + ", heads").c_str());
    }
  }
}

// One value per row broadcast along the last axis (RMSNorm's factor, T5's
// layer norm, and its gradient) runs compiled with rows of 64 values and
// more: the loop, called once per row, broadcasts the row's value and
// computes what depends only on it (exp of it here) once per call. The same
// bits as the interpreter; rows of 40 stay interpreted.
TEST(CpuJit, RowBroadcastValuesRunCompiled) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  for (int64_t L : {40, 64, 256, 768}) {
    const int64_t B = 3, T = 23;  // B·T·L over 32768 at 768: several threads
    Tensor x = Tensor::from_vector(awkward_values(B * T * L, 12), {B, T, L}).requires_grad_();
    Tensor g = Tensor::from_vector(awkward_values(B * T * L, 13), {B, T, L});
    Tensor r = Tensor::from_vector(awkward_values(B * T, 14), {B, T, 1});
    Tensor w = Tensor::from_vector(testing::uniform_values(L, 15), {L}).requires_grad_();
    Tensor rms = x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;
    sum(rms * g).backward();
    const std::vector<Tensor> results = {x * r + g, g * exp(r) - r, rms, x.grad()};
    const std::string what = "rows of " + std::to_string(L);
    expect_same_bits(results, what.c_str());
    // The fused groups that read r or the norm's factor, and that the interpreter runs.
    const testing::TracedProgram traced = testing::trace_program(results, {.fuse_sum_inputs = true});
    const auto plan = backend::cpu::prepare(traced.program);
    int row_broadcasts = 0, interpreted = 0;
    for (size_t i = 0; i < traced.program.instrs.size(); ++i) {
      const auto& ins = traced.program.instrs[i];
      if (!ins.fused) continue;
      bool reads = false;
      for (const auto& op : ins.inputs)
        reads = reads || (op.view.shape.size() == 3 && op.view.strides.back() == 0 && !op.view.is_broadcast_scalar());
      row_broadcasts += reads;
      interpreted += reads && !plan->kernels[i];
    }
    EXPECT_GE(row_broadcasts, 3) << what << "\n" << traced.program.dump();
    EXPECT_EQ(interpreted, L >= 64 ? 0 : row_broadcasts) << what << "\n" << traced.program.dump();
  }
}

// Values that are the same for every element (computed once, before the
// loop) read by the loop and by other such values: the last reader of a
// broadcast value may come after loop steps that read it too. Sizes under
// 512 with a ragged end: an invariant transcendental is one value at every
// position, in both paths.
TEST(CpuJit, BroadcastValuesReadInAndBeforeTheLoop) {
  for (int64_t n : {100, 1000}) {
    Tensor x = Tensor::from_vector(testing::uniform_values(n, 17), {n});
    Tensor g = Tensor::from_vector(testing::uniform_values(n, 18), {n});
    Tensor s = Tensor::from_vector(std::vector<float>{-2.5068f}, {});
    Tensor sb = broadcast_to(s, {n});
    const std::string what = "n = " + std::to_string(n);
    expect_same_bits({x * sb + exp(sb)}, (what + ", x*s + exp(s)").c_str());
    expect_same_bits({sb * x + (1.0 - sb) * g}, (what + ", moving average").c_str());
    expect_same_bits({x * tanh(sb), g * erf(sb) - gelu(sb)}, (what + ", invariant transcendentals").c_str());
  }
}

// More values live at once than there are registers: all twenty are stored
// after the last step, so the code generator must keep most in memory.
TEST(CpuJit, LongProgramsKeepWhatDoesNotFitInRegisters) {
  const int64_t n = 1000;
  Tensor x = Tensor::from_vector(awkward_values(n, 6), {n});
  Tensor y = Tensor::from_vector(testing::uniform_values(n, 7), {n});
  std::vector<Tensor> results;
  Tensor total = y;
  for (int i = 0; i < 20; ++i) {
    results.push_back(x * (i + 1.5) + y / (i + 2.0));
    total = total * 0.5 + results.back();
  }
  results.push_back(total);
  expect_same_bits(results, "twenty-one results");
  // The same with calls (every register is spilled around each) and an
  // output that is the same for every element.
  std::vector<Tensor> called;
  Tensor s = Tensor::from_vector(std::vector<float>{0.25f}, {});
  for (int i = 0; i < 16; ++i) called.push_back(exp(x * (0.01 * i)) + tanh(y + i));
  called.push_back(zeros({n}) + s * 2.0);
  expect_same_bits(called, "sixteen results with calls, one invariant");
}

// AdamW with clipping through the runtime: each step's update runs in one
// compiled loop that writes the parameter and both moments over their old
// memory. Three steps give the same parameters, bit for bit, both ways.
TEST(CpuJit, AdamWStepsGiveTheInterpretersParameters) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  auto train = [](bool jit) {
    const bool was = backend::cpu::jit_enabled();
    backend::cpu::set_jit_enabled(jit);
    runtime::DeviceContext::get(Device::cpu()).clear_cache();  // plans are made when a program is compiled
    Tensor w = Tensor::from_vector(testing::uniform_values(3001, 8), {3001}).requires_grad_();
    Tensor b = Tensor::from_vector(testing::uniform_values(37, 9), {37}).requires_grad_();
    Tensor target = Tensor::from_vector(testing::uniform_values(3001, 10), {3001});
    optim::AdamW opt({w, b}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
    for (int t = 0; t < 3; ++t) {
      Tensor loss = sum((w - target) * (w - target)) + sum(b * b * 3.0);
      loss.backward();
      optim::clip_grad_norm({w, b}, 1.0);
      opt.step();
      opt.zero_grad();
      mark_step();
    }
    std::vector<float> out = w.to_vector<float>(), bias = b.to_vector<float>();
    out.insert(out.end(), bias.begin(), bias.end());
    backend::cpu::set_jit_enabled(was);
    runtime::DeviceContext::get(Device::cpu()).clear_cache();
    return out;
  };
  const std::vector<float> jit = train(true), interpreted = train(false);
  ASSERT_EQ(jit.size(), interpreted.size());
  EXPECT_EQ(std::memcmp(jit.data(), interpreted.data(), jit.size() * sizeof(float)), 0);
  EXPECT_NE(jit[0], testing::uniform_values(3001, 8)[0]);  // the steps did update
}

// Fused reductions (a gradient norm's sum of squares): several blocks of
// 8192 values and a ragged end, one row and seven, summed in the same
// order both ways.
TEST(CpuJit, FusedReductionsSumInTheInterpretersOrder) {
  Tensor x = Tensor::from_vector(awkward_values(100003, 14), {100003});
  Tensor y = Tensor::from_vector(testing::uniform_values(7 * 9001, 15), {7, 9001});
  Tensor z = Tensor::from_vector(testing::uniform_values(7 * 9001, 16), {7, 9001});
  expect_same_bits({sum(y * y), sum(y * z, {1}), sum(exp(z) - 1.0, {1})}, "finite sums");
  expect_same_bits({sum(x * x)}, "a sum with NaN and infinities");
  // Without calls the lanes stay in two registers for the whole loop, so a
  // long program has two fewer for its values: twenty products live at once.
  Tensor acc = y;
  std::vector<Tensor> terms;
  for (int i = 0; i < 20; ++i) terms.push_back(y * (i + 1.5) + z / (i + 2.0));
  for (const Tensor& t : terms) acc = acc * 0.5 + t * terms.front();
  expect_same_bits({sum(acc, {1})}, "a long program's sum");
}

// GELU's gradient in both forms (the backward pass of a GELU layer).
TEST(CpuJit, GeluGradientsMatchTheInterpreterBitForBit) {
  const int64_t n = 2053;
  for (const char* form : {"none", "tanh"}) {
    Tensor x = Tensor::from_vector(awkward_values(n, 12), {n}).requires_grad_();
    Tensor dy = Tensor::from_vector(testing::uniform_values(n, 13), {n});
    sum(gelu(x * 3.0, form) * dy).backward();
    expect_same_bits({x.grad()}, form);
  }
}

// Llama's SwiGLU (silu(gate) * up) forward and backward, at a length with
// a ragged tail: the compiled loops call SiLU's lane forms, the interpreter
// its arrays; both give the same bits.
TEST(CpuJit, SwigluMatchesTheInterpreterBitForBit) {
  const int64_t n = 2053;
  std::vector<float> gv = awkward_values(n, 41);
  for (float& v : gv) v *= 8.0f;  // e^-x's whole range: SiLU's tails
  Tensor gate = Tensor::from_vector(gv, {n}).requires_grad_();
  Tensor up = Tensor::from_vector(awkward_values(n, 42), {n}).requires_grad_();
  Tensor dy = Tensor::from_vector(testing::uniform_values(n, 43), {n});
  Tensor y = silu(gate) * up;
  sum(y * dy).backward();
  expect_same_bits({y, gate.grad(), up.grad()}, "swiglu");
}

// BERT's and GPT-2's MLP activation and its gradient as programs of their
// own (the gradient's dy from a product): with AVX-512 they run 16 lanes at
// a time over whole ranges (wide_gelu), and must give the compiled loop's
// bits (8 lanes, then the last n % 8 one by one) at every length.
TEST(CpuJit, WideGeluGivesTheCompiledLoopsBits) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  for (const char* form : {"none", "tanh"})
  for (int64_t rows : {1, 5, 129, 5003}) {  // 8, 40, 1032 and 40024 values, several threads
    const int64_t n = rows * 8;
    std::vector<float> xv = awkward_values(n, 21);
    for (float& v : xv) v *= 4.0f;  // erf's and exp's whole range, GELU's tails
    Tensor x = Tensor::from_vector(xv, {rows, 8}).requires_grad_();
    Tensor w = Tensor::from_vector(testing::uniform_values(64, 22), {8, 8});
    Tensor y = gelu(x, form);
    sum(matmul(y, w)).backward();
    const testing::TracedProgram traced = testing::trace_program({y, x.grad()}, {.fuse_sum_inputs = true});
    // --bf16's activation: the GELU rounded to bf16 for the next product
    Tensor x16 = Tensor::from_vector(xv, {rows, 8});
    const testing::TracedProgram rounded = testing::trace_program({cast(gelu(x16, form), DType::bf16)});
    // ... and under Autocast, where the GELU reads the product's bf16
    // values and its gradient is bf16 for the product before it.
    Tensor xa = Tensor::from_vector(xv, {rows, 8}).requires_grad_();
    Tensor ya;
    {
      Autocast bf16;
      ya = gelu(matmul(xa, w), form);
      sum(matmul(ya, w)).backward();
    }
    const testing::TracedProgram autocast =
        testing::trace_program({cast(ya, DType::bf16), xa.grad()}, {.fuse_sum_inputs = true, .bf16_results = true});
    int wide = 0;
    for (const auto* program : {&traced.program, &rounded.program, &autocast.program})
    for (const auto& ins : program->instrs) {
      if (!backend::cpu::wide_gelu(ins)) continue;
      ++wide;
      std::vector<std::vector<float>> inputs;
      std::vector<char*> in;
      for (size_t k = 0; k < ins.inputs.size(); ++k) {
        inputs.push_back(awkward_values(ins.inputs[k].view.offset + n, 23 + k));
        in.push_back(reinterpret_cast<char*>(inputs.back().data()));
      }
      const int64_t at = ins.output.view.offset, size = static_cast<int64_t>(dtype_size(ins.output.dtype));
      std::vector<char> wide_out((at + n) * size, 0), compiled_out((at + n) * size, 0);
      backend::cpu::run_fused(ins, in, wide_out.data(), {});
      const auto kernel = backend::cpu::jit_compile(ins);
      ASSERT_NE(kernel, nullptr) << "the compiled loop declined the program";
      backend::cpu::run_jit(*kernel, ins, in, compiled_out.data(), {});
      for (int64_t j = at; j < at + n; ++j)
        ASSERT_TRUE(same_bits(wide_out, compiled_out, static_cast<size_t>(j * size), ins.output.dtype))
            << form << ", " << compiler::instr_label(ins) << ": value " << j - at << " of " << n;
    }
#if defined(__AVX512F__)
    // the activation (f32 and bf16) and its gradient; under Autocast both again
    EXPECT_EQ(wide, 5) << traced.program.dump() << rounded.program.dump() << autocast.program.dump();
#else
    EXPECT_EQ(wide, 0);
#endif
  }
}

// A bf16 input of the erf-form GELU (--bf16's activation, the product's
// rounded result) is one of 65536 values: wide_gelu looks the GELU, or its
// gradient's factor of dy, up in a table the same functions made. Every bf16
// value as x, with every one as dy too (another order), the activation and
// its gradient as Autocast traces them: the computed bits. (The tanh form
// is always computed.)
TEST(CpuJit, GeluTablesGiveTheComputedBitsForEveryBf16Input) {
  const int64_t n = 65536;
  Tensor w = Tensor::from_vector(testing::uniform_values(64, 31), {8, 8});
  Tensor xa = Tensor::from_vector(testing::uniform_values(n, 32), {n / 8, 8}).requires_grad_();
  Tensor ya;
  {
    Autocast bf16;
    ya = gelu(matmul(xa, w));
    sum(matmul(ya, w)).backward();
  }
  const testing::TracedProgram rounded =
      testing::trace_program({cast(ya, DType::bf16), xa.grad()}, {.fuse_sum_inputs = true, .bf16_results = true});
  const testing::TracedProgram wide = testing::trace_program({ya}, {.bf16_results = true});
  int tables = 0;
  for (const auto* program : {&rounded.program, &wide.program})
  for (const auto& ins : program->instrs) {
    const bool bf16_input = std::any_of(ins.inputs.begin(), ins.inputs.end(),
                                        [](const compiler::Operand& op) { return op.dtype == DType::bf16; });
    if (!backend::cpu::wide_gelu(ins) || !bf16_input) continue;
    ++tables;
    std::vector<std::vector<char>> inputs;
    std::vector<char*> in;
    for (size_t k = 0; k < ins.inputs.size(); ++k) {  // input k: bf16 value (i·(2k + 1)) mod 2¹⁶ at i
      const int64_t at = ins.inputs[k].view.offset;
      std::vector<char>& bytes = inputs.emplace_back();
      if (ins.inputs[k].dtype == DType::bf16) {
        std::vector<uint16_t> bits(static_cast<size_t>(at + n));
        for (int64_t i = 0; i < n; ++i) bits[static_cast<size_t>(at + i)] = static_cast<uint16_t>(i * (2 * k + 1));
        const char* from = reinterpret_cast<const char*>(bits.data());
        bytes.assign(from, from + bits.size() * sizeof(uint16_t));
      } else {
        const std::vector<float> v = awkward_values(at + n, 33 + static_cast<unsigned>(k));
        const char* from = reinterpret_cast<const char*>(v.data());
        bytes.assign(from, from + v.size() * sizeof(float));
      }
      in.push_back(bytes.data());
    }
    const int64_t at = ins.output.view.offset, size = static_cast<int64_t>(dtype_size(ins.output.dtype));
    std::vector<char> looked_up((at + n) * size, 0), computed((at + n) * size, 0);
    backend::cpu::run_fused(ins, in, looked_up.data(), {});
    backend::cpu::set_gelu_tables(false);
    backend::cpu::run_fused(ins, in, computed.data(), {});
    backend::cpu::set_gelu_tables(true);
    for (int64_t j = at; j < at + n; ++j)
      ASSERT_TRUE(same_bits(looked_up, computed, static_cast<size_t>(j * size), ins.output.dtype))
          << compiler::instr_label(ins) << ": bf16 x 0x" << std::hex << j - at;
  }
#if defined(__AVX512F__)
  EXPECT_EQ(tables, 3) << rounded.program.dump() << wide.program.dump();  // the GELU (bf16, f32), its gradient
#else
  EXPECT_EQ(tables, 0);
#endif
}

// A dropout mask as a program of its own (rand_uniform >= p into bytes)
// runs its own loop (dropout_mask), not compiled, and keeps element i at
// exactly Philox's uniform number i of the key's stream >= p: at lengths
// around the loop's blocks, from a stream position that is not a multiple
// of 4, and at keep probabilities of all, none and between.
TEST(CpuJit, DropoutMasksKeepPhiloxsElements) {
  Generator gen(3);
  for (double p : {0.1, 0.5, 0.0, 1.0})
    for (int64_t n : {1, 63, 2049, 40000}) {
      Tensor r = rand({n}, gen);
      Tensor mask = ge(r, scalar_like(p, r));
      const testing::TracedProgram traced = testing::trace_program({mask});
      int masks = 0;
      for (const auto& ins : traced.program.instrs) {
        if (!backend::cpu::dropout_mask(ins)) continue;
        ++masks;
        EXPECT_FALSE(backend::cpu::jit_compile(ins)) << "a random draw compiled";
        std::vector<std::vector<int64_t>> keys;
        std::vector<char*> in;
        const uint64_t seed = 0x5EEDu + static_cast<uint64_t>(n), offset = 77, first = 4 * 1000003 + 3;
        for (const auto& op : ins.inputs) {
          keys.emplace_back(static_cast<size_t>(op.view.offset), 0);
          for (uint64_t v : {seed, offset, first}) keys.back().push_back(static_cast<int64_t>(v));
          in.push_back(reinterpret_cast<char*>(keys.back().data()));
        }
        const int64_t at = ins.output.view.offset;
        std::vector<char> out(static_cast<size_t>(at + n), 7);
        backend::cpu::run_fused(ins, in, out.data(), {});
        for (int64_t j = 0; j < n; ++j) {
          const bool keep = backend::cpu::Philox::uniform(seed, offset, first + static_cast<uint64_t>(j)) >=
                            static_cast<float>(p);
          ASSERT_EQ(out[static_cast<size_t>(at + j)], keep ? 1 : 0) << "p " << p << ", element " << j << " of " << n;
        }
      }
      EXPECT_EQ(masks, 1) << traced.program.dump();
    }
}

// A copy of a view with contiguous rows (heads permuted to [B, T, H, D])
// runs as row copies (copies_rows, one of own_loop's: not compiled, not
// noted as interpreted in the profile); the values are the view's.
TEST(CpuJit, RowCopiesRunAsRowsNotLoops) {
  const int64_t B = 2, H = 3, T = 5, D = 16;
  const std::vector<float> values = testing::uniform_values(B * H * T * D, 31);
  Tensor x = Tensor::from_vector(values, {B, H, T, D});
  Tensor y = permute(x, {0, 2, 1, 3});  // a result: copied into its output
  const testing::TracedProgram traced = testing::trace_program({y});
  int copies = 0;
  for (const auto& ins : traced.program.instrs) {
    copies += backend::cpu::copies_rows(ins);
    EXPECT_EQ(backend::cpu::own_loop(ins), backend::cpu::copies_rows(ins));  // (the executor's profile note)
  }
  EXPECT_EQ(copies, 1) << traced.program.dump();
  EXPECT_EQ(backend::cpu::prepare(traced.program)->compiled(), 0) << traced.program.dump();
  const Executed run = execute({y}, true);
  ASSERT_EQ(run.outputs.size(), 1u);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          float got;
          std::memcpy(&got, &run.outputs[0][static_cast<size_t>((((b * T + t) * H + h) * D + d) * 4)], 4);
          ASSERT_EQ(got, values[static_cast<size_t>(((b * H + h) * T + t) * D + d)]) << b << " " << t << " " << h;
        }
}

// Programs with random numbers stay with the interpreter.
TEST(CpuJit, RandomNumbersStayInterpreted) {
  if (!backend::cpu::jit_enabled()) GTEST_SKIP() << "compiled loops are off (KILN_JIT=0 or no AVX2)";
  Generator gen(7);
  Tensor x = Tensor::from_vector(testing::uniform_values(1000, 11), {1000});
  Tensor y = x * ge(rand({1000}, gen), scalar_like(0.5, x));
  const testing::TracedProgram traced = testing::trace_program({y});
  EXPECT_EQ(backend::cpu::prepare(traced.program)->compiled(), 0) << traced.program.dump();
  EXPECT_GT(traced.program.num_fused, 0) << traced.program.dump();
}

}  // namespace
}  // namespace kiln
