// Matrix products (backend/cpu/kernels_matmul.cpp's counterpart): cuBLAS's
// GEMMs on the call plans of encode.h (plan_gemm, plan_gemm_padding), a
// folded bias copied into the output first. Kernel table: kernels.h.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kiln/backend/cuda/cuda.h"
#include "kiln/backend/cuda/kernels.h"
#include "kiln/backend/cuda/kernels_common.cuh"
#include "kiln/backend/cuda/libraries.h"
#include "kiln/core/env.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

__global__ void fill_rows_kernel(const float* v, int64_t stride, float* out, int64_t rows, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = v[(i % n) * stride];
}

void fill_rows(const float* v, int64_t stride, float* out, int64_t rows, int64_t n, cudaStream_t stream) {
  fill_rows_kernel<<<grid_for(rows * n), kThreads, 0, stream>>>(v, stride, out, rows, n);
}

}  // namespace

}  // namespace kiln::backend::cuda::kernels

namespace kiln::backend::cuda {

using compiler::Instr;

namespace {

// KILN_CUDA_GEMM_PAD=0 turns the padded copies of plan_gemm_padding off (to measure them).
bool gemm_padding_enabled() {
  static const bool on = env_switch("KILN_CUDA_GEMM_PAD");
  return on;
}

std::atomic<bool> g_allow_tf32{false};

// C = op(A) op(B) (+ C when beta is 1: a folded bias already in C) with f32
// or bf16 operands (g.bf16), f32 sums and result: cublasGemmEx, whose f32
// products use TF32 tensor cores when --tf32 set the handle's math mode.
// pad: plan_gemm_padding(g), its copies in `scratch`.
void gemm(DeviceState& ds, const GemmPlan& g, const GemmPadding& pad, const char* a, const char* b, float* c,
          float beta, char* scratch) {
  if (const bool tf32 = g_allow_tf32.load(std::memory_order_relaxed); tf32 != ds.blas_tf32) {
    KILN_CUDA_CHECK(cublas().set_math_mode(ds.blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    ds.blas_tf32 = tf32;
  }
  const cudaDataType_t type = g.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t es = g.bf16 ? 2 : 4;
  const float one = 1.0f;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (pad.on) {
    const GemmCall& call = g.calls[0];
    cudaStream_t s = ds.stream;
    auto copy_rows = [&](void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t width, int64_t rows,
                         int64_t elem) {
      KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_ld * elem, src, src_ld * elem, width * elem, rows,
                                        cudaMemcpyDeviceToDevice, s));
    };
    // A' [M', K'] (or [K', M'] transposed), B' [K', N'] (or [N', K']), C' [M', N'], row-major, dense.
    char* pa = scratch;
    char* pb = pa + aligned256(static_cast<size_t>(pad.M * pad.K * es));
    auto* pc = reinterpret_cast<float*>(pb + aligned256(static_cast<size_t>(pad.K * pad.N * es)));
    if (pad.K != g.K) {  // the extra products must add zeros
      KILN_CUDA_CHECK(cudaMemsetAsync(pa, 0, static_cast<size_t>(pad.M * pad.K * es), s));
      KILN_CUDA_CHECK(cudaMemsetAsync(pb, 0, static_cast<size_t>(pad.K * pad.N * es), s));
    }
    const int64_t lda = g.trans_a ? pad.M : pad.K, ldb = g.trans_b ? pad.K : pad.N;
    copy_rows(pa, lda, a + call.a * es, g.lda, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, es);
    copy_rows(pb, ldb, b + call.b * es, g.ldb, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, es);
    if (beta != 0.0f) copy_rows(pc, pad.N, c + call.c, g.N, g.N, g.M, 4);
    KILN_CUDA_CHECK(cublas().gemm_ex(ds.blas, op_b, op_a, pad.N, pad.M, pad.K, &one, pb, type, ldb, pa, type, lda,
                                     &beta, pc, CUDA_R_32F, pad.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    copy_rows(c + call.c, g.N, pc, pad.N, g.N, g.M, 4);
    return;
  }
  for (const GemmCall& call : g.calls) {
    if (call.batch == 1) {
      KILN_CUDA_CHECK(cublas().gemm_ex(ds.blas, op_b, op_a, g.N, g.M, g.K, &one, b + call.b * es, type, g.ldb,
                                       a + call.a * es, type, g.lda, &beta, c + call.c, CUDA_R_32F, g.N,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      KILN_CUDA_CHECK(cublas().gemm_strided_batched_ex(ds.blas, op_b, op_a, g.N, g.M, g.K, &one, b + call.b * es,
                                                       type, g.ldb, call.stride_b, a + call.a * es, type, g.lda,
                                                       call.stride_a, &beta, c + call.c, CUDA_R_32F, g.N, g.M * g.N,
                                                       call.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

void prepare_matmul(const Instr& ins, const DeviceState& ds, KernelStep& st) {
  st.gemm = plan_gemm(ins);
  if (st.gemm.bf16) require_bf16_tensor_cores(ds, "--bf16: bf16 products need a GPU of");
  if (gemm_padding_enabled()) st.padding = plan_gemm_padding(st.gemm);
  st.scratch_bytes = st.padding.bytes;
}

void run_matmul(const KernelCall& k) {
  const GemmPlan& g = k.st.gemm;
  // A folded bias (compiler/simplify.cpp): the output starts as its rows.
  const bool bias = k.ins.inputs.size() == 3;
  if (bias) {
    const int64_t n = k.shape().back();
    const auto& bv = k.ins.inputs[2].view;
    kernels::fill_rows(k.f(2), bv.strides.empty() ? 1 : bv.strides[0], k.fo(), n ? g.c_elems / n : 0, n, k.stream());
  }
  if (g.calls.empty()) {
    if (!bias) KILN_CUDA_CHECK(cudaMemsetAsync(k.o(), 0, g.c_elems * sizeof(float), k.stream()));
    return;
  }
  return gemm(k.ds, g, k.st.padding, k.in[0], k.in[1], reinterpret_cast<float*>(k.out), bias ? 1.0f : 0.0f,
              static_cast<char*>(k.scratch()));
}

}  // namespace

void set_allow_tf32(bool on) { g_allow_tf32.store(on, std::memory_order_relaxed); }

void add_matmul_kernels(KernelTable& t) { add_kernel(t, ir::Op::MatMul, {.run = run_matmul, .prepare = prepare_matmul}); }

}  // namespace kiln::backend::cuda
