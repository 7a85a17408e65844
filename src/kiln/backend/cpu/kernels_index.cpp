// Index and copy kernels: Iota, SliceGrad, Concat, IndexSelect, IndexAdd,
// Gather, ScatterAdd and IndexCopy.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "kiln/backend/cpu/kernels.h"
#include "kiln/backend/cpu/vecmath.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

using compiler::Instr;
using compiler::Operand;
using ir::Op;

// Iota: start, start + step, ... in the output's dtype.
namespace {

void run_iota(const Instr& ins, std::span<char* const>, char* out, std::span<char* const>) {
  const Shape& os = ins.output.view.shape;
  char* o = out_bytes(ins, out);
  const auto [start, step] = ir::IotaAttrs::of(ins.attrs);
  for (int64_t i = 0; i < os[0]; ++i) {
    double v = start + step * static_cast<double>(i);
    switch (ins.output.dtype) {
      case DType::f32: reinterpret_cast<float*>(o)[i] = static_cast<float>(v); break;
      case DType::i32: reinterpret_cast<int32_t*>(o)[i] = static_cast<int32_t>(v); break;
      case DType::i64: reinterpret_cast<int64_t*>(o)[i] = static_cast<int64_t>(v); break;
      case DType::b8: reinterpret_cast<uint8_t*>(o)[i] = v != 0; break;
      case DType::bf16: reinterpret_cast<uint16_t*>(o)[i] = bf16_from_float(static_cast<float>(v)); break;
    }
  }
}

// SliceGrad: the input placed into zeros.
void run_slice_grad(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shape& os = ins.output.view.shape;
  const size_t es = dtype_size(ins.output.dtype);
  char* o = out_bytes(ins, out);
  // dy (outer, count, inner) placed at start, start+step, ... of (outer, n, inner)
  const auto sl = ir::SliceAttrs::of(ins.attrs);
  const int64_t d = sl.dim, start = sl.start, step = sl.step;
  AxisSplit p = split_axes(os, d, d);
  int64_t count = ins.inputs[0].view.shape[d];
  std::memset(o, 0, numel(os) * es);
  const char* src = in_bytes(ins, in, 0);
  for (int64_t a = 0; a < p.outer; ++a)
    for (int64_t k = 0; k < count; ++k)
      copy_elems(o + ((a * p.axis + start + k * step) * p.inner) * es,
                 src + ((a * count + k) * p.inner) * es, p.inner, es);
}

// Concat along one axis.
void run_concat(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shape& os = ins.output.view.shape;
  const size_t es = dtype_size(ins.output.dtype);
  char* o = out_bytes(ins, out);
  int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  AxisSplit p = split_axes(os, d, d);
  int64_t off = 0;
  for (size_t k = 0; k < ins.inputs.size(); ++k) {
    int64_t len = ins.inputs[k].view.shape[d];
    const char* src = in_bytes(ins, in, k);
    for (int64_t a = 0; a < p.outer; ++a)
      copy_elems(o + ((a * p.axis + off) * p.inner) * es, src + (a * len * p.inner) * es, len * p.inner, es);
    off += len;
  }
}

// IndexSelect: rows of a table.
void run_index_select(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const size_t es = dtype_size(ins.output.dtype);
  char* o = out_bytes(ins, out);
  // table (V, R) , ids (n) -> out (n, R)
  const Shape& ts = ins.inputs[0].view.shape;
  int64_t V = ts[0], R = numel(ts) / std::max<int64_t>(V, 1), n = numel(ins.inputs[1].view.shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = read_index(ins.inputs[1], in[1], i);
    KILN_CHECK(id >= 0 && id < V, "index_select: id ", id, " at position ", i, " out of range [0, ", V, ")");
  }
  const char* table = in_bytes(ins, in, 0);
#pragma omp parallel for if (n * R > 32768)
  for (int64_t i = 0; i < n; ++i)
    copy_elems(o + i * R * es, table + read_index(ins.inputs[1], in[1], i) * R * es, R, es);
}

// IndexAdd: rows summed per id.
void run_index_add(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shape& os = ins.output.view.shape;
  const size_t es = dtype_size(ins.output.dtype);
  char* o = out_bytes(ins, out);
  // ids (n), src (n, R) -> out (V, R), rows summed per id
  KILN_CHECK(ins.output.dtype == DType::f32, "index_add: expected f32");
  int64_t V = os[0], R = numel(os) / std::max<int64_t>(V, 1), n = numel(ins.inputs[0].view.shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = read_index(ins.inputs[0], in[0], i);
    KILN_CHECK(id >= 0 && id < V, "index_add: id ", id, " at position ", i, " out of range [0, ", V, ")");
  }
  float* y = reinterpret_cast<float*>(o);
  const float* src = reinterpret_cast<const float*>(in_bytes(ins, in, 1));
  const int64_t padding_idx = ir::PaddingAttrs::of(ins.attrs).padding_idx;
  // Each id's rows are summed in position order from zero, then added to
  // its row of the output: zeros, or a base (the compiler's fold of
  // Add(base, IndexAdd)), which the output may be the memory of.
  if (ins.inputs.size() == 2) std::fill(y, y + V * R, 0.0f);
  else if (y != reinterpret_cast<const float*>(in_bytes(ins, in, 2))) copy_elems(o, in_bytes(ins, in, 2), V * R, es);
  std::vector<std::pair<int64_t, int64_t>> rows;  // (id, position), by id then position
  rows.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = read_index(ins.inputs[0], in[0], i);
    if (id != padding_idx) rows.push_back({id, i});
  }
  std::sort(rows.begin(), rows.end());
  const int64_t m = static_cast<int64_t>(rows.size());
  // Threads own column ranges, so no two write the same element.
#pragma omp parallel if (m * R > 32768)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t c0 = R * t / nt, c1 = R * (t + 1) / nt;
    std::vector<float> acc(static_cast<size_t>(c1 - c0));
    for (int64_t a = 0; a < m;) {
      const int64_t id = rows[a].first;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (; a < m && rows[a].first == id; ++a)
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += src[rows[a].second * R + c];
      for (int64_t c = c0; c < c1; ++c) y[id * R + c] += acc[c - c0];
    }
  }
}

// Gather and ScatterAdd along one axis.
void run_gather_scatter(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const size_t es = dtype_size(ins.output.dtype);
  char* o = out_bytes(ins, out);
  bool scatter = ins.op == Op::ScatterAdd;
  int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  const Operand& idx_op = ins.inputs[1];
  const Shape& is = idx_op.view.shape;
  const Shape& xs = ins.inputs[0].view.shape;  // gather: x; scatter: base (== out)
  auto xst = contiguous_strides(xs);
  int64_t n = numel(is);
  KILN_CHECK(ins.output.dtype == DType::f32, ir::op_name(ins.op), ": expected f32");
  float* y = reinterpret_cast<float*>(o);
  const float* x = reinterpret_cast<const float*>(in_bytes(ins, in, 0));
  if (scatter) std::memcpy(y, x, numel(xs) * es);
  const float* src = scatter ? reinterpret_cast<const float*>(in_bytes(ins, in, 2)) : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = 0;
    for (int64_t k = static_cast<int64_t>(is.size()) - 1; k >= 0; --k) {
      int64_t c = rem % is[k];
      rem /= is[k];
      if (k == d) {
        int64_t j = read_index(idx_op, in[1], i);
        KILN_CHECK(j >= 0 && j < xs[d], ir::op_name(ins.op), ": index ", j, " out of range [0, ", xs[d],
                   ") along dim ", d);
        c = j;
      }
      off += c * xst[k];
    }
    if (scatter) y[off] += src[i];
    else y[i] = x[off];
  }
}

// IndexCopy: x with slices along dim replaced by src's. x is copied first
// unless the output is x's own memory (compiler::donate, in_place): then
// only the slices are written, a decode step's cache write.
void run_index_copy(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shape& os = ins.output.view.shape;
  const size_t es = dtype_size(ins.output.dtype);
  const int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  const AxisSplit p = split_axes(os, d, d);
  const int64_t n = numel(ins.inputs[1].view.shape);
  std::vector<std::pair<int64_t, int64_t>> ids(static_cast<size_t>(n));  // (id, position)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = read_index(ins.inputs[1], in[1], i);
    KILN_CHECK(id >= 0 && id < p.axis, "index_copy: id ", id, " at position ", i, " out of range [0, ", p.axis,
               ") along dim ", d);
    ids[i] = {id, i};
  }
  std::vector<std::pair<int64_t, int64_t>> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    KILN_CHECK(sorted[i].first != sorted[i - 1].first, "index_copy: id ", sorted[i].first, " at positions ",
               sorted[i - 1].second, " and ", sorted[i].second, " (the ids must be distinct)");
  char* o = out_bytes(ins, out);
  const char* x = in_bytes(ins, in, 0);
  if (o != x) copy_elems(o, x, numel(os), es);
  const char* src = in_bytes(ins, in, 2);
  for (int64_t a = 0; a < p.outer; ++a)
    for (int64_t i = 0; i < n; ++i)
      copy_elems(o + ((a * p.axis + ids[i].first) * p.inner) * es, src + ((a * n + i) * p.inner) * es, p.inner, es);
}

}  // namespace

void add_index_kernels(KernelTable& t) {
  add_kernel(t, ir::Op::Iota, run_iota);
  add_kernel(t, ir::Op::SliceGrad, run_slice_grad);
  add_kernel(t, ir::Op::Concat, run_concat);
  add_kernel(t, ir::Op::IndexSelect, run_index_select);
  add_kernel(t, ir::Op::IndexAdd, run_index_add);
  add_kernel(t, ir::Op::Gather, run_gather_scatter);
  add_kernel(t, ir::Op::ScatterAdd, run_gather_scatter);
  add_kernel(t, ir::Op::IndexCopy, run_index_copy);
}

}  // namespace kiln::backend::cpu
