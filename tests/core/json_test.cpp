// core/json.h and core/file.h: the one way kiln reads files and JSON, with
// errors that name the source and never crash, block or quote a whole file.
#include "kiln/core/json.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiln/core/file.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(Json, DeepNestingIsRefusedWhereItStarts) {
  EXPECT_EQ(parse_json(nested(kMaxJsonDepth), "a.json").size(), 1u);
  const std::string deep = "{\"x\":\n" + nested(100000) + "}";  // tens of thousands deep would overflow the stack
  EXPECT_EQ(error_of([&] { parse_json(deep, "a.json"); }),
            "a.json:2:256: invalid JSON: nests deeper than 256 levels");
  EXPECT_CONTAINS(error_of([&] { parse_ordered_json(deep, "rows.jsonl", 7); }), "rows.jsonl:8:256:");
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  const std::string text = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_EQ(parse_json(text, "s.json")[0].get<std::string>().size(), 2001u);
}

TEST(Json, ParseErrorsNameTheSourceAndQuoteLittle) {
  EXPECT_CONTAINS(error_of([] { parse_json("{\n  \"a\": nope\n}", "c.json"); }), "c.json:2:");
  // An unterminated string: nlohmann quotes what it read, the rest of the file.
  const std::string e = error_of([] { parse_json("[\"" + std::string(100000, 'x'), "big.json"); });
  EXPECT_CONTAINS(e, "big.json:1:");
  EXPECT_LT(e.size(), 300u) << e;
  EXPECT_EQ(error_of([] { parse_json("[1e400]", "n.json"); }), "n.json: invalid JSON: number overflow parsing '1e400'");
  // Bytes that are not UTF-8 are escaped, not echoed.
  const std::string bad = error_of([] { parse_json("{\"a\xff\": 1}", "u.json"); });
  EXPECT_CONTAINS(bad, "\\xFF");
  EXPECT_EQ(bad.find('\xff'), std::string::npos);
}

TEST(Json, TypedValuesNameTheKey) {
  const auto j = parse_json(R"({"model_type": 7, "n": 9223372036854775808, "s": "x", "b": true, "z": null})", "config.json");
  EXPECT_EQ(error_of([&] { json_value<std::string>(j, "model_type", "", "config.json"); }),
            "config.json: 'model_type' must be a string, got number 7");
  EXPECT_EQ(error_of([&] { json_value<int64_t>(j, "n", 0, "config.json"); }),
            "config.json: 'n' must be an integer below 2^63, got number 9223372036854775808");
  EXPECT_EQ(error_of([&] { json_value<bool>(j, "s", false, "config.json"); }),
            "config.json: 's' must be true or false, got string \"x\"");
  EXPECT_EQ(json_value<bool>(j, "b", false, "c"), true);
  EXPECT_EQ(json_value<int64_t>(j, "z", 3, "c"), 3);        // null: the fallback
  EXPECT_EQ(json_value<int64_t>(j, "absent", 4, "c"), 4);  // absent: the fallback
  EXPECT_EQ(error_of([] { json_value<int64_t>(nlohmann::json::array(), "k", 0, "c.json"); }),
            "c.json: expected a JSON object, got array []");
}

TEST(Json, FoundQuotesAShortExcerpt) {
  EXPECT_EQ(json_found(nlohmann::json(7)), "number 7");
  const std::string long_array = json_found(parse_json(nested(200), "x"));
  EXPECT_EQ(long_array.rfind("array [[[[", 0), 0u);
  EXPECT_LT(long_array.size(), 80u);
  EXPECT_NE(long_array.find("…"), std::string::npos);
}

TEST(Excerpt, CutsAtCharactersAndEscapesBytes) {
  EXPECT_EQ(excerpt("short"), "short");
  EXPECT_EQ(excerpt(std::string(100, 'a'), 10), "aaaaaaaaaa…");
  EXPECT_EQ(excerpt("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9\xc3\xa9");  // é is two bytes: never cut in half
  EXPECT_EQ(excerpt("a\xff" "b\n"), "a\\xFFb\\x0A");
}

TEST(File, NonRegularFilesAreRefusedWithoutBlocking) {
  testing::TempDir dir;
  const auto fifo = dir / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { read_file(fifo); }), fifo.string() + ": is a FIFO (named pipe), expected a regular file");
  EXPECT_CONTAINS(error_of([&] { read_json_file(fifo); }), "FIFO");
  EXPECT_CONTAINS(error_of([&] { check_regular_file(fifo); }), "FIFO");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(error_of([&] { read_file(dir.path()); }), dir.path().string() + ": is a directory, expected a regular file");
  EXPECT_CONTAINS(error_of([&] { read_file("/dev/null"); }), "character device");
  EXPECT_CONTAINS(error_of([&] { read_file(dir / "missing"); }), "No such file");
  EXPECT_EQ(read_file(dir.write("f", "abc")), "abc");
}

}  // namespace
}  // namespace kiln
