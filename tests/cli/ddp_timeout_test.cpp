// --ddp_timeout under mpirun: a rank that stops responding (SIGSTOP, as a
// hung node would) ends the run after the timeout, with a message that names
// it, instead of leaving the other rank waiting in a collective forever.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/mpirun.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The pids of the kiln processes whose command line mentions `marker` (this
// test's folder), with their MPI rank (from OMPI_COMM_WORLD_RANK).
std::vector<std::pair<pid_t, int>> kiln_ranks(const std::string& marker) {
  std::vector<std::pair<pid_t, int>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(entry.path() / "cmdline");
    if (cmdline.rfind(KILN_BIN, 0) != 0 || cmdline.find(marker) == std::string::npos) continue;
    const std::string env = slurp(entry.path() / "environ");
    const std::string key = std::string(1, '\0') + "OMPI_COMM_WORLD_RANK=";
    const size_t at = ('\0' + env).find(key);
    if (at == std::string::npos) continue;
    found.emplace_back(static_cast<pid_t>(std::stol(name)), std::atoi(env.c_str() + at + key.size() - 1));
  }
  return found;
}

// Kills what is left of the run (a stopped process first needs SIGCONT to
// take anything but SIGKILL; SIGKILL alone would do, SIGCONT keeps it tidy).
void kill_leftovers(const std::string& marker) {
  for (auto [pid, rank] : kiln_ranks(marker)) {
    ::kill(pid, SIGCONT);
    ::kill(pid, SIGKILL);
  }
}

TEST(Cli, AStoppedMpiRankEndsTheRunAfterTheDdpTimeout) {
  if (!testing::has_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  testing::TempDir w;
  const fs::path data = w.path() / "data", out = w.path() / "out", log = w.path() / "log";
  ASSERT_EQ(std::system((KILN_BIN " demo-data --output_dir " + data.string() + " > /dev/null 2>&1").c_str()), 0);
  const int timeout_s = 5;
  const std::string args = "train --config_name " + (data / "model_config.json").string() + " --tokenizer_name " +
                           data.string() + " --train_file " + (data / "train.csv").string() +
                           " --max_seq_length 32 --per_device_train_batch_size 4 --max_steps 100000" +
                           " --save_strategy no --logging_steps 1 --ddp_timeout " + std::to_string(timeout_s) +
                           " --output_dir " + out.string();
  auto run = std::async(std::launch::async, [&] { return testing::mpirun_kiln(120, args, log); });

  // Training has started when rank 0 logs its first loss; then rank 1 stops.
  pid_t stopped = -1;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(90);) {
    if (run.wait_for(std::chrono::milliseconds(100)) == std::future_status::ready) break;
    if (slurp(log).find("\"loss\":") == std::string::npos) continue;
    for (auto [pid, rank] : kiln_ranks(out.string()))
      if (rank == 1) stopped = pid;
    if (stopped > 0) break;
  }
  if (stopped <= 0) {
    kill_leftovers(out.string());
    run.wait();
    FAIL() << "training never started (or rank 1 was not found):\n" << slurp(log);
  }
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  const auto t_stop = Clock::now();

  const bool ended = run.wait_for(std::chrono::seconds(timeout_s + 25)) == std::future_status::ready;
  const double waited = std::chrono::duration<double>(Clock::now() - t_stop).count();
  kill_leftovers(out.string());  // whatever happened, no process stays behind
  const int rc = run.get();      // returns at the latest when `timeout` ends mpirun
  const std::string text = slurp(log);
  ASSERT_TRUE(ended) << "mpirun did not end " << timeout_s + 25 << " s after rank 1 stopped:\n" << text;
  // Rank 0 waited the timeout out (less what it had waited when rank 1 stopped).
  EXPECT_GE(waited, timeout_s / 2.0) << text;
  ASSERT_TRUE(WIFEXITED(rc)) << text;
  EXPECT_NE(WEXITSTATUS(rc), 0) << text;
  EXPECT_NE(WEXITSTATUS(rc), 124) << "mpirun hung:\n" << text;
  EXPECT_CONTAINS(text, "ddp_timeout: rank 1 ");
  EXPECT_CONTAINS(text, "within 5 s");
}

}  // namespace
}  // namespace kiln
