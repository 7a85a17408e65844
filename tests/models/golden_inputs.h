#pragma once
// A model's inputs from a golden file's tensors (input_ids, attention_mask,
// labels, decoder_input_ids; each absent one left empty).
#include <map>
#include <string>

#include "kiln/models/model.h"

namespace kiln::testing {

inline models::ModelInputs golden_inputs(const std::map<std::string, Tensor>& golden) {
  auto get = [&](const char* k) { return golden.count(k) ? golden.at(k) : Tensor(); };
  models::ModelInputs in;
  in.input_ids = get("input_ids");
  in.attention_mask = get("attention_mask");
  in.labels = get("labels");
  in.decoder_input_ids = get("decoder_input_ids");
  return in;
}

}  // namespace kiln::testing
