// Bad input gives a kiln::Error that names the file / component / line.
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenize_file.h"
#include "kiln/tokenizers/tokenizer.h"
#include "support/test_util.h"

using namespace kiln::tokenizers;

namespace {

using kiln::testing::error_of;

const char* kWordLevel = R"({"model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1},
                             "unk_token": "[UNK]"}, "pre_tokenizer": {"type": "WhitespaceSplit"}})";

TEST(Errors, MalformedJson) {
  std::string e = error_of([] { Tokenizer::from_json_string("{\"model\": [1, 2", "my.json"); });
  EXPECT_NE(e.find("my.json:1:16: invalid JSON"), std::string::npos) << e;
}

TEST(Errors, UnknownComponentType) {
  std::string e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"type": "WordLevel", "vocab": {}},
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Frobnicate"}]}})",
                                "t.json");
  });
  EXPECT_NE(e.find("t.json: normalizer.normalizers[1]: unknown normalizer type 'Frobnicate'"),
            std::string::npos)
      << e;
  e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"type": "Magic", "vocab": {}}})", "t.json");
  });
  EXPECT_NE(e.find("t.json: model: unknown model type 'Magic'"), std::string::npos) << e;
  e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"type": "WordLevel", "vocab": {}}, "decoder": {"type": "Nope"}})",
                                "t.json");
  });
  EXPECT_NE(e.find("unknown decoder type 'Nope'"), std::string::npos) << e;
}

TEST(Errors, WrongFieldType) {
  std::string e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"type": "WordLevel", "vocab": {}},
        "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Digits", "individual_digits": "yes"}})",
                                "t.json");
  });
  EXPECT_NE(e.find("pre_tokenizer.individual_digits: expected a boolean, found a string"),
            std::string::npos)
      << e;
  e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"vocab": {"a": 0}, "merges": ["a b"]}})", "t.json");
  });
  EXPECT_NE(e.find("t.json: model.merges: BPE: merge 0 'a b'"), std::string::npos) << e;
  e = error_of([] {
    Tokenizer::from_json_string(R"({"model": {"type": "WordLevel", "vocab": {}},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})",
                                "t.json");
  });
  EXPECT_NE(e.find("invalid regex '(unclosed'"), std::string::npos) << e;
  e = error_of([] { Tokenizer::from_json_string("[1, 2]", "t.json"); });
  EXPECT_NE(e.find("expected a JSON object at the top level"), std::string::npos) << e;
}

// Token ids are integers in [0, 2^24): a negative or huge one (which would
// size a dense table) is named, wherever it is.
TEST(Errors, TokenIdsOutOfRange) {
  auto load = [](const std::string& json) {
    return error_of([&] { Tokenizer::from_json_string(json, "t.json"); });
  };
  std::string e = load(R"({"model": {"type": "WordLevel", "vocab": {"a": -5, "[UNK]": 1}, "unk_token": "[UNK]"}})");
  EXPECT_NE(e.find("t.json: model.vocab['a']: id -5 out of range (expected 0 <= id < 16777216)"), std::string::npos)
      << e;
  e = load(R"({"model": {"type": "WordLevel", "vocab": {"a": 4294967295, "[UNK]": 1}, "unk_token": "[UNK]"}})");
  EXPECT_NE(e.find("model.vocab['a']: id 4294967295 out of range"), std::string::npos) << e;
  e = load(R"({"model": {"type": "WordLevel", "vocab": {"a": "0", "[UNK]": 1}, "unk_token": "[UNK]"}})");
  EXPECT_NE(e.find("model.vocab['a']: expected an integer id, found a string"), std::string::npos) << e;
  e = load(R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "added_tokens": [{"id": -1, "content": "x"}]})");
  EXPECT_NE(e.find("added_tokens[0].id: id -1 out of range"), std::string::npos) << e;
  e = load(R"({"model": {"type": "WordLevel", "vocab": {"a": 0}},
               "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", -2], "cls": ["[CLS]", 1]}})");
  EXPECT_NE(e.find("post_processor.sep[1]: id -2 out of range"), std::string::npos) << e;
}

TEST(Errors, InvalidUtf8Input) {
  Tokenizer tok = Tokenizer::from_json_string(kWordLevel, "t.json");
  std::string e = error_of([&] { tok.encode("a \xC3\x28 a"); });
  EXPECT_NE(e.find("not valid UTF-8"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 2"), std::string::npos) << e;
  std::istringstream in("a a\na \xFF\n");
  std::ostringstream out;
  e = error_of([&] { tokenize_stream(tok, in, out, "corpus.txt"); });
  EXPECT_NE(e.find("corpus.txt:2: invalid UTF-8"), std::string::npos) << e;
}

TEST(Errors, BatchItemNamed) {
  Tokenizer tok = Tokenizer::from_json_string(kWordLevel, "t.json");
  std::string e = error_of([&] { tok.encode_batch({"a", "a", "\x80"}); });
  EXPECT_NE(e.find("batch item 2"), std::string::npos) << e;
}

TEST(Errors, MissingFile) {
  std::string e = error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); });
  EXPECT_NE(e.find("/nonexistent/tokenizer.json: cannot open"), std::string::npos) << e;
}

TEST(TokenizeFile, WritesOneJsonLinePerInputLine) {
  Tokenizer tok = Tokenizer::from_json_string(kWordLevel, "t.json");
  std::istringstream in("a a\r\nb\n\na");
  std::ostringstream out;
  EXPECT_EQ(tokenize_stream(tok, in, out, "in.txt"), 4u);
  EXPECT_EQ(out.str(),
            "{\"ids\":[0,0],\"tokens\":[\"a\",\"a\"]}\n"
            "{\"ids\":[1],\"tokens\":[\"[UNK]\"]}\n"
            "{\"ids\":[],\"tokens\":[]}\n"
            "{\"ids\":[0],\"tokens\":[\"a\"]}\n");
}

}  // namespace
