#pragma once
// The TrainingArguments fields of Hugging Face's transformers (4.x and 5.x)
// that kiln has no field for, as an args file written by HF's
// TrainingArguments.to_json_string() holds them all. A field whose value asks
// for nothing kiln lacks (torch_compile: false, deepspeed: null, a hub_* name
// without push_to_hub, dataloader_pin_memory, ...) is ignored; one that asks
// for something kiln lacks (torch_compile: true, a deepspeed config) is an
// error naming the field and the value.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::train {

enum class HfField {
  NotHf,    // not a field of HF's TrainingArguments that kiln lacks
  Ignored,  // one whose value asks for nothing
  Lacking,  // one whose value asks for something kiln does not have
};

// transformers 5's activation_checkpointing(_kwargs), the new names of
// gradient_checkpointing(_kwargs), resolved as TrainingArguments does: the
// new name's value when it is not null, else the old one's. The key whose
// value is not used is removed (HF's files hold both, mirrored);
// activation_checkpointing is kiln's gradient_checkpointing under its new name.
void resolve_hf_aliases(nlohmann::json& args);

// What `key` = `value` of an HF args file is to kiln; for Lacking, `why`
// says what the value asks for.
HfField classify_hf_field(const std::string& key, const nlohmann::json& value, std::string* why = nullptr);

// HF's spellings of fields kiln has, in kiln's form: report_to as a list,
// include_num_input_tokens_seen as "no" / "all" (transformers 5), and
// train_sampling_strategy "group_by_length" (5's name for group_by_length).
// Returns the (key, value) kiln reads, or nullopt when `key` is none of
// these. A value kiln cannot honour (include_num_input_tokens_seen
// "non_padding", train_sampling_strategy "sequential") is an error naming
// `source`, the key and the value.
std::optional<std::pair<std::string, nlohmann::json>> translate_hf_field(const std::string& key,
                                                                         const nlohmann::json& value,
                                                                         const std::string& source);

}  // namespace kiln::train
