#pragma once
// Reading tokenizer.json (both the current serialization and the older one
// whose model has no "type"). Every component is built from its JSON object;
// unknown types and malformed fields raise kiln::Error naming the file and
// the JSON path ("tokenizer.json: normalizer.normalizers[1]: ...").
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/tokenizers/tokenizer.h"

namespace kiln::tokenizers {

Tokenizer tokenizer_from_json(const nlohmann::json& j, const std::string& where);

NormalizerPtr normalizer_from_json(const nlohmann::json& j, const std::string& where);
PreTokenizerPtr pre_tokenizer_from_json(const nlohmann::json& j, const std::string& where);
ModelPtr model_from_json(const nlohmann::json& j, const std::string& where);
PostProcessorPtr post_processor_from_json(const nlohmann::json& j, const std::string& where);
DecoderPtr decoder_from_json(const nlohmann::json& j, const std::string& where);

std::string base64_decode(std::string_view in, const std::string& where);

// A token id from JSON: an integer in [0, 2^24). Ids index dense tables, and
// 2^24 is far past any real vocabulary (a few hundred thousand entries) and
// far below what would exhaust memory. Anything else is an error naming
// `where`.
uint32_t token_id_from_json(const nlohmann::json& v, const std::string& where);

}  // namespace kiln::tokenizers
