// Runs a compiled Program on a CUDA device (backend/cpu/executor.cpp's
// counterpart): binds each instruction to its fused program's kernel, its
// op's entry in the kernel table (kernels.h: a family file's kernels,
// cuBLAS products) or a collective, queues them all on the device's
// stream, then waits for the stream and reads the kernels' error reports.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/env.h"
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

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t{};
    add_reduce_kernels(t);
    add_index_kernels(t);
    add_matmul_kernels(t);
    add_rows_kernels(t);
    add_attention_kernels(t);
    return t;
  }();
  return table;
}

bool has_kernel(ir::Op op) { return kernel_table()[static_cast<size_t>(op)].run != nullptr; }

struct Plan {
  struct Step {
    std::string error;       // set: the instruction cannot run on CUDA (thrown when reached)
    FusedDesc fused;         // fused: the host copy
    const void* generated = nullptr;  // fused: its generated kernel (null: the interpreter runs it)
    size_t fused_at = 0;     // fused: byte offset of the record in `descs`
    KernelStep kernel;       // not fused: what its entry's prepare decided
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
        const KernelEntry& entry = kernel_table()[static_cast<size_t>(ins.op)];
        if (entry.prepare) entry.prepare(ins, ds, st.kernel);
        scratch_bytes = std::max(scratch_bytes, st.kernel.scratch_bytes);
        if (entry.report) st.report = plan->num_reports++;
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

void run_kernel(DeviceState& ds, Plan& plan, const Plan::Step& st, const Instr& ins, const std::vector<char*>& in,
                char* out) {
  const KernelEntry& entry = kernel_table()[static_cast<size_t>(ins.op)];
  if (!entry.run)
    throw Error(std::string("cuda backend: no kernel for op ") + ir::op_name(ins.op) + " (not supported on CUDA yet)");
  ErrorReport* report = st.report >= 0 ? static_cast<ErrorReport*>(plan.reports->ptr) + st.report : nullptr;
  entry.run(KernelCall{ds, st.kernel, ins, in, out, report, plan.scratch ? plan.scratch->ptr : nullptr});
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
      throw Error(kernel_table()[static_cast<size_t>(program.instrs[k].op)].report(program.instrs[k], reports[st.report]));
  }
}

}  // namespace kiln::backend::cuda