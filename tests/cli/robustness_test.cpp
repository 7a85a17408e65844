// kiln train when things go wrong around it: killed while removing an old
// checkpoint, two runs on one output directory, SIGINT / SIGTERM, an output
// directory it cannot write, a tokenizer the model does not fit, a step that
// fails on the device.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "support/slow_fs.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Runs `kiln args...`, output into `log`; returns the exit status (-1: ended by a signal).
int kiln(const std::string& args, const fs::path& log) {
  const int rc = std::system((KILN_BIN " " + args + " > " + log.string() + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Starts `kiln args...` in the background with the environment `env` ("K=V ..."), output into `log`: the
// returned pid is kiln's own.
pid_t start_kiln(const std::string& args, const fs::path& log, const std::string& env = "") {
  const std::string cmd = "exec env " + env + " " KILN_BIN " " + args + " > " + log.string() + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Polls `done` every 20 ms for up to `seconds`; whether it became true.
bool eventually(const std::function<bool()>& done, int seconds = 120) {
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(seconds);) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string train_args(const fs::path& data, const fs::path& out) {
  return "train --config_name " + (data / "model_config.json").string() + " --tokenizer_name " + data.string() +
         " --train_file " + (data / "train.csv").string() + " --max_seq_length 32 --pad_to_max_length" +
         " --output_dir " + out.string() + " --per_device_train_batch_size 16 --learning_rate 1e-3 --seed 3";
}

// The demo data in w/data.
fs::path demo_data(const testing::TempDir& w) {
  const fs::path data = w.path() / "data";
  EXPECT_EQ(kiln("demo-data --output_dir " + data.string(), w.path() / "demo.log"), 0) << slurp(w.path() / "demo.log");
  return data;
}

// The names in `dir` that start with `prefix`.
std::vector<std::string> names_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// What a checkpoint that training resumes from holds.
const char* const kCheckpointFiles[] = {"config.json",           "model.safetensors", "training_args.json",
                                        "trainer_state.json",    "optimizer.safetensors", "scheduler.json",
                                        "rng_state.json",        "vocab.txt"};

// Every checkpoint-N in `out` has every file (an empty string), else the first it lacks.
std::string incomplete_checkpoint(const fs::path& out) {
  for (const auto& name : names_starting(out, "checkpoint-"))
    for (const char* f : kCheckpointFiles)
      if (!fs::exists(out / name / f)) return name + "/" + f;
  return "";
}

// The step of the last {"...","step":N} line of a training log, or 0.
int64_t last_logged_step(const std::string& log) {
  const size_t at = log.rfind("\"step\":");
  return at == std::string::npos ? 0 : std::atoll(log.c_str() + at + 7);
}

// A kill in the middle of save_total_limit's rotation leaves every
// checkpoint-N whole: the oldest is renamed away before its files go, and the
// next run clears what was left.
TEST(Robustness, KilledWhileRotatingLeavesEveryCheckpointWhole) {
  if (const std::string why = testing::slow_fs_unavailable(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir w;
  const fs::path data = demo_data(w), out = w.path() / "out";
  const std::string args = train_args(data, out) + " --max_steps 12 --save_steps 2 --save_total_limit 2";
  // Each file of a discarded checkpoint takes 300 ms to go.
  const pid_t pid =
      start_kiln(args, w.path() / "log1", testing::slow_fs_env_words({.remove_ms = 300, .match = ".deleting-"}));
  fs::path deleting;
  const bool rotating = eventually([&] {
    auto names = names_starting(out, ".deleting-checkpoint-");
    if (names.empty()) return false;
    deleting = out / names[0];
    // Part of it removed already: the moment a removal in place would leave a checkpoint with files missing.
    return std::any_of(std::begin(kCheckpointFiles), std::end(kCheckpointFiles),
                       [&](const char* f) { return !fs::exists(deleting / f); });
  });
  ::kill(pid, SIGKILL);
  const int status = wait_for_exit(pid);
  ASSERT_TRUE(rotating) << "no checkpoint was being removed through a rename:\n" << slurp(w.path() / "log1");
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(incomplete_checkpoint(out), "");
  EXPECT_GE(names_starting(out, "checkpoint-").size(), 1u);
  // The next run resumes from the newest checkpoint and clears what the killed one left.
  ASSERT_EQ(kiln(args + " --resume_from_checkpoint latest", w.path() / "log2"), 0) << slurp(w.path() / "log2");
  EXPECT_CONTAINS(slurp(w.path() / "log2"), "resuming from");
  EXPECT_EQ(read_json_file(out / "trainer_state.json")["global_step"], 12);
  EXPECT_EQ(names_starting(out, ".deleting-"), std::vector<std::string>{});
  EXPECT_EQ(names_starting(out, "tmp-checkpoint-"), std::vector<std::string>{});
  EXPECT_EQ(names_starting(out, "checkpoint-"), (std::vector<std::string>{"checkpoint-10", "checkpoint-12"}));
  EXPECT_EQ(incomplete_checkpoint(out), "");
}

// --resume_from_checkpoint latest passes over a checkpoint-N with files
// missing (copied or cut short by something else) for the newest whole one.
TEST(Robustness, ResumeLatestSkipsAnIncompleteCheckpoint) {
  testing::TempDir w;
  const fs::path data = demo_data(w), out = w.path() / "out";
  const std::string args = train_args(data, out) + " --save_steps 2";
  ASSERT_EQ(kiln(args + " --max_steps 4", w.path() / "log1"), 0) << slurp(w.path() / "log1");
  fs::create_directories(out / "checkpoint-6");
  fs::copy_file(out / "checkpoint-4" / "config.json", out / "checkpoint-6" / "config.json");
  fs::create_directories(out / "tmp-checkpoint-8");  // a save killed before it was published
  ASSERT_EQ(kiln(args + " --max_steps 6 --resume_from_checkpoint latest", w.path() / "log2"), 0)
      << slurp(w.path() / "log2");
  const std::string log = slurp(w.path() / "log2");
  EXPECT_CONTAINS(log, "skipping " + (out / "checkpoint-6").string() + ": model.safetensors is missing");
  EXPECT_CONTAINS(log, "resuming from " + (out / "checkpoint-4").string());
  EXPECT_EQ(read_json_file(out / "trainer_state.json")["global_step"], 6);
  EXPECT_EQ(incomplete_checkpoint(out), "");  // checkpoint-6 is this run's, whole
  EXPECT_FALSE(fs::exists(out / "tmp-checkpoint-8"));
}

// A second kiln train on an output directory in use fails at once, naming
// the lock and the pid that holds it; a killed run leaves no stale lock.
TEST(Robustness, ASecondRunOnTheSameOutputDirFailsAtOnce) {
  testing::TempDir w;
  const fs::path data = demo_data(w), out = w.path() / "out";
  const std::string args = train_args(data, out) + " --save_strategy no --logging_steps 1";
  const pid_t first = start_kiln(args + " --max_steps 100000", w.path() / "log1");
  const bool training = eventually([&] { return slurp(w.path() / "log1").find("\"step\":") != std::string::npos; });
  if (!training) ::kill(first, SIGKILL);
  ASSERT_TRUE(training) << slurp(w.path() / "log1");
  EXPECT_EQ(slurp(out / ".kiln.lock"), std::to_string(first) + "\n");

  const auto t0 = Clock::now();
  const int second = kiln(args + " --max_steps 2 --overwrite_output_dir", w.path() / "log2");
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::kill(first, SIGKILL);
  wait_for_exit(first);
  const std::string log2 = slurp(w.path() / "log2");
  EXPECT_EQ(second, 1) << log2;
  EXPECT_CONTAINS(log2, (out / ".kiln.lock").string() + " is locked by pid " + std::to_string(first));
  EXPECT_EQ(std::count(log2.begin(), log2.end(), '\n'), 1) << log2;
  EXPECT_EQ(log2.find("optimizer steps"), std::string::npos) << "the second run trained:\n" << log2;
  EXPECT_LT(seconds, 10) << "not at once";

  // The kernel released the killed run's lock: the next run takes it.
  ASSERT_EQ(kiln(args + " --max_steps 2 --overwrite_output_dir", w.path() / "log3"), 0) << slurp(w.path() / "log3");
}

// The first SIGINT stops the run after the step in flight with a checkpoint
// (exit 130); resuming from it ends where a run without the stop ends.
TEST(Robustness, SigintSavesACheckpointThatResumesExactly) {
  testing::TempDir w;
  const fs::path data = demo_data(w), straight = w.path() / "straight", out = w.path() / "out";
  const std::string flags = " --max_steps 300 --save_strategy no --logging_steps 1";
  ASSERT_EQ(kiln(train_args(data, straight) + flags, w.path() / "log0"), 0) << slurp(w.path() / "log0");

  const pid_t pid = start_kiln(train_args(data, out) + flags, w.path() / "log1");
  const bool started = eventually([&] { return last_logged_step(slurp(w.path() / "log1")) >= 3; });
  ::kill(pid, SIGINT);
  const int status = wait_for_exit(pid);
  const std::string log = slurp(w.path() / "log1");
  ASSERT_TRUE(started) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  const std::vector<std::string> saved = names_starting(out, "checkpoint-");
  ASSERT_EQ(saved.size(), 1u) << log;
  const int64_t step = read_json_file(out / saved[0] / "trainer_state.json").at("global_step").get<int64_t>();
  ASSERT_LT(step, 300) << "the run ended before the signal:\n" << log;
  // The host runs at most a step or two ahead of the device: the run stops soon after the signal.
  EXPECT_LE(step, last_logged_step(log.substr(0, log.find("SIGINT: stopping"))) + 4) << log;
  const fs::path checkpoint = out / ("checkpoint-" + std::to_string(step));
  EXPECT_CONTAINS(log, "stopped by SIGINT after step " + std::to_string(step));
  EXPECT_CONTAINS(log, "--resume_from_checkpoint " + checkpoint.string());
  EXPECT_EQ(incomplete_checkpoint(out), "");
  EXPECT_FALSE(fs::exists(out / "model.safetensors")) << "a stopped run has no final model";

  ASSERT_EQ(kiln(train_args(data, out) + flags + " --resume_from_checkpoint " + checkpoint.string(), w.path() / "log2"),
            0)
      << slurp(w.path() / "log2");
  EXPECT_EQ(read_json_file(out / "trainer_state.json")["global_step"], 300);
  auto want = io::load_safetensors(straight / "model.safetensors"), got = io::load_safetensors(out / "model.safetensors");
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, t] : want) EXPECT_EQ(got.at(name).to_vector<float>(), t.to_vector<float>()) << name;  // bitwise
}

// SIGTERM asks to stop as SIGINT does; a second one, during the save, ends
// the process at once, without publishing the checkpoint half-written.
TEST(Robustness, ASecondSigtermEndsTheRunAtOnce) {
  if (const std::string why = testing::slow_fs_unavailable(); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir w;
  const fs::path data = demo_data(w), out = w.path() / "out";
  const pid_t pid = start_kiln(train_args(data, out) + " --max_steps 100000 --save_strategy no --logging_steps 1",
                               w.path() / "log", testing::slow_fs_env_words({.rename_ms = 3000, .match = "checkpoint-"}));
  const bool started = eventually([&] { return last_logged_step(slurp(w.path() / "log")) >= 2; });
  ::kill(pid, SIGTERM);
  const bool saving = started && eventually([&] { return !names_starting(out, "tmp-checkpoint-").empty(); });
  ::kill(pid, SIGTERM);
  const auto t0 = Clock::now();
  const int status = wait_for_exit(pid);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string log = slurp(w.path() / "log");
  ASSERT_TRUE(saving) << log;
  ASSERT_TRUE(WIFSIGNALED(status)) << log;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_LT(seconds, 2.5) << "the second signal waited for the save";
  EXPECT_CONTAINS(log, "SIGTERM: stopping after this step");
  EXPECT_EQ(names_starting(out, "checkpoint-"), std::vector<std::string>{});
}

// An output directory kiln cannot write is an error before anything is
// read or trained, naming the directory and the reason.
TEST(Robustness, AnUnwritableOutputDirIsAnErrorBeforeTraining) {
  testing::TempDir w;
  const fs::path data = demo_data(w);
  auto error = [&](const fs::path& out, const std::string& more = "") {
    EXPECT_EQ(kiln(train_args(data, out) + " --max_steps 2" + more, w.path() / "log"), 1);
    const std::string log = slurp(w.path() / "log");
    EXPECT_EQ(log.find("optimizer steps"), std::string::npos) << log;
    return log;
  };
  const fs::path file = w.write("a-file", "x");
  EXPECT_CONTAINS(error(file), "output_dir '" + file.string() + "' is a file, not a directory");
  EXPECT_CONTAINS(error(file / "out"),
                  "output_dir '" + (file / "out").string() + "' cannot be created: '" + file.string() +
                      "' is a file, not a directory");
  // A directory without write permission (root writes anyway: sysfs refuses root too).
  fs::path read_only = w.path() / "read-only";
  fs::create_directories(read_only);
  fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
  if (::geteuid() == 0) read_only = "/sys/kernel";
  if (!fs::is_directory(read_only)) GTEST_SKIP() << "running as root without /sys/kernel";
  EXPECT_CONTAINS(error(read_only, " --overwrite_output_dir"),
                  "output_dir '" + read_only.string() + "' is not writable: ");
  EXPECT_CONTAINS(error(read_only / "out"), "output_dir '" + (read_only / "out").string() + "' cannot be created: ");
  fs::permissions(w.path() / "read-only", fs::perms::owner_all);
}

// A tokenizer larger than the model's vocabulary resizes the token
// embeddings first (run_clm's resize_token_embeddings); a padding id past the
// vocabulary is one error before the first step, naming the file and the id.
TEST(Robustness, ATokenizerLargerThanTheModelResizesItAndABadIdIsOneError) {
  testing::TempDir w;
  const fs::path data = demo_data(w), model = w.path() / "model";
  nlohmann::json config = read_json_file(data / "model_config.json");
  config["vocab_size"] = 40;  // the demo tokenizer has more
  io::write_json_file_atomic(w.path() / "small.json", config);
  ASSERT_EQ(kiln("init --config " + (w.path() / "small.json").string() + " --output_dir " + model.string(),
                 w.path() / "log0"),
            0)
      << slurp(w.path() / "log0");
  auto args = [&](const std::string& out) {
    return "train --model_name_or_path " + model.string() + " --tokenizer_name " + data.string() + " --train_file " +
           (data / "train.csv").string() + " --max_seq_length 32 --max_steps 2 --ignore_mismatched_sizes --output_dir " +
           (w.path() / out).string();
  };
  ASSERT_EQ(kiln(args("out"), w.path() / "log"), 0) << slurp(w.path() / "log");
  const std::string log = slurp(w.path() / "log");
  EXPECT_CONTAINS(log, "the model's vocabulary 40: resizing the token embeddings to ");
  const int64_t grown = read_json_file(w.path() / "out" / "config.json")["vocab_size"].get<int64_t>();
  EXPECT_GT(grown, 40);
  EXPECT_CONTAINS(log, "has " + std::to_string(grown) + " tokens");

  nlohmann::json cfg = read_json_file(model / "config.json");
  cfg["pad_token_id"] = 5000;
  io::write_json_file_atomic(model / "config.json", cfg);
  EXPECT_EQ(kiln(args("out2"), w.path() / "log2"), 1);
  const std::string bad = slurp(w.path() / "log2");
  EXPECT_CONTAINS(bad, (model / "config.json").string() + ": pad_token_id 5000 out of range [0, 40)");
  EXPECT_EQ(std::count(bad.begin(), bad.end(), '\n'), 1) << bad;
  EXPECT_EQ(bad.find("train_loss"), std::string::npos) << bad;
}

// A step that fails on the device (here a token type the model's embedding
// lacks: a pair of texts into a config with type_vocab_size 1) ends the run:
// one message, a non-zero exit, no train_loss.
TEST(Robustness, AFailedStepEndsTheRunWithOneMessage) {
  testing::TempDir w;
  const fs::path data = demo_data(w);
  nlohmann::json config = read_json_file(data / "model_config.json");
  config["type_vocab_size"] = 1;
  io::write_json_file_atomic(w.path() / "one_type.json", config);
  std::string rows = "first,second,label\n";
  for (int i = 0; i < 40; ++i) rows += "good film,great acting,positive\nbad film,awful acting,negative\n";
  const fs::path pairs = w.write("pairs.csv", rows);
  const std::string args = "train --config_name " + (w.path() / "one_type.json").string() + " --tokenizer_name " +
                           data.string() + " --train_file " + pairs.string() +
                           " --text_column first --text_pair_column second --max_seq_length 16 --max_steps 50" +
                           " --per_device_train_batch_size 4 --logging_steps 1 --output_dir " +
                           (w.path() / "out").string();
  EXPECT_EQ(kiln(args, w.path() / "log"), 1);
  const std::string log = slurp(w.path() / "log");
  EXPECT_LT(log.size(), 2000u) << log.substr(0, 4000);
  EXPECT_CONTAINS(log, "a step failed on cpu:0, so the run stops: ");
  EXPECT_CONTAINS(log, "out of range [0, 1)");
  const size_t first = log.find("out of range");
  EXPECT_EQ(log.find("out of range", first + 1), std::string::npos) << "reported twice:\n" << log;
  EXPECT_EQ(log.find("train_loss"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(w.path() / "out" / "model.safetensors"));
}

}  // namespace
}  // namespace kiln
