#include "kiln/train/label_smoothing.h"

#include <cstdio>

#include "kiln/core/error.h"

namespace kiln::train {

bool label_smoothing_applies(double epsilon, const models::PreTrainedModel& model, bool question_answering, bool warn) {
  if (epsilon == 0) return false;
  KILN_CHECK(!question_answering, "label_smoothing_factor ", epsilon, ": question answering has start and end ",
             "logits, not the logits HF's LabelSmoother smooths (train without --label_smoothing_factor)");
  const models::PretrainedConfig& c = model.config();
  const std::string problem = c.problem_type.value_or(c.num_labels() == 1 ? "regression" : "");
  KILN_CHECK(problem != "regression", "label_smoothing_factor ", epsilon, ": the model is a regression head ",
             "(problem_type regression, or num_labels 1); label smoothing needs class labels");
  if (problem == "multi_label_classification") {
    if (warn)
      std::fprintf(stderr, "kiln train: warning: label_smoothing_factor ignored: label smoothing is not compatible "
                   "with multi-label classification (as in HF's Trainer)\n");
    return false;
  }
  return true;
}

Tensor smoothed_loss(const models::ModelOutputs& out, const models::ModelInputs& in, double epsilon, bool causal_lm) {
  KILN_CHECK(out.logits.defined() && in.labels.defined(), "label smoothing: the model gave no logits or no labels");
  const int64_t C = out.logits.dim(-1);
  Tensor labels = in.labels;
  if (causal_lm) {  // position t predicts label t+1; the last position predicts nothing
    const int64_t B = labels.dim(0), T = labels.dim(1);
    Tensor ignored = full({B, 1}, -100.0, labels.dtype(), labels.device());
    labels = T > 1 ? concat({slice(labels, 1, 1, T), ignored}, 1) : ignored;
  }
  return cross_entropy(reshape(out.logits, {-1, C}), reshape(labels, {-1}), -100, epsilon);
}

}  // namespace kiln::train
