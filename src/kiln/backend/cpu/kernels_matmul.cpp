// Matrix products: oneDNN's sgemm (and bf16 matmul primitive), our own
// loops for matrix-vector shapes.
#include <oneapi/dnnl/dnnl.h>
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

namespace {

// An element of B as f32: f32 as stored, bf16 widened (exact).
inline float element(const float* p, int64_t i) { return p[i]; }
inline float element(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }

// Sixteen lanes of f32 from p into v: as stored, or bf16 widened (exact).
// (Through a reference: a 64-byte vector passed by value changes the ABI
// where the build has no AVX-512, and GCC warns.)
using Lanes = float __attribute__((vector_size(64)));
inline void load_lanes(const float* p, Lanes& v) { std::memcpy(&v, p, sizeof v); }
inline void load_lanes(const uint16_t* p, Lanes& v) {
  using Half = uint16_t __attribute__((vector_size(32)));
  using Wide = uint32_t __attribute__((vector_size(64)));
  Half h;
  std::memcpy(&h, p, sizeof h);
  const Wide w = __builtin_convertvector(h, Wide) << 16;
  std::memcpy(&v, &w, sizeof v);
}

// A group of 32 columns of a row of B as two lanes of f32. f32: in column
// order. bf16: one 64-byte load widened (exact) as its even columns (each
// 32-bit word's low half shifted up) and its odd ones (the high half
// masked): two lane-wise operations where widening in column order takes a
// shuffle per 16 columns. Sums of such groups stay in this pair order
// (to_pair_order) until a row range's products are done.
constexpr int64_t kGroup = 32;
inline void load_group(const float* p, Lanes& x0, Lanes& x1) {
  load_lanes(p, x0);
  load_lanes(p + 16, x1);
}
inline void load_group(const uint16_t* p, Lanes& x0, Lanes& x1) {
  using Wide = uint32_t __attribute__((vector_size(64)));
  Wide w;
  std::memcpy(&w, p, sizeof w);
  const Wide even = w << 16, odd = w & 0xffff0000u;
  std::memcpy(&x0, &even, sizeof x0);
  std::memcpy(&x1, &odd, sizeof x1);
}

// The whole groups of 32 columns of c[0, N) between column order and the
// order load_group gives B's elements in (bf16: the even columns, then the
// odd ones; f32: column order, nothing to do).
template <class T>
void to_pair_order(float* c, int64_t N) {
  if constexpr (sizeof(T) == 2)
    for (int64_t n = 0; n + kGroup <= N; n += kGroup) {
      float t[kGroup];
      for (int l = 0; l < 16; ++l) t[l] = c[n + 2 * l], t[16 + l] = c[n + 2 * l + 1];
      std::memcpy(c + n, t, sizeof t);
    }
}
template <class T>
void to_column_order(float* c, int64_t N) {
  if constexpr (sizeof(T) == 2)
    for (int64_t n = 0; n + kGroup <= N; n += kGroup) {
      float t[kGroup];
      for (int l = 0; l < 16; ++l) t[2 * l] = c[n + l], t[2 * l + 1] = c[n + 16 + l];
      std::memcpy(c + n, t, sizeof t);
    }
}

// c[0, 32) += ak · (the group of a row of B at p), c in pair order.
template <class T>
inline void add_scaled_group(const Lanes& ak, const T* p, float* c) {
  Lanes x0, x1, c0, c1;
  load_group(p, x0, x1);
  load_lanes(c, c0);
  load_lanes(c + 16, c1);
  c0 += ak * x0;
  c1 += ak * x1;
  std::memcpy(c, &c0, sizeof c0);
  std::memcpy(c + 16, &c1, sizeof c1);
}

// c[n] += Σ_{k0 <= k < k1} a[k] · b[k·ldb + n] for n in [0, N), k in order,
// one row of b a pass, c's whole groups of 32 columns in pair order, the
// rest in column order. c stays in L1 and b is one memory stream: several
// rows a pass (c's columns kept in registers across them) read b as several
// streams ldb apart, slower from memory on this project's AMD EPYC guest
// (and aliasing in the cache where ldb is a multiple of 4 KB, as GPT-2's
// 3072-wide rows are). The loop is bound by storing c back, two 64-byte
// stores per group; four groups an iteration (docs/performance.md).
template <class T>
void add_scaled_rows(const float* a, const T* b, int64_t ldb, int64_t k0, int64_t k1, int64_t N, float* c) {
  for (int64_t k = k0; k < k1; ++k) {
    const T* bk = b + k * ldb;
    const Lanes ak = Lanes{} + a[k];
    int64_t n = 0;
    for (; n + 4 * kGroup <= N; n += 4 * kGroup) {
#pragma GCC unroll 4
      for (int64_t g = 0; g < 4; ++g) add_scaled_group(ak, bk + n + g * kGroup, c + n + g * kGroup);
    }
    for (; n + kGroup <= N; n += kGroup) add_scaled_group(ak, bk + n, c + n);
    for (; n < N; ++n) c[n] += a[k] * element(bk, n);
  }
}

// Σ_k a[k] · r[k] over the row's whole 16s: four 16-lane sums over the
// row, added in a fixed order.
// (Four named sums: as an array, GCC at -O2 keeps them in memory.)
template <class T>
[[gnu::always_inline]] inline Lanes lane_sums(const float* a, const T* r, int64_t K) {
  Lanes s0 = {}, s1 = {}, s2 = {}, s3 = {};
  auto term = [&](int64_t at) {
    Lanes x, y;
    load_lanes(a + at, x);
    load_lanes(r + at, y);
    return x * y;
  };
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    s0 += term(k);
    s1 += term(k + 16);
    s2 += term(k + 32);
    s3 += term(k + 48);
  }
  for (; k + 16 <= K; k += 16) s0 += term(k);
  return (s0 + s1) + (s2 + s3);
}

// A row's 16 lane sums added as a tree: lane l + lane l + 8, then l + 4,
// l + 2 and l + 1 of those (fold16 below adds 16 rows' lanes the same way).
inline float fold(const Lanes& s) {
  float h[8];
  for (int l = 0; l < 8; ++l) h[l] = s[l] + s[l + 8];
  for (int l = 0; l < 4; ++l) h[l] += h[l + 4];
  for (int l = 0; l < 2; ++l) h[l] += h[l + 2];
  return h[0] + h[1];
}

// fold() of 16 rows' lane sums s[0, 16) at once, lane r of the result row
// r's: each step adds two halves of a pair of vectors, and the pairs' lanes
// are interleaved so that the next step pairs them again. The same
// additions in the same order as fold(), a row's 16-add chain of dependent
// adds (most of a short row's time) replaced by 15 vector adds for 16 rows.
inline Lanes fold16(const Lanes (&s)[16]) {
  Lanes z[8], w[4], v[2];
  for (int i = 0; i < 8; ++i)  // lanes 0-7: row 2i's l + (l + 8); 8-15: row 2i + 1's
    z[i] = __builtin_shufflevector(s[2 * i], s[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(s[2 * i], s[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; ++i)  // four lanes a row, rows 4i..4i + 3
    w[i] = __builtin_shufflevector(z[2 * i], z[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(z[2 * i], z[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; ++i)  // two lanes a row, rows 8i..8i + 7
    v[i] = __builtin_shufflevector(w[2 * i], w[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           __builtin_shufflevector(w[2 * i], w[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return __builtin_shufflevector(v[0], v[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(v[0], v[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// t plus the row's last K mod 16 products, in order (one function for dot
// and dot16, so that both contract them into the same instructions).
template <class T>
float add_tail(float t, const float* a, const T* r, int64_t K) {
  for (int64_t k = K / 16 * 16; k < K; ++k) t += a[k] * element(r, k);
  return t;
}

// Σ_k a[k] · r[k]: the lane sums folded, then the last K mod 16 products.
// One row streams at a time: eight rows interleaved (eight memory streams)
// read bf16 rows at under half the memory's rate on an AMD EPYC guest (the
// GPT-2 head's product at one row, KILN_PROFILE; docs/performance.md).
template <class T>
float dot(const float* a, const T* r, int64_t K) {
  return add_tail(fold(lane_sums(a, r, K)), a, r, K);
}

// dot() of 16 rows ldb apart into out[0, 16): the same sums in the same
// order (the same bits), each row still read whole before the next, the
// rows folded together (a decode step's attention scores, 64 elements a
// row, took ~75 cycles a row folded one by one).
template <class T>
void dot16(const float* a, const T* b, int64_t ldb, int64_t K, float* out) {
  Lanes s[16];
  for (int j = 0; j < 16; ++j) s[j] = lane_sums(a, b + j * ldb, K);
  const Lanes t = fold16(s);
  for (int j = 0; j < 16; ++j) out[j] = add_tail(t[j], a, b + j * ldb, K);
}

// c[n] = Σ_k a[k] · B(k, n) (c += with accumulate), B of f32 or bf16
// elements (exact products, f32 sums): a one-token decode step's products.
// They are bound by reading B: a dot product per output row (B transposed),
// or B's rows scaled into c one after another. The bits do not depend on the
// thread count.
template <class T>
void gemv(bool tb, int64_t N, int64_t K, const float* av, const T* b, int64_t ldb, float* c, bool accumulate) {
  if (tb) {  // B(k, n) = b[n·ldb + k]: a dot product per output, 16 rows at a time
    const int64_t blocks = (N + 15) / 16;
#pragma omp parallel for schedule(static) if (N * K > 65536)
    for (int64_t i = 0; i < blocks; ++i) {
      const int64_t n0 = 16 * i, rows = std::min<int64_t>(16, N - n0);
      float s[16];
      if (rows == 16) dot16(av, b + n0 * ldb, ldb, K, s);
      else for (int64_t j = 0; j < rows; ++j) s[j] = dot(av, b + (n0 + j) * ldb, K);
      for (int64_t j = 0; j < rows; ++j)  // (never 0 · c: c may hold NaN before it is written)
        c[n0 + j] = accumulate ? c[n0 + j] + s[j] : s[j];
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
    for (int64_t p = 0; p < kParts; ++p) {
      add_scaled_rows(av, b, ldb, K * p / kParts, K * (p + 1) / kParts, N, part + p * N);
      to_column_order<T>(part + p * N, N);
    }
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
      if (accumulate) to_pair_order<T>(c + n0, n1 - n0);
      else std::fill(c + n0, c + n1, 0.0f);
      add_scaled_rows(av, b + n0, ldb, 0, K, n1 - n0, c + n0);
      to_column_order<T>(c + n0, n1 - n0);
    }
  }
}

// Row 0 of op(a) (K elements, a of f32 or bf16) as f32.
template <class T>
std::vector<float> first_row(bool ta, int64_t K, const T* a, int64_t lda) {
  std::vector<float> av(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) av[k] = element(a, ta ? k * lda : k);
  return av;
}

// GEMM: oneDNN's sgemm (row-major), chosen by bench/gemm: at BERT-base shapes
// it led OpenBLAS 0.3.21 by ~7% per layer and BLIS by ~3%, and by 16-25% on
// the small batched attention products, run from our own OpenMP loop.
// Matrix-vector shapes (M == 1 or N == 1, as in one-token decode steps) run
// on our own loops (gemv; oneDNN's sgemm crashed on some of them: M == 1
// inside an OpenMP batch loop).
// accumulate: c += a·b (c holds the bias rows), else c = a·b.
void small_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b,
                int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (M == 1) return gemv(tb, N, K, first_row(ta, K, a, lda).data(), b, ldb, c, accumulate);
  auto A = [&](int64_t m, int64_t k) { return ta ? a[k * lda + m] : a[m * lda + k]; };
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

// f(i) for the batch's matrices i in [begin, end), false if one fails (f
// returns false; it must not throw): on the threads when `spread`, each
// product on one, else in order, each product on all of them. Not through a
// parallel construct's `if` clause: an inactive region would make every
// parallel region inside f (oneDNN's, gemv's) a nested one, which starts
// threads of its own at each call (a decode step's gemv: 2 ms a call).
template <class F>
bool for_each_matrix(int64_t begin, int64_t end, bool spread, const F& f) {
  bool ok = true;
  if (spread && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic) reduction(&& : ok)
    for (int64_t i = begin; i < end; ++i) ok = ok && f(i);
  } else {
    for (int64_t i = begin; i < end; ++i) ok = ok && f(i);
  }
  return ok;
}

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
  const bool ok = for_each_matrix(1, nb, nb >= omp_get_max_threads(), [&](int64_t i) {
    try {
      return matmul_primitive_bf16(l.a.trans, l.b.trans, M, N, K, a + l.ao[i], l.a.ld, b + l.bo[i], l.b.ld,
                                   c + i * M * N, N, nullptr, accumulate);
    } catch (const Error&) {
      return false;
    }
  });
  KILN_CHECK(ok, "matmul: oneDNN's bf16 matmul failed for a batch of ", nb, " [", M, "x", K, "]·[", K, "x", N, "]");
  return true;
}

// A product's shape and operand layouts, as its instruction gives them.
struct Shapes {
  Mat la, lb;
  std::vector<int64_t> ao, bo;  // batch offsets, in elements
  bool one_gemm;                // all batches as one [nb·M, K] x [K, N] product
  int64_t M, N, K, nb;
};

Shapes shapes_of(const Instr& ins) {
  const Operand &A = ins.inputs[0], &B = ins.inputs[1];
  const auto [ta, tb] = ir::MatMulAttrs::of(ins.attrs);
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
  return {la, lb, std::move(ao), std::move(bo), one_gemm, M, N, K, nb};
}

// One row of bf16 operands (a decode step's products): our gemv widens B's
// elements as they stream, half the bytes of f32; oneDNN's bf16 matmul
// reads them several times slower at M = 1 (docs/performance.md).
bool bf16_rows(const Instr& ins, const Shapes& p) {
  return ins.inputs[0].dtype == DType::bf16 && ins.inputs[1].dtype == DType::bf16 && p.M == 1;
}

// The f32 result of the product (of shapes p) into c.
void matmul_kernel(const Instr& ins, std::span<char* const> in, const Shapes& p, float* c) {
  const Operand &A = ins.inputs[0], &B = ins.inputs[1];
  // (Named references, not a structured binding: clang 14, which builds the
  // fuzz targets, cannot capture a binding in a lambda or an OpenMP region.)
  const Mat &la = p.la, &lb = p.lb;
  const std::vector<int64_t> &ao = p.ao, &bo = p.bo;
  const bool one_gemm = p.one_gemm;
  const int64_t M = p.M, N = p.N, K = p.K, nb = p.nb;
  const bool rows = bf16_rows(ins, p);
  if (A.dtype == DType::bf16 && !rows) {
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
  const float* b = rows ? nullptr : as_f32_operand(B, in[1], wide_b);
  // (Not inside a parallel region: a paired product runs on one thread.)
  const bool primitive = !rows && one_gemm && K > 0 && !omp_in_parallel() &&
                         prefers_matmul_primitive(la.trans, lb.trans, M * nb, N, K);
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
  if (rows) {
    // A batch (a decode step's attention: a row per head against its cache)
    // runs its rows on the threads, each gemv on one: a head's product alone
    // is often too small to share (the bits do not depend on the threads).
    const uint16_t* b16 = reinterpret_cast<const uint16_t*>(in[1]);
    for_each_matrix(0, nb, nb > 1 && nb * N * K > 65536, [&](int64_t i) {
      gemv(lb.trans, N, K, first_row(la.trans, K, a + ao[i], la.ld).data(), b16 + bo[i], lb.ld, c + i * N, bias);
      return true;
    });
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
  const bool ok = for_each_matrix(0, nb, nb >= omp_get_max_threads(), [&](int64_t i) {
    return sgemm(la.trans, lb.trans, M, N, K, a + ao[i], la.ld, b + bo[i], lb.ld, c + i * M * N, N, bias);
  });
  KILN_CHECK(ok, "matmul: oneDNN sgemm failed for a batch of ", nb, " [", M, "x", K, "]·[", K, "x", N, "]");
}

// A bf16 result (compiler/bf16_results.cpp) of bf16 operands in one product
// (a contiguous bias or none): oneDNN's bf16 matmul rounds as it stores.
// Not one row (bf16_rows: a decode step's MLP input projection, whose result
// the GELU reads in bf16), which matmul_kernel's gemv reads at the memory's
// rate, oneDNN's matmul at about half of it (GPT-2's c_fc: 0.26 against
// 0.13-0.16 ms a call on 2 threads).
bool bf16_result_in_one_product(const Instr& ins, std::span<char* const> in, const Shapes& p, uint16_t* c) {
  if (ins.inputs[0].dtype != DType::bf16 || !native_bf16_products() || bf16_rows(ins, p)) return false;
  if (!p.one_gemm || p.K == 0 || p.M == 0 || p.N == 0 || p.nb == 0) return false;
  const float* v = nullptr;
  if (ins.inputs.size() == 3) {
    const Operand& V = ins.inputs[2];
    if (!V.view.strides.empty() && V.view.strides[0] != 1) return false;
    v = in_ptr<float>(ins, in, 2);
  }
  const uint16_t* a = reinterpret_cast<const uint16_t*>(in[0]);
  const uint16_t* b = reinterpret_cast<const uint16_t*>(in[1]);
  return matmul_primitive_bf16(p.la.trans, p.lb.trans, p.M * p.nb, p.N, p.K, a + p.ao[0], p.la.ld, b + p.bo[0],
                               p.lb.ld, c, p.N, v);
}

void run_matmul(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const>) {
  const Shapes p = shapes_of(ins);
  if (ins.output.dtype != DType::bf16) return matmul_kernel(ins, in, p, out_ptr<float>(ins, out));
  uint16_t* c = out_ptr<uint16_t>(ins, out);
  if (bf16_result_in_one_product(ins, in, p, c)) return;
  // Otherwise the f32 result, rounded as bf16.h rounds (the emulated path:
  // the same values oneDNN stores).
  thread_local std::vector<float> wide;
  const int64_t n = numel(ins.output.view.shape);
  wide.resize(static_cast<size_t>(n));
  matmul_kernel(ins, in, p, wide.data());
  round_to_bf16(wide.data(), c, n);
  if (wide.capacity() > (size_t{16} << 20)) std::vector<float>().swap(wide);
}

}  // namespace

void add_matmul_kernels(KernelTable& t) {
  add_kernel(t, ir::Op::MatMul, run_matmul);
}

}  // namespace kiln::backend::cpu
