// The on-disk compile cache: a second process (here: the same one after its
// in-memory cache is cleared) loads the compiled step instead of compiling
// it and computes the same values; records of another graph or another
// compiler build are misses; damaged records are warnings and recompiles,
// never crashes or wrong programs.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/serialize.h"
#include "kiln/core/atomic_file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// KILN_CACHE_DIR (and a zero save threshold) for the test's duration.
class CacheEnv {
 public:
  explicit CacheEnv(const fs::path& dir) {
    setenv("KILN_CACHE_DIR", dir.c_str(), 1);
    setenv("KILN_CACHE_MIN_COMPILE_MS", "0", 1);
  }
  ~CacheEnv() {
    setenv("KILN_CACHE_DIR", "off", 1);
    unsetenv("KILN_CACHE_MIN_COMPILE_MS");
    runtime::DeviceContext::get(Device::cpu()).clear_cache();
  }
};

// One training step of a small MLP with AdamW; returns the loss and the
// updated first weight.
std::pair<float, std::vector<float>> mlp_step() {
  auto param = [](Shape s, float scale, const char* name) {
    std::vector<float> v(numel(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::cos(0.37f * static_cast<float>(i));
    return Tensor::from_vector(v, s, Device::cpu(), name).requires_grad_();
  };
  Tensor w1 = param({32, 16}, 0.3f, "w1"), b1 = param({32}, 0.1f, "b1"), w2 = param({4, 32}, 0.3f, "w2");
  std::vector<float> xv(8 * 16);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.1f * static_cast<float>(i));
  Tensor x = Tensor::from_vector(xv, {8, 16}, Device::cpu(), "x");
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8}, Device::cpu(), "y");
  optim::AdamW opt({w1, b1, w2}, {.lr = 1e-2, .weight_decay = 0.01});
  Tensor loss = cross_entropy(linear(gelu(linear(x, w1, b1)), w2), y);
  loss.backward();
  opt.step();
  mark_step();
  return {loss.item(), w1.to_vector<float>()};
}

std::vector<fs::path> records(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::exists(dir / "programs"))
    for (const auto& e : fs::directory_iterator(dir / "programs")) out.push_back(e.path());
  return out;
}

TEST(CompileCache, ASecondRunLoadsTheStepAndComputesTheSame) {
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  const auto want = mlp_step();  // KILN_CACHE_DIR=off (the test environment)
  testing::TempDir dir;
  CacheEnv env(dir.path());
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  metrics::reset();
  EXPECT_EQ(mlp_step(), want);
  EXPECT_EQ(metrics::snapshot().compiles_from_disk, 0);
  const auto saved = records(dir.path());
  ASSERT_EQ(saved.size(), 1u);  // the step (reading values compiles nothing new)
  EXPECT_EQ(saved[0].extension(), ".kprog");

  runtime::DeviceContext::get(Device::cpu()).clear_cache();  // as a new process would start
  metrics::reset();
  EXPECT_EQ(mlp_step(), want);
  EXPECT_EQ(metrics::snapshot().compiles, 1);
  EXPECT_EQ(metrics::snapshot().compiles_from_disk, 1);

  // A damaged record: a warning, a compile, the same values, and a good record again.
  const std::string good = read_file(saved[0]);
  { std::ofstream(saved[0], std::ios::binary | std::ios::trunc) << good.substr(0, good.size() / 2); }
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  metrics::reset();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(mlp_step(), want);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(err, "compile cache: ignoring");
  EXPECT_CONTAINS(err, "truncated");
  EXPECT_EQ(metrics::snapshot().compiles_from_disk, 0);
  EXPECT_EQ(read_file(saved[0]), good);
}

// The CPU's programs carry kernels' extra outputs (the cross-entropy loss
// in its gradient's pass, the attention's kept probabilities): a causal
// attention step with dropout, loaded from its record, gives the same
// gradients as when compiled.
TEST(CompileCache, AnAttentionStepLoadsWithItsKeptProbabilities) {
  auto step = [] {
    std::vector<float> v(2 * 3 * 20 * 8);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.29f * static_cast<float>(i));
    Tensor q = Tensor::from_vector(v, {2, 3, 20, 8}).requires_grad_();
    Tensor k = (q * 0.5).detach().requires_grad_();
    Generator gen(3);
    Tensor y = fused_attention(q, k, q * 2.0, {Tensor(), true, 0.35, 0.2, &gen});
    sum(y * y).backward();
    mark_step();
    return std::pair{q.grad().to_vector<float>(), k.grad().to_vector<float>()};
  };
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  const auto want = step();
  testing::TempDir dir;
  CacheEnv env(dir.path());
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  EXPECT_EQ(step(), want);
  ASSERT_FALSE(records(dir.path()).empty());
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  metrics::reset();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(step(), want);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_GE(metrics::snapshot().compiles_from_disk, 1);
  EXPECT_EQ(metrics::snapshot().compiles_from_disk, metrics::snapshot().compiles);
}

TEST(CompileCache, OffWritesNothingAndSlowCompilesOnlyAreSaved) {
  testing::TempDir dir;
  {
    CacheEnv env(dir.path());
    setenv("KILN_CACHE_MIN_COMPILE_MS", "60000", 1);  // nothing compiles that slowly
    runtime::DeviceContext::get(Device::cpu()).clear_cache();
    mlp_step();
    EXPECT_TRUE(records(dir.path()).empty());
    setenv("KILN_CACHE_MIN_COMPILE_MS", "soon", 1);
    runtime::DeviceContext::get(Device::cpu()).clear_cache();
    EXPECT_CONTAINS(error_of([] { mlp_step(); }), "KILN_CACHE_MIN_COMPILE_MS: expected a number >= 0, found 'soon'");
  }
  runtime::DeviceContext::get(Device::cpu()).clear_cache();
  mlp_step();  // KILN_CACHE_DIR=off
  EXPECT_TRUE(records(dir.path()).empty());
}

compiler::Program compile_step(ir::Graph* graph, int64_t hidden) {
  Tensor w = Tensor::from_vector(std::vector<float>(hidden * 6, 0.5f), {hidden, 6}).requires_grad_();
  Tensor x = Tensor::from_vector(std::vector<float>(4 * 6, 0.25f), {4, 6});
  sum(gelu(linear(x, w)) * 2.0).backward();
  std::vector<ir::NodePtr> params;
  *graph = ir::flatten({w.grad().node()}, &params);
  return compiler::compile(*graph);
}

TEST(CompileCache, RecordsRoundTripAndAreTiedToTheirGraphAndCompiler) {
  ir::Graph g, other;
  const compiler::Program p = compile_step(&g, 5);
  compile_step(&other, 7);
  const std::string bytes = compiler::serialize_program(g, p);
  const auto back = compiler::deserialize_program(bytes, g);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->dump(), p.dump());
  EXPECT_EQ(back->arena_bytes, p.arena_bytes);
  EXPECT_EQ(back->output_nbytes, p.output_nbytes);
  EXPECT_EQ(back->output_donor, p.output_donor);
  EXPECT_EQ(back->slots.size(), p.slots.size());
  EXPECT_FALSE(compiler::deserialize_program(bytes, other).has_value());  // another graph
  std::string rebuilt = bytes;
  const size_t at = rebuilt.find(compiler::compiler_fingerprint());
  ASSERT_NE(at, std::string::npos);
  rebuilt[at] = rebuilt[at] == '0' ? '1' : '0';
  EXPECT_FALSE(compiler::deserialize_program(rebuilt, g).has_value());  // another compiler build
  EXPECT_CONTAINS(error_of([&] { compiler::deserialize_program("KILN", g); }), "truncated");
  EXPECT_CONTAINS(error_of([&] { compiler::deserialize_program(std::string(64, 'x'), g); }), "bad magic");
}

// Every truncation and a sweep of single-byte changes: an error, a miss or
// a program whose operands stay inside their slots -- never a crash (the
// ASan build runs this too).
TEST(CompileCache, DamagedRecordsAreErrorsNeverCrashes) {
  ir::Graph g;
  const compiler::Program p = compile_step(&g, 5);
  const std::string bytes = compiler::serialize_program(g, p);
  int errors = 0;
  for (size_t n = 0; n < bytes.size(); n += 7) {
    try {
      compiler::deserialize_program(bytes.substr(0, n), g);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, static_cast<int>((bytes.size() + 6) / 7));
  for (size_t i = 0; i < bytes.size(); i += 3) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
    try {
      const auto q = compiler::deserialize_program(damaged, g);
      if (!q) continue;
      for (const auto& ins : q->instrs) {
        EXPECT_LT(ins.output.slot, static_cast<int32_t>(q->slots.size()));
      }
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace kiln
