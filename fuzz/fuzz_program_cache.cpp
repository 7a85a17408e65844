// Fuzz target: the on-disk compile cache's records
// (compiler::deserialize_program, what runtime::load_cached_program reads
// from a .kprog file). A record starts with a magic, a format number and the
// compiler's fingerprint, which changes whenever the compiler's sources do;
// an input is the rest -- the graph the program was compiled from, then the
// program -- and the target puts this build's header in front, so the
// corpus stays valid across builds. (An input that starts with the magic is
// taken whole: the header's own checks are fuzzed too.) The graph is a fixed
// small training step: attention, LayerNorm, GELU, cross-entropy, their
// gradients and an update; a record of another graph is a cache miss.
//
// KILN_FUZZ_SEED_DIR=DIR: at start-up, writes that graph's records, compiled
// under several CompileOptions, to DIR as inputs (make fuzz adds them to
// the run's corpus; `KILN_FUZZ_SEED_DIR=fuzz/corpus/program_cache
// fuzz_replay_program_cache fuzz/corpus/program_cache` refreshes the seeds).
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kiln/compiler/compile.h"
#include "kiln/compiler/serialize.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;

// One step of a one-layer transformer at toy size.
ir::Graph training_step() {
  const int64_t B = 2, T = 4, H = 2, D = 4, C = H * D, V = 5;
  auto values = [](Shape s, float scale, const char* name, bool trained) {
    std::vector<float> v(static_cast<size_t>(numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::cos(0.37f * static_cast<float>(i));
    Tensor t = Tensor::from_vector(v, s, Device::cpu(), name);
    return trained ? t.requires_grad_() : t;
  };
  Tensor x = values({B, T, C}, 1.0f, "x", false);
  Tensor wq = values({C, C}, 0.3f, "wq", true), wk = values({C, C}, 0.2f, "wk", true),
         wv = values({C, C}, 0.1f, "wv", true), ln_w = values({C}, 1.0f, "ln_w", true),
         ln_b = values({C}, 0.1f, "ln_b", true), wo = values({V, C}, 0.3f, "wo", true);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, -100}, {B, T}, Device::cpu(), "y");
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, T, H, D}), {0, 2, 1, 3}); };
  AttentionSpec spec;
  spec.causal = true;
  spec.scale = 0.5;
  Tensor a = fused_attention(heads(linear(x, wq)), heads(linear(x, wk)), heads(linear(x, wv)), spec);
  Tensor h = layer_norm(reshape(permute(a, {0, 2, 1, 3}), {B, T, C}) + x, ln_w, ln_b);
  Tensor loss = cross_entropy(linear(gelu(h), wo), labels);
  loss.backward();
  std::vector<ir::NodePtr> outputs = {loss.node()};
  Tensor norm = values({1}, 0.0f, "norm", false);
  for (Tensor* w : {&wq, &wk, &wv, &ln_w, &ln_b, &wo}) {
    outputs.push_back((*w - w->grad() * 0.1).node());
    norm = norm + sum(w->grad() * w->grad());
  }
  outputs.push_back(sqrt(norm).node());
  std::vector<ir::NodePtr> params;
  return ir::flatten(outputs, &params);
}

const ir::Graph& graph() {
  static const ir::Graph g = training_step();
  return g;
}

// This build's record header: magic, format and fingerprint.
const std::string& header() {
  static const std::string h = [] {
    const std::string record = compiler::serialize_program(graph(), compiler::Program{});
    const size_t fingerprint = std::string(compiler::compiler_fingerprint()).size();
    return record.substr(0, 8 + 4 + 8 + fingerprint);
  }();
  return h;
}

void write_seeds(const char* dir) {
  const std::vector<std::pair<const char*, compiler::CompileOptions>> variants = {
      {"plain", {}},
      {"cpu", {.fuse_sum_inputs = true, .strided_attention_operands = true, .strided_row_sums = true,
               .concurrent_products = true, .in_place = true, .loss_with_gradient = true,
               .token_major_attention = true, .attention_probabilities = true}},
      {"sums", {.fuse_sum_inputs = true, .strided_row_sums = true}},
      {"pairs", {.concurrent_products = true, .in_place = true}},
      {"loss", {.loss_with_gradient = true, .attention_probabilities = true}},
  };
  for (const auto& [name, options] : variants) {
    const std::string record = compiler::serialize_program(graph(), compiler::compile(graph(), options));
    const std::string path = std::string(dir) + "/step-" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(record.data() + header().size(), static_cast<std::streamsize>(record.size() - header().size()));
    if (!out) std::fprintf(stderr, "%s: cannot write\n", path.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KILN_FUZZ_SEED_DIR"); dir && *dir) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const bool whole = input.rfind(header().substr(0, 8), 0) == 0;
  fuzz::attempt([&] {
    if (!compiler::deserialize_program(whole ? input : header() + input, graph()) && fuzz::verbose())
      std::fprintf(stderr, "  a cache miss: another format, compiler or graph\n");
  });
  return 0;
}
