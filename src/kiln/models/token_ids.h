#pragma once
// Token ids against a model's vocabulary. An id at or past vocab_size fails
// the embedding lookup on the device, in every step that meets it; checked on
// the host first, the error can say which id and where it is.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::models {

struct IdOutsideVocabulary {
  int64_t id;            // a negative id if there is one, else the largest
  size_t row, position;  // where it first occurs in the rows
};

// The worst id of `rows` outside [0, vocab_size), or none when all fit.
std::optional<IdOutsideVocabulary> id_outside_vocabulary(const std::vector<std::vector<int64_t>>& rows,
                                                         int64_t vocab_size);

}  // namespace kiln::models
