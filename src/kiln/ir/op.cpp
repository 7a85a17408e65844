#include "kiln/ir/op.h"

#include <cstddef>

namespace kiln::ir {

namespace {
struct OpInfo {
  const char* name;
  OpKind kind;
};

constexpr OpInfo kOps[] = {
    {"data", OpKind::Leaf},          {"constant", OpKind::Generator},
    {"iota", OpKind::Other},         {"rand_uniform", OpKind::Generator},
    {"rand_normal", OpKind::Generator},
    {"neg", OpKind::Elementwise},    {"exp", OpKind::Elementwise},
    {"log", OpKind::Elementwise},    {"tanh", OpKind::Elementwise},
    {"erf", OpKind::Elementwise},    {"sqrt", OpKind::Elementwise},
    {"rsqrt", OpKind::Elementwise},  {"abs", OpKind::Elementwise},
    {"sigmoid", OpKind::Elementwise}, {"relu", OpKind::Elementwise},
    {"gelu", OpKind::Elementwise},   {"not", OpKind::Elementwise},
    {"cast", OpKind::Elementwise},   {"detach", OpKind::Elementwise},
    {"add", OpKind::Elementwise},    {"sub", OpKind::Elementwise},
    {"mul", OpKind::Elementwise},    {"div", OpKind::Elementwise},
    {"pow", OpKind::Elementwise},    {"max", OpKind::Elementwise},
    {"min", OpKind::Elementwise},    {"eq", OpKind::Elementwise},
    {"ne", OpKind::Elementwise},     {"lt", OpKind::Elementwise},
    {"le", OpKind::Elementwise},     {"gt", OpKind::Elementwise},
    {"ge", OpKind::Elementwise},     {"and", OpKind::Elementwise},
    {"or", OpKind::Elementwise},     {"gelu_grad", OpKind::Elementwise},
    {"where", OpKind::Elementwise},
    {"sum", OpKind::Reduce},         {"reduce_max", OpKind::Reduce},
    {"argmax", OpKind::Reduce},
    {"reshape", OpKind::Movement},   {"permute", OpKind::Movement},
    {"broadcast", OpKind::Movement}, {"slice", OpKind::Movement},
    {"slice_grad", OpKind::Other},   {"concat", OpKind::Other},
    {"barrier", OpKind::Movement},
    {"index_select", OpKind::Other}, {"index_add", OpKind::Other},
    {"gather", OpKind::Other},       {"scatter_add", OpKind::Other},
    {"matmul", OpKind::Other},
    {"softmax", OpKind::Other},      {"softmax_grad", OpKind::Other},
    {"log_softmax", OpKind::Other},  {"log_softmax_grad", OpKind::Other},
    {"normalize", OpKind::Other},    {"normalize_grad", OpKind::Other},
    {"cross_entropy", OpKind::Other}, {"cross_entropy_grad", OpKind::Other},
    {"attention", OpKind::Other},    {"attention_grad", OpKind::Other},
    {"all_reduce", OpKind::Other},  {"broadcast_from", OpKind::Other},
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(Op::kCount),
              "kOps must list every Op in order");
}  // namespace

const char* op_name(Op op) { return kOps[static_cast<size_t>(op)].name; }
OpKind op_kind(Op op) { return kOps[static_cast<size_t>(op)].kind; }

}  // namespace kiln::ir
