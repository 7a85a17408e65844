// generation_config.json's settings of the decoding methods transformers 5.25
// moved to Hub custom_generate repos (refused as it refuses them without
// trust_remote_code, or ignored where it ignores them), and of the stopping
// criteria and encoder processors (read, or an error naming the key).
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "models/golden_model.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::GenerationConfig;
using testing::golden_model;

GenerationConfig from_file(const std::string& json) {
  testing::TempDir dir;
  dir.write("generation_config.json", json);
  GenerationConfig g;
  models::apply_generation_config(dir.path(), g);
  g.max_new_tokens = 3;
  return g;
}

std::string generate_error(const GenerationConfig& g) {
  return testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g); });
}

TEST(HubDecodingMethods, RefusedWhereTransformersRefusesThem) {
  EXPECT_CONTAINS(generate_error(from_file(R"({"force_words_ids": [[3, 4]]})")),
                  "force_words_ids (set) asks for constrained beam search, which transformers 5.25 moved to the Hub "
                  "repo transformers-community/constrained-beam-search");
  EXPECT_CONTAINS(generate_error(from_file(R"({"constraints": []})")), "constrained beam search");
  EXPECT_CONTAINS(generate_error(from_file(R"({"penalty_alpha": 0.6, "top_k": 4})")),
                  "penalty_alpha 0.6 with top_k 4 and greedy decoding asks for contrastive search");
  EXPECT_CONTAINS(generate_error(from_file(R"({"num_beam_groups": 2, "num_beams": 2, "diversity_penalty": 1.0})")),
                  "num_beam_groups 2 asks for group beam search");
  EXPECT_CONTAINS(generate_error(from_file(R"({"dola_layers": "high"})")), "asks for DoLa decoding");
  EXPECT_CONTAINS(generate_error(from_file(R"({"dola_layers": "low", "do_sample": true})")),
                  "transformers-community/dola");
}

TEST(HubDecodingMethods, IgnoredWhereTransformersIgnoresThem) {
  const auto plain = models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, from_file("{}"));
  for (const char* json : {R"({"penalty_alpha": 0.6, "top_k": 1})", R"({"penalty_alpha": 0.6, "top_k": 4,
                           "do_sample": true, "top_p": 0.0})", R"({"num_beam_groups": 2, "diversity_penalty": 0.5})",
                           R"({"diversity_penalty": 0.5})"})
    EXPECT_EQ(models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, from_file(json)), plain) << json;
  GenerationConfig beams = from_file(R"({"num_beams": 2, "dola_layers": [2]})");
  ::testing::internal::CaptureStderr();
  models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, beams);
  models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, beams);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(warned, "dola_layers only applies to greedy decoding and sampling (DoLa); ignored with beam search");
  EXPECT_EQ(warned.find("warning"), warned.rfind("warning")) << warned;
}

TEST(GenerationConfigFile, StoppingCriteriaAndEncoderProcessors) {
  GenerationConfig g = from_file(R"({"stop_strings": "\n\n", "max_time": 2.5, "encoder_repetition_penalty": 1.5,
      "encoder_no_repeat_ngram_size": 3})");
  EXPECT_EQ(g.stop_strings, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(g.max_time, 2.5);
  EXPECT_EQ(g.encoder_repetition_penalty, 1.5);
  EXPECT_EQ(g.encoder_no_repeat_ngram_size, 3);
  EXPECT_EQ(from_file(R"({"stop_strings": ["a", "b c"]})").stop_strings, (std::vector<std::string>{"a", "b c"}));
  auto error = [](const std::string& json) { return testing::error_of([&] { from_file(json); }); };
  EXPECT_CONTAINS(error(R"({"stop_strings": ["a", 3]})"),
                  "generation_config.json: \"stop_strings\" must be a string or a list of strings, found");
  EXPECT_CONTAINS(error(R"({"max_time": "1s"})"), "\"max_time\" must be a number of seconds, found");
  EXPECT_CONTAINS(error(R"({"encoder_repetition_penalty": true})"), "\"encoder_repetition_penalty\" must be a number");
  EXPECT_CONTAINS(error(R"({"encoder_no_repeat_ngram_size": 2.5})"),
                  "\"encoder_no_repeat_ngram_size\" must be an integer");
  EXPECT_CONTAINS(error(R"({"penalty_alpha": "x"})"), "\"penalty_alpha\" must be a number");
}

}  // namespace
}  // namespace kiln
