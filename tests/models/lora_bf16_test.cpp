// LoRA on a bf16 base (LoadOptions::keep_bf16): the frozen weight matrices
// of a bf16 checkpoint stay bf16 as loaded, and the adapted model computes
// what the same checkpoint widened to f32 computes: logits, loss and adapter
// gradients, with and without Autocast; saved modules train in f32.
#include <filesystem>
#include <set>

#include "kiln/io/safetensors.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#include "kiln/runtime/autocast.h"
#include "models/golden_inputs.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path data(const std::string& rel) { return fs::path(KILN_TEST_DATA_DIR) / rel; }

// The golden base model `base` saved as a bf16 checkpoint in `dir`.
void write_bf16_copy(const fs::path& base, const fs::path& dir) {
  fs::copy_file(base / "config.json", dir / "config.json");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : io::load_safetensors(base))
    tensors.emplace_back(name, is_floating(t.dtype()) ? cast(t, DType::bf16) : t);
  io::save_safetensors(dir / "model.safetensors", tensors);
}

struct StepResult {
  std::vector<double> logits, loss;
  std::map<std::string, std::vector<double>> grads;
};

StepResult step(models::PreTrainedModel& model, const std::map<std::string, Tensor>& golden, bool bf16) {
  Autocast autocast(bf16);
  models::ModelOutputs out = model.forward(testing::golden_inputs(golden));
  out.loss.backward();
  StepResult r{out.logits.to_vector<double>(), out.loss.to_vector<double>(), {}};
  for (auto& [key, p] : models::adapter_state(model)) r.grads[key] = p.grad().to_vector<double>();
  return r;
}

struct Case {
  const char* name;
  const char* base;
};
class LoraBf16Base : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(LoraBf16Base, FrozenWeightsStayBf16AndGiveTheWidenedModelsResults) {
  const auto [c, bf16] = GetParam();
  testing::TempDir tmp;
  write_bf16_copy(data(c.base), tmp.path());
  const fs::path adapter = data(std::string("lora/") + c.name + "/adapter");
  models::LoadOptions keep;
  keep.keep_bf16 = true;
  auto kept = models::from_pretrained(tmp.path(), keep);
  auto widened = models::from_pretrained(tmp.path());
  for (auto* m : {kept.get(), widened.get()}) {
    m->eval();
    models::load_adapter(*m, adapter);
  }
  std::set<std::string> trained;
  for (auto& [key, p] : models::adapter_state(*kept)) trained.insert(key.substr(std::string("base_model.model.").size()));
  int kept_bf16 = 0;
  for (auto& [name, p] : kept->named_parameters()) {
    EXPECT_EQ(p.requires_grad(), trained.count(name) == 1) << name;
    // Matrices and tables of the frozen base stay bf16; what trains (the
    // branches, a saved classifier) and 1-D tensors are f32.
    const bool want_bf16 = !trained.count(name) && p.rank() >= 2;
    EXPECT_EQ(p.dtype(), want_bf16 ? DType::bf16 : DType::f32) << name;
    kept_bf16 += want_bf16;
  }
  EXPECT_GT(kept_bf16, 0);
  auto golden = io::load_safetensors(data(std::string("lora/") + c.name + "/golden.safetensors"));
  const StepResult a = step(*kept, golden, bf16), b = step(*widened, golden, bf16);
  EXPECT_TRUE(testing::all_close(a.logits, b.logits, 1e-6, 1e-7)) << "logits";
  EXPECT_TRUE(testing::all_close(a.loss, b.loss, 1e-6, 1e-7)) << "loss";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [key, g] : b.grads) EXPECT_TRUE(testing::all_close(a.grads.at(key), g, 1e-5, 1e-7)) << key;
  for (auto& [name, p] : kept->named_parameters()) {
    if (!trained.count(name)) {
      EXPECT_FALSE(p.grad().defined()) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraBf16Base,
                         ::testing::Combine(::testing::Values(Case{"bert_seqcls", "bert/bert_seqcls"},
                                                              Case{"gpt2_lm", "gpt2/gpt2_lm"},
                                                              Case{"t5", "t5/t5_gated_untied"},
                                                              Case{"llama_lm_all_linear", "llama/llama_lm"},
                                                              Case{"qwen2_lm_rslora", "llama/qwen2_lm_tied"},
                                                              Case{"gpt2_lm_wte", "gpt2/gpt2_lm"},
                                                              Case{"llama_lm_save_embed", "llama/llama_lm"}),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_autocast" : "_f32");
                         });

TEST(LoraBf16Base, MergingIntoABf16BaseKeepsBf16) {
  testing::TempDir tmp;
  write_bf16_copy(data("llama/llama_lm"), tmp.path());
  models::LoadOptions keep;
  keep.keep_bf16 = true;
  auto model = models::from_pretrained(tmp.path(), keep);
  model->eval();
  models::load_adapter(*model, data("lora/llama_lm_all_linear/adapter"));
  auto golden = io::load_safetensors(data("lora/llama_lm_all_linear/golden.safetensors"));
  models::ModelInputs in;
  in.input_ids = golden.at("input_ids");
  in.attention_mask = golden.at("attention_mask");
  const std::vector<double> before = model->forward(in).logits.to_vector<double>();
  models::merge_lora(*model);
  for (auto& [name, p] : model->named_parameters()) {
    if (p.rank() >= 2) {
      EXPECT_EQ(p.dtype(), DType::bf16) << name;
    }
  }
  // The merged weights are rounded to bf16: close, not equal.
  EXPECT_TRUE(testing::all_close(model->forward(in).logits.to_vector<double>(), before, 5e-2, 5e-2));
}

}  // namespace
}  // namespace kiln
