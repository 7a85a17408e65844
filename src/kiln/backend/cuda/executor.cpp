// Runs a compiled Program on a CUDA device (backend/cpu/executor.cpp's
// counterpart): binds each instruction to a kernel launch (kernels.h), a
// cuBLAS GEMM or a copy, queues them all on the device's stream, then waits
// for the stream and reads the kernels' error reports.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/env.h"
#include "kiln/backend/cuda/attention.h"
#include "kiln/backend/cuda/codegen.h"
#include "kiln/backend/cuda/common.h"
#include "kiln/backend/cuda/cuda.h"
#include "kiln/backend/cuda/encode.h"
#include "kiln/backend/cuda/jit.h"
#include "kiln/backend/cuda/kernels.h"
#include "kiln/compiler/profile.h"
#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"

namespace kiln::backend::cuda {

using compiler::Instr;
using compiler::SlotKind;
using ir::Op;
using kernels::ErrorReport;

namespace {

// Device memory of the pool, given back when the owner goes.
struct DeviceBlock {
  Device device;
  void* ptr = nullptr;
  size_t nbytes = 0;
  DeviceBlock(Device d, size_t n) : device(d), nbytes(n) { ptr = device_state(d.index).pool.allocate(n); }
  ~DeviceBlock() { device_state(device.index).pool.release(ptr, nbytes); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
};

// Page-locked host memory (truly asynchronous copies).
struct PinnedBlock {
  void* ptr = nullptr;
  explicit PinnedBlock(size_t n) { KILN_CUDA_CHECK(cudaMallocHost(&ptr, std::max<size_t>(n, 8))); }
  ~PinnedBlock() {
    cudaFreeHost(ptr);
    cudaGetLastError();
  }
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
};

uint8_t code(DType t) { return static_cast<uint8_t>(t); }
static_assert(static_cast<uint8_t>(DType::f32) == kF32 && static_cast<uint8_t>(DType::i32) == kI32 &&
              static_cast<uint8_t>(DType::i64) == kI64 && static_cast<uint8_t>(DType::b8) == kB8 &&
              static_cast<uint8_t>(DType::bf16) == kBF16);

// (outer, axis, inner) of a Sum / ReduceMax over its axes [first, last].
Split reduce_split(const Instr& ins) {
  const auto axes = ir::ReduceAttrs::of(ins.attrs);
  return split_shape(ins.inputs[0].view.shape, axes.first(), axes.last());
}

// bf16 tensor-core work (bf16 products, fused attention) needs Ampere or newer.
void require_bf16_tensor_cores(const DeviceState& ds, const char* what) {
  KILN_CHECK(ds.props.major >= 8, what, " compute capability 8.0 (Ampere) or newer; ", ds.props.name, " is ",
             ds.props.major, ".", ds.props.minor);
}

// KILN_CUDA_GEMM_PAD=0 turns the padded copies of plan_gemm_padding off (to measure them).
bool gemm_padding_enabled() {
  static const bool on = env_switch("KILN_CUDA_GEMM_PAD");
  return on;
}

}  // namespace

struct Plan {
  struct Step {
    std::string error;       // set: the instruction cannot run on CUDA (thrown when reached)
    FusedDesc fused;         // fused: the host copy
    const void* generated = nullptr;  // fused: its generated kernel (null: the interpreter runs it)
    size_t fused_at = 0;     // fused: byte offset of the record in `descs`
    GemmPlan gemm;           // MatMul
    GemmPadding padding;     // MatMul: copies with padded extents (plan_gemm_padding)
    int report = -1;         // index of its ErrorReport, for kernels that check data
  };
  Device device;
  compiler::Program program;
  std::vector<Step> steps;
  std::unique_ptr<DeviceBlock> descs;    // every fused record
  std::unique_ptr<DeviceBlock> slots;    // the step's slot base addresses
  std::unique_ptr<PinnedBlock> slots_host;
  std::unique_ptr<DeviceBlock> reports;  // one ErrorReport per checking kernel
  std::unique_ptr<PinnedBlock> reports_host;
  int num_reports = 0;
  std::unique_ptr<DeviceBlock> scratch;  // cross-entropy row losses, reductions' partials
  std::shared_ptr<const JitModule> module;  // the generated kernels
  int sms = 1;
};

namespace {

// Which fused programs run as generated kernels (KILN_CUDA_FUSED): "auto"
// (the default) those of at least kGenerateFrom elements -- below that the
// interpreter's launch costs microseconds too, and NVRTC's ~0.5 s per plan
// would dominate small graphs (evaluation, tests of tiny models);
// "generate": all of them; "interpret": none (for comparing the two).
constexpr int64_t kGenerateFrom = int64_t{1} << 16;
int64_t generate_from() {
  static const int64_t from = [] {
    const std::string mode = env_choice("KILN_CUDA_FUSED", {"auto", "generate", "interpret"});
    return mode == "auto" ? kGenerateFrom : mode == "generate" ? int64_t{0} : int64_t{-1};
  }();
  return from;
}

// One kernel per distinct fused program (every layer shares its programs'
// kernels), compiled as one translation unit. A failure leaves the plan on
// the interpreter and says why once per process.
void attach_generated_kernels(Plan& plan, int64_t from) {
  const std::string placeholder = "kiln_fused_kernel";
  std::map<std::string, int> index;  // kernel text -> its number
  std::vector<std::string> kernels;
  std::vector<int> kernel_of(plan.program.instrs.size(), -1);
  try {
    for (size_t k = 0; k < plan.program.instrs.size(); ++k) {
      const Instr& ins = plan.program.instrs[k];
      // (A program too long for the interpreter is generated whatever its size.)
      if (!ins.fused || (numel(ins.output.view.shape) < from && plan.steps[k].error.empty())) continue;
      std::string text = fused_kernel_source(ins, placeholder);
      auto [it, fresh] = index.emplace(text, static_cast<int>(kernels.size()));
      if (fresh) {
        const std::string name = "kiln_fused_" + std::to_string(kernels.size());
        text.replace(text.find(placeholder), placeholder.size(), name);
        kernels.push_back(std::move(text));
      }
      kernel_of[k] = it->second;
    }
    if (kernels.empty()) return;
    auto module = load_module(fused_translation_unit(kernels), plan.device.index, static_cast<int>(kernels.size()));
    std::vector<const void*> handles;
    for (size_t j = 0; j < kernels.size(); ++j) handles.push_back(module->kernel("kiln_fused_" + std::to_string(j)));
    // Every kernel found: only now does the plan use them (a step the interpreter cannot run loses its error).
    plan.module = std::move(module);
    for (size_t k = 0; k < kernel_of.size(); ++k)
      if (kernel_of[k] >= 0) {
        plan.steps[k].generated = handles[kernel_of[k]];
        plan.steps[k].error.clear();
      }
  } catch (const Error& e) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      std::fprintf(stderr, "kiln: cuda: generated fused kernels unavailable, using the interpreter: %s\n", e.what());
    });
  }
}

}  // namespace

std::shared_ptr<Plan> prepare(const compiler::Program& program, Device device) {
  DeviceState& ds = device_state(device.index);
  DeviceGuard guard(device.index);
  auto plan = std::make_shared<Plan>();
  plan->device = device;
  plan->program = program;
  plan->sms = ds.props.multiProcessorCount;
  std::vector<int64_t> words;
  size_t scratch_bytes = 0;
  for (const Instr& ins : program.instrs) {
    Plan::Step st;
    try {
      if (ins.fused) {
        FusedRecord rec = encode_fused(ins);
        st.fused = rec.desc;
        st.fused_at = words.size() * 8;
        words.insert(words.end(), rec.words.begin(), rec.words.end());
      } else {
        switch (ins.op) {
          case Op::MatMul:
            st.gemm = plan_gemm(ins);
            if (st.gemm.bf16) require_bf16_tensor_cores(ds, "--bf16: bf16 products need a GPU of");
            if (gemm_padding_enabled()) st.padding = plan_gemm_padding(st.gemm);
            scratch_bytes = std::max(scratch_bytes, st.padding.bytes);
            break;
          case Op::Sum:
          case Op::ReduceMax:
            KILN_CHECK(ins.program.empty(), "the CUDA backend has no fused reductions (compile without "
                       "CompileOptions::fuse_sum_inputs)");
            scratch_bytes = std::max<size_t>(scratch_bytes, reduce_scratch_bytes(reduce_split(ins)));
            break;
          case Op::IndexAdd: {
            const Shape& os = ins.output.view.shape;
            scratch_bytes = std::max(scratch_bytes, kernels::index_add_scratch_bytes(
                                                        os[0], numel(ins.inputs[0].view.shape)));
            st.report = plan->num_reports++;
            break;
          }
          case Op::IndexSelect:
          case Op::Gather:
          case Op::ScatterAdd: st.report = plan->num_reports++; break;
          case Op::Attention:
          case Op::AttentionGrad:
            KILN_CHECK(ins.inputs[0].dtype == DType::bf16, "cuda backend: fused attention needs bf16 q, k and v ",
                       "(--bf16 / kiln::Autocast); got ", dtype_name(ins.inputs[0].dtype),
                       " (KILN_ATTENTION=auto uses the composite in fp32)");
            require_bf16_tensor_cores(ds, "cuda backend: fused attention needs");
            KILN_CHECK(!ir::AttentionAttrs::of(ins.attrs).kept_probs, "the CUDA attention kernels recompute the probabilities "
                       "(compile without CompileOptions::attention_probabilities)");
            KILN_CHECK(!ir::AttentionAttrs::of(ins.attrs).has_segments, "cuda backend: fused attention takes no segment ids (packed rows) yet; "
                       "the models take the composite with a block-diagonal mask on CUDA");
            if (ins.op == Op::AttentionGrad)
              scratch_bytes = std::max(scratch_bytes, kernels::attention_scratch_bytes(attention_args(ins)));
            break;
          case Op::CrossEntropy:
          case Op::CrossEntropyGrad:
            KILN_CHECK(ins.extra_outputs.empty(), "the CUDA backend computes the loss apart from its gradient "
                       "(compile without CompileOptions::loss_with_gradient)");
            st.report = plan->num_reports++;
            scratch_bytes = std::max<size_t>(scratch_bytes, (ins.inputs[0].view.shape[0] + 1) * sizeof(double));
            break;
          default: break;
        }
        for (const auto& op : ins.inputs)
          KILN_CHECK(op.view.shape.size() <= static_cast<size_t>(kMaxRank), "cuda backend: ", ir::op_name(ins.op),
                     " of rank ", op.view.shape.size(), " (at most ", kMaxRank, ")");
      }
    } catch (const Error& e) {
      st.error = e.what();
    }
    plan->steps.push_back(std::move(st));
  }
  if (!words.empty()) {
    plan->descs = std::make_unique<DeviceBlock>(device, words.size() * 8);
    // Complete before any step's kernels can read it (they run on another stream).
    KILN_CUDA_CHECK(cudaMemcpyAsync(plan->descs->ptr, words.data(), words.size() * 8, cudaMemcpyHostToDevice,
                                    ds.copy_stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(ds.copy_stream));
  }
  const size_t slot_bytes = std::max<size_t>(program.slots.size(), 1) * sizeof(void*);
  plan->slots = std::make_unique<DeviceBlock>(device, slot_bytes);
  plan->slots_host = std::make_unique<PinnedBlock>(slot_bytes);
  if (plan->num_reports) {
    const size_t bytes = plan->num_reports * sizeof(ErrorReport);
    plan->reports = std::make_unique<DeviceBlock>(device, bytes);
    plan->reports_host = std::make_unique<PinnedBlock>(bytes);
  }
  if (scratch_bytes) plan->scratch = std::make_unique<DeviceBlock>(device, scratch_bytes);
  if (const int64_t from = generate_from(); from >= 0) attach_generated_kernels(*plan, from);
  return plan;
}

namespace {

void check_launch(const Instr& ins) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error(detail::concat("cuda: kernel launch for ", ins.fused ? "a fused program" : ir::op_name(ins.op),
                               " failed: ", cudaGetErrorString(status), " (", cudaGetErrorName(status), ")"));
}

std::atomic<bool> g_allow_tf32{false};

// C = op(A) op(B) (+ C when beta is 1: a folded bias already in C) with f32
// or bf16 operands (g.bf16), f32 sums and result: cublasGemmEx, whose f32
// products use TF32 tensor cores when --tf32 set the handle's math mode.
// pad: plan_gemm_padding(g), its copies in `scratch`.
void gemm(DeviceState& ds, const GemmPlan& g, const GemmPadding& pad, const char* a, const char* b, float* c,
          float beta, char* scratch) {
  if (const bool tf32 = g_allow_tf32.load(std::memory_order_relaxed); tf32 != ds.blas_tf32) {
    KILN_CUDA_CHECK(cublasSetMathMode(ds.blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    ds.blas_tf32 = tf32;
  }
  const cudaDataType_t type = g.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t es = g.bf16 ? 2 : 4;
  const float one = 1.0f;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (pad.on) {
    const GemmCall& call = g.calls[0];
    cudaStream_t s = ds.stream;
    auto copy_rows = [&](void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t width, int64_t rows,
                         int64_t elem) {
      KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_ld * elem, src, src_ld * elem, width * elem, rows,
                                        cudaMemcpyDeviceToDevice, s));
    };
    // A' [M', K'] (or [K', M'] transposed), B' [K', N'] (or [N', K']), C' [M', N'], row-major, dense.
    char* pa = scratch;
    char* pb = pa + aligned256(static_cast<size_t>(pad.M * pad.K * es));
    auto* pc = reinterpret_cast<float*>(pb + aligned256(static_cast<size_t>(pad.K * pad.N * es)));
    if (pad.K != g.K) {  // the extra products must add zeros
      KILN_CUDA_CHECK(cudaMemsetAsync(pa, 0, static_cast<size_t>(pad.M * pad.K * es), s));
      KILN_CUDA_CHECK(cudaMemsetAsync(pb, 0, static_cast<size_t>(pad.K * pad.N * es), s));
    }
    const int64_t lda = g.trans_a ? pad.M : pad.K, ldb = g.trans_b ? pad.K : pad.N;
    copy_rows(pa, lda, a + call.a * es, g.lda, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, es);
    copy_rows(pb, ldb, b + call.b * es, g.ldb, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, es);
    if (beta != 0.0f) copy_rows(pc, pad.N, c + call.c, g.N, g.N, g.M, 4);
    KILN_CUDA_CHECK(cublasGemmEx(ds.blas, op_b, op_a, pad.N, pad.M, pad.K, &one, pb, type, ldb, pa, type, lda, &beta,
                                 pc, CUDA_R_32F, pad.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    copy_rows(c + call.c, g.N, pc, pad.N, g.N, g.M, 4);
    return;
  }
  for (const GemmCall& call : g.calls) {
    if (call.batch == 1) {
      KILN_CUDA_CHECK(cublasGemmEx(ds.blas, op_b, op_a, g.N, g.M, g.K, &one, b + call.b * es, type, g.ldb,
                                   a + call.a * es, type, g.lda, &beta, c + call.c, CUDA_R_32F, g.N,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      KILN_CUDA_CHECK(cublasGemmStridedBatchedEx(ds.blas, op_b, op_a, g.N, g.M, g.K, &one, b + call.b * es, type,
                                                 g.ldb, call.stride_b, a + call.a * es, type, g.lda, call.stride_a,
                                                 &beta, c + call.c, CUDA_R_32F, g.N, g.M * g.N, call.batch,
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

// AllReduce / BroadcastFrom through the host path of distributed/ (NCCL comes
// later): the inputs are copied to host memory, the collective runs there,
// and the result is copied into the output.
void collective(DeviceState& ds, const Instr& ins, const std::vector<char*>& in, char* out) {
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const auto& op : ins.inputs) {
    sizes.push_back(numel(op.view.shape));
    total += sizes.back();
  }
  std::vector<float> host(static_cast<size_t>(total));
  int64_t at = 0;
  for (size_t k = 0; k < ins.inputs.size(); ++k) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(host.data() + at, reinterpret_cast<float*>(in[k]) + ins.inputs[k].view.offset,
                                    sizes[k] * sizeof(float), cudaMemcpyDeviceToHost, ds.stream));
    at += sizes[k];
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(ds.stream));  // the inputs' kernels and the copies are done
  float* buf = host.data();
  if (ins.op == Op::AllReduce) {
    const auto a = ir::AllReduceAttrs::of(ins.attrs);
    const int64_t group = a.group;
    const int replica = static_cast<int>(a.replica);
    const double scale = a.scale;
    dist::submit(group, replica, [&] { dist::all_reduce_in_place(group, replica, buf, total, scale); }).get();
  } else {
    const auto a = ir::BroadcastFromAttrs::of(ins.attrs);
    const int64_t group = a.group;
    const int replica = static_cast<int>(a.replica);
    const std::vector<int64_t>& roots = a.roots;
    dist::submit(group, replica, [&] { dist::broadcast_in_place(group, replica, buf, sizes, roots); }).get();
  }
  // Ordered before the kernels that read the result; `host` may go once the call returns (pageable memory is
  // staged), but wait anyway: the result must not depend on that.
  KILN_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<float*>(out) + ins.output.view.offset, buf, total * sizeof(float),
                                  cudaMemcpyHostToDevice, ds.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(ds.stream));
}

std::string report_message(const Instr& ins, const ErrorReport& r) {
  switch (ins.op) {
    case Op::IndexSelect:
    case Op::IndexAdd:
      return detail::concat(ins.op == Op::IndexSelect ? "index_select" : "index_add", ": id ", r.value,
                            " at position ", r.position, " out of range [0, ", r.limit, ")");
    case Op::Gather:
    case Op::ScatterAdd:
      return detail::concat(ir::op_name(ins.op), ": index ", r.value, " out of range [0, ", r.limit, ") along dim ",
                            ir::DimAttrs::of(ins.attrs).dim);
    default:
      return detail::concat("cross_entropy: label ", r.value, " at row ", r.position, " out of range [0, ", r.limit,
                            ") (ignore_index is ", ir::CrossEntropyAttrs::of(ins.attrs).ignore_index, ")");
  }
}

// One kernel instruction's operands, as the run_* functions below read them:
// each input and the output at its view's offset, the step's error report
// and the plan's scratch memory.
struct KernelCall {
  DeviceState& ds;
  Plan& plan;
  const Plan::Step& st;
  const Instr& ins;
  const std::vector<char*>& in;
  char* out;

  cudaStream_t stream() const { return ds.stream; }
  const Shape& shape() const { return ins.output.view.shape; }
  size_t elem() const { return dtype_size(ins.output.dtype); }
  char* o() const { return out + ins.output.view.offset * elem(); }
  float* fo() const { return reinterpret_cast<float*>(o()); }
  char* inp(size_t k) const { return in[k] + ins.inputs[k].view.offset * dtype_size(ins.inputs[k].dtype); }
  const float* f(size_t k) const { return reinterpret_cast<const float*>(inp(k)); }
  ErrorReport* report() const {
    return st.report >= 0 ? static_cast<ErrorReport*>(plan.reports->ptr) + st.report : nullptr;
  }
  void* scratch() const { return plan.scratch ? plan.scratch->ptr : nullptr; }
};

// Iota, Sum, ReduceMax, ArgMax.
void run_reduce(const KernelCall& k) {
  const Instr& ins = k.ins;
  switch (ins.op) {
    case Op::Iota: {
      const auto a = ir::IotaAttrs::of(ins.attrs);
      return kernels::iota(k.o(), code(ins.output.dtype), k.shape()[0], a.start, a.step, k.stream());
    }
    case Op::ArgMax: {
      KILN_CHECK(ins.inputs[0].dtype != DType::b8, "argmax: unsupported dtype");
      const int64_t axis = ir::ReduceAttrs::of(ins.attrs).first();
      return kernels::argmax(k.inp(0), reinterpret_cast<int64_t*>(k.o()), code(ins.inputs[0].dtype),
                             split_shape(ins.inputs[0].view.shape, axis, axis), k.stream());
    }
    default:
      KILN_CHECK(ins.output.dtype == DType::f32 || is_integral(ins.output.dtype), "reduce: unsupported dtype ",
                 dtype_name(ins.output.dtype));
      return kernels::reduce(k.inp(0), k.o(), code(ins.output.dtype), reduce_split(ins), ins.op == Op::ReduceMax,
                             k.scratch(), k.stream());
  }
}

// SliceGrad and Concat: strided copies into the output.
void run_copy(const KernelCall& k) {
  const Instr& ins = k.ins;
  const size_t es = k.elem();
  if (ins.op == Op::SliceGrad) {
    const auto sl = ir::SliceAttrs::of(ins.attrs);
    return kernels::slice_grad(k.inp(0), k.o(), static_cast<int>(es), split_shape(k.shape(), sl.dim, sl.dim),
                               ins.inputs[0].view.shape[sl.dim], sl.start, sl.step, k.stream());
  }
  const int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  const Split p = split_shape(k.shape(), d, d);
  int64_t off = 0;
  for (size_t i = 0; i < ins.inputs.size(); ++i) {
    const int64_t len = ins.inputs[i].view.shape[d];
    const size_t width = static_cast<size_t>(len * p.inner) * es;
    if (width && p.outer)
      KILN_CUDA_CHECK(cudaMemcpy2DAsync(k.o() + off * p.inner * es, p.axis * p.inner * es, k.inp(i), width, width,
                                        p.outer, cudaMemcpyDeviceToDevice, k.stream()));
    off += len;
  }
}

// IndexSelect and IndexAdd: rows of a table picked or summed by ids.
void run_index(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  if (ins.op == Op::IndexSelect) {
    const Shape& ts = ins.inputs[0].view.shape;
    const int64_t V = ts[0], R = numel(ts) / std::max<int64_t>(V, 1), n = numel(ins.inputs[1].view.shape);
    return kernels::index_select(k.inp(0), k.inp(1), code(ins.inputs[1].dtype), k.o(), static_cast<int>(k.elem()), V,
                                 R, n, k.report(), k.stream());
  }
  KILN_CHECK(ins.output.dtype == DType::f32, "index_add: expected f32");
  const int64_t V = os[0], R = numel(os) / std::max<int64_t>(V, 1), n = numel(ins.inputs[0].view.shape);
  if (ins.inputs.size() == 3)  // the compiler's fold of Add(base, IndexAdd): the sums go onto the base
    KILN_CUDA_CHECK(cudaMemcpyAsync(k.o(), k.inp(2), numel(os) * k.elem(), cudaMemcpyDeviceToDevice, k.stream()));
  else
    KILN_CUDA_CHECK(cudaMemsetAsync(k.o(), 0, numel(os) * k.elem(), k.stream()));
  return kernels::index_add(k.inp(0), code(ins.inputs[0].dtype), k.f(1), k.fo(), V, R, n,
                            ir::PaddingAttrs::of(ins.attrs).padding_idx, k.report(), k.scratch(), k.stream());
}

// Gather and ScatterAdd along one dimension.
void run_gather(const KernelCall& k) {
  const Instr& ins = k.ins;
  KILN_CHECK(ins.output.dtype == DType::f32, ir::op_name(ins.op), ": expected f32");
  const Shape& is = ins.inputs[1].view.shape;
  const Shape& xs = ins.inputs[0].view.shape;
  kernels::GatherShape g;
  g.rank = static_cast<int32_t>(is.size());
  g.dim = static_cast<int32_t>(ir::DimAttrs::of(ins.attrs).dim);
  const auto xst = contiguous_strides(xs);
  for (int d = 0; d < g.rank; ++d) {
    g.index_shape[d] = is[d];
    g.x_strides[d] = xst[d];
  }
  g.x_extent = xs[g.dim];
  if (ins.op == Op::Gather)
    return kernels::gather(k.f(0), k.inp(1), code(ins.inputs[1].dtype), k.fo(), g, k.report(), k.stream());
  KILN_CUDA_CHECK(cudaMemcpyAsync(k.o(), k.f(0), numel(xs) * k.elem(), cudaMemcpyDeviceToDevice, k.stream()));
  return kernels::scatter_add(k.inp(1), code(ins.inputs[1].dtype), k.f(2), k.fo(), g, k.report(), k.stream());
}

void run_matmul(const KernelCall& k) {
  const GemmPlan& g = k.st.gemm;
  // A folded bias (compiler/simplify.cpp): the output starts as its rows.
  const bool bias = k.ins.inputs.size() == 3;
  if (bias) {
    const int64_t n = k.shape().back();
    const auto& bv = k.ins.inputs[2].view;
    kernels::fill_rows(k.f(2), bv.strides.empty() ? 1 : bv.strides[0], k.fo(), n ? g.c_elems / n : 0, n, k.stream());
  }
  if (g.calls.empty()) {
    if (!bias) KILN_CUDA_CHECK(cudaMemsetAsync(k.o(), 0, g.c_elems * sizeof(float), k.stream()));
    return;
  }
  return gemm(k.ds, g, k.st.padding, k.in[0], k.in[1], reinterpret_cast<float*>(k.out), bias ? 1.0f : 0.0f,
              static_cast<char*>(k.scratch()));
}

// Row-wise kernels: softmax, normalization and cross-entropy, forward and backward; the rotary embedding.
void run_rows(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  switch (ins.op) {
    case Op::Softmax:
    case Op::LogSoftmax: {
      const float* mask = ins.inputs.size() > 1 ? k.f(1) : nullptr;
      const int64_t axis = ir::AxisAttrs::of(ins.attrs).axis;
      return kernels::softmax(k.f(0), mask, k.fo(), split_shape(os, axis, axis), ins.op == Op::LogSoftmax,
                              k.stream());
    }
    case Op::SoftmaxGrad:
    case Op::LogSoftmaxGrad: {
      const int64_t axis = ir::AxisAttrs::of(ins.attrs).axis;
      return kernels::softmax_grad(k.f(0), k.f(1), k.fo(), split_shape(os, axis, axis),
                                   ins.op == Op::LogSoftmaxGrad, k.stream());
    }
    case Op::Normalize:
    case Op::NormalizeGrad: {
      const int64_t C = os.empty() ? 1 : os.back(), N = numel(os) / std::max<int64_t>(C, 1);
      const float eps = ir::NormalizeAttrs::of(ins.attrs).eps;
      if (ins.op == Op::Normalize) return kernels::normalize(k.f(0), k.fo(), N, C, eps, k.stream());
      return kernels::normalize_grad(k.f(0), k.f(1), k.fo(), N, C, eps, k.stream());
    }
    case Op::Rope: {
      const Shape& xs = ins.inputs[0].view.shape;
      const bool per_batch = ins.inputs[1].view.shape[0] == xs[0] && xs[0] > 1;
      return kernels::rope(k.inp(0), code(ins.inputs[0].dtype), k.f(1), k.f(2), k.fo(), numel(xs) / xs[3], xs[3],
                           xs[2], per_batch ? xs[1] * xs[2] : 0, ir::RopeAttrs::of(ins.attrs).transpose, k.stream());
    }
    default: {  // CrossEntropy, CrossEntropyGrad
      const Shape& ls = ins.inputs[0].view.shape;
      const int64_t N = ls[0], C = ls[1];
      const auto ce = ir::CrossEntropyAttrs::of(ins.attrs);
      auto* scratch = static_cast<double*>(k.scratch());
      if (ins.op == Op::CrossEntropy)
        return kernels::cross_entropy(k.f(0), k.inp(1), code(ins.inputs[1].dtype), k.fo(), N, C, ce.ignore_index,
                                      ce.smoothing, scratch, k.report(), k.stream());
      return kernels::cross_entropy_grad(k.f(0), k.inp(1), code(ins.inputs[1].dtype), k.f(2), k.fo(), N, C,
                                         ce.ignore_index, ce.smoothing, scratch, k.report(), k.stream());
    }
  }
}

void run_attention(const KernelCall& k) {
  const Instr& ins = k.ins;
  const AttentionArgs a = attention_args(ins);
  KILN_CHECK(a.window == 0, "cuda backend: fused attention has no sliding window yet (the model takes the composite)");
  const float* mask = a.mask_input >= 0 ? k.f(a.mask_input) : nullptr;
  const int64_t* key = a.key_input >= 0 ? reinterpret_cast<const int64_t*>(k.inp(a.key_input)) : nullptr;
  if (ins.op == Op::Attention)
    return kernels::attention(a, k.inp(0), k.inp(1), k.inp(2), mask, key, k.fo(), k.stream());
  const size_t next = ins.inputs.size() - 2;  // AttentionGrad: then out, dout
  float* dq = k.fo();
  float* dk = dq + a.B * a.H * a.Tq * a.D;
  float* dv = dk + a.B * a.H * a.Tk * a.D;
  return kernels::attention_grad(a, k.inp(0), k.inp(1), k.inp(2), mask, key, k.f(next), k.f(next + 1), dq, dk, dv,
                                 k.scratch(), k.stream());
}

void run_kernel(DeviceState& ds, Plan& plan, const Plan::Step& st, const Instr& ins, const std::vector<char*>& in,
                char* out) {
  const KernelCall k{ds, plan, st, ins, in, out};
  switch (ins.op) {
    case Op::Iota:
    case Op::Sum:
    case Op::ReduceMax:
    case Op::ArgMax:
      return run_reduce(k);
    case Op::SliceGrad:
    case Op::Concat:
      return run_copy(k);
    case Op::IndexSelect:
    case Op::IndexAdd:
      return run_index(k);
    case Op::Gather:
    case Op::ScatterAdd:
      return run_gather(k);
    case Op::MatMul:
      return run_matmul(k);
    case Op::Softmax:
    case Op::LogSoftmax:
    case Op::SoftmaxGrad:
    case Op::LogSoftmaxGrad:
    case Op::Normalize:
    case Op::NormalizeGrad:
    case Op::CrossEntropy:
    case Op::CrossEntropyGrad:
    case Op::Rope:
      return run_rows(k);
    case Op::Attention:
    case Op::AttentionGrad:
      return run_attention(k);
    default:
      throw Error(std::string("cuda backend: no kernel for op ") + ir::op_name(ins.op) + " (not supported on CUDA yet)");
  }
}

// A fused instruction's generated kernel: one pointer per input, then per
// output, each at its view's offset.
void launch_generated(const Instr& ins, const Plan::Step& st, char* const* slot_base, int sms, cudaStream_t s) {
  const int64_t n = numel(ins.output.view.shape);
  if (n == 0) return;
  std::vector<char*> ptrs;
  auto at = [&](const compiler::Operand& op) {
    ptrs.push_back(slot_base[op.slot] + op.view.offset * static_cast<int64_t>(dtype_size(op.dtype)));
  };
  for (const auto& op : ins.inputs) at(op);
  at(ins.output);
  for (const auto& e : ins.extra_outputs) at(e.out);
  std::vector<void*> args;
  for (auto& p : ptrs) args.push_back(&p);
  const int64_t blocks = std::min<int64_t>((n + kGeneratedThreads - 1) / kGeneratedThreads, int64_t(sms) * 8);
  KILN_CUDA_CHECK(cudaLaunchKernel(st.generated, dim3(static_cast<unsigned>(blocks)),
                                   dim3(kGeneratedThreads), args.data(), 0, s));
}

// Waits for the stream whatever happens: nothing may release memory that a
// queued kernel still uses.
struct SyncOnExit {
  cudaStream_t stream;
  ~SyncOnExit() {
    cudaStreamSynchronize(stream);
    cudaGetLastError();
  }
};

}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on, std::memory_order_relaxed); }

void execute(Plan& plan, std::span<void* const> params, std::span<void* const> outputs, void* arena) {
  DeviceState& ds = device_state(plan.device.index);
  DeviceGuard guard(plan.device.index);
  const compiler::Program& program = plan.program;
  auto** slot_base = static_cast<char**>(plan.slots_host->ptr);
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const compiler::Slot& slot = program.slots[s];
    void* const* bound = slot.kind == SlotKind::Param ? params.data() : outputs.data();
    slot_base[s] = slot.kind == SlotKind::Temp ? static_cast<char*>(arena) + slot.offset
                                               : static_cast<char*>(bound[slot.index]);
  }
  SyncOnExit sync{ds.stream};
  KILN_CUDA_CHECK(cudaMemcpyAsync(plan.slots->ptr, slot_base, program.slots.size() * sizeof(char*),
                                  cudaMemcpyHostToDevice, ds.stream));
  if (plan.num_reports)
    KILN_CUDA_CHECK(cudaMemsetAsync(plan.reports->ptr, 0, plan.num_reports * sizeof(ErrorReport), ds.stream));
  // KILN_PROFILE: an event before the first instruction and after each one.
  struct Events {
    std::vector<cudaEvent_t> e;
    ~Events() {
      for (cudaEvent_t x : e) cudaEventDestroy(x);
    }
  } events;
  if (compiler::profiling()) {
    events.e.resize(program.instrs.size() + 1);
    for (cudaEvent_t& x : events.e) KILN_CUDA_CHECK(cudaEventCreate(&x));
    KILN_CUDA_CHECK(cudaEventRecord(events.e[0], ds.stream));
  }
  std::vector<char*> in;
  for (size_t k = 0; k < program.instrs.size(); ++k) {
    const Instr& ins = program.instrs[k];
    const Plan::Step& st = plan.steps[k];
    if (!st.error.empty()) throw Error(st.error);
    in.clear();
    for (const auto& op : ins.inputs) in.push_back(slot_base[op.slot]);
    char* out = slot_base[ins.output.slot];
    if (ins.fused && st.generated) {
      launch_generated(ins, st, slot_base, plan.sms, ds.stream);
    } else if (ins.fused) {
      const auto* desc = reinterpret_cast<const FusedDesc*>(static_cast<char*>(plan.descs->ptr) + st.fused_at);
      kernels::fused(desc, st.fused, static_cast<char* const*>(plan.slots->ptr), plan.sms, ds.stream);
    } else if (ins.op == Op::AllReduce || ins.op == Op::BroadcastFrom) {
      collective(ds, ins, in, out);
    } else {
      run_kernel(ds, plan, st, ins, in, out);
    }
    check_launch(ins);
    if (!events.e.empty()) KILN_CUDA_CHECK(cudaEventRecord(events.e[k + 1], ds.stream));
  }
  if (plan.num_reports)
    KILN_CUDA_CHECK(cudaMemcpyAsync(plan.reports_host->ptr, plan.reports->ptr, plan.num_reports * sizeof(ErrorReport),
                                    cudaMemcpyDeviceToHost, ds.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(ds.stream));
  for (size_t k = 0; k + 1 < events.e.size(); ++k) {
    float ms = 0;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, events.e[k], events.e[k + 1]));
    compiler::profile_add(program.instrs[k], ms / 1e3);
  }
  // The first failing instruction in program order, as on the CPU.
  const auto* reports = static_cast<const ErrorReport*>(plan.num_reports ? plan.reports_host->ptr : nullptr);
  for (size_t k = 0; k < program.instrs.size(); ++k) {
    const Plan::Step& st = plan.steps[k];
    if (st.report >= 0 && reports[st.report].code != kernels::kNone)
      throw Error(report_message(program.instrs[k], reports[st.report]));
  }
}

}  // namespace kiln::backend::cuda
