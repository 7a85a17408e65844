// kiln demo-data --output_dir DIR [--seed S]
// Writes the demo text-classification data set (train.csv, validation.csv,
// test.txt), its WordPiece vocabulary (vocab.txt, tokenizer_config.json) and a
// small BERT config (model_config.json): the main job trains on these.
#include <cstdio>

#include "command.h"
#include "flags.h"
#include "kiln/data/demo.h"
#include "kiln/io/json_file.h"
#include "kiln/models/config.h"

namespace {

constexpr const char* kUsage = "usage: kiln demo-data --output_dir DIR [--seed S]";

int run_demo_data(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("demo-data", {{"output_dir", true, true}, {"seed"}}, kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::filesystem::path dir = flags.get("output_dir");
  kiln::data::demo::write_demo_dataset(dir, std::stoull(flags.get("seed", "0")));
  // A small BERT for it: 2 layers, hidden 64 (vocab_size is set from the tokenizer by kiln train).
  kiln::models::BertConfig c = *kiln::models::BertConfig::preset("bert-tiny");
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.max_position_embeddings = 64;
  c.architectures = {"BertForSequenceClassification"};
  kiln::io::write_json_file_atomic(dir / "model_config.json", c.to_json());
  std::printf("kiln demo-data: wrote %s\n", dir.string().c_str());
  return 0;
}

}  // namespace

KILN_COMMAND_NAMED(demo_data, "demo-data", "write the demo data set, vocabulary and model config", run_demo_data);
