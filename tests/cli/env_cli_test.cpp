// `kiln env` and KILN_DUMP through the kiln command.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::run_kiln;

TEST(EnvCli, ListsEverySwitchWithItsDefaultAndTheValueSetNow) {
  testing::TempDir dir;
  ::setenv("KILN_ATTENTION", "composite", 1);
  const auto r = run_kiln("env", dir.path());
  ::unsetenv("KILN_ATTENTION");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "KILN_JIT=1  (default)");
  EXPECT_CONTAINS(r.output, "KILN_ATTENTION=composite  (set)");
  EXPECT_CONTAINS(r.output, "KILN_DUMP=");
}

TEST(EnvCli, DumpPrintsTheGraphAndTheProgramAndRefusesUnknownItems) {
  testing::TempDir dir;
  ASSERT_EQ(run_kiln("init --config bert-tiny --architecture BertModel --output_dir " + (dir / "m").string(),
                     dir.path())
                .status,
            0);
  const std::string forward = "forward --model " + (dir / "m").string() + " --inputs " +
                              dir.write("in.json", R"({"input_ids": [[1, 2, 3]]})").string() + " --output " +
                              (dir / "o.json").string();
  ::setenv("KILN_DUMP", "graph,program", 1);
  const auto r = run_kiln(forward, dir.path());
  ::setenv("KILN_DUMP", "graph,hlo", 1);
  const auto bad = run_kiln(forward, dir.path());
  ::unsetenv("KILN_DUMP");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "kiln graph (KILN_DUMP):");
  EXPECT_CONTAINS(r.output, "kiln program (KILN_DUMP");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_CONTAINS(bad.output, "KILN_DUMP: expected a comma-separated list of 'graph' 'program', found 'graph,hlo'");
}

}  // namespace
}  // namespace kiln
