// kiln merge: PEFT's merge_and_unload. The adapter is folded into the base's
// weights and a full Hugging Face model directory written, which
// transformers opens without PEFT.
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/models/lora.h"
#include "lora_flags.h"
#include "train_common.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;

constexpr const char* kUsage =
    "usage: kiln merge --model BASE --adapter LORA_DIR --output_dir OUT\n"
    "       kiln merge --model LORA_DIR --output_dir OUT   (the base named by its adapter_config.json)\n"
    "Writes OUT/config.json and OUT/model.safetensors with the adapter folded into the weights (and the "
    "tokenizer files).";

int run_merge(const std::vector<std::string>& args) {
  cli::Flags flags("merge", {{"model", true, true}, {"adapter"}, {"output_dir", true, true}}, kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const fs::path model_dir = flags.get("model"), adapter = flags.get("adapter"), out = flags.get("output_dir");
  KILN_CHECK(!adapter.empty() || models::is_adapter_dir(model_dir), "merge: ", model_dir.string(),
             " has no adapter_config.json: pass the adapter with --adapter LORA_DIR");
  // Checked before anything is written: the merged model beside adapter_config.json would load as the adapter.
  const fs::path adapter_dir = adapter.empty() ? model_dir : adapter;
  std::error_code same_ec;
  KILN_CHECK(!fs::equivalent(out, adapter_dir, same_ec), "merge: --output_dir ", out.string(),
             " is the adapter's directory: the merged model would sit beside adapter_config.json (and load as the ",
             "adapter); write it to another directory");
  auto model = models::from_pretrained_with_adapter(model_dir, adapter, {});
  models::merge_lora(*model);
  model->save_pretrained(out);
  // The tokenizer files travel with the model, as kiln train's outputs carry them.
  const fs::path tok_dir = cli::tokenizer_dir_for(model_dir, adapter);
  if (fs::exists(tok_dir / "tokenizer.json") || fs::exists(tok_dir / "vocab.txt") || fs::exists(tok_dir / "vocab.json") ||
      fs::exists(tok_dir / "spiece.model")) {
    for (const auto& f : cli::load_tokenizer(tok_dir).files) {
      std::error_code ec;
      if (fs::equivalent(f, out / f.filename(), ec)) continue;  // merged into the tokenizer's own directory
      fs::copy_file(f, out / f.filename(), fs::copy_options::overwrite_existing, ec);
      KILN_CHECK(!ec, "merge: cannot copy ", f.string(), " into ", out.string(), ": ", ec.message());
    }
  }
  std::fprintf(stderr, "kiln merge: %s with its adapter folded in -> %s\n", model->architecture().c_str(),
               out.string().c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(merge, "fold a LoRA adapter into its base model (PEFT's merge_and_unload)", run_merge);
