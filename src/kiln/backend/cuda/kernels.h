#pragma once
// Launchers of the CUDA kernels (kernels.cu, fused.cu), called by the
// executor. Pointers are device pointers already advanced to the operand's
// view offset; every kernel is queued on `stream` and returns at once.
// Data errors (an id out of range) are written to `report` (first one
// wins); the executor reads it when the step ends.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kiln/backend/cuda/desc.h"

namespace kiln::backend::cuda::kernels {

struct ErrorReport {
  int32_t code = 0;  // ErrorCode; 0: none
  int32_t pad = 0;
  int64_t value = 0, position = 0, limit = 0;
};
enum ErrorCode : int32_t { kNone = 0, kIdOutOfRange = 1, kLabelOutOfRange = 2 };

// Fused elementwise program (desc in device memory, host copy for sizes);
// slots: device array of every slot's base address.
void fused(const FusedDesc* desc, const FusedDesc& host, char* const* slots, int sms, cudaStream_t stream);

void iota(void* out, uint8_t dtype, int64_t n, double start, double step, cudaStream_t stream);
// rows x n floats of out, each row the vector v (stride: its element step).
void fill_rows(const float* v, int64_t stride, float* out, int64_t rows, int64_t n, cudaStream_t stream);
// Sum or max over the axis of (outer, axis, inner); T = dtype. scratch:
// reduce_scratch_bytes(p) bytes (desc.h).
void reduce(const void* x, void* y, uint8_t dtype, Split p, bool is_max, void* scratch, cudaStream_t stream);
void argmax(const void* x, int64_t* y, uint8_t dtype, Split p, cudaStream_t stream);
// dy (outer, count, inner) placed at start, start+step, ... of zeros (outer, p.axis, inner).
void slice_grad(const void* dy, void* out, int elem_bytes, Split p, int64_t count, int64_t start, int64_t step,
                cudaStream_t stream);
// table (V, R), ids (n) -> out (n, R).
void index_select(const void* table, const void* ids, uint8_t id_dtype, void* out, int elem_bytes, int64_t V,
                  int64_t R, int64_t n, ErrorReport* report, cudaStream_t stream);
// ids (n), src (n, R) -> out (V, R), which the caller zeroed or filled with
// a base: rows summed per id in position order (deterministic, as on the
// CPU), skipping padding_idx, and each sum added to its row of out.
// scratch: index_add_scratch_bytes(V, n).
void index_add(const void* ids, uint8_t id_dtype, const float* src, float* out, int64_t V, int64_t R, int64_t n,
               int64_t padding_idx, ErrorReport* report, void* scratch, cudaStream_t stream);
size_t index_add_scratch_bytes(int64_t V, int64_t n);

struct GatherShape {
  int32_t rank = 0, dim = 0;
  int64_t index_shape[kMaxRank] = {};
  int64_t x_strides[kMaxRank] = {};  // contiguous strides of x
  int64_t x_extent = 0;              // x's extent along dim
};
void gather(const float* x, const void* index, uint8_t index_dtype, float* y, const GatherShape& g,
            ErrorReport* report, cudaStream_t stream);
// y already holds base; adds src at the indexed places, along dim in order.
void scatter_add(const void* index, uint8_t index_dtype, const float* src, float* y, const GatherShape& g,
                 ErrorReport* report, cudaStream_t stream);

// Rows along the axis of (outer, axis, inner); mask may be null.
void softmax(const float* x, const float* mask, float* y, Split p, bool log_form, cudaStream_t stream);
void softmax_grad(const float* y, const float* dy, float* dx, Split p, bool log_form, cudaStream_t stream);
// Rows of C values.
void normalize(const float* x, float* y, int64_t N, int64_t C, double eps, cudaStream_t stream);
void normalize_grad(const float* x, const float* dy, float* dx, int64_t N, int64_t C, double eps, cudaStream_t stream);
// Rotary embedding: x (rows of D, f32 or bf16: x_dtype), rows r = ((b·H + h)·T + t),
// rotated by row (b·T + t) of cos / sin when batch_rows (= H·T) is nonzero,
// row t otherwise; y f32. transpose: the gradient's rotation (ir/ops.def's Rope).
void rope(const void* x, uint8_t x_dtype, const float* cos, const float* sin, float* y, int64_t rows, int64_t D,
          int64_t T, int64_t batch_rows, bool transpose, cudaStream_t stream);
// logits (N, C), labels (N): the mean loss (scalar) / its gradient. scratch:
// N + 1 doubles.
void cross_entropy(const float* x, const void* labels, uint8_t label_dtype, float* loss, int64_t N, int64_t C,
                   int64_t ignore, double smoothing, double* scratch, ErrorReport* report, cudaStream_t stream);
void cross_entropy_grad(const float* x, const void* labels, uint8_t label_dtype, const float* dloss, float* dx,
                        int64_t N, int64_t C, int64_t ignore, double smoothing, double* scratch, ErrorReport* report,
                        cudaStream_t stream);

}  // namespace kiln::backend::cuda::kernels
