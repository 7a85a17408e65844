// tokenize_qa against run_qa.py's prepare_train_features
// (tests/goldens/qa/cases.json, gen_qa_goldens.py): every window of each
// context (max_seq_length 32, doc_stride 8, WordPiece pieces) and its answer
// positions, [CLS] for a window without the whole answer. Where run_qa's
// start walks on past the context (an answer starting at a window's last
// context token), the golden holds that token, as kiln labels it.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/data/features.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::data {
namespace {

using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/qa/";

TEST(QaFeaturesGolden, WindowsAndAnswerPositionsAreRunQas) {
  const json cases = read_json_file(kDir + "cases.json");
  const auto tok = tokenizers::Tokenizer::from_pretrained(kDir + "bert");
  EXPECT_GT(cases.at("v1").at("run_qa_walks_past_context").get<int>(), 0);  // the departure is exercised
  for (const char* name : {"v1", "v2"}) {
    SCOPED_TRACE(name);
    DatasetOptions o;
    o.question_answering = true;
    o.text_column = "question";
    o.text_pair_column = "context";
    o.label_column = "answers";
    auto ds = std::make_shared<const Dataset>(load_dataset(kDir + "data/train_" + std::string(name) + ".jsonl", o));
    const Features f = tokenize_qa(ds, tok, 32, 8);
    const json& hf = cases.at(name).at("train_features");
    ASSERT_EQ(f.size(), hf.size());
    for (size_t i = 0; i < f.size(); ++i) {
      EXPECT_EQ(f.input_ids[i], hf[i].at("input_ids").get<std::vector<int64_t>>()) << "window " << i;
      EXPECT_EQ(f.start_positions[i], hf[i].at("start_positions").get<int64_t>()) << "window " << i;
      EXPECT_EQ(f.end_positions[i], hf[i].at("end_positions").get<int64_t>()) << "window " << i;
    }
  }
}

}  // namespace
}  // namespace kiln::data
