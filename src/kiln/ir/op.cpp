#include "kiln/ir/op.h"

#include <cstddef>

namespace kiln::ir {

namespace {
constexpr const char* kNames[] = {
#define KILN_OP(Name, name, ...) name,
#include "kiln/ir/ops.def"
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(Op::kCount));
}  // namespace

const char* op_name(Op op) {
  const auto k = static_cast<size_t>(op);
  return k < static_cast<size_t>(Op::kCount) ? kNames[k] : "?";
}

}  // namespace kiln::ir
