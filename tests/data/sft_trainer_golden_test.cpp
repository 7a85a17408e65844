// tokenize_sft and pack_sft against the rows TRL's SFTTrainer itself prepares
// (tests/goldens/sft_trainer/cases.json, gen_sft_trainer_goldens.py, trl 1.16):
// conversational and prompt-completion data, assistant-only and
// completion-only losses, max_length truncation (rows left without a label
// dropped), and bfd, bfd_split and wrapped packing with each packed row's
// example lengths.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/data/sft.h"
#include "kiln/tokenizers/chat_template.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::data {
namespace {

using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/sft_trainer/";

const json& cases() {
  static const json j = read_json_file(kDir + "cases.json");
  return j;
}

TEST(SftTrainerGolden, RowsAreTrlsPreparedDataset) {
  const auto tok = tokenizers::Tokenizer::from_pretrained(kDir + "llama");
  const auto chat = tokenizers::ChatTemplate::from_pretrained(kDir + "llama");
  ASSERT_GE(cases().size(), 10u);
  for (const auto& [name, c] : cases().items()) {
    SCOPED_TRACE(name);
    const json& config = c.at("config");
    SftOptions o;
    o.eos_token = chat.special_tokens()["eos_token"].get<std::string>();
    o.assistant_only_loss = config.value("assistant_only_loss", false);
    if (config.contains("completion_only_loss")) o.completion_only_loss = config.at("completion_only_loss").get<bool>();
    // TRL's default 1024; null: no truncation.
    const json length = config.value("max_length", json(1024));
    o.max_length = length.is_null() ? 0 : length.get<int64_t>();
    o.packing = config.value("packing", false);
    Features f = tokenize_sft(load_json_rows(kDir + "../sft/" + c.at("file").get<std::string>()), tok, &chat, o);
    if (o.packing)
      f = pack_sft(f, o.max_length, parse_packing_strategy(config.value("packing_strategy", std::string("bfd"))));
    const json& rows = c.at("rows");
    ASSERT_EQ(f.size(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(f.input_ids[r], rows[r].at("input_ids").get<std::vector<int64_t>>()) << "row " << r;
      EXPECT_EQ(f.token_labels[r], rows[r].at("labels").get<std::vector<int64_t>>()) << "row " << r;
      if (rows[r].contains("seq_lengths")) {
        ASSERT_LT(r, f.seq_lengths.size());
        EXPECT_EQ(f.seq_lengths[r], rows[r].at("seq_lengths").get<std::vector<int64_t>>()) << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::data
