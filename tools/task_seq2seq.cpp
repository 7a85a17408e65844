// --task seq2seq (run_summarization): T5 on source/target text pairs; with
// --do_predict the test loss, and with --predict_with_generate the generated
// outputs and their ROUGE / BLEU scores.
#include "kiln/core/error.h"
#include "train_task.h"

namespace kiln::cli {
namespace {

class Seq2Seq : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::Seq2Seq; }
  // --source_column / --target_column are the text pair of each row.
  void adapt_flags(FlagValues& f) const override {
    f["text_column"] = f.count("source_column") ? f["source_column"] : "source";
    f["text_pair_column"] = f.count("target_column") ? f["target_column"] : "target";
    f["label_column"] = "";
  }
  std::string architecture(const models::PretrainedConfig& c) const override {
    KILN_CHECK(c.model_type == "t5", "seq2seq: needs a t5 model, got model_type '", c.model_type, "'");
    return "T5ForConditionalGeneration";
  }
  void finish_model(models::PreTrainedModel& model, const TaskContext& ctx) const override {
    save_source_prefix(model.config(), source_prefix(ctx.flags));
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::tokenize_seq2seq(
        ds, ctx.tok.tokenizer, int_flag(ctx.flags, "max_source_length", ctx.max_len),
        int_flag(ctx.flags, "max_target_length", ctx.max_len), source_prefix(ctx.flags)));
  }
  bool predicts() const override { return true; }
  bool generates() const override { return true; }
  // run_summarization: the test loss, and with predict_with_generate the outputs.
  void predict(const PredictRun& run, const TaskContext& ctx, nlohmann::json& predict,
               nlohmann::json& all) const override {
    auto m = run.trainer.evaluate("predict", run.test);
    m.erase("perplexity");
    for (auto& [k, v] : m) predict[k] = all[k] = v;
    if (!run.args.predict_with_generate) return;
    const auto generated =
        write_generated(run.model, *run.test, run.args, int_flag(ctx.flags, "max_target_length", ctx.max_len),
                        ctx.tok, run.out / "generated_predictions.txt",
                        ctx.flags.count("model_name_or_path") ? ctx.flags.at("model_name_or_path") : "");
    score_generated(generated, *run.test, ctx.tok, predict);
    for (const char* k : {"predict_rouge1", "predict_rouge2", "predict_rougeL", "predict_rougeLsum", "predict_bleu"}) all[k] = predict[k];
  }

 private:
  static std::string source_prefix(const FlagValues& f) { return f.count("source_prefix") ? f.at("source_prefix") : ""; }
};

}  // namespace

std::unique_ptr<TrainTask> seq2seq_task() { return std::make_unique<Seq2Seq>(); }

}  // namespace kiln::cli
