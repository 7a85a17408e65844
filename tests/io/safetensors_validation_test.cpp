// Header validation: every malformed file is a kiln::Error naming the file
// (and the tensor, and what was expected vs found), never a crash.
#include <gtest/gtest.h>

#include <random>

#include "io/io_test_util.h"
#include "kiln/io/safetensors.h"

namespace kiln::io {
namespace {

using testing::raw_safetensors;
using testing::TempDir;
using testing::throws_with;

class SafetensorsValidation : public ::testing::Test {
 protected:
  // Writes `bytes` as bad.safetensors and expects open() to fail with a
  // message holding the file name and every fragment.
  ::testing::AssertionResult rejects(const std::string& bytes, std::vector<std::string> fragments) {
    write_file_atomic(path(), bytes);
    fragments.insert(fragments.begin(), path().string());
    return throws_with([&] { SafetensorsFile::open(path()); }, fragments);
  }
  ::testing::AssertionResult rejects_header(const std::string& header, const std::string& data,
                                            std::vector<std::string> fragments) {
    return rejects(raw_safetensors(header, data), std::move(fragments));
  }
  std::filesystem::path path() const { return dir_ / "bad.safetensors"; }

  TempDir dir_;
};

const std::string kData16(16, '\0');

TEST_F(SafetensorsValidation, EmptyFile) { EXPECT_TRUE(rejects("", {"0 bytes", "shorter than"})); }

TEST_F(SafetensorsValidation, ShorterThanEightBytes) { EXPECT_TRUE(rejects("abc", {"3 bytes", "shorter than"})); }

TEST_F(SafetensorsValidation, HeaderLengthLargerThanFile) {
  uint64_t n = 1000;
  EXPECT_TRUE(rejects(std::string(reinterpret_cast<char*>(&n), 8) + "{}", {"header length 1000", "larger than the file"}));
}

TEST_F(SafetensorsValidation, HeaderLengthNearU64Max) {
  uint64_t n = ~uint64_t{0} - 3;  // 8 + n wraps around
  EXPECT_TRUE(rejects(std::string(reinterpret_cast<char*>(&n), 8) + "{}", {"larger than the file"}));
}

TEST_F(SafetensorsValidation, HeaderNotJson) {
  EXPECT_TRUE(rejects_header("{\"a\": nope}", "", {"not valid JSON", "1:"}));
  EXPECT_TRUE(rejects_header(std::string("{\"a\0\":1}", 8), "", {"not valid JSON"}));
  EXPECT_TRUE(rejects_header("", "", {"not valid JSON"}));
  EXPECT_TRUE(rejects_header("{\"\xff\":{}}", "", {"not valid JSON"}));  // invalid UTF-8
  // A number past double's range: nlohmann reports it as out_of_range, not a parse error.
  EXPECT_TRUE(rejects_header("{\"a\":1e400}", "", {"not valid JSON", "1e400"}));
}

TEST_F(SafetensorsValidation, HeaderNotObject) {
  EXPECT_TRUE(rejects_header("[1,2]", "", {"must be a JSON object", "array"}));
  EXPECT_TRUE(rejects_header("7", "", {"must be a JSON object", "integer 7"}));
}

TEST_F(SafetensorsValidation, EntryNotObject) {
  EXPECT_TRUE(rejects_header(R"({"w": 3})", "", {"tensor 'w'", "expected an object", "integer 3"}));
}

TEST_F(SafetensorsValidation, MissingFields) {
  EXPECT_TRUE(rejects_header(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", kData16, {"tensor 'w'", "missing \"dtype\""}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", kData16, {"tensor 'w'", "missing \"shape\""}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4]}})", kData16, {"tensor 'w'", "missing \"data_offsets\""}));
}

TEST_F(SafetensorsValidation, WrongJsonTypes) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":32,"shape":[4],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "\"dtype\" must be a string", "integer 32"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "\"shape\" must be an array", "string"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "\"shape\" must be an array of integers", "number 4.0"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[[4]],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "\"shape\"", "array"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16]}})", kData16,
                             {"tensor 'w'", "\"data_offsets\" must be [begin, end]", "[16]"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16,32]}})", kData16,
                             {"tensor 'w'", "\"data_offsets\""}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,"16"]}})", kData16,
                             {"tensor 'w'", "\"data_offsets\""}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]}})", kData16,
                             {"tensor 'w'", "\"data_offsets\"", "[-16,0]"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":{"begin":0}}})", kData16,
                             {"tensor 'w'", "\"data_offsets\""}));
}

TEST_F(SafetensorsValidation, DeeplyNestedHeaderIsRejectedWithoutRecursion) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_TRUE(rejects_header(deep, "", {"nests deeper than 8 levels"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":)" + deep + "}}", kData16,
                             {"nests deeper"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,16]}})", kData16,
                             {"nests deeper"}));
  // Moderate nesting still gets the precise message.
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[[[[0]]],16]}})", kData16,
                             {"tensor 'w'", "\"data_offsets\"", "found array"}));
}

TEST_F(SafetensorsValidation, UnknownDtype) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "unknown dtype 'F128'", "expected one of"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"f32","shape":[4],"data_offsets":[0,16]}})", kData16,
                             {"unknown dtype 'f32'"}));
}

TEST_F(SafetensorsValidation, NegativeExtent) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "negative extent -2"}));
}

TEST_F(SafetensorsValidation, ExtentTooLargeOrOverflowing) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "too large"}));
  // 2^32 * 2^32 * 4 wraps to 0 in 64 bits; with a zero extent elsewhere too.
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "",
                             {"tensor 'w'", "overflows"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", "",
                             {"tensor 'w'", "overflows"}));
}

TEST_F(SafetensorsValidation, ByteCountMismatch) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "F32[2,3] needs 24 bytes", "[0,16] hold 16"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"BF16","shape":[],"data_offsets":[0,16]}})", kData16,
                             {"tensor 'w'", "BF16[] needs 2 bytes"}));
}

TEST_F(SafetensorsValidation, ReversedOffsets) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", kData16,
                             {"tensor 'w'", "[16,0]", "end before they begin"}));
}

TEST_F(SafetensorsValidation, OffsetsOutsideDataSection) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", kData16,
                             {"tensor 'w'", "[0,24]", "outside the data section (16 bytes)"}));
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", kData16,
                             {"tensor 'w'"}));
}

TEST_F(SafetensorsValidation, OverlappingTensors) {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  EXPECT_TRUE(rejects_header(header, std::string(24, '\0'), {"'b'", "[8,24]", "overlap tensor 'a' [0,16]"}));
  // The same bytes twice.
  header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})";
  EXPECT_TRUE(rejects_header(header, kData16, {"overlap"}));
  // An empty tensor inside another one.
  header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"I32","shape":[0],"data_offsets":[8,8]}})";
  EXPECT_TRUE(rejects_header(header, kData16, {"'b'", "overlap"}));
}

TEST_F(SafetensorsValidation, HoleBetweenTensors) {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})";
  EXPECT_TRUE(rejects_header(header, std::string(24, '\0'), {"bytes [8,16)", "before tensor 'b'", "no tensor"}));
}

TEST_F(SafetensorsValidation, TrailingBytesBelongToNoTensor) {
  EXPECT_TRUE(rejects_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData16,
                             {"16 bytes", "cover 8", "trailing"}));
  EXPECT_TRUE(rejects_header("{}", "x", {"1 bytes", "cover 0"}));
}

TEST_F(SafetensorsValidation, MetadataMustMapStringsToStrings) {
  EXPECT_TRUE(rejects_header(R"({"__metadata__":{"format":"pt","step":3}})", "",
                             {"__metadata__ 'step' must be a string", "integer 3"}));
  EXPECT_TRUE(rejects_header(R"({"__metadata__":["pt"]})", "", {"__metadata__ must be an object", "array"}));
  EXPECT_TRUE(rejects_header(R"({"__metadata__":{"a":{"b":"c"}}})", "", {"__metadata__ 'a'", "object"}));
}

TEST_F(SafetensorsValidation, DuplicateTensorName) {
  std::string header =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_TRUE(rejects_header(header, kData16, {"'w' twice"}));
}

TEST_F(SafetensorsValidation, AcceptsOutOfOrderOffsetsAndUnknownFields) {
  // Header order need not be offset order; extra fields are ignored (as HF does).
  std::string header =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16],"note":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  write_file_atomic(path(), raw_safetensors(header, kData16));
  auto f = SafetensorsFile::open(path());
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries()[0].name, "b");
  EXPECT_EQ(f.entries()[1].name, "a");
  EXPECT_TRUE(f.metadata().empty());
}

std::string valid_file(const TempDir& dir) {
  save_safetensors(dir / "good.safetensors",
                   {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2})},
                    {"ids", Tensor::from_vector(std::vector<int64_t>{7, 8, 9}, {3})}});
  return read_file(dir / "good.safetensors");
}

TEST_F(SafetensorsValidation, TruncatedInTheHeader) {
  std::string good = valid_file(dir_);
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  EXPECT_TRUE(rejects(good.substr(0, 8 + n / 2), {"header length", "larger than the file"}));
  EXPECT_TRUE(rejects(good.substr(0, 5), {"shorter than"}));
}

TEST_F(SafetensorsValidation, TruncatedInTheData) {
  std::string good = valid_file(dir_);
  EXPECT_TRUE(rejects(good.substr(0, good.size() - 4), {"tensor 'ids'", "outside the data section", "truncated"}));
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  EXPECT_TRUE(rejects(good.substr(0, 8 + n + 3), {"tensor '", "outside the data section"}));
  // Cut right after the header: every tensor is missing.
  EXPECT_TRUE(rejects(good.substr(0, 8 + n), {"outside the data section (0 bytes)"}));
}

// No prefix of a valid file, and no single corrupted header byte, may crash:
// each either opens (and then loads) or throws kiln::Error.
TEST_F(SafetensorsValidation, EveryTruncationIsAnError) {
  std::string good = valid_file(dir_);
  for (size_t len = 0; len < good.size(); ++len) {
    write_file_atomic(path(), good.substr(0, len));
    EXPECT_THROW(SafetensorsFile::open(path()), kiln::Error) << "length " << len;
  }
}

TEST_F(SafetensorsValidation, CorruptedHeaderBytesNeverCrash) {
  std::string good = valid_file(dir_);
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  std::mt19937 rng(1234);
  const char replacements[] = {'0', '9', '-', '[', ']', '{', '}', '"', ',', ':', 'e', '.', ' ', '\0', '\xff', '1'};
  for (size_t pos = 0; pos < 8 + n; ++pos) {
    std::string bad = good;
    bad[pos] = replacements[rng() % sizeof replacements];
    write_file_atomic(path(), bad);
    try {
      auto f = SafetensorsFile::open(path());
      for (const auto& e : f.entries()) {
        try {
          f.load(e.name).to_vector<double>();
        } catch (const kiln::Error&) {
        }
      }
    } catch (const kiln::Error&) {
    }
  }
}

}  // namespace
}  // namespace kiln::io
