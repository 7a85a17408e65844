// The CUDA backend's logic that runs without a GPU: device errors, the
// caching allocator's size classes, and the kernels' index math and fused
// interpreter (shared __host__ __device__ code) run on the host against the
// CPU backend. Built in every configuration; the CUDA-only parts need
// KILN_HAVE_CUDA (a build with the CUDA toolkit, GPU or not).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <set>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/philox.h"
#include "kiln/compiler/compile.h"
#include "kiln/io/safetensors.h"
#include "kiln/ir/graph.h"
#include "kiln/optim/optimizer.h"
#include "kiln/runtime/context.h"
#include "support/program_util.h"
#include "support/test_util.h"
#include "train/tiny_bert.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/backend/cuda/cuda.h"
#include "kiln/backend/cuda/codegen.h"
#include "kiln/backend/cuda/encode.h"
#include "kiln/backend/cuda/jit.h"
#include "kiln/backend/cuda/fused_eval.h"
#include "kiln/backend/cuda/libraries.h"
#include "kiln/backend/cuda/pool.h"
#endif

namespace kiln {
namespace {

using testing::error_of;

int visible_gpus() {
#ifdef KILN_HAVE_CUDA
  return backend::cuda::device_count();
#else
  return 0;
#endif
}

// ---- device errors: these run on CPU-only machines ----

TEST(CudaDevice, ParsingAcceptsCudaDevices) {
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_CONTAINS(error_of([] { Device::parse("cuda:x"); }), "bad index 'x'");
  EXPECT_CONTAINS(error_of([] { Device::parse("gpu:0"); }), "unknown device 'gpu:0'");
}

TEST(CudaDevice, BeyondTheVisibleDevicesIsAnError) {
  const int n = visible_gpus();
  const Device beyond = Device::cuda(n);
  const std::string err = error_of([&] { runtime::DeviceContext::get(beyond); });
#ifdef KILN_HAVE_CUDA
  EXPECT_CONTAINS(err, "device " + beyond.str() + " requested but " + std::to_string(n) + " CUDA device");
  EXPECT_CONTAINS(err, "visible");
#else
  EXPECT_CONTAINS(err, "this build has no CUDA backend");
#endif
  // Memory and tensors on that device fail the same way, before any step.
  EXPECT_CONTAINS(error_of([&] { Storage s(beyond, 16); }), beyond.str());
  EXPECT_CONTAINS(error_of([&] { Tensor::from_vector(std::vector<float>{1, 2}, {2}, beyond); }), beyond.str());
  EXPECT_CONTAINS(error_of([&] { zeros({2}, DType::f32, beyond); }), beyond.str());
}

TEST(CudaDevice, SafetensorsLoadOntoAMissingDeviceNamesFileAndTensor) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a CUDA device is visible (the GPU tests load onto it)";
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/kiln_cuda_missing.safetensors";
  io::save_safetensors(path, {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})}});
  auto f = io::SafetensorsFile::open(path);
  const std::string err = error_of([&] { f.load("w", Device::cuda()); });
  EXPECT_CONTAINS(err, "kiln_cuda_missing.safetensors");
  EXPECT_CONTAINS(err, "'w'");
  EXPECT_CONTAINS(err, "cuda:0");
  std::remove(path.c_str());
}

#ifdef KILN_HAVE_CUDA

using backend::cuda::BlockPool;

// ---- cuBLAS and NVRTC: opened on first use ----

#ifdef KILN_HAVE_CUDA
// Whether this process has mapped a shared library whose file name holds `name`.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(CudaLibraries, CublasAndNvrtcAreNotLoadedUntilTheBackendCallsThem) {
  // (ctest runs each test in a process of its own; a GPU run's earlier
  // tests in the same process may have multiplied matrices.)
  if (visible_gpus() > 0) GTEST_SKIP() << "a CUDA device is visible (other tests may have opened cuBLAS)";
  EXPECT_FALSE(mapped("libcublas")) << "cuBLAS (and cuBLASLt: ~180 MB resident) loaded with the program";
  EXPECT_FALSE(mapped("libnvrtc"));
  const backend::cuda::Cublas& blas = backend::cuda::cublas();
  for (const void* f : {reinterpret_cast<const void*>(blas.create), reinterpret_cast<const void*>(blas.set_stream),
                        reinterpret_cast<const void*>(blas.set_math_mode),
                        reinterpret_cast<const void*>(blas.set_workspace), reinterpret_cast<const void*>(blas.gemm_ex),
                        reinterpret_cast<const void*>(blas.gemm_strided_batched_ex),
                        reinterpret_cast<const void*>(blas.status_string),
                        reinterpret_cast<const void*>(blas.status_name)})
    EXPECT_NE(f, nullptr);
  EXPECT_TRUE(mapped("libcublas"));
  EXPECT_STREQ(blas.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&backend::cuda::cublas(), &blas);  // opened once
  int major = 0, minor = 0;
  ASSERT_EQ(backend::cuda::nvrtc().version(&major, &minor), NVRTC_SUCCESS);
  EXPECT_GE(major, 12);
  EXPECT_TRUE(mapped("libnvrtc"));
  EXPECT_STREQ(backend::cuda::nvrtc().error_string(NVRTC_ERROR_INVALID_INPUT), "NVRTC_ERROR_INVALID_INPUT");
}
#endif

// ---- the caching allocator ----

TEST(CudaPool, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(BlockPool::size_class(0), 512u);
  EXPECT_EQ(BlockPool::size_class(1), 512u);
  EXPECT_EQ(BlockPool::size_class(512), 512u);
  EXPECT_EQ(BlockPool::size_class(513), 1024u);
  EXPECT_EQ(BlockPool::size_class(1 << 20), size_t{1} << 20);
  EXPECT_EQ(BlockPool::size_class((1 << 20) + 1), (size_t{1} << 20) + (1 << 17));
  std::mt19937_64 rng(5);
  for (int t = 0; t < 10000; ++t) {
    const size_t n = rng() % (size_t{1} << (rng() % 34));
    const size_t c = BlockPool::size_class(n);
    ASSERT_GE(c, n);
    ASSERT_EQ(BlockPool::size_class(c), c) << n;  // classes are fixed points
    if (n > (1u << 20)) {
      ASSERT_LE(c, n + n / 8) << n;
    }
  }
}

TEST(CudaPool, ReleasedBlocksAreReusedAndTrimmedWhenOutOfMemory) {
  size_t live = 0, limit = 1 << 16, calls = 0;
  BlockPool pool(
      "test",
      [&](size_t n) -> void* {
        ++calls;
        if (live + n > limit) return nullptr;
        live += n;
        return std::malloc(n);
      },
      [&](void* p) {
        std::free(p);
        live -= 4096;  // only 4096-byte blocks are released below
      });
  void* a = pool.allocate(4000);
  void* b = pool.allocate(3000);  // same class: 4096
  EXPECT_EQ(pool.stats().in_use, 8192u);
  pool.release(a, 4000);
  EXPECT_EQ(pool.stats().cached, 4096u);
  void* c = pool.allocate(4096);
  EXPECT_EQ(c, a);  // from the free list
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(pool.stats().reuses, 1u);
  pool.release(b, 3000);
  pool.release(c, 4096);
  EXPECT_EQ(pool.stats().cached, 8192u);
  // 65536 bytes fit only once the two cached blocks are given back.
  void* big = pool.allocate(60000);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(pool.stats().cached, 0u);
  EXPECT_EQ(pool.stats().reserved, 65536u);
  EXPECT_EQ(live, 65536u);
  const std::string err = error_of([&] { pool.allocate(100); });
  EXPECT_CONTAINS(err, "test: out of memory allocating 100 bytes");
  std::free(big);  // straight back to the C heap: the pool's release hook would count 4096
  live = 0;
}

// ---- index math shared with the kernels ----

TEST(CudaIndexMath, ViewOffsetsFollowShapeAndStrides) {
  // Every layout: contiguous with an offset, transposed, broadcast, sliced, scalar.
  struct Case {
    Shape shape;
    std::vector<int64_t> strides;
    int64_t offset;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {12, 4, 1}, 5}, {{4, 3}, {1, 4}, 0},     {{2, 3, 4}, {0, 1, 0}, 7},
      {{3, 2}, {6, 3}, 2},        {{5}, {0}, 9},           {{2, 1, 3, 2, 2}, {24, 99, 2, 12, 1}, 1},
      {{}, {}, 4},                {{1, 1}, {0, 0}, 3},
      // merged dimensions: a mask broadcast over batch and heads, extent-1 dims, a transposed pair
      {{2, 3, 4, 5}, {0, 0, 5, 1}, 2}, {{4, 1, 5}, {5, 7, 1}, 0}, {{2, 3, 4}, {12, 1, 3}, 0},
  };
  for (const auto& c : cases) {
    compiler::Operand op;
    op.slot = 0;
    op.view = compiler::View{c.offset, c.shape, c.strides};
    const backend::cuda::ViewDesc d = backend::cuda::view_desc(op);
    const int64_t n = numel(c.shape);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, want = c.offset;
      for (int64_t k = static_cast<int64_t>(c.shape.size()) - 1; k >= 0; --k) {
        want += (rem % c.shape[k]) * c.strides[k];
        rem /= c.shape[k];
      }
      ASSERT_EQ(backend::cuda::view_offset(d, i), want) << to_string(c.shape) << " element " << i;
      backend::cuda::ViewDesc wide = d;  // the 64-bit path of views of 2^31 elements and more
      wide.narrow = 0;
      ASSERT_EQ(backend::cuda::view_offset(wide, i), want) << to_string(c.shape) << " element " << i << " (64-bit)";
    }
  }
  {  // [2, 3, 4, 5] broadcast over its first two dimensions divides once
    compiler::Operand op;
    op.view = compiler::View{0, {2, 3, 4, 5}, {0, 0, 5, 1}};
    const backend::cuda::ViewDesc d = backend::cuda::view_desc(op);
    EXPECT_EQ(d.rank, 2);
    EXPECT_EQ(d.shape[0], 6);
    EXPECT_EQ(d.shape[1], 20);
    EXPECT_EQ(d.strides[0], 0);
    op.view = compiler::View{3, {2, 1, 6}, {6, 0, 1}};
    EXPECT_EQ(backend::cuda::view_desc(op).layout, backend::cuda::kContiguous);
  }
  compiler::Operand deep;
  deep.view = compiler::View::contiguous(Shape(9, 1));
  EXPECT_CONTAINS(error_of([&] { backend::cuda::view_desc(deep); }), "rank 9");
}

TEST(CudaIndexMath, PhiloxSharedCoreIsTheCpuGenerator) {
  uint32_t w[4];
  backend::philox_block(0, 0, 0, w);  // Random123's known answer
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  std::vector<float> u(1000), z(1000);
  backend::cpu::Philox::uniform_range(11, 4, 77, 1000, u.data());
  backend::cpu::Philox::normal_range(11, 4, 77, 1000, z.data());
  for (int64_t j = 0; j < 1000; ++j) {
    ASSERT_EQ(backend::philox_uniform(11, 4, 77 + j), u[j]);
    ASSERT_EQ(backend::philox_normal(11, 4, 77 + j), z[j]);
  }
}

// ---- compiled programs run on the host with the CUDA kernels' fused code ----

using testing::HostMemory;

template <typename E>
void emulate_gemm(const backend::cuda::GemmPlan& g, const E* a, const E* b, float* c, bool accumulate = false);

// Every fused instruction through encode_fused + fused_eval (the CUDA
// kernel's body), every MatMul through its cuBLAS plan, everything else
// through the CPU kernels.
void run_emulated(const compiler::Program& p, std::span<void* const> params, std::span<void* const> outputs,
                  void* arena) {
  using namespace backend::cuda;
  std::vector<char*> base(p.slots.size());
  for (size_t s = 0; s < p.slots.size(); ++s) {
    const auto& slot = p.slots[s];
    base[s] = slot.kind == compiler::SlotKind::Param    ? static_cast<char*>(params[slot.index])
              : slot.kind == compiler::SlotKind::Output ? static_cast<char*>(outputs[slot.index])
                                                        : static_cast<char*>(arena) + slot.offset;
  }
  for (const auto& ins : p.instrs) {
    std::vector<char*> in;
    for (const auto& op : ins.inputs) in.push_back(base[op.slot]);
    if (ins.op == ir::Op::MatMul && !ins.fused) {
      const GemmPlan g = plan_gemm(ins);
      float* c = reinterpret_cast<float*>(base[ins.output.slot]) + ins.output.view.offset;
      const bool bias = ins.inputs.size() == 3;  // the executor's fill_rows, then beta = 1
      if (bias) {
        const auto& bv = ins.inputs[2].view;
        const float* v = reinterpret_cast<float*>(in[2]) + bv.offset;
        const int64_t n = ins.output.view.shape.back();
        for (int64_t i = 0; i < g.c_elems; ++i) c[i] = v[(i % n) * bv.strides[0]];
      } else if (g.calls.empty()) {
        std::fill_n(c, g.c_elems, 0.0f);
      }
      if (g.bf16)
        emulate_gemm(g, reinterpret_cast<uint16_t*>(in[0]), reinterpret_cast<uint16_t*>(in[1]),
                     reinterpret_cast<float*>(base[ins.output.slot]), bias);
      else
        emulate_gemm(g, reinterpret_cast<float*>(in[0]), reinterpret_cast<float*>(in[1]),
                     reinterpret_cast<float*>(base[ins.output.slot]), bias);
      continue;
    }
    if (!ins.fused) {
      backend::cpu::run_kernel(ins, in, base[ins.output.slot]);
      continue;
    }
    const FusedRecord rec = encode_fused(ins);
    const auto* d = reinterpret_cast<const FusedDesc*>(rec.words.data());
    const FStep* steps = desc_array<FStep>(d, d->steps_at);
    const ViewDesc* inputs = desc_array<ViewDesc>(d, d->inputs_at);
    ASSERT_LE(d->nregs, kFusedMaxRegs);
    for (int64_t i = 0; i < d->n; ++i) {
      if (d->wide) {
        double regs[kFusedMaxRegs] = {};
        ASSERT_TRUE(fused_eval<double>(steps, d->nsteps, inputs, base.data(), i, regs));
        fused_store<double>(d, base.data(), i, regs);
      } else {
        float regs[kFusedMaxRegs] = {};
        ASSERT_TRUE(fused_eval<float>(steps, d->nsteps, inputs, base.data(), i, regs));
        fused_store<float>(d, base.data(), i, regs);
      }
    }
  }
}

// Compiles what the tensors need and runs it twice, on the CPU backend and
// emulated; compares every output (float outputs within rtol, others exactly).
void expect_same_as_cpu(const std::vector<Tensor>& results, double rtol = 2e-5, int* fused_count = nullptr) {
  const testing::TracedProgram traced = testing::trace_program(results);
  const compiler::Program& p = traced.program;
  const std::vector<ir::NodePtr>& outs = traced.outputs;
  const std::vector<void*>& param_ptrs = traced.params;
  HostMemory mem;
  std::vector<void*> cpu_out, emu_out;
  for (size_t o = 0; o < p.output_nbytes.size(); ++o) {
    cpu_out.push_back(mem.get(p.output_nbytes[o]));
    emu_out.push_back(mem.get(p.output_nbytes[o]));
  }
  backend::cpu::execute(p, nullptr, param_ptrs, cpu_out, mem.get(p.arena_bytes));
  run_emulated(p, param_ptrs, emu_out, mem.get(p.arena_bytes));
  if (fused_count) *fused_count = p.num_fused;
  // Outputs are the graph's outputs in order: the results' nodes.
  ASSERT_EQ(p.output_nbytes.size(), outs.size());
  for (size_t o = 0; o < outs.size(); ++o) {
    const int64_t n = outs[o]->numel();
    for (int64_t i = 0; i < n; ++i) {
      double got, want;
      switch (outs[o]->dtype) {
        case DType::f32: got = static_cast<float*>(emu_out[o])[i], want = static_cast<float*>(cpu_out[o])[i]; break;
        case DType::i32: got = static_cast<int32_t*>(emu_out[o])[i], want = static_cast<int32_t*>(cpu_out[o])[i]; break;
        case DType::i64: got = static_cast<double>(static_cast<int64_t*>(emu_out[o])[i]),
                         want = static_cast<double>(static_cast<int64_t*>(cpu_out[o])[i]); break;
        case DType::bf16: got = bf16_to_float(static_cast<uint16_t*>(emu_out[o])[i]),
                          want = bf16_to_float(static_cast<uint16_t*>(cpu_out[o])[i]); break;
        default: got = static_cast<uint8_t*>(emu_out[o])[i], want = static_cast<uint8_t*>(cpu_out[o])[i]; break;
      }
      // bf16 results may differ by one rounding where the f32 sums before it differ in the last bits.
      const double tol = outs[o]->dtype == DType::f32    ? rtol * std::abs(want) + 1e-6
                         : outs[o]->dtype == DType::bf16 ? std::ldexp(std::abs(want), -7) + 1e-6
                                                         : 0.0;
      if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << "output " << o << " element " << i;
      else ASSERT_LE(std::abs(got - want), tol) << "output " << o << " (" << dtype_name(outs[o]->dtype)
                                                 << to_string(outs[o]->shape) << ") element " << i << "\n" << p.dump();
    }
  }
}

std::vector<float> values(int64_t n, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  return testing::uniform_values(n, seed, lo, hi);
}

TEST(CudaFusedEmulation, EveryElementwiseOpMatchesTheCpuInterpreter) {
  Tensor a = Tensor::from_vector(values(24, 1), {4, 6});
  Tensor b = Tensor::from_vector(values(6, 2, 0.5f, 3.0f), {6});
  Tensor c = Tensor::from_vector(values(4, 3), {4, 1});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, -7, 12, 5, 0, 9}, {6});
  std::vector<Tensor> r = {
      -a + b * c - a / b,
      exp(a) + log(b) + tanh(a) + erf(a) + sqrt(b) + rsqrt(b) + abs(a),
      sigmoid(a) * relu(a) + gelu(a) + gelu(a, "tanh"),
      pow(b, a) + pow(a, 2.0) + maximum(a, c) + minimum(a, c),
      cast(logical_and(lt(a, c), ge(a, -1.0 * c)), DType::f32) + cast(logical_or(eq(a, c), ne(b, c)), DType::f32),
      where(gt(a, c), a, c) + cast(logical_not(le(a, 0.5 * c)), DType::f32),
      ids + ids * 3,                       // integer group: evaluated in double
      div(ids, full({}, 4, DType::i64)),   // truncating division
      cast(a * 10.0, DType::i64),          // truncation toward zero
      cast(ids, DType::f32) / 3.0 + a.detach(),
      cast(gt(a, scalar_like(0.0, a)), DType::b8),
      cast(a * 3.0, DType::bf16),
      cast(transpose(cast(a, DType::bf16), 0, 1), DType::f32) + 1.0,
  };
  int fused = 0;
  expect_same_as_cpu(r, 2e-5, &fused);
  EXPECT_GE(fused, 8);
}

TEST(CudaFusedEmulation, RandomNumbersAndBroadcastViewsMatchExactly) {
  Generator g(1234);
  Tensor x = Tensor::from_vector(values(2 * 3 * 5, 7), {2, 3, 5});
  Tensor row = Tensor::from_vector(values(5, 8), {5});
  std::vector<Tensor> r = {rand({3, 7}, g), randn({5, 5}, g), dropout(x, 0.3, g) + row,
                           bernoulli({2, 9}, 0.4, g), transpose(x, 0, 2) * 2.0 + 1.0,
                           broadcast_to(unsqueeze(row, 0), {4, 5}) + 1.0, slice(x, 2, 1, 5, 2) * 3.0};
  expect_same_as_cpu(r, 0.0);
}

// Two sequences of six tokens, one padded, with class labels.
models::ModelInputs tiny_bert_batch() {
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{2, 5, 9, 13, 1, 0, 7, 7, 30, 4, 0, 0}, {2, 6});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 6});
  in.labels = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2});
  return in;
}

TEST(CudaFusedEmulation, TinyBertTrainingStepMatchesTheCpu) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    auto model = models::create_model("BertForSequenceClassification", testing::tiny_bert(2), 3);
    model->train();
    const models::ModelInputs in = tiny_bert_batch();
    Tensor loss;
    {
      Autocast autocast(bf16);
      loss = model->forward(in).loss;
    }
    loss.backward();
    std::vector<Tensor> r{loss};
    for (const auto& p : model->parameters()) r.push_back(p.grad());
    int fused = 0;
    expect_same_as_cpu(r, 1e-4, &fused);
    EXPECT_GE(fused, 10);
  }
}

// A whole training step of a 12-layer model (what bert-base compiles to,
// at toy width): gradient clipping sums ~200 norms and AdamW updates every
// parameter in one pass. Every fused program fits the device interpreter's
// registers, and the step gives the CPU's result.
TEST(CudaFusedEmulation, ATwelveLayerTrainingStepFitsTheRegisters) {
  auto model = models::create_model("BertForSequenceClassification", testing::tiny_bert(12), 3);
  model->train();
  const models::ModelInputs in = tiny_bert_batch();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  model->forward(in).loss.backward();
  optim::clip_grad_norm(model->parameters(), 1.0);
  opt.step();
  std::vector<Tensor> r = model->parameters();
  std::vector<ir::NodePtr> outs, params;
  for (const auto& t : r) outs.push_back(t.node());
  const compiler::Program p = compiler::compile(ir::flatten(outs, &params));
  size_t longest = 0;
  for (const auto& ins : p.instrs)
    if (ins.fused) {
      longest = std::max(longest, ins.program.size());
      EXPECT_NO_THROW(backend::cuda::encode_fused(ins)) << ins.program.size() << " steps";
    }
  EXPECT_GE(longest, 100u);  // the clipping coefficient's sum of norms is one program
  expect_same_as_cpu(r, 1e-4);
}

// The generated kernels (codegen.h) of every fused program of a 12-layer
// training step, fp32 and with bf16 products: NVRTC compiles them for Hopper
// here (no GPU needed), and the layers share their kernels. (The GPU tests
// run them.)
TEST(CudaCodegen, EveryProgramOfATrainingStepCompilesWithNvrtc) {
  std::set<std::string> distinct;
  int fused = 0;
  for (const bool bf16 : {false, true}) {
    auto model = models::create_model("BertForSequenceClassification", testing::tiny_bert(12), 3);
    model->train();
    optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
    Tensor loss;
    {
      Autocast autocast(bf16);
      loss = model->forward(tiny_bert_batch()).loss;
    }
    loss.backward();
    optim::clip_grad_norm(model->parameters(), 1.0);
    opt.step();
    std::vector<ir::NodePtr> outs, params;
    for (const auto& t : model->parameters()) outs.push_back(t.node());
    const compiler::Program p = compiler::compile(ir::flatten(outs, &params));
    for (const auto& ins : p.instrs)
      if (ins.fused) {
        ++fused;
        distinct.insert(backend::cuda::fused_kernel_source(ins, "k"));
      }
  }
  EXPECT_TRUE(std::any_of(distinct.begin(), distinct.end(),
                          [](const std::string& k) { return k.find("bf16_from_float") != std::string::npos; }));
  std::vector<std::string> kernels;
  for (const auto& text : distinct) {
    std::string k = text;
    k.replace(k.find("void __launch_bounds__(256) k("), 30,
              "void __launch_bounds__(256) k" + std::to_string(kernels.size()) + "(");
    kernels.push_back(k);
  }
  EXPECT_LT(distinct.size() * 3, static_cast<size_t>(fused)) << fused << " fused programs";
  const std::string cubin = backend::cuda::compile_cubin(backend::cuda::fused_translation_unit(kernels), 90);
  EXPECT_GT(cubin.size(), 1000u);
}

TEST(CudaCodegen, EveryElementwiseOpAndViewKindCompiles) {
  Tensor a = Tensor::from_vector(values(24, 1), {4, 6});
  Tensor b = Tensor::from_vector(values(6, 2, 0.5f, 3.0f), {6});
  Tensor c = Tensor::from_vector(values(4, 3), {4, 1});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, -7, 12, 5, 0, 9}, {6});
  Generator g(11);
  Tensor h = cast(a, DType::bf16);
  (void)h.to_vector<float>();  // now stored bf16 data
  std::vector<Tensor> r = {
      cast(a * 3.0, DType::bf16),                  // stores bf16
      cast(transpose(h, 0, 1), DType::f32) * 2.0,  // loads bf16 through a view
      -a + b * c - a / b + pow(abs(a) + 0.5, b) + maximum(a, b) + minimum(a, c),
      exp(a) + log(b) + tanh(a) + erf(a) + sqrt(b) + rsqrt(b) + sigmoid(a) + relu(a) + gelu(a) + gelu(a, "tanh"),
      where(logical_and(gt(a, b), logical_not(le(a, c))), a, b) + cast(logical_or(eq(a, b), ne(a, c)), DType::f32),
      cast(div(ids * 7, full({}, 3, DType::i64)) + ids, DType::f32) + b,
      dropout(transpose(a, 0, 1), 0.3, g) + bernoulli({6, 4}, 0.4, g),
  };
  std::vector<ir::NodePtr> outs, params;
  for (const auto& t : r) outs.push_back(t.node());
  const compiler::Program p = compiler::compile(ir::flatten(outs, &params));
  std::vector<std::string> kernels;
  for (const auto& ins : p.instrs)
    if (ins.fused) kernels.push_back(backend::cuda::fused_kernel_source(ins, "k" + std::to_string(kernels.size())));
  EXPECT_GE(kernels.size(), 4u);
  const std::string all = backend::cuda::fused_translation_unit(kernels);
  const std::string gelu_op = "(kiln::ir::Op)" + std::to_string(static_cast<int>(ir::Op::Gelu)) + ",";
  for (const std::string& want : {std::string("double"), std::string("philox_uniform"), gelu_op, std::string("% 6u"),
                                  std::string("__longlong_as_double"), std::string("kiln::bf16_from_float"),
                                  std::string("kiln::bf16_to_float")})
    EXPECT_NE(all.find(want), std::string::npos) << want << " in\n" << all;
  EXPECT_GT(backend::cuda::compile_cubin(all, 90).size(), 1000u);
  // NVRTC's log reaches the error.
  EXPECT_CONTAINS(error_of([&] { backend::cuda::compile_cubin("__global__ void k() { undeclared(); }", 90); }),
                  "undeclared");
}

TEST(CudaFusedEmulation, RegistersAreReusedOnceTheirLastReaderRan) {
  // A long chain needs two live values, whatever its length.
  Tensor x = Tensor::from_vector(values(8, 9), {8});
  Tensor y = x;
  for (int k = 0; k < 40; ++k) y = y * 0.9 + x;
  std::vector<ir::NodePtr> params;
  const compiler::Program p = compiler::compile(ir::flatten({y.node()}, &params));
  ASSERT_EQ(p.instrs.size(), 1u);
  const auto rec = backend::cuda::encode_fused(p.instrs[0]);
  EXPECT_LE(rec.desc.nregs, 4) << rec.desc.nsteps << " steps";
  expect_same_as_cpu({y}, 1e-6);
}

TEST(CudaFusedEmulation, ExtraOutputsStoreTheirRegisters) {
  // out = (x + 1) * y, extra outputs: x + 1 (f32) and x > 0 (bool).
  using compiler::FusedStep;
  compiler::Instr ins;
  ins.fused = true;
  const Shape s{3, 4};
  for (int k = 0; k < 2; ++k) ins.inputs.push_back(compiler::Operand{k, compiler::View::contiguous(s), DType::f32});
  auto step = [](ir::Op op, DType t, int a = -1, int b = -1, int load = -1, double v = 0) {
    FusedStep f{op, t, a, b, -1, load, {}};
    if (op == ir::Op::Constant) f.attrs.floats = {v};
    return f;
  };
  ins.program = {step(ir::Op::Data, DType::f32, -1, -1, 0),  step(ir::Op::Data, DType::f32, -1, -1, 1),
                 step(ir::Op::Constant, DType::f32, -1, -1, -1, 1.0), step(ir::Op::Add, DType::f32, 0, 2),
                 step(ir::Op::Constant, DType::f32, -1, -1, -1, 0.0), step(ir::Op::Gt, DType::b8, 0, 4),
                 step(ir::Op::Mul, DType::f32, 3, 1)};
  ins.output = compiler::Operand{2, compiler::View::contiguous(s), DType::f32};
  ins.extra_outputs = {{3, compiler::Operand{3, compiler::View::contiguous(s), DType::f32}},
                       {5, compiler::Operand{4, compiler::View::contiguous(s), DType::b8}}};
  const auto x = values(12, 21), y = values(12, 22);
  std::vector<float> out(12), plus(12);
  std::vector<uint8_t> pos(12);
  char* slots[] = {(char*)x.data(), (char*)y.data(), (char*)out.data(), (char*)plus.data(), (char*)pos.data()};
  const auto rec = backend::cuda::encode_fused(ins);
  const auto* d = reinterpret_cast<const backend::cuda::FusedDesc*>(rec.words.data());
  EXPECT_EQ(d->nouts, 3);
  for (int64_t i = 0; i < 12; ++i) {
    float regs[backend::cuda::kFusedMaxRegs] = {};
    ASSERT_TRUE(backend::cuda::fused_eval<float>(backend::cuda::desc_array<backend::cuda::FStep>(d, d->steps_at),
                                                 d->nsteps,
                                                 backend::cuda::desc_array<backend::cuda::ViewDesc>(d, d->inputs_at),
                                                 slots, i, regs));
    backend::cuda::fused_store<float>(d, slots, i, regs);
  }
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(plus[i], x[i] + 1.0f);
    EXPECT_EQ(out[i], (x[i] + 1.0f) * y[i]);
    EXPECT_EQ(pos[i], x[i] > 0.0f);
  }
}

TEST(CudaFusedEmulation, UnsupportedProgramsAreClearErrors) {
  compiler::Instr ins;
  ins.fused = true;
  ins.output = compiler::Operand{0, compiler::View::contiguous({2}), DType::f32};
  ins.program = {compiler::FusedStep{ir::Op::MatMul, DType::f32, -1, -1, -1, -1, {}}};
  EXPECT_CONTAINS(error_of([&] { backend::cuda::encode_fused(ins); }), "unsupported op matmul");
}

// ---- GEMM plans: the cuBLAS calls, carried out by a naive column-major loop ----

float as_float(float x) { return x; }
float as_float(uint16_t x) { return bf16_to_float(x); }

// cuBLAS's product of f32 or bf16 operands, in double.
template <typename E>
void emulate_gemm(const backend::cuda::GemmPlan& g, const E* a, const E* b, float* c, bool accumulate) {
  for (const auto& call : g.calls)
    for (int64_t t = 0; t < call.batch; ++t) {
      const E* A = b + call.b + t * call.stride_b;  // cuBLAS's A: our B
      const E* B = a + call.a + t * call.stride_a;
      float* C = c + call.c + t * g.M * g.N;
      for (int64_t j = 0; j < g.M; ++j)
        for (int64_t i = 0; i < g.N; ++i) {
          double acc = 0;
          for (int64_t k = 0; k < g.K; ++k) {
            const float av = as_float(g.trans_b ? A[k + i * g.ldb] : A[i + k * g.ldb]);
            const float bv = as_float(g.trans_a ? B[j + k * g.lda] : B[k + j * g.lda]);
            acc += static_cast<double>(av) * bv;
          }
          C[i + j * g.N] = static_cast<float>(acc + (accumulate ? C[i + j * g.N] : 0.0));
        }
    }
}

TEST(CudaGemmPlan, TransposedBatchedAndBroadcastViewsGiveTheCpuProduct) {
  struct Case {
    Shape a, b;
    bool ta, tb;
    std::function<Tensor(Tensor)> va, vb;  // views applied before the product
  };
  auto id = [](Tensor t) { return t; };
  const std::vector<Case> cases = {
      {{5, 3}, {3, 4}, false, false, id, id},
      {{3, 5}, {4, 3}, true, true, id, id},
      {{2, 5, 3}, {3, 4}, false, false, id, id},                 // B shared: one stacked GEMM
      {{2, 5, 3}, {2, 3, 4}, false, false, id, id},              // strided batch
      {{2, 1, 5, 3}, {1, 4, 3, 6}, false, false, id, id},        // broadcast over two batch dims
      {{2, 5, 3, 4}, {2, 4, 3, 6}, false, false,                 // permuted (attention-like) operands
       [](Tensor t) { return permute(t, {0, 2, 1, 3}); }, [](Tensor t) { return permute(t, {0, 2, 1, 3}); }},
      {{1, 4}, {4, 7}, false, false, id, id},                    // M == 1
      {{6, 4}, {4, 1}, false, false, id, id},                    // N == 1
      {{4, 6}, {5, 4}, false, false, [](Tensor t) { return transpose(t, 0, 1); },
       [](Tensor t) { return transpose(t, 0, 1); }},
  };
  uint64_t seed = 40;
  for (const auto& c : cases) {
    Tensor A = c.va(Tensor::from_vector(values(numel(c.a), seed++), c.a));
    Tensor B = c.vb(Tensor::from_vector(values(numel(c.b), seed++), c.b));
    SCOPED_TRACE(to_string(c.a) + " x " + to_string(c.b));
    expect_same_as_cpu({matmul(A, B, c.ta, c.tb)}, 1e-5);
  }
  // A broadcast over two batch dims is not one arithmetic progression: one call per run.
  Tensor A = Tensor::from_vector(values(2 * 5 * 3, 1), {2, 1, 5, 3});
  Tensor B = Tensor::from_vector(values(4 * 3 * 6, 2), {1, 4, 3, 6});
  std::vector<ir::NodePtr> params;
  const compiler::Program p = compiler::compile(ir::flatten({matmul(A, B).node()}, &params));
  ASSERT_EQ(p.instrs.size(), 1u);
  const auto g = backend::cuda::plan_gemm(p.instrs[0]);
  EXPECT_EQ(g.calls.size(), 2u);
  EXPECT_EQ(g.calls[0].batch, 4);
}

// Which products run on padded copies (executor.cpp; checked on an H200 by
// CudaOps.LargeProductsWithUnalignedRowsMatchTheCpu): large single-call ones
// whose extents or rows are not multiples of 8 / 16 bytes, as GPT-2's LM head.
TEST(CudaGemmPlan, LargeProductsWithOddExtentsRunOnPaddedCopies) {
  auto plan = [](const Shape& a, const Shape& b, bool tb, DType dtype) {
    Tensor A = cast(Tensor::from_vector(values(numel(a), 1), a), dtype);
    Tensor B = cast(Tensor::from_vector(values(numel(b), 2), b), dtype);
    std::vector<ir::NodePtr> params;
    const compiler::Program p = compiler::compile(ir::flatten({matmul(A, B, false, tb).node()}, &params));
    for (const auto& ins : p.instrs)
      if (ins.op == ir::Op::MatMul && !ins.fused) return backend::cuda::plan_gemm(ins);
    ADD_FAILURE() << "no product";
    return backend::cuda::GemmPlan{};
  };
  using backend::cuda::aligned256;
  // [512 x 777] x [1001 x 777]ᵀ, bf16: every extent rounded up to a multiple of 8.
  const auto odd = backend::cuda::plan_gemm_padding(plan({512, 777}, {1001, 777}, true, DType::bf16));
  EXPECT_TRUE(odd.on);
  EXPECT_EQ(odd.M, 512);
  EXPECT_EQ(odd.N, 1008);
  EXPECT_EQ(odd.K, 784);
  EXPECT_EQ(odd.bytes, aligned256(512 * 784 * 2) + aligned256(784 * 1008 * 2) + aligned256(512 * 1008 * 4));
  // f32 operands: 4-byte elements in A' and B'.
  const auto f32 = backend::cuda::plan_gemm_padding(plan({512, 777}, {1001, 777}, true, DType::f32));
  EXPECT_EQ(f32.bytes, aligned256(512 * 784 * 4) + aligned256(784 * 1008 * 4) + aligned256(512 * 1008 * 4));
  // Aligned extents, or too small to pay: as they are.
  EXPECT_FALSE(backend::cuda::plan_gemm_padding(plan({512, 768}, {768, 1024}, false, DType::bf16)).on);
  EXPECT_FALSE(backend::cuda::plan_gemm_padding(plan({64, 77}, {77, 101}, false, DType::bf16)).on);
  // Only N odd (the LM head's vocabulary), K and M aligned.
  const auto head = backend::cuda::plan_gemm_padding(plan({1024, 768}, {50257, 768}, true, DType::bf16));
  EXPECT_TRUE(head.on);
  EXPECT_EQ(head.N, 50264);
  EXPECT_EQ(head.K, 768);
}

#endif  // KILN_HAVE_CUDA

}  // namespace
}  // namespace kiln
