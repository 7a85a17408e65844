// run_kernel: each op's kernel from the table the family files fill
// (kernels.h names the families and their files), and the collectives.
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

const KernelTable& kernels() {
  static const KernelTable table = [] {
    KernelTable t{};
    add_reduce_kernels(t);
    add_index_kernels(t);
    add_matmul_kernels(t);
    add_rows_kernels(t);
    add_kernel(t, Op::Attention, run_attention);
    add_kernel(t, Op::AttentionGrad, run_attention_grad);
    return t;
  }();
  return table;
}

}  // namespace

void run_kernel(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  const KernelTable& table = kernels();
  const auto k = static_cast<size_t>(ins.op);
  if (k >= table.size() || !table[k]) throw Error(std::string("cpu backend: no kernel for op ") + ir::op_name(ins.op));
  table[k](ins, in, out, extra);
}

bool has_kernel(Op op) { return kernels()[static_cast<size_t>(op)] != nullptr; }

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
