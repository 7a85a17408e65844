// Non-elementwise kernels: reductions, indexing, GEMM, and the composites
// (softmax, normalisation, cross-entropy) with their backward passes.
// Shapes in comments: N rows, C classes / features; "row" = one slice along
// the reduced axis. Inputs are contiguous except GEMM operands (views).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/vecmath.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"

namespace kiln::backend::cpu {

using compiler::Instr;
using compiler::Operand;
using ir::Op;

namespace {

template <typename T>
const T* in_ptr(const Instr& ins, std::span<char* const> in, size_t k) {
  return reinterpret_cast<const T*>(in[k]) + ins.inputs[k].view.offset;
}
template <typename T>
T* out_ptr(const Instr& ins, char* out) {
  return reinterpret_cast<T*>(out) + ins.output.view.offset;
}

int64_t read_index(const Operand& op, const char* base, int64_t i) {
  if (op.dtype == DType::i64) return reinterpret_cast<const int64_t*>(base)[op.view.offset + i];
  return reinterpret_cast<const int32_t*>(base)[op.view.offset + i];
}


template <typename T>
void reduce_kernel(const Instr& ins, const T* x, T* y) {
  const Shape& s = ins.inputs[0].view.shape;
  AxisSplit p = split_axes(s, ins.attrs.ints.front(), ins.attrs.ints.back());
  bool is_max = ins.op == Op::ReduceMax;
  // x (outer, axis, inner) -> y (outer, inner); rows of inner values ld
  // apart (a strided view: outer is 1, CompileOptions::strided_row_sums)
  const compiler::View& v = ins.inputs[0].view;
  const int64_t ld = v.is_contiguous() ? p.inner
                                       : compiler::summed_row_stride(v, ins.attrs.ints.front(), ins.attrs.ints.back());
  KILN_ASSERT(ld == p.inner || (ld > 0 && p.outer == 1));
  if (!is_max && p.inner >= 16 && p.axis >= 128) {
    // Sums down the rows of a wide matrix (bias gradients: [B*T, C] -> [C]):
    // each block of kRows rows is summed row by row into a vector of partial
    // sums (contiguous, vectorised), then the blocks are added in block order
    // — the same order on any number of threads.
    constexpr int64_t kRows = 64;
    const int64_t blocks = (p.axis + kRows - 1) / kRows;
    std::vector<double> partial(static_cast<size_t>(blocks * p.inner));
    for (int64_t o = 0; o < p.outer; ++o) {
      const T* xo = x + o * p.axis * p.inner;
#pragma omp parallel for if (p.axis * p.inner > 32768)
      for (int64_t b = 0; b < blocks; ++b) {
        double* acc = partial.data() + b * p.inner;
        std::fill(acc, acc + p.inner, 0.0);
        for (int64_t a = b * kRows; a < std::min(p.axis, (b + 1) * kRows); ++a) {
          const T* row = xo + a * ld;
#pragma omp simd
          for (int64_t i = 0; i < p.inner; ++i) acc[i] += static_cast<double>(row[i]);
        }
      }
#pragma omp parallel for if (blocks * p.inner > 32768)
      for (int64_t i = 0; i < p.inner; ++i) {
        double acc = 0;
        for (int64_t b = 0; b < blocks; ++b) acc += partial[b * p.inner + i];
        y[o * p.inner + i] = static_cast<T>(acc);
      }
    }
    return;
  }
  if (!is_max && p.inner == 1 && p.axis >= 8192) {
    // Long contiguous rows (a gradient's sum of squares for clipping): fixed
    // blocks summed in vectorised double, then the blocks in order — the same
    // result on any number of threads.
    const int64_t blocks = (p.axis + kSumBlock - 1) / kSumBlock;
    std::vector<double> partial(static_cast<size_t>(p.outer * blocks));
#pragma omp parallel for collapse(2) if (p.outer * p.axis > 32768)
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t b = 0; b < blocks; ++b) {
        const T* row = x + o * p.axis;
        double acc = 0;
        const int64_t end = std::min(p.axis, (b + 1) * kSumBlock);
#pragma omp simd reduction(+ : acc)
        for (int64_t a = b * kSumBlock; a < end; ++a) acc += static_cast<double>(row[a]);
        partial[o * blocks + b] = acc;
      }
    for (int64_t o = 0; o < p.outer; ++o) {
      double acc = 0;
      for (int64_t b = 0; b < blocks; ++b) acc += partial[o * blocks + b];
      y[o] = static_cast<T>(acc);
    }
    return;
  }
#pragma omp parallel for collapse(2) if (p.outer * p.inner * p.axis > 32768)
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      const T* row = x + o * p.axis * ld + i;
      if (is_max) {
        T m = row[0];
        for (int64_t a = 1; a < p.axis; ++a) m = std::max(m, row[a * ld]);
        y[o * p.inner + i] = m;
      } else {
        double acc = 0;
        for (int64_t a = 0; a < p.axis; ++a) acc += static_cast<double>(row[a * ld]);
        y[o * p.inner + i] = static_cast<T>(acc);
      }
    }
}

template <typename T>
void argmax_kernel(const Instr& ins, const T* x, int64_t* y) {
  const Shape& s = ins.inputs[0].view.shape;
  int64_t ax = ins.attrs.ints[0];
  AxisSplit p = split_axes(s, ax, ax);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      const T* row = x + o * p.axis * p.inner + i;
      int64_t best = 0;
      for (int64_t a = 1; a < p.axis; ++a)
        if (row[a * p.inner] > row[best * p.inner]) best = a;
      y[o * p.inner + i] = best;
    }
}

// c[n] += Σ_{k0 <= k < k1} a[k] · b[k·ldb + n] for n in [n0, n1), k in
// order. Eight rows a pass: c is loaded and stored once for eight of them
// (the same adds in the same order as one row a pass), and eight streams
// from memory are in flight.
void add_scaled_rows(const float* a, const float* b, int64_t ldb, int64_t k0, int64_t k1, int64_t n0, int64_t n1,
                     float* c) {
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    const float* bk[8];
    float ak[8];
    for (int j = 0; j < 8; ++j) {
      bk[j] = b + (k + j) * ldb;
      ak[j] = a[k + j];
    }
#pragma omp simd
    for (int64_t n = n0; n < n1; ++n) {
      float v = c[n];
      v += ak[0] * bk[0][n];
      v += ak[1] * bk[1][n];
      v += ak[2] * bk[2][n];
      v += ak[3] * bk[3][n];
      v += ak[4] * bk[4][n];
      v += ak[5] * bk[5][n];
      v += ak[6] * bk[6][n];
      v += ak[7] * bk[7][n];
      c[n] = v;
    }
  }
  for (; k < k1; ++k) {
    const float* bk = b + k * ldb;
    const float ak = a[k];
#pragma omp simd
    for (int64_t n = n0; n < n1; ++n) c[n] += ak * bk[n];
  }
}

// GEMM: oneDNN's sgemm (row-major), chosen by bench/gemm: at BERT-base shapes
// it led OpenBLAS 0.3.21 by ~7% per layer and BLIS by ~3%, and by 16-25% on
// the small batched attention products, run from our own OpenMP loop.
// Matrix-vector shapes (M == 1 or N == 1, as in one-token decode steps) run
// on our own loops: oneDNN's sgemm crashed on some of them (M == 1 inside an
// OpenMP batch loop). They are bound by reading B, so M == 1 takes eight of
// B's rows a pass (eight dot products, or eight rows scaled into c), and the
// dot products prefetch the group after next: GPT-2's decode products ran
// at 11-22 GB/s one row a pass; 37-53 GB/s now.
// accumulate: c += a·b (c holds the bias rows), else c = a·b.
void small_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  auto A = [&](int64_t m, int64_t k) { return ta ? a[k * lda + m] : a[m * lda + k]; };
  if (M == 1) {  // c[n] = Σ_k a[k] · B(k, n)
    std::vector<float> av(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) av[k] = A(0, k);
    if (tb) {  // B(k, n) = b[n·ldb + k]: a dot product per output, eight outputs at a time
      const int64_t groups = N / 8;
#pragma omp parallel for if (N * K > 65536)
      for (int64_t q = 0; q < groups; ++q) {
        const int64_t n = q * 8;
        const float* br[8];
        for (int j = 0; j < 8; ++j) br[j] = b + (n + j) * ldb;
        if (n + 24 <= N) {  // the group after next, into the cache (GPT-2's LM head; docs/performance.md)
          const char* ahead = reinterpret_cast<const char*>(b + (n + 16) * ldb);
          for (int64_t o = 0; o < 8 * ldb * static_cast<int64_t>(sizeof(float)); o += 64) __builtin_prefetch(ahead + o);
        }
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
        for (int64_t k = 0; k < K; ++k) {
          s0 += av[k] * br[0][k];
          s1 += av[k] * br[1][k];
          s2 += av[k] * br[2][k];
          s3 += av[k] * br[3][k];
          s4 += av[k] * br[4][k];
          s5 += av[k] * br[5][k];
          s6 += av[k] * br[6][k];
          s7 += av[k] * br[7][k];
        }
        const float sums[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
        for (int j = 0; j < 8; ++j) c[n + j] = accumulate ? c[n + j] + sums[j] : sums[j];
      }
      for (int64_t n = groups * 8; n < N; ++n) {  // the last N % 8 outputs
        const float* bn = b + n * ldb;
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; ++k) acc += av[k] * bn[k];
        c[n] = accumulate ? c[n] + acc : acc;  // (never 0 · c: c may hold NaN before it is written)
      }
    } else if (N <= 4096 && N * K > 65536) {  // B(k, n) = b[k·ldb + n], short rows: B's rows in parts
      // A decode step's projections: each of eight fixed parts of B's rows is
      // summed into its own vector (in L1) by whichever thread takes it, and
      // the parts are then added in order, so whole rows stream from memory
      // and the bits do not depend on the threads (GPT-2's MLP c_proj: 23-31
      // GB/s with column ranges per thread, 41-53 in parts).
      constexpr int64_t kParts = 8;
      thread_local std::vector<float> scratch;  // (a fresh 128 KB block each call would be mapped afresh)
      scratch.assign(static_cast<size_t>(kParts * N), 0.0f);
      float* part = scratch.data();  // (the OpenMP threads see their own thread_local)
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < kParts; ++p)
        add_scaled_rows(av.data(), b, ldb, K * p / kParts, K * (p + 1) / kParts, 0, N, part + p * N);
      for (int64_t n = 0; n < N; ++n) c[n] = accumulate ? c[n] + part[n] : part[n];
      for (int64_t p = 1; p < kParts; ++p) {
        const float* pp = part + p * N;
#pragma omp simd
        for (int64_t n = 0; n < N; ++n) c[n] += pp[n];
      }
    } else {  // B(k, n) = b[k·ldb + n]: rows of B scaled and summed, threads own column ranges
#pragma omp parallel if (N * K > 65536)
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t n0 = N * t / nt, n1 = N * (t + 1) / nt;
        if (!accumulate) std::fill(c + n0, c + n1, 0.0f);
        add_scaled_rows(av.data(), b, ldb, 0, K, n0, n1, c);
      }
    }
    return;
  }
  auto B = [&](int64_t k, int64_t n) { return tb ? b[n * ldb + k] : b[k * ldb + n]; };
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += A(m, k) * B(k, n);
      c[m * ldc + n] = accumulate ? c[m * ldc + n] + acc : acc;
    }
}

}  // namespace

bool sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (M == 0 || N == 0) return true;  // an empty result (oneDNN refuses the call)
  if (M == 1 || N == 1) {
    small_gemm(ta, tb, M, N, K, a, lda, b, ldb, c, ldc, accumulate);
    return true;
  }
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c,
                    ldc) == dnnl_success;
}

namespace {

// GEMM operand: a stored matrix (rows, cols) with strides, seen as row-major
// with a transpose flag and leading dimension.
struct Mat {
  bool trans;
  int64_t ld;
};
Mat gemm_layout(const compiler::View& v, bool logical_trans) {
  size_t r = v.shape.size();
  int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
  int64_t sr = v.strides[r - 2], sc = v.strides[r - 1];
  bool row_major = (sc == 1 || cols == 1) && (sr >= cols || rows == 1) && sr > 0;
  if (row_major) return {logical_trans, rows == 1 ? std::max<int64_t>(cols, 1) : sr};
  return {!logical_trans, cols == 1 ? std::max<int64_t>(rows, 1) : sc};
}

// Batch offsets (in elements) of a view for every output batch index.
std::vector<int64_t> batch_offsets(const compiler::View& v, const Shape& out_batch) {
  int64_t nb = numel(out_batch);
  std::vector<int64_t> offs(nb, v.offset);
  int64_t vr = static_cast<int64_t>(v.shape.size()) - 2, br = static_cast<int64_t>(out_batch.size());
  for (int64_t b = 0; b < nb; ++b) {
    int64_t rem = b, off = v.offset;
    for (int64_t d = br - 1; d >= 0; --d) {
      int64_t idx = rem % out_batch[d];
      rem /= out_batch[d];
      int64_t vd = d - (br - vr);
      if (vd >= 0 && v.shape[vd] != 1) off += idx * v.strides[vd];
    }
    offs[b] = off;
  }
  return offs;
}

}  // namespace

// The slot of a GEMM operand as f32: as stored, or (bf16) the elements the
// view spans converted into `wide`, at the same offsets.
const float* as_f32_operand(const Operand& op, const char* base, std::vector<float>& wide) {
  if (op.dtype == DType::f32) return reinterpret_cast<const float*>(base);
  KILN_CHECK(op.dtype == DType::bf16, "matmul: expected f32 or bf16 operands, got ", dtype_name(op.dtype));
  const auto& v = op.view;
  int64_t end = v.offset + 1;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) return reinterpret_cast<const float*>(base);  // nothing is read
    end += (v.shape[d] - 1) * v.strides[d];
  }
  wide.resize(static_cast<size_t>(end));
  const uint16_t* src = reinterpret_cast<const uint16_t*>(base);
  float* dst = wide.data();
#pragma omp parallel for schedule(static) if (end - v.offset > 65536)
  for (int64_t i = v.offset; i < end; ++i) dst[i] = bf16_to_float(src[i]);
  return dst;
}

namespace {

// A product's operands as matmul_kernel lays them out.
struct Layout {
  Mat a, b;
  const std::vector<int64_t>&ao, &bo;  // batch offsets, in elements
  bool one_gemm;                        // all batches as one [nb·M, K] x [K, N] product
  int64_t M, N, K;
};

// bf16 operands on a CPU with bf16 dot products: oneDNN's bf16 matmul,
// f32 sums and result, the bias (f32) added by the primitive or, strided,
// put in c first and summed onto. False (nothing written that the f32 path
// does not write again) where oneDNN declines the layout or the shape is
// empty.
bool bf16_products(const Instr& ins, std::span<char* const> in, const Layout& l, float* c) {
  const int64_t nb = static_cast<int64_t>(l.ao.size()), M = l.M, N = l.N, K = l.K;
  if (K == 0 || M == 0 || N == 0 || nb == 0) return false;
  const uint16_t* a = reinterpret_cast<const uint16_t*>(in[0]);
  const uint16_t* b = reinterpret_cast<const uint16_t*>(in[1]);
  const bool bias = ins.inputs.size() == 3;
  const float* v = nullptr;
  if (bias) {
    const Operand& V = ins.inputs[2];
    const int64_t vs = V.view.strides.empty() ? 1 : V.view.strides[0];
    v = reinterpret_cast<const float*>(in[2]) + V.view.offset;
    if (!l.one_gemm || vs != 1) {  // every row of c starts as the bias; the products add to it
#pragma omp parallel for schedule(static) if (nb * M * N > 65536)
      for (int64_t r = 0; r < nb * M; ++r)
        for (int64_t j = 0; j < N; ++j) c[r * N + j] = v[j * vs];
      v = nullptr;
    }
  }
  const bool accumulate = bias && !v;
  if (l.one_gemm)
    return matmul_primitive_bf16(l.a.trans, l.b.trans, M * nb, N, K, a + l.ao[0], l.a.ld, b + l.bo[0], l.b.ld, c, N,
                                 v, accumulate);
  // Batched (attention's composite): the batch over threads, one product each.
  if (!matmul_primitive_bf16(l.a.trans, l.b.trans, M, N, K, a + l.ao[0], l.a.ld, b + l.bo[0], l.b.ld, c, N, nullptr,
                             accumulate))
    return false;
  // Errors are collected: nothing may throw out of a parallel region.
  bool ok = true;
#pragma omp parallel for schedule(dynamic) if (nb >= omp_get_max_threads()) reduction(&& : ok)
  for (int64_t i = 1; i < nb; ++i) {
    try {
      ok = ok && matmul_primitive_bf16(l.a.trans, l.b.trans, M, N, K, a + l.ao[i], l.a.ld, b + l.bo[i], l.b.ld,
                                       c + i * M * N, N, nullptr, accumulate);
    } catch (const Error&) {
      ok = false;
    }
  }
  KILN_CHECK(ok, "matmul: oneDNN's bf16 matmul failed for a batch of ", nb, " [", M, "x", K, "]·[", K, "x", N, "]");
  return true;
}

void matmul_kernel(const Instr& ins, std::span<char* const> in, char* out) {
  const Operand &A = ins.inputs[0], &B = ins.inputs[1];
  bool ta = ins.attrs.ints[0], tb = ins.attrs.ints[1];
  const Shape& os = ins.output.view.shape;
  size_t r = os.size();
  int64_t M = os[r - 2], N = os[r - 1];
  size_t ra = A.view.shape.size();
  int64_t K = ta ? A.view.shape[ra - 2] : A.view.shape[ra - 1];
  Shape out_batch(os.begin(), os.end() - 2);
  int64_t nb = numel(out_batch);
  Mat la = gemm_layout(A.view, ta), lb = gemm_layout(B.view, tb);
  std::vector<int64_t> ao = batch_offsets(A.view, out_batch), bo = batch_offsets(B.view, out_batch);
  // B shared by every batch and A's batches stacked row-major: one GEMM.
  bool b_shared = std::all_of(bo.begin(), bo.end(), [&](int64_t o) { return o == bo[0]; });
  bool a_stacked = !la.trans && la.ld == K;
  for (int64_t i = 1; i < nb && a_stacked; ++i) a_stacked = ao[i] == ao[0] + i * M * K;
  const bool one_gemm = nb == 1 || (b_shared && a_stacked);
  float* c = out_ptr<float>(ins, out);
  if (A.dtype == DType::bf16) {
    if (native_bf16_products()) {
      if (bf16_products(ins, in, {la, lb, ao, bo, one_gemm, M, N, K}, c)) return;
    } else {
      note_emulated_bf16();
    }
  }
  // bf16 operands without bf16 products (or a layout oneDNN's bf16 matmul
  // declines): each is widened to f32 first (exact), which gives a bf16
  // GEMM's result: exact products, sums in f32. The buffers are kept for the
  // next product, unless large (an LM head's [tokens, vocabulary] gradient).
  thread_local std::vector<float> wide_a, wide_b;
  struct Release {
    ~Release() {
      for (auto* w : {&wide_a, &wide_b})
        if (w->capacity() > (size_t{16} << 20)) std::vector<float>().swap(*w);
    }
  } release;
  const float* a = as_f32_operand(A, in[0], wide_a);
  const float* b = as_f32_operand(B, in[1], wide_b);
  // (Not inside a parallel region: a paired product runs on one thread.)
  const bool primitive =
      one_gemm && K > 0 && !omp_in_parallel() && prefers_matmul_primitive(la.trans, lb.trans, M * nb, N, K);
  // A bias (compiler/simplify.cpp folds `product + bias` into the product):
  // the matmul primitive adds a contiguous one itself; otherwise every row
  // of c starts as the bias and the GEMM adds to it.
  const bool bias = ins.inputs.size() == 3;
  if (bias) {
    const Operand& V = ins.inputs[2];
    const float* v = reinterpret_cast<const float*>(in[2]) + V.view.offset;
    const int64_t vs = V.view.strides.empty() ? 1 : V.view.strides[0];
    if (primitive && vs == 1 &&
        matmul_primitive(la.trans, lb.trans, M * nb, N, K, a + ao[0], la.ld, b + bo[0], lb.ld, c, N, v, false))
      return;
#pragma omp parallel for schedule(static) if (nb * M * N > 65536)
    for (int64_t r = 0; r < nb * M; ++r) {
      float* row = c + r * N;
      if (vs == 1) std::memcpy(row, v, N * sizeof(float));
      else for (int64_t j = 0; j < N; ++j) row[j] = v[j * vs];
    }
  }
  if (K == 0) {
    if (!bias) std::fill(c, c + nb * M * N, 0.0f);
    return;
  }
  if (one_gemm) {
    if (primitive &&
        matmul_primitive(la.trans, lb.trans, M * nb, N, K, a + ao[0], la.ld, b + bo[0], lb.ld, c, N, nullptr, bias))
      return;
    KILN_CHECK(sgemm(la.trans, lb.trans, M * nb, N, K, a + ao[0], la.ld, b + bo[0], lb.ld, c, N, bias),
               "matmul: oneDNN sgemm failed for M=", M * nb, " N=", N, " K=", K);
    return;
  }
  // Batched (attention): our OpenMP loop over the batch, one single-threaded
  // sgemm per matrix (faster than threading each small call, bench/gemm).
  // Errors are collected: nothing may throw out of a parallel region.
  bool ok = true;
#pragma omp parallel for schedule(dynamic) if (nb >= omp_get_max_threads()) reduction(&& : ok)
  for (int64_t i = 0; i < nb; ++i)
    ok = ok && sgemm(la.trans, lb.trans, M, N, K, a + ao[i], la.ld, b + bo[i], lb.ld, c + i * M * N, N, bias);
  KILN_CHECK(ok, "matmul: oneDNN sgemm failed for a batch of ", nb, " [", M, "x", K, "]·[", K, "x", N, "]");
}

// Rows along `axis` of a contiguous tensor: row r starts at base(r), stride inner.
struct Rows {
  AxisSplit p;
  int64_t count() const { return p.outer * p.inner; }
  int64_t base(int64_t r) const { return (r / p.inner) * p.axis * p.inner + r % p.inner; }
  int64_t step() const { return p.inner; }
  int64_t len() const { return p.axis; }
};
Rows rows_of(const Shape& s, int64_t axis) { return Rows{split_axes(s, axis, axis)}; }

}  // namespace

// Contiguous rows: the largest value, and e = exp(x - m) with its sum — the
// exponentials 16 lanes at a time through vec::exp16 on AVX-512 (the rest,
// and every value without it, through vec::exp), each block of 512 summed
// in float and the blocks in double (a row of 50k logits loses nothing
// visible).
// NaNs are skipped, as std::max(m, x) skips them (GCC leaves that loop
// scalar, so the lanes are spelled out: maxps returns its second operand
// when the first is NaN).
float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t k = 0;
#ifdef __AVX2__
  if (n >= 16) {
    __m256 a = _mm256_set1_ps(m), b = a;
    for (; k + 16 <= n; k += 16) {
      a = _mm256_max_ps(_mm256_loadu_ps(x + k), a);
      b = _mm256_max_ps(_mm256_loadu_ps(x + k + 8), b);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(a, b));
    for (float l : lanes) m = std::max(m, l);
  }
#endif
  for (; k < n; ++k) m = std::max(m, x[k]);
  return m;
}

double exp_shifted_sum(const float* x, float m, float* e, int64_t n) {
  constexpr int64_t kBlock = 512;
  double sum = 0;
  for (int64_t k0 = 0; k0 < n; k0 += kBlock) {
    const int64_t len = std::min(kBlock, n - k0);
    const float* xb = x + k0;
    float* eb = e + k0;
#ifdef __AVX512F__
    // One pass: subtract, exponentiate, store and add up, 16 lanes at a time
    // (the last len % 16 values in masked lanes).
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
      const __mmask16 lanes = len - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (len - k)) - 1);
      const __m512 v = vec::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, xb + k), mv));
      _mm512_mask_storeu_ps(eb + k, lanes, v);
      acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(lanes, v));
    }
    sum += vec::sum16(acc);
#else
    for (int64_t k = 0; k < len; ++k) eb[k] = xb[k] - m;
    vec::exp(eb, eb, len);
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t k = 0; k < len; ++k) part += eb[k];
    sum += part;
#endif
  }
  return sum;
}

namespace {

void softmax_kernel(const Instr& ins, std::span<char* const> in, char* out, bool log_form) {
  const float* x = in_ptr<float>(ins, in, 0);
  const float* mask = ins.inputs.size() > 1 ? in_ptr<float>(ins, in, 1) : nullptr;
  float* y = out_ptr<float>(ins, out);
  Rows rows = rows_of(ins.output.view.shape, ins.attrs.ints[0]);
  int64_t L = rows.len(), st = rows.step();
  // y = softmax(x + mask) along the row;  log form: y = (x + mask) - logsumexp
  if (st == 1) {
#pragma omp parallel if (rows.count() * L > 16384)
    {
      std::vector<float> e(log_form ? L : 0);
#pragma omp for
      for (int64_t r = 0; r < rows.count(); ++r) {
        const float* xr = x + r * L;
        float* yr = y + r * L;
        if (mask) {
          const float* mr = mask + r * L;
          for (int64_t k = 0; k < L; ++k) yr[k] = xr[k] + mr[k];
          xr = yr;
        }
        float m = row_max(xr, L);
        if (log_form) {
          float lse = m + static_cast<float>(std::log(exp_shifted_sum(xr, m, e.data(), L)));
          for (int64_t k = 0; k < L; ++k) yr[k] = xr[k] - lse;
        } else {
          float inv = static_cast<float>(1.0 / exp_shifted_sum(xr, m, yr, L));
          for (int64_t k = 0; k < L; ++k) yr[k] *= inv;
        }
      }
    }
    return;
  }
#pragma omp parallel for if (rows.count() * L > 16384)
  for (int64_t r = 0; r < rows.count(); ++r) {
    int64_t b = rows.base(r);
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < L; ++k) {
      float v = x[b + k * st] + (mask ? mask[b + k * st] : 0.0f);
      y[b + k * st] = v;
      m = std::max(m, v);
    }
    double sum = 0;
    for (int64_t k = 0; k < L; ++k) sum += std::exp(static_cast<double>(y[b + k * st] - m));
    if (log_form) {
      float lse = m + static_cast<float>(std::log(sum));
      for (int64_t k = 0; k < L; ++k) y[b + k * st] -= lse;
    } else {
      float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < L; ++k) y[b + k * st] = std::exp(y[b + k * st] - m) * inv;
    }
  }
}

void softmax_grad_kernel(const Instr& ins, std::span<char* const> in, char* out, bool log_form) {
  const float* y = in_ptr<float>(ins, in, 0);
  const float* dy = in_ptr<float>(ins, in, 1);
  float* dx = out_ptr<float>(ins, out);
  Rows rows = rows_of(ins.output.view.shape, ins.attrs.ints[0]);
  int64_t L = rows.len(), st = rows.step();
  // softmax:     dx = y (dy - Σ dy·y)
  // log_softmax: dx = dy - exp(y) Σ dy
#pragma omp parallel for if (rows.count() * L > 16384)
  for (int64_t r = 0; r < rows.count(); ++r) {
    int64_t b = rows.base(r);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < L; ++k) s += log_form ? dy[b + k * st] : static_cast<double>(dy[b + k * st]) * y[b + k * st];
    // dy - s cancels when the row is nearly one-hot: subtract in double.
#pragma omp simd
    for (int64_t k = 0; k < L; ++k) {
      int64_t i = b + k * st;
      double diff = static_cast<double>(dy[i]) - s;
      dx[i] = static_cast<float>(log_form ? dy[i] - std::exp(static_cast<double>(y[i])) * s : y[i] * diff);
    }
  }
}

// Mean and 1/sqrt(var + eps) of one row of C values (biased variance, in
// double). The sums are vectorised (`omp simd` may reassociate them): the
// result depends on the build, not on the thread count.
std::pair<double, double> row_stats(const float* xr, int64_t C, double eps) {
  double mean = 0, var = 0;
#pragma omp simd reduction(+ : mean)
  for (int64_t c = 0; c < C; ++c) mean += xr[c];
  mean /= C;
#pragma omp simd reduction(+ : var)
  for (int64_t c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
  var /= C;
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// x (N, C) -> y (N, C): (x - mean) / sqrt(var + eps) per row
void normalize_kernel(const Instr& ins, std::span<char* const> in, char* out) {
  const float* x = in_ptr<float>(ins, in, 0);
  float* y = out_ptr<float>(ins, out);
  const Shape& s = ins.output.view.shape;
  int64_t C = s.back(), N = numel(s) / std::max<int64_t>(C, 1);
  double eps = ins.attrs.floats[0];
#pragma omp parallel for if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    auto [mean, rstd] = row_stats(xr, C, eps);
    float fr = static_cast<float>(rstd), fm = static_cast<float>(mean);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (xr[c] - fm) * fr;
  }
}

// dx = rstd (dy - mean(dy) - x̂ mean(dy x̂)),  x̂ = (x - mean) rstd
void normalize_grad_kernel(const Instr& ins, std::span<char* const> in, char* out) {
  const float* x = in_ptr<float>(ins, in, 0);
  const float* dy = in_ptr<float>(ins, in, 1);
  float* dx = out_ptr<float>(ins, out);
  const Shape& s = ins.output.view.shape;
  int64_t C = s.back(), N = numel(s) / std::max<int64_t>(C, 1);
  double eps = ins.attrs.floats[0];
#pragma omp parallel for if (N * C > 16384)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    const float* gr = dy + n * C;
    double mean, rstd;  // not a structured binding: clang before 16 cannot name one inside the simd loops
    std::tie(mean, rstd) = row_stats(xr, C, eps);
    double mg = 0, mgx = 0;
#pragma omp simd reduction(+ : mg, mgx)
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xr[c] - mean) * rstd;
      mg += gr[c];
      mgx += gr[c] * xh;
    }
    mg /= C;
    mgx /= C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xr[c] - mean) * rstd;
      dx[n * C + c] = static_cast<float>(rstd * (gr[c] - mg - xh * mgx));
    }
  }
}

void check_labels(const Instr& ins, std::span<char* const> in, int64_t N, int64_t C, int64_t ignore) {
  for (int64_t n = 0; n < N; ++n) {
    int64_t y = read_index(ins.inputs[1], in[1], n);
    KILN_CHECK(y == ignore || (y >= 0 && y < C), "cross_entropy: label ", y, " at row ", n,
               " out of range [0, ", C, ") (ignore_index is ", ignore, ")");
  }
}

// logits (N, C), labels (N) -> mean over non-ignored rows of
// (1-ε)·(lse - x_y) + ε·(lse - mean_c x_c). The gradient:
// dx = g/count · (p_c - (1-ε)[c = y] - ε/C); ignored rows get 0. With
// `loss` (CompileOptions::loss_with_gradient) the gradient's instruction
// also writes the loss, from the same pass: the same rows, threads and sums
// as the loss alone, so the same bits. dx may be the logits' own memory
// (CompileOptions::in_place): a row is read before it is written.
void cross_entropy_kernel(const Instr& ins, std::span<char* const> in, char* out, bool grad, float* loss_out) {
  const float* x = in_ptr<float>(ins, in, 0);
  const Shape& s = ins.inputs[0].view.shape;
  int64_t N = s[0], C = s[1];
  int64_t ignore = ins.attrs.ints[0];
  double eps = ins.attrs.floats[0];
  check_labels(ins, in, N, C, ignore);
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += read_index(ins.inputs[1], in[1], n) != ignore;
  float* dx = grad ? out_ptr<float>(ins, out) : nullptr;
  float* loss = grad ? loss_out : out_ptr<float>(ins, out);
  const double scale = grad && count ? *in_ptr<float>(ins, in, 2) / static_cast<double>(count) : 0.0;
  double total = 0;
#pragma omp parallel reduction(+ : total) if (N * C > 16384)
  {
    std::vector<float> e(grad ? 0 : C);
#pragma omp for
    for (int64_t n = 0; n < N; ++n) {
      const int64_t y = read_index(ins.inputs[1], in[1], n);
      const float* xr = x + n * C;
      float* dr = grad ? dx + n * C : e.data();
      if (y == ignore) {
        if (grad) std::fill(dr, dr + C, 0.0f);
        continue;
      }
      const float m = row_max(xr, C);
      const float xy = xr[y];
      double mean = 0;
      if (loss && eps > 0)
        for (int64_t c = 0; c < C; ++c) mean += xr[c];
      const double sum = exp_shifted_sum(xr, m, dr, C);  // dr = exp(x - m); xr may be dr from here on
      if (loss) {
        const double lse = m + std::log(sum);
        total += eps > 0 ? (1 - eps) * (lse - xy) + eps * (lse - mean / C) : lse - xy;
      }
      if (!grad) continue;
      const float a = static_cast<float>(scale / sum), b = static_cast<float>(scale * eps / C);
      for (int64_t c = 0; c < C; ++c) dr[c] = a * dr[c] - b;
      dr[y] -= static_cast<float>(scale * (1 - eps));
    }
  }
  if (loss) *loss = static_cast<float>(count ? total / count : std::nan(""));
}

void copy_elems(char* dst, const char* src, int64_t n, size_t es) { std::memcpy(dst, src, n * es); }

}  // namespace

void run_kernel(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  const Shape& os = ins.output.view.shape;
  size_t es = dtype_size(ins.output.dtype);
  char* o = out + ins.output.view.offset * es;
  auto inp = [&](size_t k) { return in[k] + ins.inputs[k].view.offset * dtype_size(ins.inputs[k].dtype); };
  switch (ins.op) {
    case Op::Iota: {
      double start = ins.attrs.floats[0], step = ins.attrs.floats[1];
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
      return;
    }
    case Op::Sum:
    case Op::ReduceMax:
      if (!ins.program.empty()) return run_fused_sum(ins, in, out);
      switch (ins.output.dtype) {
        case DType::f32: return reduce_kernel(ins, reinterpret_cast<const float*>(inp(0)), reinterpret_cast<float*>(o));
        case DType::i32: return reduce_kernel(ins, reinterpret_cast<const int32_t*>(inp(0)), reinterpret_cast<int32_t*>(o));
        case DType::i64: return reduce_kernel(ins, reinterpret_cast<const int64_t*>(inp(0)), reinterpret_cast<int64_t*>(o));
        default: throw Error("reduce: unsupported dtype");
      }
    case Op::ArgMax:
      switch (ins.inputs[0].dtype) {
        case DType::f32: return argmax_kernel(ins, reinterpret_cast<const float*>(inp(0)), reinterpret_cast<int64_t*>(o));
        case DType::i32: return argmax_kernel(ins, reinterpret_cast<const int32_t*>(inp(0)), reinterpret_cast<int64_t*>(o));
        case DType::i64: return argmax_kernel(ins, reinterpret_cast<const int64_t*>(inp(0)), reinterpret_cast<int64_t*>(o));
        default: throw Error("argmax: unsupported dtype");
      }
    case Op::SliceGrad: {
      // dy (outer, count, inner) placed at start, start+step, ... of (outer, n, inner)
      int64_t d = ins.attrs.ints[0], start = ins.attrs.ints[1], step = ins.attrs.ints[3];
      AxisSplit p = split_axes(os, d, d);
      int64_t count = ins.inputs[0].view.shape[d];
      std::memset(o, 0, numel(os) * es);
      const char* src = inp(0);
      for (int64_t a = 0; a < p.outer; ++a)
        for (int64_t k = 0; k < count; ++k)
          copy_elems(o + ((a * p.axis + start + k * step) * p.inner) * es,
                     src + ((a * count + k) * p.inner) * es, p.inner, es);
      return;
    }
    case Op::Concat: {
      int64_t d = ins.attrs.ints[0];
      AxisSplit p = split_axes(os, d, d);
      int64_t off = 0;
      for (size_t k = 0; k < ins.inputs.size(); ++k) {
        int64_t len = ins.inputs[k].view.shape[d];
        const char* src = inp(k);
        for (int64_t a = 0; a < p.outer; ++a)
          copy_elems(o + ((a * p.axis + off) * p.inner) * es, src + (a * len * p.inner) * es, len * p.inner, es);
        off += len;
      }
      return;
    }
    case Op::IndexSelect: {
      // table (V, R) , ids (n) -> out (n, R)
      const Shape& ts = ins.inputs[0].view.shape;
      int64_t V = ts[0], R = numel(ts) / std::max<int64_t>(V, 1), n = numel(ins.inputs[1].view.shape);
      for (int64_t i = 0; i < n; ++i) {
        int64_t id = read_index(ins.inputs[1], in[1], i);
        KILN_CHECK(id >= 0 && id < V, "index_select: id ", id, " at position ", i, " out of range [0, ", V, ")");
      }
      const char* table = inp(0);
#pragma omp parallel for if (n * R > 32768)
      for (int64_t i = 0; i < n; ++i)
        copy_elems(o + i * R * es, table + read_index(ins.inputs[1], in[1], i) * R * es, R, es);
      return;
    }
    case Op::IndexAdd: {
      // ids (n), src (n, R) -> out (V, R), rows summed per id
      KILN_CHECK(ins.output.dtype == DType::f32, "index_add: expected f32");
      int64_t V = os[0], R = numel(os) / std::max<int64_t>(V, 1), n = numel(ins.inputs[0].view.shape);
      for (int64_t i = 0; i < n; ++i) {
        int64_t id = read_index(ins.inputs[0], in[0], i);
        KILN_CHECK(id >= 0 && id < V, "index_add: id ", id, " at position ", i, " out of range [0, ", V, ")");
      }
      float* y = reinterpret_cast<float*>(o);
      const float* src = reinterpret_cast<const float*>(inp(1));
      const int64_t padding_idx = ins.attrs.ints[0];
      // Each id's rows are summed in position order from zero, then added to
      // its row of the output: zeros, or a base (the compiler's fold of
      // Add(base, IndexAdd)), which the output may be the memory of.
      if (ins.inputs.size() == 2) std::fill(y, y + V * R, 0.0f);
      else if (y != reinterpret_cast<const float*>(inp(2))) copy_elems(o, inp(2), V * R, es);
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
      return;
    }
    case Op::Gather:
    case Op::ScatterAdd: {
      bool scatter = ins.op == Op::ScatterAdd;
      int64_t d = ins.attrs.ints[0];
      const Operand& idx_op = ins.inputs[1];
      const Shape& is = idx_op.view.shape;
      const Shape& xs = ins.inputs[0].view.shape;  // gather: x; scatter: base (== out)
      auto xst = contiguous_strides(xs);
      int64_t n = numel(is);
      KILN_CHECK(ins.output.dtype == DType::f32, ir::op_name(ins.op), ": expected f32");
      float* y = reinterpret_cast<float*>(o);
      const float* x = reinterpret_cast<const float*>(inp(0));
      if (scatter) std::memcpy(y, x, numel(xs) * es);
      const float* src = scatter ? reinterpret_cast<const float*>(inp(2)) : nullptr;
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
      return;
    }
    case Op::MatMul: return matmul_kernel(ins, in, out);
    case Op::Softmax: return softmax_kernel(ins, in, out, false);
    case Op::LogSoftmax: return softmax_kernel(ins, in, out, true);
    case Op::SoftmaxGrad: return softmax_grad_kernel(ins, in, out, false);
    case Op::LogSoftmaxGrad: return softmax_grad_kernel(ins, in, out, true);
    case Op::Normalize: return normalize_kernel(ins, in, out);
    case Op::NormalizeGrad: return normalize_grad_kernel(ins, in, out);
    case Op::CrossEntropy: return cross_entropy_kernel(ins, in, out, false, nullptr);
    case Op::CrossEntropyGrad: {
      float* loss = extra.empty() ? nullptr : reinterpret_cast<float*>(extra[0]) + ins.extra_outputs[0].out.view.offset;
      return cross_entropy_kernel(ins, in, out, true, loss);
    }
    case Op::Attention: return attention_kernel(ins, in, out, extra, false);
    case Op::AttentionGrad: return attention_kernel(ins, in, out, extra, true);
    default:
      throw Error(std::string("cpu backend: no kernel for op ") + ir::op_name(ins.op));
  }
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
  const int64_t group = ins.attrs.ints[0];
  const int replica = static_cast<int>(ins.attrs.ints[1]);
  if (ins.op == Op::AllReduce) {
    const double scale = ins.attrs.floats[0];
    return dist::submit(group, replica, [=] { dist::all_reduce_in_place(group, replica, buf, at, scale); });
  }
  KILN_ASSERT(ins.op == Op::BroadcastFrom);
  std::vector<int64_t> roots(ins.attrs.ints.begin() + 2, ins.attrs.ints.end());
  return dist::submit(group, replica, [=] { dist::broadcast_in_place(group, replica, buf, sizes, roots); });
}

}  // namespace kiln::backend::cpu
