// Beam search from the command line: kiln generate's --num_beams,
// --length_penalty, --early_stopping and --num_return_sequences print what
// models::generate gives; a model's generation_config.json supplies defaults
// the flags override; kiln eval --predict_with_generate reports ROUGE and
// BLEU; every checkpoint of a generative model carries generation_config.json.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "kiln/tokenizers/tokenizer.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

class BeamCli : public ::testing::Test {
 protected:
  // A t5-tiny with the t5-small tokenizer in `name`.
  fs::path t5(const std::string& name) {
    const fs::path tokenizer = fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small";
    const fs::path m = dir_ / name;
    EXPECT_EQ(run_kiln("init --config t5-tiny --output_dir " + m.string(), dir_.path()).status, 0);
    for (const char* f : {"spiece.model", "tokenizer.json"}) fs::copy_file(tokenizer / f, m / f);
    return m;
  }
  // The two prompts of prompts.txt as the tokenizer encodes them (with </s>).
  static std::vector<std::vector<int64_t>> prompt_ids(const tokenizers::Tokenizer& tok) {
    std::vector<std::vector<int64_t>> ids;
    for (const char* p : {"summarize: the battery lasts all day", "hello there"}) {
      auto e = tok.encode(p);
      ids.emplace_back(e.ids.begin(), e.ids.end());
    }
    return ids;
  }
  testing::TempDir dir_;
};

TEST_F(BeamCli, GenerateBeamsAsTheLibraryAndGenerationConfigDefaults) {
  SKIP_WITHOUT_SHARED((fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small").string());
  const fs::path m = t5("t5");
  std::ofstream(dir_ / "prompts.txt") << "summarize: the battery lasts all day\nhello there\n";
  const std::string gen = "generate --model " + m.string() + " --prompts_file " + (dir_ / "prompts.txt").string() +
                          " --max_new_tokens 6";
  const auto beams = run_kiln(gen + " --num_beams 3 --num_return_sequences 2 --length_penalty 0.6 --early_stopping never",
                              dir_.path());
  ASSERT_EQ(beams.status, 0) << beams.output;
  const auto uncached = run_kiln(gen + " --num_beams 3 --num_return_sequences 2 --length_penalty 0.6 "
                                       "--early_stopping never --no_cache",
                                 dir_.path());
  EXPECT_EQ(uncached.output, beams.output);
  // The same through the library: two lines per prompt, best first.
  auto model = models::from_pretrained(m);
  auto tok = tokenizers::Tokenizer::from_pretrained(m.string());
  const auto ids = prompt_ids(tok);
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  g.num_beams = 3;
  g.num_return_sequences = 2;
  g.length_penalty = 0.6;
  g.early_stopping = models::GenerationConfig::EarlyStopping::Never;
  std::string expected;
  for (const auto& seq : models::generate(*model, ids, g))
    expected += tok.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true) + "\n";
  EXPECT_EQ(beams.output, expected);

  // generation_config.json's beam settings are the defaults; flags win over them.
  auto config = read_json_file(m / "generation_config.json");
  config["num_beams"] = 3;
  config["num_return_sequences"] = 2;
  config["length_penalty"] = 0.6;
  config["early_stopping"] = "never";
  io::write_json_file_atomic(m / "generation_config.json", config);
  EXPECT_EQ(run_kiln(gen, dir_.path()).output, expected);
  const auto greedy = run_kiln(gen + " --num_beams 1 --num_return_sequences 1", dir_.path());
  ASSERT_EQ(greedy.status, 0) << greedy.output;
  g = models::GenerationConfig{};
  g.max_new_tokens = 6;
  expected.clear();
  for (const auto& seq : models::generate(*model, ids, g))
    expected += tok.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true) + "\n";
  EXPECT_EQ(greedy.output, expected);

  // Bad values: clear errors naming the flag or the file and key.
  auto fails = [&](const std::string& extra, const std::string& message) {
    const auto r = run_kiln(gen + extra, dir_.path());
    EXPECT_NE(r.status, 0) << extra;
    EXPECT_NE(r.output.find(message), std::string::npos) << extra << "\n" << r.output;
  };
  fails(" --early_stopping sometimes", "--early_stopping must be true, false or \"never\"");
  fails(" --num_beams 1", "greedy decoding without beam search returns one sequence per prompt, got num_return_sequences 2");
  config["num_beams"] = "four";
  io::write_json_file_atomic(m / "generation_config.json", config);
  fails("", "generation_config.json: \"num_beams\" must be an integer, found");
}

// A generation_config.json that samples (as instruct models ship one): kiln
// generate samples with its settings, as model.generate() would; the flags
// override it, --do_sample false included.
TEST_F(BeamCli, GenerateSamplesAsTheGenerationConfigSays) {
  SKIP_WITHOUT_SHARED((fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small").string());
  const fs::path m = t5("t5");
  std::ofstream(dir_ / "prompts.txt") << "summarize: the battery lasts all day\nhello there\n";
  auto config = read_json_file(m / "generation_config.json");
  config["do_sample"] = true;
  config["temperature"] = 1.7;
  config["top_k"] = 7;
  config["max_new_tokens"] = 6;
  io::write_json_file_atomic(m / "generation_config.json", config);
  const std::string gen = "generate --model " + m.string() + " --prompts_file " + (dir_ / "prompts.txt").string();
  auto model = models::from_pretrained(m);
  auto tok = tokenizers::Tokenizer::from_pretrained(m.string());
  const auto ids = prompt_ids(tok);
  auto text = [&](const models::GenerationConfig& g) {
    std::string out;
    for (const auto& seq : models::generate(*model, ids, g))
      out += tok.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true) + "\n";
    return out;
  };
  models::GenerationConfig g;
  g.do_sample = true;
  g.temperature = 1.7;
  g.top_k = 7;
  g.max_new_tokens = 6;
  g.seed = 3;
  const auto sampled = run_kiln(gen + " --seed 3", dir_.path());
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_EQ(sampled.output, text(g));
  g.do_sample = false;
  const auto greedy = run_kiln(gen + " --do_sample false --max_length 4", dir_.path());
  ASSERT_EQ(greedy.status, 0) << greedy.output;
  g.max_length = 4;  // the decoder's start token and 3 new ones
  EXPECT_EQ(greedy.output, text(g));
  const auto both = run_kiln(gen + " --max_length 4 --max_new_tokens 3", dir_.path());
  EXPECT_NE(both.status, 0);
  EXPECT_CONTAINS(both.output, "--max_new_tokens or --max_length, not both");
}

// Beam sampling from the command line (--num_beams with --do_sample, or a generation_config.json that sets both):
// what models::generate draws with the same settings and seed; the same seed, the same lines.
TEST_F(BeamCli, GenerateBeamSampling) {
  SKIP_WITHOUT_SHARED((fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small").string());
  const fs::path m = t5("t5");
  std::ofstream(dir_ / "prompts.txt") << "summarize: the battery lasts all day\nhello there\n";
  const std::string gen = "generate --model " + m.string() + " --prompts_file " + (dir_ / "prompts.txt").string() +
                          " --max_new_tokens 6 --num_return_sequences 2";
  auto model = models::from_pretrained(m);
  auto tok = tokenizers::Tokenizer::from_pretrained(m.string());
  models::GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 3;
  g.num_return_sequences = 2;
  g.temperature = 1.7;
  g.top_k = 7;
  g.max_new_tokens = 6;
  g.seed = 3;
  std::string expected;
  for (const auto& seq : models::generate(*model, prompt_ids(tok), g))
    expected += tok.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true) + "\n";
  const std::string flags = " --num_beams 3 --do_sample true --temperature 1.7 --top_k 7 --seed 3";
  const auto sampled = run_kiln(gen + flags, dir_.path());
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_EQ(sampled.output, expected);
  EXPECT_EQ(run_kiln(gen + flags, dir_.path()).output, expected);
  // The same settings from generation_config.json.
  auto config = read_json_file(m / "generation_config.json");
  config["num_beams"] = 3;
  config["do_sample"] = true;
  config["temperature"] = 1.7;
  config["top_k"] = 7;
  io::write_json_file_atomic(m / "generation_config.json", config);
  const auto from_file = run_kiln(gen + " --seed 3", dir_.path());
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_EQ(from_file.output, expected);
}

// kiln predict with a T5: one JSON line per source, the beams kiln generate prints for it.
TEST_F(BeamCli, PredictGeneratesForSeq2Seq) {
  SKIP_WITHOUT_SHARED((fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small").string());
  const fs::path m = t5("t5");
  std::ofstream(dir_ / "sources.txt") << "summarize: the battery lasts all day\nhello there\n";
  const std::string beams = " --num_beams 3 --num_return_sequences 2 --max_new_tokens 5";
  const auto gen = run_kiln("generate --model " + m.string() + " --prompts_file " + (dir_ / "sources.txt").string() +
                                beams + " --source_prefix ''",
                            dir_.path());
  ASSERT_EQ(gen.status, 0) << gen.output;
  const auto pred = run_kiln("predict --model_name_or_path " + m.string() + " --test_file " +
                                 (dir_ / "sources.txt").string() + " --output " + (dir_ / "p.jsonl").string() +
                                 " --predict_with_generate --generation_num_beams 3 --num_return_sequences 2" +
                                 " --generation_max_length 6",  // the decoder's start token and 5 new ones
                             dir_.path());
  ASSERT_EQ(pred.status, 0) << pred.output;
  std::ifstream in(dir_ / "p.jsonl");
  std::string expected, line;
  size_t rows = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_EQ(j["candidates"].size(), 2u) << line;
    EXPECT_EQ(j["generated_text"], j["candidates"][0]);
    for (const auto& c : j["candidates"]) expected += c.get<std::string>() + "\n";
    ++rows;
  }
  EXPECT_EQ(rows, 2u);
  EXPECT_EQ(gen.output, expected);
}

// kiln eval of a seq2seq model under --predict_with_generate (beam search by --generation_num_beams): the loss and
// run_summarization's generated-text scores.
TEST_F(BeamCli, Seq2SeqEvalReportsRougeAndBleu) {
  SKIP_WITHOUT_SHARED((fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small").string());
  const fs::path m = t5("t5");
  std::ofstream(dir_ / "val.csv") << "source,target\nthe house is big,das haus ist gross\nhello,hallo\n"
                                  << "a cat sat on the mat,eine katze sass\n";
  const auto r = run_kiln("eval --model_name_or_path " + m.string() + " --validation_file " +
                              (dir_ / "val.csv").string() + " --max_source_length 16 --max_target_length 5" +
                              " --predict_with_generate --generation_num_beams 2 --output_dir " + (dir_ / "ev").string(),
                          dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto metrics = read_json_file(dir_ / "ev" / "eval_results.json");
  for (const char* k : {"eval_loss", "eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum", "eval_bleu"})
    EXPECT_TRUE(metrics.contains(k)) << k << " " << metrics.dump();
  EXPECT_NE(r.output.find("eval_rougeLsum = "), std::string::npos) << r.output;
}

// Every checkpoint-N of a generative model has generation_config.json, as
// model.save_pretrained writes it; a model's own file travels with it.
TEST_F(BeamCli, CheckpointsCarryGenerationConfig) {
  ASSERT_EQ(run_kiln("demo-data --output_dir " + (dir_ / "data").string(), dir_.path()).status, 0);
  const std::string common = " --tokenizer_name " + (dir_ / "data").string() + " --train_file " +
                             (dir_ / "data" / "train.csv").string() +
                             " --max_seq_length 16 --max_steps 2 --save_strategy steps --save_steps 1";
  auto r = run_kiln("train --task causal-lm --config_name gpt2-tiny" + common + " --output_dir " +
                        (dir_ / "lm").string(),
                    dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* d : {"lm/checkpoint-1", "lm/checkpoint-2", "lm"}) {
    SCOPED_TRACE(d);
    const auto g = read_json_file(dir_ / d / "generation_config.json");
    EXPECT_EQ(g["_from_model_config"], true);
    EXPECT_EQ(g["eos_token_id"], read_json_file(dir_ / d / "config.json")["eos_token_id"]);
  }
  // Fine-tuning a model that has its own generation_config.json keeps it.
  auto g = read_json_file(dir_ / "lm" / "generation_config.json");
  g["num_beams"] = 4;
  g.erase("_from_model_config");
  io::write_json_file_atomic(dir_ / "lm" / "generation_config.json", g);
  r = run_kiln("train --task causal-lm --model_name_or_path " + (dir_ / "lm").string() + common + " --output_dir " +
                   (dir_ / "ft").string(),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* d : {"ft/checkpoint-1", "ft"})
    EXPECT_EQ(read_json_file(dir_ / d / "generation_config.json"), g) << d;
  // A classifier does not generate: no file.
  r = run_kiln("train --config_name " + (dir_ / "data" / "model_config.json").string() + common + " --output_dir " +
                   (dir_ / "cls").string(),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "cls" / "checkpoint-1" / "generation_config.json"));
}

}  // namespace
}  // namespace kiln
