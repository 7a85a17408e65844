// The row-wise kernels (backend/cpu/kernels_rows.cpp's counterparts), one
// block per row: softmax, log-softmax, normalisation and cross-entropy,
// forward and backward, and the rotary embedding (one thread per element).
// Kernel table: kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kiln/backend/cuda/kernels.h"
#include "kiln/backend/cuda/kernels_common.cuh"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

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

}  // namespace

}  // namespace kiln::backend::cuda::kernels

namespace kiln::backend::cuda {

using compiler::Instr;
using ir::Op;

namespace {

// Softmax and LogSoftmax along an axis, with an optional additive mask.
void run_softmax(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  const float* mask = ins.inputs.size() > 1 ? k.f(1) : nullptr;
  const int64_t axis = ir::AxisAttrs::of(ins.attrs).axis;
  return kernels::softmax(k.f(0), mask, k.fo(), split_shape(os, axis, axis), ins.op == Op::LogSoftmax, k.stream());
}

// SoftmaxGrad and LogSoftmaxGrad.
void run_softmax_grad(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  const int64_t axis = ir::AxisAttrs::of(ins.attrs).axis;
  return kernels::softmax_grad(k.f(0), k.f(1), k.fo(), split_shape(os, axis, axis), ins.op == Op::LogSoftmaxGrad,
                               k.stream());
}

// Normalize and NormalizeGrad over the last dimension.
void run_normalize(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& os = k.shape();
  const int64_t C = os.empty() ? 1 : os.back(), N = numel(os) / std::max<int64_t>(C, 1);
  const float eps = ir::NormalizeAttrs::of(ins.attrs).eps;
  if (ins.op == Op::Normalize) return kernels::normalize(k.f(0), k.fo(), N, C, eps, k.stream());
  return kernels::normalize_grad(k.f(0), k.f(1), k.fo(), N, C, eps, k.stream());
}

void run_rope(const KernelCall& k) {
  const Instr& ins = k.ins;
  const Shape& xs = ins.inputs[0].view.shape;
  const bool per_batch = ins.inputs[1].view.shape[0] == xs[0] && xs[0] > 1;
  return kernels::rope(k.inp(0), code(ins.inputs[0].dtype), k.f(1), k.f(2), k.fo(), numel(xs) / xs[3], xs[3], xs[2],
                       per_batch ? xs[1] * xs[2] : 0, ir::RopeAttrs::of(ins.attrs).transpose, k.stream());
}

// CrossEntropy and CrossEntropyGrad: the loss apart from its gradient; the
// rows' losses (or the label count) in scratch.
void prepare_cross_entropy(const Instr& ins, const DeviceState&, KernelStep& st) {
  KILN_CHECK(ins.extra_outputs.empty(), "the CUDA backend computes the loss apart from its gradient "
             "(compile without CompileOptions::loss_with_gradient)");
  KILN_CHECK(ins.inputs[0].dtype == DType::f32, "the CUDA backend takes f32 logits for cross_entropy, got ",
             dtype_name(ins.inputs[0].dtype));
  st.scratch_bytes = (ins.inputs[0].view.shape[0] + 1) * sizeof(double);
}

void run_cross_entropy(const KernelCall& k) {
  const Instr& ins = k.ins;
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

std::string cross_entropy_error(const Instr& ins, const kernels::ErrorReport& r) {
  return detail::concat("cross_entropy: label ", r.value, " at row ", r.position, " out of range [0, ", r.limit,
                        ") (ignore_index is ", ir::CrossEntropyAttrs::of(ins.attrs).ignore_index, ")");
}

}  // namespace

void add_rows_kernels(KernelTable& t) {
  add_kernel(t, Op::Softmax, {.run = run_softmax});
  add_kernel(t, Op::LogSoftmax, {.run = run_softmax});
  add_kernel(t, Op::SoftmaxGrad, {.run = run_softmax_grad});
  add_kernel(t, Op::LogSoftmaxGrad, {.run = run_softmax_grad});
  add_kernel(t, Op::Normalize, {.run = run_normalize});
  add_kernel(t, Op::NormalizeGrad, {.run = run_normalize});
  add_kernel(t, Op::CrossEntropy, {.run = run_cross_entropy, .prepare = prepare_cross_entropy,
                                   .report = cross_entropy_error});
  add_kernel(t, Op::CrossEntropyGrad, {.run = run_cross_entropy, .prepare = prepare_cross_entropy,
                                       .report = cross_entropy_error});
  add_kernel(t, Op::Rope, {.run = run_rope});
}

}  // namespace kiln::backend::cuda
