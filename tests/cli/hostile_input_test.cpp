// Hostile input to the kiln command: deeply nested JSON wherever JSON is
// read, a FIFO where a file is expected, empty inputs, malformed
// environment variables. Each is a one-line error and exit status 1: never
// a crash, a hang or a silent default.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/backend/cpu/bf16_tiles.h"
#include "kiln/backend/cpu/executor.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::run_kiln;
using Run = testing::KilnRun;

std::string deep(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

void expect_one_line_error(const Run& r, const std::string& part) {
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, part);
  EXPECT_LT(r.output.size(), 2000u) << "errors quote an excerpt, not the file";
}

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_kiln("demo-data --output_dir " + (dir_ / "data").string(), dir_.path()).status, 0);
    ASSERT_EQ(run_kiln("init --config bert-tiny --architecture BertForSequenceClassification --output_dir " +
                           (dir_ / "model").string(),
                       dir_.path())
                  .status,
              0);
  }
  std::string train_args() const {
    const fs::path data = dir_ / "data";
    return "train --config_name " + (data / "model_config.json").string() + " --tokenizer_name " + data.string() +
           " --max_seq_length 16 --max_steps 1 --output_dir " + (dir_ / "out").string();
  }
  testing::TempDir dir_;
};

TEST_F(HostileInput, DeeplyNestedJsonIsAnErrorWhereverJsonIsRead) {
  const std::string nested = deep(60000);
  const fs::path data = dir_ / "data";
  const std::string kDeep = "nests deeper than 256 levels";

  expect_one_line_error(run_kiln("forward --model " + (dir_ / "model").string() + " --inputs " +
                                     dir_.write("in.json", "{\"input_ids\": " + nested + "}").string() + " --output " +
                                     (dir_ / "o.json").string(),
                                 dir_.path()),
                        kDeep);
  expect_one_line_error(run_kiln(train_args() + " --train_file " +
                                     dir_.write("rows.jsonl", "{\"sentence\": \"a\", \"label\": 0}\n{\"sentence\": " +
                                                                  nested + ", \"label\": 1}\n")
                                         .string(),
                                 dir_.path()),
                        "rows.jsonl:2:");
  expect_one_line_error(run_kiln(train_args() + " --train_file " + (data / "train.csv").string() + " --args_file " +
                                     dir_.write("args.json", "{\"seed\": " + nested + "}").string(),
                                 dir_.path()),
                        kDeep);
  expect_one_line_error(run_kiln(train_args() + " --train_file " + (data / "train.csv").string() +
                                     " --lr_scheduler_type cosine_with_restarts --lr_scheduler_kwargs '{\"a\": " +
                                     deep(300) + "}'",
                                 dir_.path()),
                        kDeep);
  fs::create_directories(dir_ / "bad_model");
  fs::copy_file(dir_ / "model" / "model.safetensors", dir_ / "bad_model" / "model.safetensors");
  dir_.write("bad_model/config.json", "{\"model_type\": \"bert\", \"architectures\": [\"BertModel\"], \"x\": " + nested + "}");
  expect_one_line_error(run_kiln("forward --model " + (dir_ / "bad_model").string() + " --inputs " +
                                     dir_.write("ok.json", "{\"input_ids\": [[1, 2]]}").string() + " --output " +
                                     (dir_ / "o.json").string(),
                                 dir_.path()),
                        "config.json:1:");
}

TEST_F(HostileInput, AFifoInPlaceOfAFileIsAnErrorNotAHang) {
  const fs::path model = dir_ / "model";
  fs::remove(model / "model.safetensors");
  ASSERT_EQ(::mkfifo((model / "model.safetensors").c_str(), 0600), 0);
  expect_one_line_error(run_kiln("forward --model " + model.string() + " --inputs " +
                                     dir_.write("in.json", "{\"input_ids\": [[1, 2]]}").string() + " --output " +
                                     (dir_ / "o.json").string(),
                                 dir_.path()),
                        "model.safetensors: is a FIFO (named pipe), expected a regular file");
  const fs::path fifo_csv = dir_ / "train.csv";
  ASSERT_EQ(::mkfifo(fifo_csv.c_str(), 0600), 0);
  expect_one_line_error(run_kiln(train_args() + " --train_file " + fifo_csv.string(), dir_.path()), "is a FIFO");
}

TEST_F(HostileInput, EmptyAndMistypedInputsAreClearErrors) {
  const std::string forward = "forward --model " + (dir_ / "model").string() + " --output " + (dir_ / "o.json").string();
  expect_one_line_error(run_kiln(forward + " --inputs " + dir_.write("e.json", "{\"input_ids\": [[]]}").string(),
                                 dir_.path()),
                        "'input_ids' must hold at least one row of at least one token, got shape [1,0]");
  expect_one_line_error(run_kiln(forward + " --inputs " + dir_.write("t.json", "{\"input_ids\": [[\"a\"]]}").string(),
                                 dir_.path()),
                        "expected a number, got string \"a\"");
  // A CSV quote left open is reported where it opened.
  expect_one_line_error(run_kiln(train_args() + " --train_file " +
                                     dir_.write("q.csv", "sentence,label\n\"good,1\nbad,0\nfi\"ne,1\n").string(),
                                 dir_.path()),
                        "after the closing quote of a field that opened at 2:1");
}

// More replicas than the machine holds copies of the model for: refused with
// what they need, not an out-of-memory kill or a bare system message.
TEST_F(HostileInput, ReplicaCountsPastTheMachineAreAClearError) {
  const std::string train = train_args() + " --train_file " + (dir_ / "data" / "train.csv").string();
  const testing::KilnRun replicas = run_kiln(train + " --num_replicas 100000000", dir_.path());
  expect_one_line_error(replicas, "--num_replicas 100000000: as many copies of the model's");
  EXPECT_CONTAINS(replicas.output, "more than this machine's");
}

// Every variable a CPU bf16 step reads (docs/compiler.md), malformed: a
// one-line error naming it and its value, exit 1, never an abort or a crash
// (a variable first read inside a kernel's threads could only abort; a
// device context whose construction failed must not be left behind).
TEST_F(HostileInput, MalformedEnvironmentVariablesAreOneLineErrors) {
  std::vector<std::string> vars = {"KILN_CACHE_MIN_COMPILE_MS", "KILN_CACHE_SIZE", "KILN_HOST_CACHE_MB",
                                   "KILN_HUGE_PAGES", "KILN_EAGER", "KILN_JIT", "KILN_JIT_WIDE", "KILN_ATTENTION",
                                   "KILN_PROFILE", "KILN_DUMP"};
  if (backend::cpu::cpu_has_bf16_products()) vars.push_back("KILN_CPU_BF16");  // (read only where it matters)
  if (backend::cpu::cpu_has_bf16_products() && backend::cpu::amx_usable()) vars.push_back("KILN_CPU_AMX");
  const fs::path cache = dir_ / "cache";
  for (const std::string& var : vars) {
    SCOPED_TRACE(var);
    ASSERT_EQ(setenv(var.c_str(), "sometimes", 1), 0);
    ASSERT_EQ(setenv("KILN_CACHE_DIR", cache.c_str(), 1), 0);
    const testing::KilnRun r =
        run_kiln("bench --model bert-tiny --batch 2 --seq 16 --steps 1 --warmup 1 --bf16", dir_.path());
    unsetenv(var.c_str());
    unsetenv("KILN_CACHE_DIR");
    expect_one_line_error(r, var + ": expected ");
    EXPECT_CONTAINS(r.output, "found 'sometimes'");
  }
}

}  // namespace
}  // namespace kiln
