#pragma once
// TensorBoard event files, as torch.utils.tensorboard's SummaryWriter writes
// them for HF's TensorBoardCallback: events.out.tfevents.<secs>.<host>.<pid>.<n>
// in logging_dir, a sequence of TFRecords
//   uint64 length (LE) | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// whose data are tensorflow.Event protos (tensorboard/compat/proto/event.proto):
// first {wall_time, file_version: "brain.Event:2"}, the run's arguments and
// the model's config as text summaries ("args", "model_config", as HF's
// TensorBoardCallback adds them), then one
// {wall_time, step, summary {value {tag, simple_value}}} per scalar.
// The protobuf is encoded here by hand (a few varints and fixed-width fields).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/train/training_args.h"

namespace kiln::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(std::string_view data);

// The Event protos, serialized.
std::string encode_file_version_event(double wall_time);
std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time);
// torch's add_text: a DT_STRING tensor tagged `tag`/text_summary for the text plugin; no step when nullopt.
std::string encode_text_event(const std::string& tag, const std::string& text, std::optional<int64_t> step,
                              double wall_time);

class EventFileWriter {
 public:
  // Creates `dir` and the event file in it, and writes the file_version event.
  explicit EventFileWriter(const std::filesystem::path& dir);
  // One Event per scalar, all with `step`; flushed, so a killed run keeps them.
  void add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step);
  // One text summary without a step (SummaryWriter.add_text(tag, text)), flushed.
  void add_text(const std::string& tag, const std::string& text);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(std::string_view data);
  std::filesystem::path path_;
  std::ofstream out_;
};

// HF's rewrite_logs: "eval_x" -> "eval/x", "test_x" -> "test/x", any other
// key k -> "train/k"; numbers only ("step", which HF's logs do not hold, is skipped).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& log_entry);

// HF's default logging_dir: output_dir/runs/<%b%d_%H-%M-%S>_<hostname>.
std::filesystem::path default_logging_dir(const std::string& output_dir);
// Where the events go: --logging_dir (transformers 4's field); else, as
// transformers 5's TensorBoardCallback, $TENSORBOARD_LOGGING_DIR (~ expanded);
// else the default above.
std::filesystem::path tensorboard_logging_dir(const TrainingArguments& args);

// The integrations report_to names that kiln has (TensorBoard only): the
// master's log entries go to each.
class Reporter {
 public:
  // `model_config` (config.json's object; null: none) is written as text beside the arguments.
  explicit Reporter(const TrainingArguments& args, const nlohmann::json& model_config = nullptr);
  void log(const nlohmann::json& entry, int64_t step);

 private:
  std::unique_ptr<EventFileWriter> tensorboard_;
};

}  // namespace kiln::train
