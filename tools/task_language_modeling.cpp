// --task masked-lm (run_mlm), causal-lm (run_clm) and sft (TRL's SFTTrainer):
// text concatenated into blocks (run_mlm / run_clm's group_texts), or SFT's
// conversations and prompt-completion pairs (train_sft.h) for causal-lm's model.
#include "flags.h"
#include "kiln/core/error.h"
#include "train_sft.h"
#include "train_task.h"

namespace kiln::cli {
namespace {

class MaskedLm : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::MaskedLM; }
  std::string architecture(const models::PretrainedConfig& c) const override { return c.class_prefix() + "ForMaskedLM"; }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::group_texts(ds, ctx.tok.tokenizer, ctx.max_len, true));
  }
  void collator(data::CollatorOptions& co, const TaskContext& ctx) const override {
    co.mlm = true;
    KILN_CHECK(ctx.tok.mask_id >= 0, "masked-lm: the tokenizer in ", ctx.tok.dir.string(),
               " has no [MASK] or <mask> token");
    co.mask_token_id = ctx.tok.mask_id;
    co.vocab_size = static_cast<int64_t>(ctx.tok.tokenizer.vocab_size());
    co.special_token_ids = ctx.tok.special_ids;
    if (ctx.flags.count("mlm_probability"))  // checked by check_task_flags
      co.mlm_probability = number_value("train", "mlm_probability", ctx.flags.at("mlm_probability"), 0, 1);
  }
};

class CausalLm : public TrainTask {
 public:
  train::Task trainer_task() const override { return train::Task::CausalLM; }
  std::string architecture(const models::PretrainedConfig& c) const override {
    std::string arch = models::causal_lm_architecture(c);
    KILN_CHECK(!arch.empty(), "causal-lm: needs a model of type ", models::causal_lm_types(), ", got model_type '",
               c.model_type, "'");
    return arch;
  }
  std::shared_ptr<data::Features> features(const data::Dataset& ds, const TaskContext& ctx) const override {
    return std::make_shared<data::Features>(data::group_texts(ds, ctx.tok.tokenizer, ctx.max_len, false));
  }
  void collator(data::CollatorOptions& co, const TaskContext&) const override { co.causal_lm = true; }
};

// causal-lm's model and loss on SFT data: the files are read by sft_features, not as rows.
class Sft : public CausalLm {
 public:
  bool reads_rows() const override { return false; }
  int64_t max_length(const FlagValues& f, const models::PretrainedConfig& config, const char* command) const override {
    return sequence_length(sft_max_length_flag(f), config, command, 1024);
  }
  std::shared_ptr<data::Features> features(const data::Dataset&, const TaskContext&) const override {
    throw Error("internal error: --task sft reads its files itself (sft_features)");
  }
  std::shared_ptr<data::Features> train_features(const data::Dataset&, const TaskContext& ctx) const override {
    return at_most(sft_features(ctx.flags.at("train_file"), ctx.tok, ctx.flags, ctx.max_len), ctx.flags,
                   "max_train_samples");
  }
  std::shared_ptr<data::Features> eval_features(data::Dataset& ds, const TaskContext& ctx) const override {
    ds.source = ctx.flags.at("validation_file");
    return at_most(sft_features(ds.source, ctx.tok, ctx.flags, ctx.max_len, true), ctx.flags, "max_eval_samples");
  }
  void collator(data::CollatorOptions& co, const TaskContext& ctx) const override {
    co.causal_lm = true;
    co.pad_token_id = sft_padding_id(ctx.tok);
  }
};

}  // namespace

std::unique_ptr<TrainTask> masked_lm_task() { return std::make_unique<MaskedLm>(); }
std::unique_ptr<TrainTask> causal_lm_task() { return std::make_unique<CausalLm>(); }
std::unique_ptr<TrainTask> sft_task() { return std::make_unique<Sft>(); }

}  // namespace kiln::cli
