// kiln predict --model_name_or_path DIR --test_file FILE --output FILE.jsonl [--max_seq_length N] [--text_column C]
// (--model, --input and --batch_size are kiln's short names for them)
// One JSON line per input row: {"label": "positive", "score": 0.98} (regression: {"score": x}); a token
// classifier gives {"words": [...], "tags": [...]}, one tag per word; a question-answering model
// {"id": ..., "answer": "...", "start": c, "end": c, "score": p} (characters of the context); a
// multiple-choice model {"label": k, "score": p}, the chosen ending's index.
// Each line comes from the model's task (train_task.h: its prediction_lines).
#include <cstdio>
#include <filesystem>

#include "command.h"
#include "flags.h"
#include "generation_flags.h"
#include "kiln/models/model.h"
#include "lora_flags.h"
#include "train_task.h"

namespace {

using namespace kiln;
constexpr const char* kUsage =
    "usage: kiln predict --model_name_or_path DIR --test_file FILE --output FILE.jsonl [--max_seq_length N] "
    "[--text_column C] [--text_pair_column C] [--per_device_eval_batch_size N] [--bf16] [--doc_stride N] [--max_answer_length N] "
    "[--version_2_with_negative] [--adapter LORA_DIR]\n"
    "A sequence classifier reads CSV/TSV/JSON rows or text lines; a token classifier reads JSON rows with a list "
    "of words (--text_column, default 'tokens') or text lines split at whitespace; a question-answering model "
    "reads JSON rows with a question and a context (--text_column, default 'question'; --text_pair_column, "
    "default 'context'); a multiple-choice model reads run_swag's rows (sent1, sent2, ending0, ending1, ...).\n"
    "A seq2seq model (T5) generates from each row's source (text lines, or --text_column, default 'source'; "
    "--predict_with_generate is implied) with [--max_new_tokens N, default 128, or --generation_max_length N "
    "(Seq2SeqTrainer's: N - 1 new tokens, the decoder's start token counted)] "
    "[--num_beams N (--generation_num_beams)] [--length_penalty L] [--early_stopping true|false|never] "
    "[--num_return_sequences R] [--repetition_penalty P] [--no_repeat_ngram_size N] [--min_new_tokens N] [--min_length L] "
    "[the other logits-processor flags of kiln generate: --suppress_tokens IDS, --bad_words_ids JSON, "
    "--encoder_repetition_penalty P, --encoder_no_repeat_ngram_size N, ...] [--stop_strings JSON|TEXT] "
    "[--max_time SECONDS] [--source_prefix P]: "
    "{\"generated_text\": ...} per row.";

// The model's task (its architecture's, as kiln eval decides it) reads the rows and makes the lines; the language
// models' tasks have none.
int run_predict(const std::vector<std::string>& args) {
  std::vector<cli::FlagSpec> specs = {
      {"model_name_or_path", true, true}, {"test_file", true, true, "input"}, {"output", true, true},
      {"max_seq_length"}, {"text_column"}, {"text_pair_column"}, {"per_device_eval_batch_size"}, {"bf16", false},
      {"doc_stride"}, {"max_answer_length"}, {"version_2_with_negative", false}, {"adapter"},
      {"predict_with_generate", false}, {"max_new_tokens"}, {"generation_max_length"}, {"source_prefix"}};
  for (auto& s : cli::beam_flag_specs()) specs.push_back(std::move(s));
  cli::Flags flags("predict", std::move(specs), kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const std::filesystem::path dir = flags.get("model");
  models::LoadOptions load;
  load.keep_bf16 = flags.has("bf16");  // nothing trains: a bf16 checkpoint stays bf16
  auto model = models::from_pretrained_with_adapter(dir, flags.get("adapter"), load);
  const std::string name = cli::task_of_architecture(model->architecture());
  const std::unique_ptr<cli::TrainTask> task = name.empty() ? nullptr : cli::make_train_task(name);
  if (flags.has("predict_with_generate") && !(task && task->generates()))
    std::fprintf(stderr, "kiln predict: warning: --predict_with_generate is for seq2seq models (T5); ignored\n");
  if (!task) cli::cannot_predict(model->architecture());
  const cli::PredictionRequest request{flags, *model, dir, flags.get("adapter")};
  cli::write_prediction_lines(flags.get("output"), task->prediction_lines(request));
  return 0;
}

}  // namespace

KILN_COMMAND(predict, "predict labels, tags or answers for a file of texts with a trained model", run_predict);
