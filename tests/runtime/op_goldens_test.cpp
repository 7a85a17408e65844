// Every op's forward value and gradient against PyTorch (tests/goldens/op_goldens.json,
// made by tests/goldens/gen_op_goldens.py with Debian's python3-torch), on the CPU
// and, where the build has the CUDA backend and a GPU is visible, on the GPU: an
// op's golden cases check its CUDA kernel too.
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiln/backend/backend.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using nlohmann::json;

const json& goldens() {
  static json j = [] {
    std::ifstream f(KILN_TEST_DATA_DIR "/op_goldens.json");
    return json::parse(f);
  }();
  return j;
}

Tensor to_tensor(const json& t, Device device) {
  Shape shape = t["shape"].get<Shape>();
  DType dtype = parse_dtype(t["dtype"].get<std::string>());
  if (dtype == DType::f32) return Tensor::from_vector(t["data"].get<std::vector<float>>(), shape, device);
  if (dtype == DType::i64) return Tensor::from_vector(t["data"].get<std::vector<int64_t>>(), shape, device);
  std::vector<uint8_t> b;
  for (const auto& v : t["data"]) b.push_back(v.get<bool>());
  return Tensor::from_data(b.data(), DType::b8, shape, device);
}

std::vector<double> values(const json& t) {
  std::vector<double> out;
  for (const auto& v : t["data"]) out.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>());
  return out;
}

Tensor apply(const std::string& op, const json& attrs, const std::vector<Tensor>& x) {
  auto b = [&](const char* k) { return attrs[k].get<bool>(); };
  auto i = [&](const char* k) { return attrs[k].get<int64_t>(); };
  if (op == "neg") return neg(x[0]);
  if (op == "exp") return exp(x[0]);
  if (op == "log") return log(x[0]);
  if (op == "tanh") return tanh(x[0]);
  if (op == "erf") return erf(x[0]);
  if (op == "sqrt") return sqrt(x[0]);
  if (op == "rsqrt") return rsqrt(x[0]);
  if (op == "abs") return abs(x[0]);
  if (op == "sigmoid") return sigmoid(x[0]);
  if (op == "silu") return silu(x[0]);
  if (op == "rope") return rope(x[0], x[1], x[2]);
  if (op == "relu") return relu(x[0]);
  if (op == "gelu") return gelu(x[0], attrs["approximate"].get<std::string>());
  if (op == "pow_scalar") return pow(x[0], attrs["exponent"].get<double>());
  if (op == "add") return x[0] + x[1];
  if (op == "sub") return x[0] - x[1];
  if (op == "mul") return x[0] * x[1];
  if (op == "div") return x[0] / x[1];
  if (op == "pow") return pow(x[0], x[1]);
  if (op == "maximum") return maximum(x[0], x[1]);
  if (op == "minimum") return minimum(x[0], x[1]);
  if (op == "eq") return eq(x[0], x[1]);
  if (op == "ne") return ne(x[0], x[1]);
  if (op == "lt") return lt(x[0], x[1]);
  if (op == "le") return le(x[0], x[1]);
  if (op == "gt") return gt(x[0], x[1]);
  if (op == "ge") return ge(x[0], x[1]);
  if (op == "where") return where(x[0], x[1], x[2]);
  if (op == "cast") return cast(x[0], parse_dtype(attrs["dtype"].get<std::string>()));
  if (op == "sum") return sum(x[0], attrs["axes"].get<std::vector<int64_t>>(), b("keepdim"));
  if (op == "mean") return mean(x[0], attrs["axes"].get<std::vector<int64_t>>(), b("keepdim"));
  if (op == "max") return amax(x[0], attrs["axes"].get<std::vector<int64_t>>(), b("keepdim"));
  if (op == "argmax") return argmax(x[0], i("axis"), b("keepdim"));
  if (op == "reshape") return reshape(x[0], attrs["shape"].get<Shape>());
  if (op == "permute") return permute(x[0], attrs["perm"].get<std::vector<int64_t>>());
  if (op == "transpose") return transpose(x[0], i("dim0"), i("dim1"));
  if (op == "broadcast_to") return broadcast_to(x[0], attrs["shape"].get<Shape>());
  if (op == "slice") return slice(x[0], i("dim"), i("start"), i("end"), i("step"));
  if (op == "concat") return concat(x, i("dim"));
  if (op == "index_select") return index_select(x[0], x[1]);
  if (op == "gather") return gather(x[0], i("dim"), x[1]);
  if (op == "scatter_add") return scatter_add(x[0], i("dim"), x[1], x[2]);
  if (op == "matmul") return matmul(x[0], x[1], b("transpose_a"), b("transpose_b"));
  if (op == "softmax") return softmax(x[0], i("dim"), x.size() > 1 ? x[1] : Tensor());
  if (op == "log_softmax") return log_softmax(x[0], i("dim"), x.size() > 1 ? x[1] : Tensor());
  if (op == "layer_norm") return layer_norm(x[0], x[1], x[2], attrs["eps"].get<double>());
  if (op == "cross_entropy")
    return cross_entropy(x[0], x[1], i("ignore_index"), attrs["label_smoothing"].get<double>());
  if (op == "mse_loss") return mse_loss(x[0], x[1]);
  if (op == "binary_cross_entropy_with_logits") return binary_cross_entropy_with_logits(x[0], x[1]);
  throw Error("golden test: unknown op " + op);
}

class OpGolden : public ::testing::TestWithParam<size_t> {};

void check_case(const json& c, Device device = Device::cpu()) {
  std::vector<Tensor> inputs;
  const auto& grads = c["grads"];
  for (size_t k = 0; k < c["inputs"].size(); ++k) {
    inputs.push_back(to_tensor(c["inputs"][k], device));
    if (!grads.is_null() && k < grads.size() && !grads[k].is_null()) inputs.back().requires_grad_();
  }
  Tensor y = apply(c["op"].get<std::string>(), c["attrs"], inputs);
  EXPECT_EQ(y.device(), device);
  EXPECT_EQ(y.shape(), c["output"]["shape"].get<Shape>());
  EXPECT_EQ(y.dtype(), parse_dtype(c["output"]["dtype"].get<std::string>()));
  EXPECT_TRUE(testing::all_close(y.to_vector<double>(), values(c["output"]), 1e-4, 1e-5)) << "forward";
  if (c["grad_output"].is_null()) return;
  y.backward(to_tensor(c["grad_output"], device));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (grads[k].is_null()) continue;
    ASSERT_TRUE(inputs[k].grad().defined()) << "no gradient for input " << k;
    EXPECT_TRUE(testing::all_close(inputs[k].grad().to_vector<double>(), values(grads[k]), 1e-4, 1e-5))
        << "gradient of input " << k;
  }
}

TEST_P(OpGolden, MatchesPyTorch) {
  const json& c = goldens()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  check_case(c);
}

TEST_P(OpGolden, MatchesPyTorchInEagerMode) {
  const json& c = goldens()["cases"][GetParam()];
  SCOPED_TRACE(c["name"].get<std::string>());
  set_eager_mode(true);
  check_case(c);
  set_eager_mode(false);
}

// Why this build cannot run on cuda:0 ("" when it can).
std::string no_cuda_reason() {
  backend::Backend* cuda = backend::find_backend(DeviceKind::CUDA);
  if (!cuda) return "built without the CUDA backend";
  try {
    cuda->open(Device::cuda(0));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One test for all cases: a build without a GPU skips it once.
TEST(OpGoldens, EveryCaseMatchesPyTorchOnCuda) {
  if (const std::string why = no_cuda_reason(); !why.empty()) GTEST_SKIP() << why;
  for (const json& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    check_case(c, Device::cuda(0));
  }
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(goldens()["cases"].size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGolden, ::testing::ValuesIn(case_indices()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = goldens()["cases"][info.param]["name"].get<std::string>();
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kiln
