#include "kiln/models/token_ids.h"

namespace kiln::models {

std::optional<IdOutsideVocabulary> id_outside_vocabulary(const std::vector<std::vector<int64_t>>& rows,
                                                         int64_t vocab_size) {
  std::optional<IdOutsideVocabulary> worst;
  // A negative id beats any large one; between two large ones the larger wins.
  auto worse = [](int64_t a, int64_t b) { return (a < 0) != (b < 0) ? a < 0 : a < 0 ? a < b : a > b; };
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t p = 0; p < rows[r].size(); ++p) {
      const int64_t id = rows[r][p];
      if (id >= 0 && id < vocab_size) continue;
      if (!worst || worse(id, worst->id)) worst = IdOutsideVocabulary{id, r, p};
    }
  return worst;
}

}  // namespace kiln::models
