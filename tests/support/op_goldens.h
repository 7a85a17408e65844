#pragma once
// The op goldens: every op's forward value and gradient from PyTorch
// (tests/goldens/op_goldens.json, made by tests/goldens/gen_op_goldens.py),
// and how a case is built and checked with kiln on a device. The CPU runs
// them in tests/runtime/op_goldens_test.cpp, the GPU in
// tests/backend/cuda/device_test.cpp. An op used through a tensor function
// needs its line in apply_golden_op(); an op with its own kernel, named as
// ops.def names it, is built from the op table with no line (table_op).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/ir/builder.h"
#include "support/test_util.h"

namespace kiln::testing {

using nlohmann::json;

// KILN_TEST_DATA_DIR in the environment: a binary built elsewhere (bench/gpu_bundle.sh).
inline const json& op_goldens() {
  static const json j = [] {
    const char* dir = std::getenv("KILN_TEST_DATA_DIR");
    const std::string path = std::string(dir ? dir : KILN_TEST_DATA_DIR) + "/op_goldens.json";
    std::ifstream f(path);
    if (!f) throw Error("op goldens: cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

inline Tensor golden_tensor(const json& t, Device device) {
  Shape shape = t["shape"].get<Shape>();
  DType dtype = parse_dtype(t["dtype"].get<std::string>());
  if (dtype == DType::f32) return Tensor::from_vector(t["data"].get<std::vector<float>>(), shape, device);
  if (dtype == DType::i64) return Tensor::from_vector(t["data"].get<std::vector<int64_t>>(), shape, device);
  std::vector<uint8_t> b;
  for (const auto& v : t["data"]) b.push_back(v.get<bool>());
  return Tensor::from_data(b.data(), DType::b8, shape, device);
}

inline std::vector<double> golden_values(const json& t) {
  std::vector<double> out;
  for (const auto& v : t["data"]) out.push_back(v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>());
  return out;
}

// The op ops.def names `name`, on the inputs, built by ir::make_op from the
// op table with the case's attributes as its attrs.h view stores them
// ("ints", "floats"; none: the view's defaults). The view's operand check
// is not run: the cases are PyTorch's valid inputs.
inline Tensor table_op(const std::string& name, const json& attrs, const std::vector<Tensor>& x) {
  for (int k = 0; k < static_cast<int>(ir::Op::kCount); ++k) {
    const auto op = static_cast<ir::Op>(k);
    if (name != ir::op_name(op)) continue;
    struct Stored {
      ir::Attrs a;
      ir::Attrs attrs() const { return a; }
    };
    Stored view{{attrs.value("ints", std::vector<int64_t>{}), attrs.value("floats", std::vector<double>{})}};
    std::vector<ir::NodePtr> inputs;
    for (const Tensor& t : x) inputs.push_back(t.node());
    return Tensor(ir::make_op(op, std::move(inputs), view));
  }
  throw Error("golden test: no tensor function or ops.def op named '" + name + "'");
}

// The case's op on its inputs, as a kiln user calls it (a tensor function),
// or from the op table (an op with its own kernel and no line here).
inline Tensor apply_golden_op(const std::string& op, const json& attrs, const std::vector<Tensor>& x) {
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
  if (op == "rope_rows") return rope(x[0], x[1], x[2]);  // kiln::rope on rows: the op is "rope" (table_op)
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
  if (op == "index_copy") return index_copy(x[0], i("dim"), x[1], x[2]);
  if (op == "matmul") return matmul(x[0], x[1], b("transpose_a"), b("transpose_b"));
  if (op == "softmax") return softmax(x[0], i("dim"), x.size() > 1 ? x[1] : Tensor());
  if (op == "log_softmax") return log_softmax(x[0], i("dim"), x.size() > 1 ? x[1] : Tensor());
  if (op == "layer_norm") return layer_norm(x[0], x[1], x[2], attrs["eps"].get<double>());
  if (op == "cross_entropy")
    return cross_entropy(x[0], x[1], i("ignore_index"), attrs["label_smoothing"].get<double>());
  if (op == "mse_loss") return mse_loss(x[0], x[1]);
  if (op == "binary_cross_entropy_with_logits") return binary_cross_entropy_with_logits(x[0], x[1]);
  return table_op(op, attrs, x);
}

// The case on `device`: its value, and its gradients where PyTorch gave them.
inline void check_op_golden(const json& c, Device device) {
  std::vector<Tensor> inputs;
  const auto& grads = c["grads"];
  for (size_t k = 0; k < c["inputs"].size(); ++k) {
    inputs.push_back(golden_tensor(c["inputs"][k], device));
    if (!grads.is_null() && k < grads.size() && !grads[k].is_null()) inputs.back().requires_grad_();
  }
  Tensor y = apply_golden_op(c["op"].get<std::string>(), c["attrs"], inputs);
  EXPECT_EQ(y.device(), device);
  EXPECT_EQ(y.shape(), c["output"]["shape"].get<Shape>());
  EXPECT_EQ(y.dtype(), parse_dtype(c["output"]["dtype"].get<std::string>()));
  EXPECT_TRUE(all_close(y.to_vector<double>(), golden_values(c["output"]), 1e-4, 1e-5)) << "forward";
  if (c["grad_output"].is_null()) return;
  y.backward(golden_tensor(c["grad_output"], device));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (grads[k].is_null()) continue;
    ASSERT_TRUE(inputs[k].grad().defined()) << "no gradient for input " << k;
    EXPECT_TRUE(all_close(inputs[k].grad().to_vector<double>(), golden_values(grads[k]), 1e-4, 1e-5))
        << "gradient of input " << k;
  }
}

}  // namespace kiln::testing
