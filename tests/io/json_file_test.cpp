#include "kiln/io/json_file.h"

#include <gtest/gtest.h>

#include "io/io_test_util.h"

namespace kiln::io {
namespace {

using testing::TempDir;
using testing::throws_with;

TEST(JsonFile, RoundTrip) {
  TempDir dir;
  nlohmann::json j = {{"hidden_size", 128}, {"architectures", {"BertModel"}}, {"layer_norm_eps", 1e-12},
                      {"id2label", {{"0", "NEG"}, {"1", "POS"}}}, {"name", "caf\u00e9"}};
  write_json_file_atomic(dir / "config.json", j);
  EXPECT_EQ(read_json_file(dir / "config.json"), j);
  std::string text = read_file(dir / "config.json");
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("\n  \"architectures\""), std::string::npos) << text;  // indent 2
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"config.json"});
}

TEST(JsonFile, CompactWithNegativeIndent) {
  TempDir dir;
  write_json_file_atomic(dir / "a.json", {{"a", 1}}, -1);
  EXPECT_EQ(read_file(dir / "a.json"), "{\"a\":1}\n");
}

TEST(JsonFile, ParseErrorNamesFileLineAndColumn) {
  TempDir dir;
  write_file_atomic(dir / "config.json", "{\n  \"a\": 1,\n  \"b\": nope\n}\n");
  auto path = (dir / "config.json").string();
  EXPECT_TRUE(throws_with([&] { read_json_file(dir / "config.json"); }, {path + ":3:", "invalid JSON"}));
}

TEST(JsonFile, TruncatedJsonNamesFile) {
  TempDir dir;
  write_file_atomic(dir / "t.json", "{\"a\": [1, 2");
  EXPECT_TRUE(throws_with([&] { read_json_file(dir / "t.json"); }, {(dir / "t.json").string() + ":1:"}));
}

TEST(JsonFile, MissingFileNamesIt) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { read_json_file(dir / "nope.json"); }, {(dir / "nope.json").string()}));
}

TEST(JsonFile, InvalidUtf8IsAKilnError) {
  TempDir dir;
  nlohmann::json j = {{"bad", std::string("\xff\xfe")}};
  EXPECT_TRUE(throws_with([&] { write_json_file_atomic(dir / "x.json", j); }, {(dir / "x.json").string()}));
  EXPECT_TRUE(dir.listing().empty());
}

TEST(JsonFile, ErrorPosition) {
  EXPECT_EQ(json_error_position("ab\ncd", 5), "2:2");
  EXPECT_EQ(json_error_position("x", 1), "1:1");
  EXPECT_EQ(json_error_position("", 0), "1:1");
  EXPECT_EQ(json_error_position("ab", 100), "1:3");
}

}  // namespace
}  // namespace kiln::io
