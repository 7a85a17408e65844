#include "kiln/backend/cuda/encode.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "kiln/backend/cuda/fused_eval.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda {

using compiler::Instr;
using compiler::Operand;
using compiler::View;

ViewDesc view_desc(const Operand& op) {
  const View& v = op.view;
  KILN_CHECK(v.shape.size() <= static_cast<size_t>(kMaxRank), "cuda backend: a view of rank ", v.shape.size(),
             " (", to_string(v.shape), "); the kernels take rank <= ", kMaxRank);
  ViewDesc d;
  d.offset = v.offset;
  d.numel = numel(v.shape);
  d.slot = op.slot;
  d.dtype = static_cast<uint8_t>(op.dtype);
  // The same element order over fewer dimensions: extent-1 dimensions go,
  // and a dimension merges into the one before it when stepping over it
  // whole is one step of the outer (a mask broadcast over batch and heads,
  // [B, H, T, T] with strides [0, 0, T, 1], is [B*H, T*T] with [0, 1]): the
  // kernels' per-element index math divides once per dimension.
  std::vector<int64_t> shape, strides;
  for (size_t k = 0; k < v.shape.size(); ++k) {
    if (v.shape[k] == 1) continue;
    if (!shape.empty() && strides.back() == v.strides[k] * v.shape[k]) {
      shape.back() *= v.shape[k];
      strides.back() = v.strides[k];
    } else {
      shape.push_back(v.shape[k]);
      strides.push_back(v.strides[k]);
    }
  }
  d.rank = static_cast<int32_t>(shape.size());
  for (int k = 0; k < d.rank; ++k) {
    d.shape[k] = shape[k];
    d.strides[k] = strides[k];
  }
  const bool all_zero = std::all_of(strides.begin(), strides.end(), [](int64_t x) { return x == 0; });
  d.layout = d.numel <= 1 || all_zero ? kScalar : (d.rank == 1 && strides[0] == 1 ? kContiguous : kGeneral);
  d.narrow = d.numel < (int64_t{1} << 31);
  return d;
}

Split split_shape(const Shape& s, int64_t a0, int64_t a1) {
  const AxisSplit r = split_axes(s, a0, a1);  // desc.h's Split is the device's copy of it
  return Split{r.outer, r.axis, r.inner};
}

namespace {

template <typename T>
void append(std::vector<char>& bytes, const T* items, size_t count) {
  const char* p = reinterpret_cast<const char*>(items);
  bytes.insert(bytes.end(), p, p + count * sizeof(T));
  bytes.resize((bytes.size() + 7) / 8 * 8, 0);
}

}  // namespace

FusedRecord encode_fused(const Instr& ins) {
  KILN_ASSERT(ins.fused && !ins.program.empty());
  const auto& prog = ins.program;
  const int n = static_cast<int>(prog.size());
  // Last reader of each value; results stored at the end live to the end.
  const std::vector<int32_t> last = compiler::last_reads(ins);
  std::vector<FStep> steps(n);
  std::vector<int> phys(n, -1);
  std::set<int> free_regs;
  int nregs = 0;
  for (int k = 0; k < n; ++k) {
    const compiler::FusedStep& s = prog[k];
    KILN_CHECK(fused_supports(static_cast<uint8_t>(s.op)), "cuda backend: fused kernel: unsupported op ",
               ir::op_name(s.op));
    FStep f;
    f.op = static_cast<uint8_t>(s.op);
    f.dtype = static_cast<uint8_t>(s.dtype);
    f.a = static_cast<uint8_t>(s.a >= 0 ? phys[s.a] : 0);
    f.b = static_cast<uint8_t>(s.b >= 0 ? phys[s.b] : 0);
    f.c = static_cast<uint8_t>(s.c >= 0 ? phys[s.c] : 0);
    f.load = static_cast<int16_t>(s.load);
    f.iattr = ir::GeluAttrs::of(s.attrs).tanh_form ? 1 : 0;  // the only int a fused step has
    f.value = ir::ConstantAttrs::of(s.attrs).value;
    if ((s.op == ir::Op::Data || s.op == ir::Op::RandUniform || s.op == ir::Op::RandNormal))
      KILN_ASSERT(s.load >= 0 && s.load < static_cast<int32_t>(ins.inputs.size()));
    // Operands read for the last time free their registers (the step reads
    // them before it writes its own).
    for (int32_t x : {s.a, s.b, s.c})
      if (x >= 0 && last[x] == k && phys[x] >= 0) {
        free_regs.insert(phys[x]);
        phys[x] = -2;  // freed (an operand may repeat: a * a)
      }
    int reg;
    if (free_regs.empty()) {
      reg = nregs++;
    } else {
      reg = *free_regs.begin();
      free_regs.erase(free_regs.begin());
    }
    phys[k] = reg;
    f.dst = static_cast<uint8_t>(reg);
    steps[k] = f;
    if (last[k] < 0) {  // never read: its register is free again at once
      free_regs.insert(reg);
      phys[k] = -2;
    }
  }
  KILN_CHECK(nregs <= kFusedMaxRegs, "cuda backend: a fused program of ", n, " steps needs ", nregs,
             " live registers, more than the CUDA interpreter's ", kFusedMaxRegs, " (not supported on CUDA yet)");

  std::vector<ViewDesc> inputs, outs;
  for (const auto& op : ins.inputs) inputs.push_back(view_desc(op));
  std::vector<int32_t> out_regs;
  outs.push_back(view_desc(ins.output));
  out_regs.push_back(phys[n - 1]);
  for (const auto& e : ins.extra_outputs) {
    KILN_CHECK(numel(e.out.view.shape) == numel(ins.output.view.shape), "cuda backend: extra output of shape ",
               to_string(e.out.view.shape), " for a fused result of shape ", to_string(ins.output.view.shape));
    outs.push_back(view_desc(e.out));
    out_regs.push_back(phys[e.reg]);
  }

  FusedDesc d;
  d.n = numel(ins.output.view.shape);
  d.nsteps = n;
  d.ninputs = static_cast<int32_t>(inputs.size());
  d.nouts = static_cast<int32_t>(outs.size());
  d.nregs = std::max(nregs, 1);
  d.wide = compiler::computes_in_double(ins);
  std::vector<char> bytes(sizeof(FusedDesc), 0);
  bytes.resize((bytes.size() + 7) / 8 * 8, 0);
  d.steps_at = static_cast<int32_t>(bytes.size());
  append(bytes, steps.data(), steps.size());
  d.inputs_at = static_cast<int32_t>(bytes.size());
  append(bytes, inputs.data(), inputs.size());
  d.outs_at = static_cast<int32_t>(bytes.size());
  append(bytes, outs.data(), outs.size());
  d.out_regs_at = static_cast<int32_t>(bytes.size());
  append(bytes, out_regs.data(), out_regs.size());
  d.bytes = static_cast<int32_t>(bytes.size());
  std::memcpy(bytes.data(), &d, sizeof d);
  FusedRecord r;
  r.desc = d;
  r.words.resize(bytes.size() / 8);
  std::memcpy(r.words.data(), bytes.data(), bytes.size());
  return r;
}

namespace {

// A stored matrix (rows, cols) with strides, seen as row-major with a
// transpose flag and leading dimension (the CPU backend's reading of views).
struct Layout {
  bool trans;
  int64_t ld;
};
Layout matrix_layout(const View& v, bool logical_trans) {
  const size_t r = v.shape.size();
  const int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
  const int64_t row_stride = v.strides[r - 2], col_stride = v.strides[r - 1];
  if ((col_stride == 1 || cols == 1) && (row_stride >= cols || rows == 1) && row_stride > 0)
    return {logical_trans, rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  return {!logical_trans, cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
}

// Element offset of every output batch's matrix in a view (broadcast dims,
// extent 1, stay put).
std::vector<int64_t> matrix_offsets(const View& v, const Shape& out_batch) {
  const int64_t nb = numel(out_batch);
  const int64_t view_batch = static_cast<int64_t>(v.shape.size()) - 2, rank = static_cast<int64_t>(out_batch.size());
  std::vector<int64_t> offs(nb);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t rem = b, off = v.offset;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % out_batch[d];
      rem /= out_batch[d];
      const int64_t vd = d - (rank - view_batch);
      if (vd >= 0 && v.shape[vd] != 1) off += idx * v.strides[vd];
    }
    offs[b] = off;
  }
  return offs;
}

// True when each run of `inner` offsets is an arithmetic progression.
bool runs_regular(const std::vector<int64_t>& offs, int64_t inner) {
  for (size_t g = 0; g < offs.size(); g += static_cast<size_t>(inner)) {
    if (inner < 2) continue;
    const int64_t step = offs[g + 1] - offs[g];
    for (int64_t i = 2; i < inner; ++i)
      if (offs[g + i] - offs[g] != i * step) return false;
  }
  return true;
}

}  // namespace

GemmPlan plan_gemm(const Instr& ins) {
  const Operand &A = ins.inputs[0], &B = ins.inputs[1];
  KILN_CHECK(A.dtype == B.dtype && is_floating(A.dtype) && ins.output.dtype == DType::f32,
             "cuda backend: matmul of ", dtype_name(A.dtype), " and ", dtype_name(B.dtype), " into ",
             dtype_name(ins.output.dtype), ": expected two f32 or two bf16 operands and an f32 result");
  const auto [ta, tb] = ir::MatMulAttrs::of(ins.attrs);
  const Shape& os = ins.output.view.shape;
  const size_t r = os.size(), ra = A.view.shape.size();
  GemmPlan g;
  g.bf16 = A.dtype == DType::bf16;
  g.M = os[r - 2];
  g.N = os[r - 1];
  g.K = ta ? A.view.shape[ra - 2] : A.view.shape[ra - 1];
  const Shape out_batch(os.begin(), os.end() - 2);
  const int64_t nb = numel(out_batch);
  g.c_elems = nb * g.M * g.N;
  const Layout la = matrix_layout(A.view, ta), lb = matrix_layout(B.view, tb);
  g.trans_a = la.trans;
  g.trans_b = lb.trans;
  g.lda = la.ld;
  g.ldb = lb.ld;
  if (g.K == 0 || g.c_elems == 0) return g;  // no calls: the output is zeroed
  const int64_t c0 = ins.output.view.offset;
  const std::vector<int64_t> ao = matrix_offsets(A.view, out_batch), bo = matrix_offsets(B.view, out_batch);
  // B shared by every batch and A's batches stacked row-major: one GEMM of nb * M rows.
  const bool b_shared = std::all_of(bo.begin(), bo.end(), [&](int64_t o) { return o == bo[0]; });
  bool a_stacked = !la.trans && la.ld == g.K;
  for (int64_t i = 1; i < nb && a_stacked; ++i) a_stacked = ao[i] == ao[0] + i * g.M * g.K;
  if (nb == 1 || (b_shared && a_stacked)) {
    g.M *= nb;
    g.calls.push_back(GemmCall{ao[0], bo[0], c0, 0, 0, 1});
    return g;
  }
  // The longest regular run of trailing batch dims: one strided-batched call per run.
  int64_t inner = 1;
  for (size_t d = 0; d < out_batch.size(); ++d) {
    const int64_t cand = numel(Shape(out_batch.begin() + static_cast<std::ptrdiff_t>(d), out_batch.end()));
    if (runs_regular(ao, cand) && runs_regular(bo, cand)) {
      inner = cand;
      break;
    }
  }
  for (int64_t s = 0; s < nb; s += inner) {
    GemmCall call;
    call.a = ao[s];
    call.b = bo[s];
    call.c = c0 + s * g.M * g.N;
    call.stride_a = inner > 1 ? ao[s + 1] - ao[s] : 0;
    call.stride_b = inner > 1 ? bo[s + 1] - bo[s] : 0;
    call.batch = inner;
    g.calls.push_back(call);
  }
  return g;
}

GemmPadding plan_gemm_padding(const GemmPlan& g) {
  GemmPadding p;
  if (g.calls.size() != 1 || g.calls[0].batch != 1 ||
      static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K) < 268435456.0)
    return p;
  const int64_t es = g.bf16 ? 2 : 4;
  const GemmCall& c = g.calls[0];
  auto odd = [](int64_t x, int64_t elem) { return (x * elem) % 16 != 0; };
  if (g.M % 8 == 0 && g.N % 8 == 0 && g.K % 8 == 0 && !odd(g.lda, es) && !odd(g.ldb, es) && !odd(c.a, es) &&
      !odd(c.b, es) && !odd(c.c, 4))
    return p;
  auto up = [](int64_t x) { return (x + 7) / 8 * 8; };
  p.on = true;
  p.M = up(g.M), p.N = up(g.N), p.K = up(g.K);
  p.bytes = aligned256(static_cast<size_t>(p.M * p.K * es)) + aligned256(static_cast<size_t>(p.K * p.N * es)) +
            aligned256(static_cast<size_t>(p.M * p.N * 4));
  return p;
}

}  // namespace kiln::backend::cuda
