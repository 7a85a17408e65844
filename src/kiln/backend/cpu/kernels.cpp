// run_kernel: each op's kernel from a table (kernels.h names the families
// and their files), and the collectives.
#include <array>
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/kernels.h"
#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"

namespace kiln::backend::cpu {

using compiler::Instr;
using ir::Op;

namespace {

void run_attention(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  attention_kernel(ins, in, out, extra, false);
}
void run_attention_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  attention_kernel(ins, in, out, extra, true);
}

// Op -> kernel; null for the ops without one (elementwise ops run fused,
// views and leaves need none, collectives start with start_collective).
constexpr std::array<Kernel, static_cast<size_t>(Op::kCount)> make_kernels() {
  std::array<Kernel, static_cast<size_t>(Op::kCount)> k{};
  auto at = [&](Op op) -> Kernel& { return k[static_cast<size_t>(op)]; };
  at(Op::Iota) = run_iota;
  at(Op::Sum) = at(Op::ReduceMax) = run_reduce;
  at(Op::ArgMax) = run_argmax;
  at(Op::SliceGrad) = run_slice_grad;
  at(Op::Concat) = run_concat;
  at(Op::IndexSelect) = run_index_select;
  at(Op::IndexAdd) = run_index_add;
  at(Op::Gather) = at(Op::ScatterAdd) = run_gather_scatter;
  at(Op::MatMul) = run_matmul;
  at(Op::Softmax) = run_softmax;
  at(Op::LogSoftmax) = run_log_softmax;
  at(Op::SoftmaxGrad) = run_softmax_grad;
  at(Op::LogSoftmaxGrad) = run_log_softmax_grad;
  at(Op::Normalize) = run_normalize;
  at(Op::NormalizeGrad) = run_normalize_grad;
  at(Op::CrossEntropy) = run_cross_entropy;
  at(Op::CrossEntropyGrad) = run_cross_entropy_grad;
  at(Op::Attention) = run_attention;
  at(Op::AttentionGrad) = run_attention_grad;
  return k;
}
constexpr auto kKernels = make_kernels();

}  // namespace

void run_kernel(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  const auto k = static_cast<size_t>(ins.op);
  if (k >= kKernels.size() || !kKernels[k])
    throw Error(std::string("cpu backend: no kernel for op ") + ir::op_name(ins.op));
  kKernels[k](ins, in, out, extra);
}

std::shared_future<void> start_collective(const Instr& ins, std::span<char* const> in, char* out) {
  // The replica's inputs, concatenated into the output buffer now (so their
  // memory may be reused at once); the collective then works on that buffer
  // on the replica's collective thread.
  float* buf = out_ptr<float>(ins, out);
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (size_t k = 0; k < ins.inputs.size(); ++k) {
    const int64_t n = numel(ins.inputs[k].view.shape);
    std::memcpy(buf + at, in_ptr<float>(ins, in, k), n * sizeof(float));
    sizes.push_back(n);
    at += n;
  }
  if (ins.op == Op::AllReduce) {
    const auto a = ir::AllReduceAttrs::of(ins.attrs);
    const int64_t group = a.group;
    const int replica = static_cast<int>(a.replica);
    const double scale = a.scale;
    return dist::submit(group, replica, [=] { dist::all_reduce_in_place(group, replica, buf, at, scale); });
  }
  KILN_ASSERT(ins.op == Op::BroadcastFrom);
  const auto a = ir::BroadcastFromAttrs::of(ins.attrs);
  const int64_t group = a.group;
  const int replica = static_cast<int>(a.replica);
  std::vector<int64_t> roots = a.roots;
  return dist::submit(group, replica, [=] { dist::broadcast_in_place(group, replica, buf, sizes, roots); });
}

}  // namespace kiln::backend::cpu
