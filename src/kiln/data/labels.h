#pragma once
// String labels -> class ids, as run_glue builds label_list from the training
// set (label2id / id2label are saved into config.json by the Trainer).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct LabelMap {
  std::vector<std::string> labels;  // id -> label (empty for regression)
  bool is_regression = false;

  // Sorted lexicographically (byte order, as Python sorts str) unless every
  // label is an integer ("-1", "2": then numeric order, as run_glue sorts an
  // int column); regression when every label is a number and at least one is
  // not an integer ("3.5"). kiln::Error when `train` has no labels.
  static LabelMap from_dataset(const Dataset& train);
  // Token classification: every word tag of `train` (run_ner's
  // get_label_list), in the same order; never regression.
  static LabelMap from_word_labels(const Dataset& train);
  // From a model's id2label (ids 0..n-1 in order).
  static LabelMap from_labels(std::vector<std::string> labels);

  // run_ner's "model has labels -> use them": when a checkpoint's id2label
  // names its labels (not HF's default LABEL_0, LABEL_1, ...) and they are
  // exactly this map's labels, those labels in the checkpoint's id order, so
  // that fine-tuning keeps its head's classes; nullopt otherwise (a
  // different count, default names, or another label set).
  std::optional<LabelMap> in_model_order(const std::map<int64_t, std::string>& id2label) const;

  // kiln::Error naming `where`, the label and the known labels when absent.
  int64_t id(const std::string& label, const std::string& where) const;
  size_t size() const { return labels.size(); }
};

// Whether a config's id2label names its labels: anything but HF's default
// LABEL_<id> for every id.
bool has_named_labels(const std::map<int64_t, std::string>& id2label);

// Helpers shared with tokenize_dataset: "-12" / "+3" (integer), "0.5", "1e-3" (number).
bool is_integer_label(const std::string& s);
bool parse_number_label(const std::string& s, double* out);

}  // namespace kiln::data
