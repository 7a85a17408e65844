// Every op's forward value and gradient against PyTorch on the CPU, traced and
// eager (the cases: support/op_goldens.h; on the GPU: tests/backend/cuda/device_test.cpp).
#include "support/op_goldens.h"

namespace kiln {
namespace {

using nlohmann::json;
using testing::op_goldens;

class OpGolden : public ::testing::TestWithParam<size_t> {};

TEST_P(OpGolden, MatchesPyTorch) {
  const json& c = op_goldens()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  testing::check_op_golden(c, Device::cpu());
}

TEST_P(OpGolden, MatchesPyTorchInEagerMode) {
  const json& c = op_goldens()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  set_eager_mode(true);
  testing::check_op_golden(c, Device::cpu());
  set_eager_mode(false);
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(op_goldens()["cases"].size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGolden, ::testing::ValuesIn(case_indices()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = op_goldens()["cases"][info.param]["name"].get<std::string>();
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln
