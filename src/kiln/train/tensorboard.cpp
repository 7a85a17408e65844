#include "kiln/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "kiln/core/error.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: key = field << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, int field, int wire_type) { put_varint(out, static_cast<uint64_t>(field << 3 | wire_type)); }
template <class T>
void put_fixed(std::string& out, T v) {  // little-endian, as x86 and ARM store it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) c = t[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// Event: wall_time (1, double), step (2, int64), file_version (3, string), summary (5, Summary).
std::string encode_file_version_event(double wall_time) {
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

// Summary: value (1, repeated Value); Value: tag (1, string), simple_value (2, float).
std::string encode_scalar_event(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e;
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));  // int64: negatives as 10-byte two's complement
  put_bytes(e, 5, summary);
  return e;
}

// torch.utils.tensorboard's text(): Value {tag (1): tag + "/text_summary", tensor (8): TensorProto {dtype (1):
// DT_STRING = 7, tensor_shape (2): {dim (2): {size (1): 1}}, string_val (8): text}, metadata (9): SummaryMetadata
// {plugin_data (1): {plugin_name (1): "text"}}}; the step (2) only when there is one (add_text without a step).
std::string encode_text_event(const std::string& tag, const std::string& text, std::optional<int64_t> step,
                              double wall_time) {
  std::string dim, shape, tensor, plugin, metadata, v, summary, e;
  put_key(dim, 1, 0);
  put_varint(dim, 1);
  put_bytes(shape, 2, dim);
  put_key(tensor, 1, 0);
  put_varint(tensor, 7);
  put_bytes(tensor, 2, shape);
  put_bytes(tensor, 8, text);
  put_bytes(plugin, 1, "text");
  put_bytes(metadata, 1, plugin);
  put_bytes(v, 1, tag + "/text_summary");
  put_bytes(v, 8, tensor);
  put_bytes(v, 9, metadata);
  put_bytes(summary, 1, v);
  put_key(e, 1, 1);
  put_fixed(e, wall_time);
  if (step) {
    put_key(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(*step));
  }
  put_bytes(e, 5, summary);
  return e;
}

EventFileWriter::EventFileWriter(const fs::path& dir) {
  static std::atomic<int> uid{0};  // SummaryWriter's per-process counter
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, "logging_dir ", dir.string(), ": cannot create the directory: ", ec.message());
  char name[512];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(std::time(nullptr)), hostname().c_str(), static_cast<int>(::getpid()),
                uid.fetch_add(1));
  path_ = dir / name;
  out_.open(path_, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out_.good(), path_.string(), ": cannot open for writing");
  write_record(encode_file_version_event(now_seconds()));
  out_.flush();
}

void EventFileWriter::write_record(std::string_view data) {
  std::string header;
  put_fixed<uint64_t>(header, data.size());
  std::string record = header;
  put_fixed(record, masked_crc32c(header));
  record.append(data);
  put_fixed(record, masked_crc32c(data));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
}

void EventFileWriter::add_text(const std::string& tag, const std::string& text) {
  write_record(encode_text_event(tag, text, std::nullopt, now_seconds()));
  out_.flush();
  KILN_CHECK(out_.good(), path_.string(), ": write failed");
}

void EventFileWriter::add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step) {
  const double wall_time = now_seconds();
  for (const auto& [tag, value] : scalars)
    write_record(encode_scalar_event(tag, static_cast<float>(value), step, wall_time));
  out_.flush();
  KILN_CHECK(out_.good(), path_.string(), ": write failed");
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const json& log_entry) {
  std::vector<std::pair<std::string, double>> out;
  if (!log_entry.is_object()) return out;
  for (const auto& [k, v] : log_entry.items()) {
    if (k == "step" || !v.is_number()) continue;
    std::string tag = k.rfind("eval_", 0) == 0   ? "eval/" + k.substr(5)
                      : k.rfind("test_", 0) == 0 ? "test/" + k.substr(5)
                                                 : "train/" + k;
    out.emplace_back(std::move(tag), v.get<double>());
  }
  return out;
}

fs::path default_logging_dir(const std::string& output_dir) {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&t, &local);
  char stamp[64];
  std::strftime(stamp, sizeof(stamp), "%b%d_%H-%M-%S", &local);
  return fs::path(output_dir) / "runs" / (std::string(stamp) + "_" + hostname());
}

fs::path tensorboard_logging_dir(const TrainingArguments& args) {
  if (args.logging_dir) return *args.logging_dir;
  if (const char* env = std::getenv("TENSORBOARD_LOGGING_DIR"); env && *env) {
    const std::string dir = env;
    const char* home = std::getenv("HOME");
    if (home && (dir == "~" || dir.rfind("~/", 0) == 0)) return std::string(home) + dir.substr(1);  // expanduser
    return dir;
  }
  return default_logging_dir(args.output_dir);
}

Reporter::Reporter(const TrainingArguments& args, const json& model_config) {
  if (!args.reports_to("tensorboard")) return;
  tensorboard_ = std::make_unique<EventFileWriter>(tensorboard_logging_dir(args));
  // TensorBoardCallback.on_train_begin's texts (to_json_string: indent 2, keys sorted).
  tensorboard_->add_text("args", args.to_json().dump(2));
  if (!model_config.is_null()) tensorboard_->add_text("model_config", model_config.dump(2));
}

// Runs in step closures: a failed write (disk full) costs the events, not the run.
void Reporter::log(const json& entry, int64_t step) {
  if (!tensorboard_) return;
  try {
    tensorboard_->add_scalars(tensorboard_scalars(entry), step);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln train: warning: TensorBoard: %s; no more events are written\n", e.what());
    tensorboard_.reset();
  }
}

}  // namespace kiln::train
