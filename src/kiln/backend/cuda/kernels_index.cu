// The movement and indexing kernels (backend/cpu/kernels_index.cpp's
// counterparts): Iota, SliceGrad, Concat, IndexSelect, IndexAdd, Gather,
// ScatterAdd and IndexCopy, with the CPU's error messages for bad ids. Kernel table:
// kernels.h.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kiln/backend/cuda/kernels.h"
#include "kiln/backend/cuda/kernels_common.cuh"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

__global__ void iota_kernel(void* out, uint8_t dtype, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    store_as(out, dtype, i, start + step * static_cast<double>(i));
  }
}

// Gather / ScatterAdd's shapes, as the kernels read them.
struct GatherShape {
  int32_t rank = 0, dim = 0;
  int64_t index_shape[kMaxRank] = {};
  int64_t x_strides[kMaxRank] = {};  // contiguous strides of x
  int64_t x_extent = 0;              // x's extent along dim
};

template <typename E>
__global__ void slice_grad_kernel(const E* dy, E* out, Split p, int64_t count, int64_t start, int64_t step) {
  const int64_t n = p.outer * p.axis * p.inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % p.inner, j = (e / p.inner) % p.axis, o = e / (p.inner * p.axis);
    const int64_t rel = j - start;
    E v = E(0);
    if (rel >= 0 && rel % step == 0 && rel / step < count) v = dy[(o * count + rel / step) * p.inner + i];
    out[e] = v;
  }
}

template <typename E>
__global__ void index_select_kernel(const E* table, const void* ids, uint8_t id_dtype, E* out, int64_t V, int64_t R,
                                    int64_t n, ErrorReport* report) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * R; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / R, r = e % R;
    const int64_t id = read_id(ids, id_dtype, i);
    if (id < 0 || id >= V) {
      report_error(report, kIdOutOfRange, id, i, V);
      out[e] = E(0);
    } else {
      out[e] = table[id * R + r];
    }
  }
}

// index_add in three passes, deterministic and parallel over rows: (1) one
// block finds the first bad id (the CPU's error: the smallest position);
// (2) the ids, as int32 keys with padding and bad ids last, are sorted with
// their positions (a stable radix sort: positions stay in order within an
// id); (3) a block per id sums its rows in position order, as the CPU does,
// and adds the sum to the output (zeros, or the base the caller copied there).
__global__ void index_check_kernel(const void* ids, uint8_t id_dtype, int64_t V, int64_t n, int64_t padding_idx,
                                   ErrorReport* report) {
  int64_t first = n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t id = read_id(ids, id_dtype, i);
    if (id != padding_idx && (id < 0 || id >= V)) {
      first = i;
      break;
    }
  }
  first = block_reduce(first, MinOp<int64_t>());
  if (threadIdx.x == 0 && first < n) report_error(report, kIdOutOfRange, read_id(ids, id_dtype, first), first, V);
}

__global__ void index_keys_kernel(const void* ids, uint8_t id_dtype, int64_t V, int64_t n, int64_t padding_idx,
                                  int32_t* keys, int32_t* positions) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = read_id(ids, id_dtype, i);
    keys[i] = id == padding_idx || id < 0 || id >= V ? static_cast<int32_t>(V) : static_cast<int32_t>(id);
    positions[i] = static_cast<int32_t>(i);
  }
}

__global__ void index_sum_kernel(const int32_t* keys, const int32_t* positions, const float* src, float* out,
                                 int64_t V, int64_t R, int64_t n) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const int32_t key = keys[p];
    if (key >= V || (p > 0 && keys[p - 1] == key)) continue;  // padding / bad ids, or not the id's first row
    for (int64_t c = threadIdx.x; c < R; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t q = p; q < n && keys[q] == key; ++q) acc += src[positions[q] * R + c];
      out[key * R + c] += acc;  // onto zeros, or onto a base (ir/op.h)
    }
  }
}

// Offset in x of index element (coords), with coords[dim] replaced by j.
__device__ int64_t gather_offset(const GatherShape& g, const int64_t* coords, int64_t j) {
  int64_t off = 0;
  for (int k = 0; k < g.rank; ++k) off += (k == g.dim ? j : coords[k]) * g.x_strides[k];
  return off;
}

__global__ void gather_kernel(const float* x, const void* index, uint8_t index_dtype, float* y, GatherShape g,
                              int64_t n, ErrorReport* report) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t coords[kMaxRank];
    int64_t rem = i;
    for (int k = g.rank - 1; k >= 0; --k) {
      coords[k] = rem % g.index_shape[k];
      rem /= g.index_shape[k];
    }
    const int64_t j = read_id(index, index_dtype, i);
    if (j < 0 || j >= g.x_extent) {
      report_error(report, kIdOutOfRange, j, i, g.x_extent);
      y[i] = 0.0f;
    } else {
      y[i] = x[gather_offset(g, coords, j)];
    }
  }
}

// One thread per position off `dim`, adding along dim in index order: the
// CPU's order, and no two threads touch the same element.
__global__ void scatter_add_kernel(const void* index, uint8_t index_dtype, const float* src, float* y, GatherShape g,
                                   int64_t lines, ErrorReport* report) {
  const int64_t len = g.index_shape[g.dim];
  int64_t istride[kMaxRank];
  int64_t acc = 1;
  for (int k = g.rank - 1; k >= 0; --k) {
    istride[k] = acc;
    acc *= g.index_shape[k];
  }
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < lines; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t coords[kMaxRank];
    int64_t rem = t, base = 0;
    for (int k = g.rank - 1; k >= 0; --k) {
      if (k == g.dim) {
        coords[k] = 0;
        continue;
      }
      coords[k] = rem % g.index_shape[k];
      rem /= g.index_shape[k];
      base += coords[k] * istride[k];
    }
    for (int64_t k = 0; k < len; ++k) {
      const int64_t i = base + k * istride[g.dim];
      const int64_t j = read_id(index, index_dtype, i);
      if (j < 0 || j >= g.x_extent) {
        report_error(report, kIdOutOfRange, j, i, g.x_extent);
        continue;
      }
      y[gather_offset(g, coords, j)] += src[i];
    }
  }
}

// IndexCopy's ids: each in [0, V) and none twice (the first bad one is reported).
__global__ void index_copy_check_kernel(const void* ids, uint8_t id_dtype, int64_t V, int64_t n, ErrorReport* report) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = read_id(ids, id_dtype, i);
    if (id < 0 || id >= V) report_error(report, kIdOutOfRange, id, i, V);
    for (int64_t j = i + 1; j < n; ++j)
      if (read_id(ids, id_dtype, j) == id) report_error(report, kDuplicateId, id, i, j);
  }
}

// One thread per element of src, written to its slice's place in out.
template <typename E>
__global__ void index_copy_kernel(const E* src, const void* ids, uint8_t id_dtype, E* out, Split p, int64_t n) {
  const int64_t total = p.outer * n * p.inner;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e % p.inner, i = (e / p.inner) % n, a = e / (p.inner * n);
    const int64_t id = read_id(ids, id_dtype, i);
    if (id >= 0 && id < p.axis) out[(a * p.axis + id) * p.inner + r] = src[e];
  }
}

void iota(void* out, uint8_t dtype, int64_t n, double start, double step, cudaStream_t stream) {
  iota_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, dtype, n, start, step);
}

// Calls launch(E{}) with E the unsigned integer of elem_bytes bytes: the
// copy kernels move elements of any dtype as such words.
template <typename Launch>
void by_element_size(const char* op, int elem_bytes, Launch&& launch) {
  switch (elem_bytes) {
    case 1: return launch(uint8_t{});
    case 2: return launch(uint16_t{});
    case 4: return launch(uint32_t{});
    case 8: return launch(uint64_t{});
    default: throw Error(std::string(op) + ": elements of " + std::to_string(elem_bytes) + " bytes");
  }
}

void slice_grad(const void* dy, void* out, int elem_bytes, Split p, int64_t count, int64_t start, int64_t step,
                cudaStream_t stream) {
  by_element_size("slice_grad", elem_bytes, [&](auto word) {
    using E = decltype(word);
    slice_grad_kernel<E><<<grid_for(p.outer * p.axis * p.inner), kThreads, 0, stream>>>(
        static_cast<const E*>(dy), static_cast<E*>(out), p, count, start, step);
  });
}

void index_select(const void* table, const void* ids, uint8_t id_dtype, void* out, int elem_bytes, int64_t V,
                  int64_t R, int64_t n, ErrorReport* report, cudaStream_t stream) {
  by_element_size("index_select", elem_bytes, [&](auto word) {
    using E = decltype(word);
    index_select_kernel<E><<<grid_for(n * R), kThreads, 0, stream>>>(static_cast<const E*>(table), ids, id_dtype,
                                                                      static_cast<E*>(out), V, R, n, report);
  });
}

int sort_bits(int64_t V) {  // keys 0..V
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}
// CUB's scratch for sorting n keys below 2^sort_bits(V) with their positions.
size_t sort_bytes(int64_t V, int64_t n) {
  size_t bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, sort_bits(V)));
  return bytes;
}

size_t index_add_scratch_bytes(int64_t V, int64_t n) {
  return 4 * aligned256(static_cast<size_t>(n) * sizeof(int32_t)) + aligned256(sort_bytes(V, n));
}

void index_add(const void* ids, uint8_t id_dtype, const float* src, float* out, int64_t V, int64_t R, int64_t n,
               int64_t padding_idx, ErrorReport* report, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  KILN_CHECK(n < (int64_t{1} << 31) && V < (int64_t{1} << 31) - 1, "index_add: ", n, " ids into ", V,
             " rows (CUDA takes fewer than 2^31)");
  index_check_kernel<<<1, kThreads, 0, stream>>>(ids, id_dtype, V, n, padding_idx, report);
  char* at = static_cast<char*>(scratch);
  const size_t vec = aligned256(static_cast<size_t>(n) * sizeof(int32_t));
  auto* keys = reinterpret_cast<int32_t*>(at);
  auto* positions = reinterpret_cast<int32_t*>(at + vec);
  auto* sorted_keys = reinterpret_cast<int32_t*>(at + 2 * vec);
  auto* sorted_positions = reinterpret_cast<int32_t*>(at + 3 * vec);
  index_keys_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, id_dtype, V, n, padding_idx, keys, positions);
  size_t bytes = sort_bytes(V, n);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(at + 4 * vec, bytes, keys, sorted_keys, positions, sorted_positions,
                                                  static_cast<int>(n), 0, sort_bits(V), stream));
  index_sum_kernel<<<grid_rows(n), kThreads, 0, stream>>>(sorted_keys, sorted_positions, src, out, V, R, n);
}

void gather(const float* x, const void* index, uint8_t index_dtype, float* y, const GatherShape& g,
            ErrorReport* report, cudaStream_t stream) {
  int64_t n = 1;
  for (int k = 0; k < g.rank; ++k) n *= g.index_shape[k];
  gather_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, index, index_dtype, y, g, n, report);
}

void scatter_add(const void* index, uint8_t index_dtype, const float* src, float* y, const GatherShape& g,
                 ErrorReport* report, cudaStream_t stream) {
  int64_t lines = 1;
  for (int k = 0; k < g.rank; ++k)
    if (k != g.dim) lines *= g.index_shape[k];
  if (g.index_shape[g.dim] == 0) return;
  scatter_add_kernel<<<grid_for(lines), kThreads, 0, stream>>>(index, index_dtype, src, y, g, lines, report);
}

void index_copy(const void* src, const void* ids, uint8_t id_dtype, void* out, int elem_bytes, Split p, int64_t n,
                ErrorReport* report, cudaStream_t stream) {
  if (n == 0) return;
  index_copy_check_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, id_dtype, p.axis, n, report);
  by_element_size("index_copy", elem_bytes, [&](auto word) {
    using E = decltype(word);
    index_copy_kernel<E><<<grid_for(p.outer * n * p.inner), kThreads, 0, stream>>>(
        static_cast<const E*>(src), ids, id_dtype, static_cast<E*>(out), p, n);
  });
}

}  // namespace

}  // namespace kiln::backend::cuda::kernels

namespace kiln::backend::cuda {

using compiler::Instr;
using ir::Op;

namespace {

void run_iota(const KernelCall& k) {
  const Instr& ins = k.ins;
  const auto a = ir::IotaAttrs::of(ins.attrs);
  return kernels::iota(k.o(), code(ins.output.dtype), k.shape()[0], a.start, a.step, k.stream());
}

// SliceGrad and Concat: strided copies into the output.
void run_slice_grad(const KernelCall& k) {
  const Instr& ins = k.ins;
  const size_t es = k.elem();
  const auto sl = ir::SliceAttrs::of(ins.attrs);
  return kernels::slice_grad(k.inp(0), k.o(), static_cast<int>(es), split_shape(k.shape(), sl.dim, sl.dim),
                             ins.inputs[0].view.shape[sl.dim], sl.start, sl.step, k.stream());
}

void run_concat(const KernelCall& k) {
  const Instr& ins = k.ins;
  const size_t es = k.elem();
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
void run_index_select(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& ts = ins.inputs[0].view.shape;
  const int64_t V = ts[0], R = numel(ts) / std::max<int64_t>(V, 1), n = numel(ins.inputs[1].view.shape);
  return kernels::index_select(k.inp(0), k.inp(1), code(ins.inputs[1].dtype), k.o(), static_cast<int>(k.elem()), V, R,
                               n, k.report(), k.stream());
}

void prepare_index_add(const Instr& ins, const DeviceState&, KernelStep& st) {
  const Shape& os = ins.output.view.shape;
  st.scratch_bytes = kernels::index_add_scratch_bytes(os[0], numel(ins.inputs[0].view.shape));
}

void run_index_add(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  KILN_CHECK(ins.output.dtype == DType::f32, "index_add: expected f32");
  const int64_t V = os[0], R = numel(os) / std::max<int64_t>(V, 1), n = numel(ins.inputs[0].view.shape);
  if (ins.inputs.size() == 3)  // the compiler's fold of Add(base, IndexAdd): the sums go onto the base
    KILN_CUDA_CHECK(cudaMemcpyAsync(k.o(), k.inp(2), numel(os) * k.elem(), cudaMemcpyDeviceToDevice, k.stream()));
  else
    KILN_CUDA_CHECK(cudaMemsetAsync(k.o(), 0, numel(os) * k.elem(), k.stream()));
  return kernels::index_add(k.inp(0), code(ins.inputs[0].dtype), k.f(1), k.fo(), V, R, n,
                            ir::PaddingAttrs::of(ins.attrs).padding_idx, k.report(), k.scratch(), k.stream());
}

std::string index_error(const Instr& ins, const kernels::ErrorReport& r) {
  return detail::concat(ins.op == Op::IndexSelect ? "index_select" : "index_add", ": id ", r.value, " at position ",
                        r.position, " out of range [0, ", r.limit, ")");
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

std::string gather_error(const Instr& ins, const kernels::ErrorReport& r) {
  return detail::concat(ir::op_name(ins.op), ": index ", r.value, " out of range [0, ", r.limit, ") along dim ",
                        ir::DimAttrs::of(ins.attrs).dim);
}

// IndexCopy: x copied unless the output is x's memory (donated or in
// place), then src's slices written over it.
void run_index_copy(const KernelCall& k) {
  const Instr& ins = k.ins;
  const int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  const size_t bytes = numel(k.shape()) * k.elem();
  if (k.o() != k.inp(0) && bytes)
    KILN_CUDA_CHECK(cudaMemcpyAsync(k.o(), k.inp(0), bytes, cudaMemcpyDeviceToDevice, k.stream()));
  return kernels::index_copy(k.inp(2), k.inp(1), code(ins.inputs[1].dtype), k.o(), static_cast<int>(k.elem()),
                             split_shape(k.shape(), d, d), numel(ins.inputs[1].view.shape), k.report(), k.stream());
}

std::string index_copy_error(const Instr& ins, const kernels::ErrorReport& r) {
  const int64_t d = ir::DimAttrs::of(ins.attrs).dim;
  if (r.code == kernels::kDuplicateId)
    return detail::concat("index_copy: id ", r.value, " at positions ", r.position, " and ", r.limit,
                          " (the ids must be distinct)");
  return detail::concat("index_copy: id ", r.value, " at position ", r.position, " out of range [0, ", r.limit,
                        ") along dim ", d);
}

}  // namespace

void add_index_kernels(KernelTable& t) {
  add_kernel(t, Op::Iota, {.run = run_iota});
  add_kernel(t, Op::SliceGrad, {.run = run_slice_grad});
  add_kernel(t, Op::Concat, {.run = run_concat});
  add_kernel(t, Op::IndexSelect, {.run = run_index_select, .report = index_error});
  add_kernel(t, Op::IndexAdd, {.run = run_index_add, .prepare = prepare_index_add, .report = index_error});
  add_kernel(t, Op::Gather, {.run = run_gather, .report = gather_error});
  add_kernel(t, Op::ScatterAdd, {.run = run_gather, .report = gather_error});
  add_kernel(t, Op::IndexCopy, {.run = run_index_copy, .report = index_copy_error});
}

}  // namespace kiln::backend::cuda
