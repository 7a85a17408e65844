// kiln forward --model_name_or_path DIR (or --model DIR) [--adapter LORA_DIR] --inputs inputs.json --output out.json
//              [--architecture ARCH]   (the model may be a PEFT adapter directory whose adapter_config.json names its base)
// Runs the model in eval mode on {"input_ids": [[...]], "attention_mask": ...,
// "token_type_ids": ..., "labels": ...} and writes {"logits": [...], "loss": x}:
// how a user checks that a model agrees with Python's transformers.
#include <cstdio>

#include "command.h"
#include "flags.h"
#include "kiln/core/error.h"
#include "kiln/io/json_file.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"

namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "usage: kiln forward --model_name_or_path DIR [--adapter LORA_DIR] --inputs inputs.json --output out.json "
    "[--architecture ARCH]\n(the model may be a PEFT adapter directory whose adapter_config.json names its base)";

// A rectangular nested JSON array of numbers -> Tensor (i64 when all are integers).
kiln::Tensor to_tensor(const json& j, const std::string& where) {
  kiln::Shape shape;
  const json* cur = &j;
  while (cur->is_array()) {
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  std::vector<double> values;
  bool integral = true;
  std::function<void(const json&, size_t, std::string)> walk = [&](const json& v, size_t depth, std::string path) {
    if (depth == shape.size()) {
      KILN_CHECK(v.is_number() || v.is_boolean(), where, path, ": expected a number, got ", kiln::json_found(v));
      integral = integral && (v.is_number_integer() || v.is_boolean());
      values.push_back(v.is_boolean() ? v.get<bool>() : v.get<double>());
      return;
    }
    KILN_CHECK(v.is_array() && static_cast<int64_t>(v.size()) == shape[depth], where, path, ": expected a list of ",
               shape[depth], " entries (rows must have equal lengths), got ", v.is_array() ? std::to_string(v.size()) + " entries" : kiln::json_found(v));
    for (size_t i = 0; i < v.size(); ++i) walk(v[i], depth + 1, path + "[" + std::to_string(i) + "]");
  };
  walk(j, 0, "");
  if (integral) return kiln::Tensor::from_vector(std::vector<int64_t>(values.begin(), values.end()), shape);
  return kiln::Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape);
}

json to_json(const kiln::Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  const kiln::Shape& s = t.shape();
  std::function<json(size_t, size_t&)> build = [&](size_t depth, size_t& pos) -> json {
    if (depth == s.size()) return v[pos++];
    json arr = json::array();
    for (int64_t i = 0; i < s[depth]; ++i) arr.push_back(build(depth + 1, pos));
    return arr;
  };
  size_t pos = 0;
  return build(0, pos);
}

int run_forward(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("forward",
                         {{"model_name_or_path", true, true}, {"inputs", true, true}, {"output", true, true},
                          {"architecture"}, {"adapter"}},
                         kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  std::string inputs_path = flags.get("inputs");
  json inputs = kiln::read_json_file(inputs_path);
  KILN_CHECK(inputs.is_object(), inputs_path, ": expected an object with input_ids, attention_mask, ...");
  static const std::vector<std::string> known = {"input_ids", "attention_mask", "token_type_ids", "labels",
                                                 "start_positions", "end_positions", "decoder_input_ids",
                                                 "decoder_attention_mask"};
  for (const auto& [k, v] : inputs.items())
    KILN_CHECK(std::find(known.begin(), known.end(), k) != known.end(), inputs_path, ": unknown key '", k,
               "' (expected input_ids, attention_mask, token_type_ids, labels, start_positions, end_positions, ",
               "decoder_input_ids, decoder_attention_mask)");
  KILN_CHECK(inputs.contains("input_ids"), inputs_path, ": 'input_ids' is required");
  auto field = [&](const char* k) {
    return inputs.contains(k) ? to_tensor(inputs[k], inputs_path + ": '" + k + "'") : kiln::Tensor();
  };
  kiln::models::ModelInputs in{field("input_ids"), field("attention_mask"), field("token_type_ids"), field("labels"),
                               field("start_positions"), field("end_positions"), field("decoder_input_ids"),
                               field("decoder_attention_mask"), field("position_ids")};
  KILN_CHECK(kiln::is_integral(in.input_ids.dtype()) && in.input_ids.rank() == 2, inputs_path,
             ": 'input_ids' must be a list of lists of token ids");
  KILN_CHECK(in.input_ids.numel() > 0, inputs_path, ": 'input_ids' must hold at least one row of at least one token, ",
             "got shape ", kiln::to_string(in.input_ids.shape()));

  kiln::models::LoadOptions opts;
  opts.architecture = flags.get("architecture");
  auto model = kiln::models::from_pretrained_with_adapter(flags.get("model"), flags.get("adapter"), opts);
  model->eval();
  kiln::models::ModelOutputs out;
  {
    kiln::NoGradGuard no_grad;
    out = model->forward(in);
  }
  json result = json::object();
  for (const auto& [name, t] : out.named()) result[name] = to_json(t);
  kiln::io::write_json_file_atomic(flags.get("output"), result);
  std::fprintf(stderr, "kiln forward: %s -> %s\n", model->architecture().c_str(), flags.get("output").c_str());
  return 0;
}

}  // namespace

KILN_COMMAND(forward, "run a model on token ids from JSON and write logits and loss", run_forward);
