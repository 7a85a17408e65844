#include "kiln/backend/cuda/codegen.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "kiln/backend/cuda/encode.h"
#include "kiln/backend/cuda/fused_math.h"
#include "kiln/compiler/compile.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda {

using compiler::FusedStep;
using compiler::Instr;
using compiler::Operand;
using ir::Op;

namespace {

const char* c_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::bf16: return "unsigned short";
    default: return "unsigned char";
  }
}

// The element offset of view `d` for element i, as statements defining
// `name` (the pointer is already at the view's offset).
std::string offset_code(const ViewDesc& d, const std::string& name) {
  std::ostringstream os;
  if (d.layout == kContiguous) {
    os << "const long long " << name << " = i;\n";
  } else if (d.layout == kScalar) {
    os << "const long long " << name << " = 0;\n";
  } else {
    const char* index_type = d.narrow ? "unsigned" : "unsigned long long";
    const char* suffix = d.narrow ? "u" : "ull";
    os << "long long " << name << " = 0;\n{\n" << index_type << " j = (" << index_type << ")i;\n";
    for (int k = d.rank - 1; k > 0; --k) {
      if (d.strides[k] != 0) os << name << " += (long long)(j % " << d.shape[k] << suffix << ") * " << d.strides[k] << "ll;\n";
      os << "j /= " << d.shape[k] << suffix << ";\n";
    }
    if (d.strides[0] != 0) os << name << " += (long long)j * " << d.strides[0] << "ll;\n";
    os << "}\n";
  }
  return os.str();
}

std::string bits_of(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char buf[48];
  std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016" PRIx64 "ll)", bits);
  return buf;
}

}  // namespace

std::string fused_kernel_source(const Instr& ins, const std::string& name) {
  KILN_ASSERT(ins.fused && !ins.program.empty());
  const std::string T = compiler::computes_in_double(ins) ? "double" : "float";
  const int64_t n = numel(ins.output.view.shape);
  std::vector<const Operand*> outs{&ins.output};
  for (const auto& e : ins.extra_outputs) {
    KILN_CHECK(numel(e.out.view.shape) == n, "cuda codegen: extra output of shape ", to_string(e.out.view.shape),
               " for a fused result of shape ", to_string(ins.output.view.shape));
    outs.push_back(&e.out);
  }
  std::ostringstream os;
  os << "extern \"C\" __global__ void __launch_bounds__(" << kGeneratedThreads << ") " << name << "(";
  for (size_t k = 0; k < ins.inputs.size(); ++k)
    os << (k ? ", " : "") << "const " << c_type(ins.inputs[k].dtype) << "* in" << k;
  for (size_t k = 0; k < outs.size(); ++k)
    os << (k || !ins.inputs.empty() ? ", " : "") << c_type(outs[k]->dtype) << "* out" << k;
  os << ") {\n"
     << "for (long long i = (long long)blockIdx.x * " << kGeneratedThreads << " + threadIdx.x; i < " << n
     << "ll; i += (long long)gridDim.x * " << kGeneratedThreads << ") {\n";
  const auto& prog = ins.program;
  auto v = [](int32_t k) { return "v" + std::to_string(k); };
  for (size_t k = 0; k < prog.size(); ++k) {
    const FusedStep& s = prog[k];
    const std::string name_k = v(static_cast<int32_t>(k));
    std::string value;
    switch (s.op) {
      case Op::Data: {
        KILN_ASSERT(s.load >= 0 && s.load < static_cast<int32_t>(ins.inputs.size()));
        const std::string off = "o" + std::to_string(k);
        os << offset_code(view_desc(ins.inputs[s.load]), off);
        const std::string element = "in" + std::to_string(s.load) + "[" + off + "]";
        value = T + "(" + (ins.inputs[s.load].dtype == DType::bf16 ? "kiln::bf16_to_float(" + element + ")" : element) + ")";
        break;
      }
      case Op::Constant:
        value = T + "(" + bits_of(ir::ConstantAttrs::of(s.attrs).value) + ")";
        break;
      case Op::RandUniform:
      case Op::RandNormal: {
        KILN_ASSERT(s.load >= 0 && s.load < static_cast<int32_t>(ins.inputs.size()));
        const Operand& key = ins.inputs[s.load];
        KILN_CHECK(key.dtype == DType::i64, "cuda codegen: a random key of dtype ", dtype_name(key.dtype));
        const std::string kp = "in" + std::to_string(s.load);
        value = T + "(" + (s.op == Op::RandUniform ? "philox_uniform" : "philox_normal") + "((unsigned long long)" + kp +
                "[0], (unsigned long long)" + kp + "[1], (unsigned long long)(i" +
                (numel(key.view.shape) > 2 ? " + " + kp + "[2]" : std::string()) + ")))";
        break;
      }
      default: {
        // The interpreter's formula (fused_math.h), the op a literal.
        KILN_CHECK(fused_supports(static_cast<uint8_t>(s.op)), "cuda codegen: no code for op ", ir::op_name(s.op),
                   " in a fused program");
        auto operand = [&](int32_t x) { return x >= 0 ? v(x) : T + "(0)"; };
        value = "op_value<" + T + ">((kiln::ir::Op)" + std::to_string(static_cast<int>(s.op)) + ", " +
                std::to_string(static_cast<int>(s.dtype)) + ", " +
                std::to_string(ir::GeluAttrs::of(s.attrs).tanh_form ? 1 : 0) + ", " + operand(s.a) + ", " +
                operand(s.b) + ", " + operand(s.c) + ")";
      }
    }
    if (s.op != Op::Data) value = "as_step_value<" + T + ">(" + value + ", " + std::to_string(static_cast<int>(s.dtype)) + ")";
    os << "const " << T << " " << name_k << " = " << value << ";\n";
  }
  std::vector<int32_t> out_regs{static_cast<int32_t>(prog.size()) - 1};
  for (const auto& e : ins.extra_outputs) out_regs.push_back(e.reg);
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string off = "p" + std::to_string(k), r = v(out_regs[k]);
    os << offset_code(view_desc(*outs[k]), off);
    // store_as: bool outputs hold v != 0, bf16 ones v rounded to nearest even.
    const std::string stored = outs[k]->dtype == DType::b8     ? "(unsigned char)(" + r + " != " + T + "(0))"
                               : outs[k]->dtype == DType::bf16 ? "kiln::bf16_from_float((float)" + r + ")"
                                                               : "(" + std::string(c_type(outs[k]->dtype)) + ")" + r;
    os << "out" << k << "[" << off << "] = " << stored << ";\n";
  }
  os << "}\n}\n";
  return os.str();
}

std::string fused_translation_unit(const std::vector<std::string>& kernels) {
  std::string tu =
      "#include \"kiln/backend/cuda/fused_math.h\"\n"
      "#include \"kiln/backend/philox_core.h\"\n"
      "using namespace kiln::backend;\n"
      "using namespace kiln::backend::cuda;\n"
      "using namespace kiln::backend::cuda::fused_math;\n";
  for (const auto& k : kernels) tu += "\n" + k;
  return tu;
}

}  // namespace kiln::backend::cuda
