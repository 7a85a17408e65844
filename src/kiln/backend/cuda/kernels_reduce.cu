// The reductions' kernels (backend/cpu/kernels_reduce.cpp's counterparts):
// Sum and ReduceMax over an axis range in a fixed order (long axes with few
// outputs split into parts fixed by the shape, desc.h's reduce_parts), and
// ArgMax. Kernel table: kernels.h.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/backend/cuda/kernels.h"
#include "kiln/backend/cuda/kernels_common.cuh"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

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

}  // namespace

}  // namespace kiln::backend::cuda::kernels

namespace kiln::backend::cuda {

using compiler::Instr;
using ir::Op;

namespace {

// (outer, axis, inner) of a Sum / ReduceMax over its axes [first, last].
Split reduce_split(const Instr& ins) {
  const auto axes = ir::ReduceAttrs::of(ins.attrs);
  return split_shape(ins.inputs[0].view.shape, axes.first(), axes.last());
}

// Sum and ReduceMax: the CUDA backend has no fused reductions; long axes
// take scratch for their parts.
void prepare_reduce(const Instr& ins, const DeviceState&, KernelStep& st) {
  KILN_CHECK(ins.program.empty(), "the CUDA backend has no fused reductions (compile without "
             "CompileOptions::fuse_sum_inputs)");
  st.scratch_bytes = static_cast<size_t>(reduce_scratch_bytes(reduce_split(ins)));
}

void run_reduce(const KernelCall& k) {
  const Instr& ins = k.ins;
  KILN_CHECK(ins.output.dtype == DType::f32 || is_integral(ins.output.dtype), "reduce: unsupported dtype ",
             dtype_name(ins.output.dtype));
  return kernels::reduce(k.inp(0), k.o(), code(ins.output.dtype), reduce_split(ins), ins.op == Op::ReduceMax,
                         k.scratch(), k.stream());
}

void run_argmax(const KernelCall& k) {
  const Instr& ins = k.ins;
  KILN_CHECK(ins.inputs[0].dtype != DType::b8, "argmax: unsupported dtype");
  const int64_t axis = ir::ReduceAttrs::of(ins.attrs).first();
  return kernels::argmax(k.inp(0), reinterpret_cast<int64_t*>(k.o()), code(ins.inputs[0].dtype),
                         split_shape(ins.inputs[0].view.shape, axis, axis), k.stream());
}

}  // namespace

void add_reduce_kernels(KernelTable& t) {
  add_kernel(t, Op::Sum, {.run = run_reduce, .prepare = prepare_reduce});
  add_kernel(t, Op::ReduceMax, {.run = run_reduce, .prepare = prepare_reduce});
  add_kernel(t, Op::ArgMax, {.run = run_argmax});
}

}  // namespace kiln::backend::cuda
