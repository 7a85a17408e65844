// kiln init --config FILE_OR_PRESET --output_dir DIR [--architecture ARCH] [--num_labels N] [--seed S]
//           [--torch_dtype float32|bfloat16] [--max_shard_size 50GB]
// Writes a randomly initialised model directory (config.json + model.safetensors,
// or shards and their index past max_shard_size, as save_pretrained does)
// that Python's transformers opens with from_pretrained; bfloat16 stores the
// weights as a bf16 checkpoint (half the size), as `model.to(torch.bfloat16)` would.
// Each weight is computed as it is written, so memory holds one at a time
// (an 8B-parameter model's weights would not fit in memory together).
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/model.h"
#include "kiln/nn/defer_init.h"

namespace {

const std::string kUsage =
    "usage: kiln init --config FILE_OR_PRESET --output_dir DIR [--architecture ARCH] [--num_labels N] [--seed S]\n"
    "                 [--torch_dtype float32|bfloat16] [--max_shard_size 50GB]\n"
    "presets: " + kiln::models::preset_names();

int run_init(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("init",
                         {{"config", true, true}, {"output_dir", true, true}, {"architecture"}, {"num_labels"}, {"seed"},
                          {"torch_dtype"}, {"max_shard_size"}},
                         kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage.c_str());
    return 0;
  }
  std::string source = flags.get("config");
  std::unique_ptr<kiln::models::PretrainedConfig> config = kiln::models::preset_config(source);
  if (!config) {
    KILN_CHECK(std::filesystem::is_regular_file(source), "init: --config '", source,
               "' is neither a preset (", kiln::models::preset_names(), ") nor a file");
    config = kiln::models::load_config(source);
  }
  if (flags.has("num_labels")) config->set_num_labels(flags.integer("num_labels", 0));
  std::string arch = flags.get("architecture", config->architectures.empty() ? "" : config->architectures[0]);
  KILN_CHECK(!arch.empty(), "init: the config names no architecture; pass --architecture");
  const auto seed = static_cast<uint64_t>(flags.integer("seed", 42, 0));
  const std::string dtype = flags.get("torch_dtype", "float32");
  KILN_CHECK(dtype == "float32" || dtype == "bfloat16", "init: --torch_dtype must be float32 or bfloat16, got '",
             dtype, "'");
  kiln::models::PreTrainedModel::SaveOptions save;
  if (dtype == "bfloat16") save.dtype = kiln::DType::bf16;
  if (flags.has("max_shard_size"))
    save.max_shard_size = kiln::io::parse_shard_size(flags.get("max_shard_size"), "init: --max_shard_size");
  std::unique_ptr<kiln::models::PreTrainedModel> model;
  {
    kiln::nn::DeferInit defer;  // the weights are computed one by one as they are written
    model = kiln::models::create_model(arch, *config, seed);
  }
  model->save_pretrained(flags.get("output_dir"), save);
  size_t count = 0;
  for (auto& [n, p] : model->named_parameters()) count += static_cast<size_t>(p.numel());
  std::printf("kiln init: %s with %zu parameters -> %s\n", arch.c_str(), count, flags.get("output_dir").c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(init, "write a randomly initialised model directory (HF layout)", run_init);
