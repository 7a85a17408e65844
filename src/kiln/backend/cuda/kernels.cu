// The CUDA kernels of every non-elementwise op (backend/cpu/kernels.cpp's
// counterparts; the GEMM is cuBLAS, in executor.cpp). Correct first: one
// block per row for row-wise ops, one thread per element elsewhere.
// Reductions run in a fixed order (per-thread strided partials, then a fixed
// tree), so results are bit-identical from run to run; sums accumulate in
// double as on the CPU.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/backend/cuda/common.h"
#include "kiln/backend/cuda/kernels.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

constexpr int kThreads = 256;  // every block; a multiple of 32

unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));  // grid-stride loops do the rest
}

unsigned grid_rows(int64_t rows) {
  if (rows < 1) rows = 1;
  return static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
}

__device__ int64_t read_id(const void* ids, uint8_t dtype, int64_t i) {
  return dtype == kI64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
}

__device__ void report_error(ErrorReport* r, int32_t code, int64_t value, int64_t position, int64_t limit) {
  if (atomicCAS(&r->code, 0, -1) == 0) {
    r->value = value;
    r->position = position;
    r->limit = limit;
    __threadfence();
    atomicExch(&r->code, code);
  }
}

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct MinOp {
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
template <typename T>
struct MaxOp {  // std::max: a NaN in `a` stays, a NaN in `b` is passed over
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};

// Every thread's partial combined in a fixed order; every thread gets the
// result. Must be reached by the whole block.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T warp_partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T acc = warp_partial[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) acc = op(acc, warp_partial[w]);
    warp_partial[0] = acc;
  }
  __syncthreads();
  T r = warp_partial[0];
  __syncthreads();  // the buffer may be reused at once
  return r;
}

__device__ double block_sum(double v) { return block_reduce(v, SumOp<double>()); }

// ---- iota ----

__global__ void iota_kernel(void* out, uint8_t dtype, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    store_as(out, dtype, i, start + step * static_cast<double>(i));
  }
}

// ---- reductions ----

// The part of the axis block row blockIdx.y reduces (reduce_parts: every
// part is non-empty).
struct AxisPart {
  int64_t begin, end;
};
__device__ AxisPart axis_part(int64_t axis) {
  const int64_t chunk = (axis + gridDim.y - 1) / gridDim.y, begin = blockIdx.y * chunk;
  return {begin, begin + chunk < axis ? begin + chunk : axis};
}

// Output r's result, or with several parts, part blockIdx.y's partial
// (sums as double, maxima as T) at partial[part * outputs + r].
template <typename T>
__device__ void put(T* y, void* partial, int64_t outputs, int64_t r, T max_value, double sum, bool is_max) {
  if (gridDim.y == 1) y[r] = is_max ? max_value : static_cast<T>(sum);
  else if (is_max) static_cast<T*>(partial)[blockIdx.y * outputs + r] = max_value;
  else static_cast<double*>(partial)[blockIdx.y * outputs + r] = sum;
}

// One block per output (o, i): the axis (its part) strided over the threads.
template <typename T>
__global__ void reduce_rows_kernel(const T* x, T* y, Split p, bool is_max, void* partial) {
  const AxisPart part = axis_part(p.axis);
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    const T* row = x + (r / p.inner) * p.axis * p.inner + r % p.inner;
    if (is_max) {
      T m = row[part.begin * p.inner];
      for (int64_t a = part.begin + threadIdx.x; a < part.end; a += blockDim.x) m = MaxOp<T>()(m, row[a * p.inner]);
      m = block_reduce(m, MaxOp<T>());
      if (threadIdx.x == 0) put(y, partial, p.outer * p.inner, r, m, 0.0, true);
    } else {
      double acc = 0;
      for (int64_t a = part.begin + threadIdx.x; a < part.end; a += blockDim.x)
        acc += static_cast<double>(row[a * p.inner]);
      acc = block_sum(acc);
      if (threadIdx.x == 0) put(y, partial, p.outer * p.inner, r, T(0), acc, false);
    }
  }
}

// inner >= 32: blocks of 32 (inner, coalesced) x 8 (axis) threads.
template <typename T>
__global__ void reduce_tiles_kernel(const T* x, T* y, Split p, bool is_max, void* partial) {
  __shared__ double sums[8][33];
  __shared__ T maxes[8][33];
  const AxisPart part = axis_part(p.axis);
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  for (int64_t tile = blockIdx.x; tile < p.outer * ((p.inner + 31) / 32); tile += gridDim.x) {
    const int64_t tiles_per_outer = (p.inner + 31) / 32;
    const int64_t o = tile / tiles_per_outer, i = (tile % tiles_per_outer) * 32 + tx;
    const bool live = i < p.inner;
    const T* col = x + o * p.axis * p.inner + (live ? i : 0);
    if (is_max) {
      T m = col[part.begin * p.inner];
      for (int64_t a = part.begin + ty; a < part.end; a += 8) m = MaxOp<T>()(m, col[a * p.inner]);
      maxes[ty][tx] = m;
    } else {
      double acc = 0;
      for (int64_t a = part.begin + ty; a < part.end; a += 8) acc += static_cast<double>(col[a * p.inner]);
      sums[ty][tx] = acc;
    }
    __syncthreads();
    if (ty == 0 && live) {
      if (is_max) {
        T m = maxes[0][tx];
        for (int k = 1; k < 8; ++k) m = MaxOp<T>()(m, maxes[k][tx]);
        put(y, partial, p.outer * p.inner, o * p.inner + i, m, 0.0, true);
      } else {
        double acc = sums[0][tx];
        for (int k = 1; k < 8; ++k) acc += sums[k][tx];
        put(y, partial, p.outer * p.inner, o * p.inner + i, T(0), acc, false);
      }
    }
    __syncthreads();
  }
}

// The parts of every output combined in part order.
template <typename T>
__global__ void reduce_parts_kernel(const void* partial, T* y, int64_t outputs, int64_t parts, bool is_max) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < outputs; r += int64_t(gridDim.x) * blockDim.x) {
    if (is_max) {
      const T* pt = static_cast<const T*>(partial);
      T m = pt[r];
      for (int64_t k = 1; k < parts; ++k) m = MaxOp<T>()(m, pt[k * outputs + r]);
      y[r] = m;
    } else {
      const double* pd = static_cast<const double*>(partial);
      double acc = pd[r];
      for (int64_t k = 1; k < parts; ++k) acc += pd[k * outputs + r];
      y[r] = static_cast<T>(acc);
    }
  }
}

template <typename T>
void reduce_typed(const void* x, void* y, Split p, bool is_max, void* scratch, cudaStream_t stream) {
  const int64_t parts = reduce_parts(p), outputs = p.outer * p.inner;
  const dim3 grid(p.inner >= 32 ? grid_rows(p.outer * ((p.inner + 31) / 32)) : grid_rows(outputs),
                  static_cast<unsigned>(parts));
  if (p.inner >= 32)
    reduce_tiles_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p, is_max,
                                                          scratch);
  else
    reduce_rows_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p, is_max,
                                                         scratch);
  if (parts > 1)
    reduce_parts_kernel<T><<<grid_for(outputs), kThreads, 0, stream>>>(scratch, static_cast<T*>(y), outputs, parts,
                                                                       is_max);
}

// The first index of the row's largest value (NaN passed over, unless the
// row starts with one: then 0), as the CPU's sequential scan gives.
template <typename T>
__global__ void argmax_kernel(const T* x, int64_t* y, Split p) {
  __shared__ T best_v[kThreads];
  __shared__ int64_t best_a[kThreads];
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    const T* row = x + (r / p.inner) * p.axis * p.inner + r % p.inner;
    T bv = T(0);
    int64_t ba = -1;
    for (int64_t a = threadIdx.x; a < p.axis; a += blockDim.x) {
      T v = row[a * p.inner];
      if (v != v) continue;
      if (ba < 0 || v > bv) bv = v, ba = a;
    }
    best_v[threadIdx.x] = bv;
    best_a[threadIdx.x] = ba;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half >>= 1) {
      if (threadIdx.x < half) {
        T v2 = best_v[threadIdx.x + half];
        int64_t a2 = best_a[threadIdx.x + half], a1 = best_a[threadIdx.x];
        if (a2 >= 0 && (a1 < 0 || v2 > best_v[threadIdx.x] || (v2 == best_v[threadIdx.x] && a2 < a1))) {
          best_v[threadIdx.x] = v2;
          best_a[threadIdx.x] = a2;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      T first = row[0];
      y[r] = (first != first || best_a[0] < 0) ? 0 : best_a[0];
    }
    __syncthreads();
  }
}

// ---- movement and indexing ----

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

// ---- composites: one block per row ----

__device__ float block_max(float v) { return block_reduce(v, MaxOp<float>()); }

__global__ void softmax_kernel(const float* x, const float* mask, float* y, Split p, bool log_form) {
  const int64_t L = p.axis, st = p.inner;
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    const int64_t b = (r / p.inner) * p.axis * p.inner + r % p.inner;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
      float v = x[b + k * st] + (mask ? mask[b + k * st] : 0.0f);
      y[b + k * st] = v;
      m = fmaxf(m, v);
    }
    m = block_max(m);
    double sum = 0;
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) sum += exp(static_cast<double>(y[b + k * st] - m));
    sum = block_sum(sum);
    if (log_form) {
      const float lse = m + static_cast<float>(log(sum));
      for (int64_t k = threadIdx.x; k < L; k += blockDim.x) y[b + k * st] -= lse;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = threadIdx.x; k < L; k += blockDim.x) y[b + k * st] = expf(y[b + k * st] - m) * inv;
    }
  }
}

__global__ void softmax_grad_kernel(const float* y, const float* dy, float* dx, Split p, bool log_form) {
  const int64_t L = p.axis, st = p.inner;
  for (int64_t r = blockIdx.x; r < p.outer * p.inner; r += gridDim.x) {
    const int64_t b = (r / p.inner) * p.axis * p.inner + r % p.inner;
    double s = 0;
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x)
      s += log_form ? dy[b + k * st] : static_cast<double>(dy[b + k * st]) * y[b + k * st];
    s = block_sum(s);
    for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
      const int64_t i = b + k * st;
      const double diff = static_cast<double>(dy[i]) - s;
      dx[i] = static_cast<float>(log_form ? dy[i] - exp(static_cast<double>(y[i])) * s : y[i] * diff);
    }
  }
}

// Mean and 1/sqrt(var + eps) of a row (biased variance, two passes, double).
__device__ void row_stats(const float* xr, int64_t C, double eps, double& mean, double& rstd) {
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
  mean = block_sum(s) / C;
  double v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (xr[c] - mean) * (xr[c] - mean);
  rstd = 1.0 / sqrt(block_sum(v) / C + eps);
}

__global__ void normalize_kernel(const float* x, float* y, int64_t N, int64_t C, double eps) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* xr = x + n * C;
    double mean, rstd;
    row_stats(xr, C, eps, mean, rstd);
    const float fm = static_cast<float>(mean), fr = static_cast<float>(rstd);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[n * C + c] = (xr[c] - fm) * fr;
  }
}

__global__ void normalize_grad_kernel(const float* x, const float* dy, float* dx, int64_t N, int64_t C, double eps) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* xr = x + n * C;
    const float* gr = dy + n * C;
    double mean, rstd;
    row_stats(xr, C, eps, mean, rstd);
    double mg = 0, mgx = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      mg += gr[c];
      mgx += gr[c] * ((xr[c] - mean) * rstd);
    }
    mg = block_sum(mg) / C;
    mgx = block_sum(mgx) / C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const double xh = (xr[c] - mean) * rstd;
      dx[n * C + c] = static_cast<float>(rstd * (gr[c] - mg - xh * mgx));
    }
  }
}

// One thread per element, whose partner is D/2 away in its row. Each product
// is rounded before the sum (nvcc would fuse them into an FMA), as the CPU
// kernel and the composite round them: forward y_i = x_i c_i ∓ x_j s_i, the
// transpose y_i = x_i c_i ± x_j s_j (upper sign for the first half).
__global__ void rope_kernel(const void* x, uint8_t x_dtype, const float* cos, const float* sin, float* y, int64_t n,
                            int64_t D, int64_t T, int64_t batch_rows, bool transpose) {
  const int64_t h = D / 2;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / D, i = e % D, j = i < h ? i + h : i - h;
    const int64_t table = ((batch_rows ? row / batch_rows * T : 0) + row % T) * D;
    const float a = __fmul_rn(load_as<float>(x, x_dtype, e), cos[table + i]);
    const float b = __fmul_rn(load_as<float>(x, x_dtype, row * D + j), sin[table + (transpose ? j : i)]);
    y[e] = (i < h) != transpose ? __fsub_rn(a, b) : __fadd_rn(a, b);
  }
}

// Row n's loss into scratch[n] (0 for ignored rows).
__global__ void cross_entropy_rows_kernel(const float* x, const void* labels, uint8_t label_dtype, int64_t N,
                                          int64_t C, int64_t ignore, double eps, double* scratch,
                                          ErrorReport* report) {
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t y = read_id(labels, label_dtype, n);
    const bool bad = y != ignore && (y < 0 || y >= C);
    if (bad && threadIdx.x == 0) report_error(report, kLabelOutOfRange, y, n, C);
    if (y == ignore || bad) {
      if (threadIdx.x == 0) scratch[n] = 0;
      continue;
    }
    const float* xr = x + n * C;
    float mf = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mf = fmaxf(mf, xr[c]);
    const float mb = block_max(mf);
    const double m = mb;
    double sum = 0, mean = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {  // f32 exponentials (as the CPU's), f64 sums
      sum += expf(xr[c] - mb);
      mean += xr[c];
    }
    sum = block_sum(sum);
    mean = block_sum(mean);
    if (threadIdx.x == 0) {
      const double lse = m + log(sum);
      scratch[n] = (1 - eps) * (lse - xr[y]) + eps * (lse - mean / C);
    }
  }
}

// Non-ignored labels; one block.
__device__ double count_labels(const void* labels, uint8_t label_dtype, int64_t N, int64_t ignore) {
  double count = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) count += read_id(labels, label_dtype, n) != ignore;
  return block_sum(count);
}

__global__ void cross_entropy_mean_kernel(const void* labels, uint8_t label_dtype, int64_t N, int64_t ignore,
                                          const double* rows, float* loss) {
  double total = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) total += rows[n];
  total = block_sum(total);
  const double count = count_labels(labels, label_dtype, N, ignore);
  if (threadIdx.x == 0) *loss = static_cast<float>(count > 0 ? total / count : NAN);
}

__global__ void count_labels_kernel(const void* labels, uint8_t label_dtype, int64_t N, int64_t ignore,
                                    double* count) {
  const double c = count_labels(labels, label_dtype, N, ignore);
  if (threadIdx.x == 0) *count = c;
}

// dx = g/count · (p_c - (1-ε)[c = y] - ε/C); ignored rows get 0.
__global__ void cross_entropy_grad_kernel(const float* x, const void* labels, uint8_t label_dtype, const float* dloss,
                                          float* dx, int64_t N, int64_t C, int64_t ignore, double eps,
                                          const double* count, ErrorReport* report) {
  const double scale = *count > 0 ? static_cast<double>(*dloss) / *count : 0.0;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t y = read_id(labels, label_dtype, n);
    const float* xr = x + n * C;
    float* dr = dx + n * C;
    const bool bad = y != ignore && (y < 0 || y >= C);
    if (bad && threadIdx.x == 0) report_error(report, kLabelOutOfRange, y, n, C);
    if (y == ignore || bad) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dr[c] = 0.0f;
      continue;
    }
    float mf = -INFINITY;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mf = fmaxf(mf, xr[c]);
    const float mb = block_max(mf);
    double sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(xr[c] - mb);  // f32 exponentials, f64 sums
    sum = block_sum(sum);
    const double inv = 1.0 / sum;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const double p = expf(xr[c] - mb) * inv;
      dr[c] = static_cast<float>(scale * (p - (c == y ? 1 - eps : 0.0) - eps / C));
    }
  }
}

}  // namespace

__global__ void fill_rows_kernel(const float* v, int64_t stride, float* out, int64_t rows, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = v[(i % n) * stride];
}

void fill_rows(const float* v, int64_t stride, float* out, int64_t rows, int64_t n, cudaStream_t stream) {
  fill_rows_kernel<<<grid_for(rows * n), kThreads, 0, stream>>>(v, stride, out, rows, n);
}

void iota(void* out, uint8_t dtype, int64_t n, double start, double step, cudaStream_t stream) {
  iota_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, dtype, n, start, step);
}

void reduce(const void* x, void* y, uint8_t dtype, Split p, bool is_max, void* scratch, cudaStream_t stream) {
  switch (dtype) {
    case kF32: return reduce_typed<float>(x, y, p, is_max, scratch, stream);
    case kI32: return reduce_typed<int32_t>(x, y, p, is_max, scratch, stream);
    default: return reduce_typed<int64_t>(x, y, p, is_max, scratch, stream);
  }
}

void argmax(const void* x, int64_t* y, uint8_t dtype, Split p, cudaStream_t stream) {
  const unsigned grid = grid_rows(p.outer * p.inner);
  switch (dtype) {
    case kF32: return argmax_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), y, p);
    case kI32: return argmax_kernel<int32_t><<<grid, kThreads, 0, stream>>>(static_cast<const int32_t*>(x), y, p);
    case kI64: return argmax_kernel<int64_t><<<grid, kThreads, 0, stream>>>(static_cast<const int64_t*>(x), y, p);
    default: throw Error("argmax: unsupported dtype code " + std::to_string(dtype));
  }
}

void slice_grad(const void* dy, void* out, int elem_bytes, Split p, int64_t count, int64_t start, int64_t step,
                cudaStream_t stream) {
  const unsigned grid = grid_for(p.outer * p.axis * p.inner);
  switch (elem_bytes) {
    case 1:
      return slice_grad_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(dy),
                                                                       static_cast<uint8_t*>(out), p, count, start, step);
    case 2:
      return slice_grad_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint16_t*>(dy), static_cast<uint16_t*>(out), p, count, start, step);
    case 4:
      return slice_grad_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint32_t*>(dy), static_cast<uint32_t*>(out), p, count, start, step);
    case 8:
      return slice_grad_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint64_t*>(dy), static_cast<uint64_t*>(out), p, count, start, step);
    default:
      throw Error("slice_grad: elements of " + std::to_string(elem_bytes) + " bytes");
  }
}

void index_select(const void* table, const void* ids, uint8_t id_dtype, void* out, int elem_bytes, int64_t V,
                  int64_t R, int64_t n, ErrorReport* report, cudaStream_t stream) {
  const unsigned grid = grid_for(n * R);
  switch (elem_bytes) {
    case 1:
      return index_select_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint8_t*>(table), ids, id_dtype, static_cast<uint8_t*>(out), V, R, n, report);
    case 2:
      return index_select_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint16_t*>(table), ids, id_dtype, static_cast<uint16_t*>(out), V, R, n, report);
    case 4:
      return index_select_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint32_t*>(table), ids, id_dtype, static_cast<uint32_t*>(out), V, R, n, report);
    case 8:
      return index_select_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(
          static_cast<const uint64_t*>(table), ids, id_dtype, static_cast<uint64_t*>(out), V, R, n, report);
    default:
      throw Error("index_select: elements of " + std::to_string(elem_bytes) + " bytes");
  }
}

namespace {
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
}  // namespace

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

void softmax(const float* x, const float* mask, float* y, Split p, bool log_form, cudaStream_t stream) {
  softmax_kernel<<<grid_rows(p.outer * p.inner), kThreads, 0, stream>>>(x, mask, y, p, log_form);
}

void softmax_grad(const float* y, const float* dy, float* dx, Split p, bool log_form, cudaStream_t stream) {
  softmax_grad_kernel<<<grid_rows(p.outer * p.inner), kThreads, 0, stream>>>(y, dy, dx, p, log_form);
}

void normalize(const float* x, float* y, int64_t N, int64_t C, double eps, cudaStream_t stream) {
  normalize_kernel<<<grid_rows(N), kThreads, 0, stream>>>(x, y, N, C, eps);
}

void normalize_grad(const float* x, const float* dy, float* dx, int64_t N, int64_t C, double eps, cudaStream_t stream) {
  normalize_grad_kernel<<<grid_rows(N), kThreads, 0, stream>>>(x, dy, dx, N, C, eps);
}

void rope(const void* x, uint8_t x_dtype, const float* cos, const float* sin, float* y, int64_t rows, int64_t D,
          int64_t T, int64_t batch_rows, bool transpose, cudaStream_t stream) {
  const int64_t n = rows * D;
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, x_dtype, cos, sin, y, n, D, T, batch_rows, transpose);
}

void cross_entropy(const float* x, const void* labels, uint8_t label_dtype, float* loss, int64_t N, int64_t C,
                   int64_t ignore, double smoothing, double* scratch, ErrorReport* report, cudaStream_t stream) {
  cross_entropy_rows_kernel<<<grid_rows(N), kThreads, 0, stream>>>(x, labels, label_dtype, N, C, ignore, smoothing,
                                                                   scratch, report);
  cross_entropy_mean_kernel<<<1, kThreads, 0, stream>>>(labels, label_dtype, N, ignore, scratch, loss);
}

void cross_entropy_grad(const float* x, const void* labels, uint8_t label_dtype, const float* dloss, float* dx,
                        int64_t N, int64_t C, int64_t ignore, double smoothing, double* scratch, ErrorReport* report,
                        cudaStream_t stream) {
  count_labels_kernel<<<1, kThreads, 0, stream>>>(labels, label_dtype, N, ignore, scratch);
  cross_entropy_grad_kernel<<<grid_rows(N), kThreads, 0, stream>>>(x, labels, label_dtype, dloss, dx, N, C, ignore,
                                                                   smoothing, scratch, report);
}

}  // namespace kiln::backend::cuda::kernels
