#pragma once
// TrainingArguments.label_smoothing_factor as transformers' Trainer applies it:
// its LabelSmoother replaces the model's loss, in training and in evaluation,
// by the cross-entropy of the logits against labels smoothed by epsilon,
// (1 - epsilon) * nll + epsilon * mean over the classes of -log p, averaged
// over the labels that are not -100 (torch's cross_entropy with
// label_smoothing). A causal LM's labels shift left first, as its own loss does.
#include <string>

#include "kiln/models/model.h"

namespace kiln::train {

// Whether label smoothing applies to a model whose loss is of `problem`
// (a task name for the errors): an error for heads HF's LabelSmoother fails
// on (question answering: no logits; regression: real labels); false, with a
// warning on stderr, for multi-label classification, which HF's Trainer runs
// without it.
bool label_smoothing_applies(double epsilon, const models::PreTrainedModel& model, bool question_answering,
                             bool warn);

// The smoothed loss of the outputs `out` of `in` (in.labels defined).
Tensor smoothed_loss(const models::ModelOutputs& out, const models::ModelInputs& in, double epsilon, bool causal_lm);

}  // namespace kiln::train
