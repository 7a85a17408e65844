// kiln train --report_to tensorboard writes HF's event-file layout under
// output_dir/runs/; other integrations are a one-line error; kiln plot draws
// trainer_state.json's curves into an SVG.
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/file.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::KilnRun;
using testing::run_kiln;

class ReportTo : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_kiln("demo-data --output_dir " + (dir_ / "data").string(), dir_.path()).status, 0);
  }
  std::string train_args(const std::string& out) const {
    const fs::path data = dir_ / "data";
    return "train --config_name " + (data / "model_config.json").string() + " --tokenizer_name " + data.string() +
           " --train_file " + (data / "train.csv").string() + " --validation_file " +
           (data / "validation.csv").string() + " --max_seq_length 16 --max_steps 4 --logging_steps 1" +
           " --eval_strategy steps --eval_steps 2 --output_dir " + (dir_ / out).string();
  }
  testing::TempDir dir_;
};

TEST_F(ReportTo, TensorBoardEventFileUnderRuns) {
  KilnRun r = run_kiln(train_args("out") + " --report_to tensorboard", dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  fs::path event_file;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "out" / "runs"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) event_file = e.path();
  ASSERT_FALSE(event_file.empty()) << "no event file under out/runs";
  EXPECT_EQ(event_file.parent_path().parent_path(), dir_ / "out" / "runs");
  const std::string bytes = read_file(event_file);
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("train/loss"), std::string::npos);
  EXPECT_NE(bytes.find("train/learning_rate"), std::string::npos);
  EXPECT_NE(bytes.find("train/grad_norm"), std::string::npos);
  EXPECT_NE(bytes.find("eval/loss"), std::string::npos);

  // --logging_dir puts it there instead; the default report_to writes none.
  ASSERT_EQ(run_kiln(train_args("out2") + " --report_to all --logging_dir " + (dir_ / "tb").string(), dir_.path()).status, 0);
  EXPECT_FALSE(fs::is_empty(dir_ / "tb"));
  EXPECT_FALSE(fs::exists(dir_ / "out2" / "runs"));
  ASSERT_EQ(run_kiln(train_args("out3"), dir_.path()).status, 0);
  EXPECT_FALSE(fs::exists(dir_ / "out3" / "runs"));
}

TEST_F(ReportTo, OtherIntegrationsAreAOneLineError) {
  KilnRun r = run_kiln(train_args("out") + " --report_to wandb", dir_.path());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--report_to 'wandb' is not available: kiln writes only tensorboard");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST_F(ReportTo, PlotDrawsTheCurves) {
  ASSERT_EQ(run_kiln(train_args("out"), dir_.path()).status, 0);
  KilnRun r = run_kiln("plot " + (dir_ / "out").string(), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string svg = read_file(dir_ / "out" / "training_curves.svg");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_CONTAINS(svg, "<polyline");
  EXPECT_CONTAINS(svg, ">train loss</text>");
  EXPECT_CONTAINS(svg, ">eval_loss</text>");
  EXPECT_CONTAINS(svg, ">learning rate</text>");
  EXPECT_CONTAINS(svg, ">step</text>");
  EXPECT_CONTAINS(svg, "</svg>");

  ASSERT_EQ(run_kiln("plot " + (dir_ / "out").string() + " --output " + (dir_ / "c.svg").string(), dir_.path()).status, 0);
  EXPECT_TRUE(fs::exists(dir_ / "c.svg"));

  KilnRun missing = run_kiln("plot " + (dir_ / "nowhere").string(), dir_.path());
  EXPECT_EQ(missing.status, 1);
  EXPECT_CONTAINS(missing.output, "trainer_state.json: no such file");
  fs::create_directories(dir_ / "empty");
  dir_.write("empty/trainer_state.json", "{\"log_history\": []}");
  KilnRun empty = run_kiln("plot " + (dir_ / "empty").string(), dir_.path());
  EXPECT_EQ(empty.status, 1);
  EXPECT_CONTAINS(empty.output, "log_history holds no loss, learning_rate or eval_* entries");
}

}  // namespace
}  // namespace kiln
