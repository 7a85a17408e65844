// What HF's TensorBoardCallback writes besides scalars, and where transformers 5 puts the events: the run's
// arguments as a text summary (torch's add_text, byte for byte) and $TENSORBOARD_LOGGING_DIR.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "kiln/train/tensorboard.h"

namespace kiln::train {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// The bytes of torch.utils.tensorboard's Event(wall_time=1.5, summary=text("args", 'hi "x"\n')) and of
// Event(wall_time=1.5, step=7, summary=text("train/note", "ok")), serialized by tensorboard's protobuf.
TEST(TensorBoardText, EventAsTorchWritesIt) {
  EXPECT_EQ(encode_text_event("args", "hi \"x\"\n", std::nullopt, 1.5),
            from_hex("09000000000000f83f2a320a300a11617267732f746578745f73756d6d61727942110807120412020801420768692022"
                     "78220a4a080a060a0474657874"));
  EXPECT_EQ(encode_text_event("train/note", "ok", 7, 1.5),
            from_hex("09000000000000f83f10072a330a310a17747261696e2f6e6f74652f746578745f73756d6d617279420c0807120412"
                     "02080142026f6b4a080a060a0474657874"));
}

// --logging_dir first (transformers 4's field), then transformers 5's $TENSORBOARD_LOGGING_DIR (~ expanded), then
// output_dir/runs/<date>_<host>.
TEST(TensorBoardText, LoggingDirFromFlagEnvironmentOrDefault) {
  TrainingArguments a;
  a.output_dir = "out";
  ::unsetenv("TENSORBOARD_LOGGING_DIR");
  EXPECT_EQ(tensorboard_logging_dir(a).parent_path(), std::filesystem::path("out") / "runs");
  ::setenv("TENSORBOARD_LOGGING_DIR", "/tmp/tb_here", 1);
  EXPECT_EQ(tensorboard_logging_dir(a), "/tmp/tb_here");
  const char* home = std::getenv("HOME");
  ::setenv("TENSORBOARD_LOGGING_DIR", "~/tb", 1);
  if (home) {
    EXPECT_EQ(tensorboard_logging_dir(a), std::string(home) + "/tb");
  }
  a.logging_dir = "flag_dir";
  EXPECT_EQ(tensorboard_logging_dir(a), "flag_dir");
  ::unsetenv("TENSORBOARD_LOGGING_DIR");
}

}  // namespace
}  // namespace kiln::train
