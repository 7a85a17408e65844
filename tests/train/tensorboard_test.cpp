// TensorBoard event files: TFRecord framing with masked CRC-32C, and the
// Event/Summary protos (tensorboard/compat/proto/event.proto, summary.proto),
// read back by an independent decoder.
#include "kiln/train/tensorboard.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/temp_dir.h"

namespace kiln::train {
namespace {

namespace fs = std::filesystem;

// The published TFRecord mask, written out again so the test does not trust the writer's.
uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <class T>
T read_le(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

// Records of a TFRecord file, both CRCs checked.
std::vector<std::string> read_records(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_LE(at + 12, bytes.size()) << "truncated record header";
    const auto len = read_le<uint64_t>(bytes, at);
    EXPECT_EQ(read_le<uint32_t>(bytes, at + 8), mask(crc32c(bytes.substr(at, 8)))) << "length CRC";
    EXPECT_LE(at + 12 + len + 4, bytes.size()) << "truncated record";
    std::string data = bytes.substr(at + 12, len);
    EXPECT_EQ(read_le<uint32_t>(bytes, at + 12 + len), mask(crc32c(data))) << "data CRC";
    records.push_back(std::move(data));
    at += 12 + len + 4;
  }
  return records;
}

// A protobuf message's fields: (field number, wire type) -> raw value (varint as number, others as bytes).
struct Field {
  int number = 0, wire_type = 0;
  uint64_t varint = 0;
  std::string bytes;
};
std::vector<Field> decode(const std::string& m) {
  std::vector<Field> out;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = static_cast<uint8_t>(m.at(at++));
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (at < m.size()) {
    uint64_t key = varint();
    Field f;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    if (f.wire_type == 0) {
      f.varint = varint();
    } else if (f.wire_type == 1) {
      f.bytes = m.substr(at, 8), at += 8;
    } else if (f.wire_type == 5) {
      f.bytes = m.substr(at, 4), at += 4;
    } else {
      EXPECT_EQ(f.wire_type, 2);
      size_t n = varint();
      f.bytes = m.substr(at, n), at += n;
    }
    out.push_back(f);
  }
  return out;
}

struct Event {
  std::optional<double> wall_time;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::string tag;
  std::optional<float> simple_value;
};
Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : decode(data)) {
    if (f.number == 1 && f.wire_type == 1) e.wall_time = read_le<double>(f.bytes, 0);
    if (f.number == 2 && f.wire_type == 0) e.step = static_cast<int64_t>(f.varint);
    if (f.number == 3 && f.wire_type == 2) e.file_version = f.bytes;
    if (f.number == 5 && f.wire_type == 2)              // Summary
      for (const Field& v : decode(f.bytes)) {          // Summary.value
        EXPECT_EQ(v.number, 1);
        for (const Field& x : decode(v.bytes)) {        // Value
          if (x.number == 1 && x.wire_type == 2) e.tag = x.bytes;
          if (x.number == 2 && x.wire_type == 5) e.simple_value = read_le<float>(x.bytes, 0);
        }
      }
  }
  return e;
}

TEST(TensorBoard, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(masked_crc32c("123456789"), mask(0xE3069283u));
}

// A scalar Event byte for byte: wall_time 1.5 at step 3, tag "a", value 2.0f.
TEST(TensorBoard, ScalarEventEncoding) {
  const std::string expected("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"  // 1: double 1.5
                             "\x10\x03"                             // 2: varint 3
                             "\x2a\x0a"                             // 5: Summary, 10 bytes
                             "\x0a\x08"                             //   1: Value, 8 bytes
                             "\x0a\x01"
                             "a"                                    //     1: tag "a"
                             "\x15\x00\x00\x00\x40",                //     2: float 2.0
                             23);
  EXPECT_EQ(encode_scalar_event("a", 2.0f, 3, 1.5), expected);
}

TEST(TensorBoard, WrittenFileReadsBack) {
  testing::TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir / "runs" / "x");
    path = w.path().string();
    w.add_scalars({{"train/loss", 0.75}, {"train/learning_rate", 5e-5}}, 10);
    w.add_scalars({{"eval/loss", 0.5}}, 300000);  // a step past one varint byte
  }
  EXPECT_EQ(fs::path(path).parent_path(), dir / "runs" / "x");
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  auto records = read_records(path);
  ASSERT_EQ(records.size(), 4u);
  Event first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  ASSERT_TRUE(first.wall_time);
  EXPECT_GT(*first.wall_time, 1.6e9);
  struct Want {
    std::string tag;
    int64_t step;
    float value;
  };
  const std::vector<Want> want = {{"train/loss", 10, 0.75f}, {"train/learning_rate", 10, 5e-5f}, {"eval/loss", 300000, 0.5f}};
  for (size_t i = 0; i < want.size(); ++i) {
    Event e = decode_event(records[i + 1]);
    EXPECT_EQ(e.tag, want[i].tag);
    EXPECT_EQ(e.step, want[i].step);
    ASSERT_TRUE(e.simple_value);
    EXPECT_EQ(*e.simple_value, want[i].value);
    EXPECT_TRUE(e.wall_time);
    EXPECT_FALSE(e.file_version);
  }
}

// HF's rewrite_logs.
TEST(TensorBoard, LogKeysBecomeHfTags) {
  auto s = tensorboard_scalars({{"loss", 1.0}, {"eval_loss", 2.0}, {"test_f1", 3.0}, {"step", 4}, {"note", "x"}});
  std::map<std::string, double> got(s.begin(), s.end());
  EXPECT_EQ(got, (std::map<std::string, double>{{"train/loss", 1.0}, {"eval/loss", 2.0}, {"test/f1", 3.0}}));
}

TEST(TensorBoard, DefaultLoggingDirIsHfs) {
  const std::string name = default_logging_dir("out").filename().string();
  EXPECT_EQ(default_logging_dir("out").parent_path(), fs::path("out") / "runs");
  // "Dec05_00-25-41_host": month, day, time, hostname.
  ASSERT_GT(name.size(), 16u);
  EXPECT_EQ(name[5], '_');
  EXPECT_EQ(name[8], '-');
  EXPECT_EQ(name[14], '_');
}

}  // namespace
}  // namespace kiln::train
