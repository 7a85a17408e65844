// kiln generate --bf16 on a bf16 checkpoint keeps its weights bf16 (half
// the memory) and prints what the same checkpoint widened to f32 prints under
// --bf16: the products round the widened weights back to the same values.
#include <gtest/gtest.h>

#include "kiln/io/safetensors.h"
#include "kiln/runtime/ops.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

// The test GPT-2 with the SFT tests' tokenizer (prompts of capitals stay inside the
// model's 99 ids), its f32 tensors written as `dtype`.
fs::path gpt2_checkpoint(const fs::path& dir, DType dtype) {
  const fs::path data(KILN_TEST_DATA_DIR);
  fs::create_directories(dir);
  fs::copy_file(data / "gpt2/gpt2_lm/config.json", dir / "config.json");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(data / "sft/tokenizer" / f, dir / f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : io::load_safetensors(data / "gpt2/gpt2_lm"))
    tensors.emplace_back(name, t.dtype() == DType::f32 ? cast(cast(t, DType::bf16), dtype) : t);
  io::save_safetensors(dir / "model.safetensors", tensors);
  return dir;
}

// (Also: the process ends only after the last step's queued cache update has
// run; it used to race oneDNN's static engine being destroyed at exit.)
TEST(CliBf16Generate, Bf16CheckpointGeneratesAsItsWidenedCopy) {
  testing::TempDir w;
  const fs::path bf16 = gpt2_checkpoint(w.path() / "bf16", DType::bf16);
  const fs::path f32 = gpt2_checkpoint(w.path() / "f32", DType::f32);
  EXPECT_LT(fs::file_size(bf16 / "model.safetensors"), fs::file_size(f32 / "model.safetensors"));
  const std::string args = " --prompt QXZJ --max_new_tokens 10 --bf16";
  const auto kept = run_kiln("generate --model " + bf16.string() + args, w.path());
  const auto widened = run_kiln("generate --model " + f32.string() + args, w.path());
  ASSERT_EQ(kept.status, 0) << kept.output;
  ASSERT_EQ(widened.status, 0) << widened.output;
  EXPECT_EQ(kept.output, widened.output);
  EXPECT_NE(kept.output.find("QXZJ"), std::string::npos) << kept.output;
  // Without --bf16 the bf16 checkpoint is widened and runs in f32.
  const auto plain = run_kiln("generate --model " + bf16.string() + " --prompt QXZJ --max_new_tokens 10",
                              w.path());
  ASSERT_EQ(plain.status, 0) << plain.output;
}

}  // namespace
}  // namespace kiln
