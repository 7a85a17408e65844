// The fused Attention op and its gradient on the host (ir/op.h), computed as
// the composite computes them (matmul, scale, causal where, softmax with the
// mask, dropout, matmul) but a block of query rows at a time, so the scores
// never leave the cache:
//   forward, per block of rows of one head: S = q kᵀ (sgemm), the softmax
//   rows with the kernels.cpp softmax's own steps, the dropout factors from
//   the same Philox elements dropout() draws, y = P v (sgemm);
//   backward, per head: the same P block by block (kept by the forward,
//   CompileOptions::attention_probabilities, else recomputed), then
//   dP = dy vᵀ, dv += Pᵀ dy, dS = P (dP - Σ P dP) · scale, dq = dS k,
//   dk += dSᵀ q (sgemm each), with dk and dv summed over the blocks in order
//   (the first block to reach a key sets its rows).
// Causal blocks stop at their last row's key: the keys past it have
// probability 0 (unless a row's visible keys are all masked: then the block
// takes every key, as the composite's softmax does). With a sliding window a
// block also starts at its first row's first key: the keys before it are
// never read (but for the one before an odd first key, times 0, in
// PairedProducts; a row whose window holds only masked keys spreads its
// weight over them; transformers gives NaN there). With segment ids (packed rows)
// a row sees only the keys of its own segment, one run of keys [first,
// end): a block starts at its first row's segment and (not causal) ends
// with its last row's, so the keys of other examples are never read, and a
// row's scores outside its segment are f32 min, its probabilities past the
// segment 0 (a row whose segment holds only keys masked with f32 min spreads
// its weight over the block's keys up to its own: as meaningless as the
// composite's, which spreads it over every key). Results do not depend
// on the thread count. With bf16 inputs, the dropped probabilities, the
// output gradient, the probabilities' gradient and dS are rounded to bf16
// where autocast's composite rounds them; on a CPU with bf16 products
// (native_bf16_products) the block products then read q, k, v and those
// blocks as bf16 pair words (PairedProducts: AMX's or AVX512-BF16's dot
// products, f32 sums), elsewhere their widened values (sgemm,
// WideProducts): the same exact products, summed in another order.
// q, k, v and dy may be strided views of [B, H, T, D] (a head's rows D
// floats apart or more): the heads of a [B, T, H·D] projection are read in
// place (CompileOptions::strided_attention_operands). The result may be
// token-major, and the gradient's dq, dk and dv interleaved token by token
// (CompileOptions::token_major_attention): see result_heads.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "kiln/backend/attention_args.h"
#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/kernels.h"
#include "kiln/backend/cpu/bf16_tiles.h"
#include "kiln/backend/cpu/philox.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

namespace {

using compiler::Instr;

// The instruction's geometry, with its mask and key.
struct Geometry : AttentionArgs {
  bool bf16 = false;
  bool native = false;  // bf16 q, k, v on a CPU with bf16 products: the block products run in bf16
  const float* mask = nullptr;  // [B or 1, Tk]
  const int64_t* key = nullptr;
  int64_t block = 0;  // query rows a block
  bool kept = false;  // the probabilities are kept for the gradient (CompileOptions::attention_probabilities)
  // With segment ids: token (b, t)'s segment is keys [seg_first, seg_end)[b·Tk + t].
  std::vector<int64_t> seg_first, seg_end;
  bool segmented() const { return !seg_first.empty(); }
  int64_t first_key(int64_t b, int64_t t) const { return seg_first[static_cast<size_t>(b * Tk + t)]; }
  int64_t end_key(int64_t b, int64_t t) const { return seg_end[static_cast<size_t>(b * Tk + t)]; }
};

// Each token's segment as the run of keys with its id: each id of a row
// (i32 or i64, any view of [B, Tk]) must lie in one run, as packed
// examples do.
void segment_runs(const compiler::Operand& op, const char* base, Geometry& g) {
  const compiler::View& v = op.view;
  auto id = [&](int64_t b, int64_t t) {
    const int64_t at = v.offset + b * v.strides[0] + t * v.strides[1];
    return op.dtype == DType::i32 ? static_cast<int64_t>(reinterpret_cast<const int32_t*>(base)[at])
                                  : reinterpret_cast<const int64_t*>(base)[at];
  };
  const auto n = static_cast<size_t>(g.B * g.Tk);
  g.seg_first.assign(n, 0);
  g.seg_end.assign(n, 0);
  for (int64_t b = 0; b < g.B; ++b) {
    std::unordered_set<int64_t> seen;
    int64_t start = 0;
    for (int64_t t = 1; t <= g.Tk; ++t) {
      if (t < g.Tk && id(b, t) == id(b, start)) continue;
      KILN_CHECK(seen.insert(id(b, start)).second, "attention: each segment id must lie in one run of a row ",
                 "(packed examples one after another); row ", b, " has id ", id(b, start), " again at ", start);
      for (int64_t u = start; u < t; ++u) {
        g.seg_first[static_cast<size_t>(b * g.Tk + u)] = start;
        g.seg_end[static_cast<size_t>(b * g.Tk + u)] = t;
      }
      start = t;
    }
  }
}

Geometry geometry(const Instr& ins, std::span<char* const> in) {
  Geometry g;
  static_cast<AttentionArgs&>(g) = attention_args(ins);
  g.bf16 = ins.inputs[0].dtype == DType::bf16;
  g.native = g.bf16 && ins.inputs[1].dtype == DType::bf16 && ins.inputs[2].dtype == DType::bf16 &&
             native_bf16_products();
  if (g.mask_input >= 0)
    g.mask = reinterpret_cast<const float*>(in[g.mask_input]) + ins.inputs[g.mask_input].view.offset;
  if (g.key_input >= 0) g.key = reinterpret_cast<const int64_t*>(in[g.key_input]) + ins.inputs[g.key_input].view.offset;
  // ~64 KB of scores a block: 128 rows up to 128 keys, 64 at 256, 16 from
  // 1024. Smaller causal blocks skip more keys; at [4,12,256,64] 64 and 32
  // rows measured alike and 128 10-15 % slower (its blocks reach 75 % of the
  // keys, 64's 62.5 %).
  // (An even count: PairedProducts pairs the rows of a block.)
  g.block = std::clamp<int64_t>(16384 / std::max<int64_t>(g.Tk, 1), 16, 128) / 2 * 2;
  g.kept = ir::AttentionAttrs::of(ins.attrs).kept_probs;
  if (g.segment_input >= 0 && g.B > 0) segment_runs(ins.inputs[g.segment_input], in[g.segment_input], g);
  return g;
}

// The kept probabilities (CompileOptions::attention_probabilities):
// B·H·Tq·Tk floats, then B·H·Tq int32s. Block (head bh, rows [i0, i0 +
// rows)) lies at (bh·Tq + i0)·Tk as rows × keys (its own key count, ld
// keys). Each value is the softmax probability; with dropout, a dropped
// one's sign bit is set (−|p|: the sign of a NaN row's values says too). The
// int32s are the rows' extents.
struct Kept {
  float* p = nullptr;
  int32_t* extent = nullptr;
  Kept(char* base, const compiler::Operand& op, const Geometry& g) {
    const int64_t need = g.B * g.H * g.Tq * (g.Tk + 1);
    KILN_CHECK(op.dtype == DType::f32 && op.view.is_contiguous() && numel(op.view.shape) >= need,
               "attention: kept probabilities need ", need, " contiguous f32 values, got ", numel(op.view.shape));
    p = reinterpret_cast<float*>(base) + op.view.offset;
    extent = reinterpret_cast<int32_t*>(p + g.B * g.H * g.Tq * g.Tk);
  }
};

// An operand's (a result's) heads: element (b, h, t, d) at base + b·sb + h·sh
// + t·ld + d.
template <typename T>
struct HeadsOf {
  T* base = nullptr;
  int64_t sb = 0, sh = 0, ld = 0;
  T* at(int64_t b, int64_t h, int64_t t = 0) const { return base + b * sb + h * sh + t * ld; }
  void zero_head(int64_t b, int64_t h, int64_t rows, int64_t D) const {
    for (int64_t t = 0; t < rows; ++t) std::fill(at(b, h, t), at(b, h, t) + D, 0.0f);
  }
  void zero(int64_t B, int64_t H, int64_t rows, int64_t D) const {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) zero_head(b, h, rows, D);
  }
};
using Heads = HeadsOf<const float>;
using OutHeads = HeadsOf<float>;

// The result's heads: y [B, H, Tq, D], contiguous or token-major ([B, Tq, H,
// D] in memory, CompileOptions::token_major_attention); for the gradient,
// dq, dk and dv (which = 0, 1, 2), one after the other in a flat result or
// interleaved token by token in a [3, B, H, T, D] one ([B, T, 3, H, D] in
// memory).
template <typename E = float>
HeadsOf<E> result_heads(const Instr& ins, char* out, const Geometry& g, int which = -1) {
  E* base = reinterpret_cast<E*>(out) + ins.output.view.offset;
  const compiler::View& v = ins.output.view;
  if (v.shape.size() == 4) return {base, v.strides[0], v.strides[1], v.strides[2]};
  if (v.shape.size() == 5) return {base + which * v.strides[0], v.strides[1], v.strides[2], v.strides[3]};
  const int64_t T = which == 0 ? g.Tq : g.Tk;
  const int64_t before = which == 0 ? 0 : g.B * g.H * (g.Tq + (which - 1) * g.Tk) * g.D;
  return {base + before, g.H * T * g.D, T * g.D, g.D};
}

using Bf16Heads = HeadsOf<const uint16_t>;

// The heads of a [B, H, T, D] view whose elements lie at `base`.
template <typename T>
HeadsOf<const T> heads_at(const compiler::View& v, const T* base) {
  KILN_ASSERT(v.shape.size() == 4 && (v.strides[3] == 1 || v.shape[3] == 1));
  return {base + v.offset, v.strides[0], v.strides[1], v.shape[2] == 1 ? v.shape[3] : v.strides[2]};
}

// Operand k (f32 as stored; bf16 widened exactly into `wide`).
Heads heads(const Instr& ins, std::span<char* const> in, size_t k, std::vector<float>& wide) {
  return heads_at(ins.inputs[k].view, as_f32_operand(ins.inputs[k], in[k], wide));
}

// Operand k's bf16 elements as stored (Geometry::native).
Bf16Heads bf16_heads(const Instr& ins, std::span<char* const> in, size_t k) {
  KILN_ASSERT(ins.inputs[k].dtype == DType::bf16);
  return heads_at(ins.inputs[k].view, reinterpret_cast<const uint16_t*>(in[k]));
}

struct Block {
  int64_t b, h, i0, rows, keys;  // query rows [i0, i0 + rows) of head (b, h) against keys [k0, keys)
  int64_t k0 = 0;                // (a sliding window's first key; the block's columns are keys k0..)
  int64_t cols() const { return keys - k0; }
};

Block block_of(const Geometry& g, int64_t bh, int64_t blk) {
  const int64_t b = bh / g.H, i0 = blk * g.block, rows = std::min(g.block, g.Tq - i0);
  int64_t k0 = g.window > 0 ? std::max<int64_t>(0, i0 - g.window + 1) : 0;
  int64_t keys = g.causal ? std::min(g.Tk, i0 + rows) : g.Tk;
  if (g.segmented()) {  // (segments rise along the row: the first row's starts first, the last row's ends last)
    k0 = std::max(k0, g.first_key(b, i0));
    keys = std::min(keys, g.end_key(b, i0 + rows - 1));
  }
  return {b, bh % g.H, i0, rows, keys, k0};
}

// A thread's scratch buffer `which` of T elements (n at least), kept
// between calls: blocks of 128 KB and more would otherwise be fresh mmap'd
// pages, faulted in on every call.
template <class T = float>
T* scratch(size_t which, int64_t n) {
  thread_local std::vector<T> buffers[10];
  std::vector<T>& b = buffers[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// A block's two computed operands: its dropped probabilities and dS.
enum BlockOperand { kProbs = 0, kScoreGrads = 1 };

// A head's block products, two ways (WideProducts, PairedProducts), each
// over the block's rows [i0, i0 + rows) and columns (keys) [k0, keys):
//   head(b, h)           before the head's blocks (kPacksHeads: all of them)
//                        on the thread that runs them
//   scores(x, s)         s = q kᵀ (rows × cols)
//   dprobs(x, ds)        ds = dy vᵀ (the probabilities' gradient)
//   operand(o, x, xb)    xb (rows × cols, f32) as the block's operand o for
//                        the products below: for bf16 inputs rounded to bf16
//                        first (kRoundsOperands: by operand() itself)
//   values(x, y, ldy)    y = kProbs · v
//   queries(x, dq, ld)   dq = kScoreGrads · k
//   keys(o, x, j0, j1, d, ldd, acc)  rows [j0, j1) of the block's keys:
//                        d (+)= (o's columns j0..j1)ᵀ · (dy for kProbs, q for
//                        kScoreGrads) over the block's rows
// Each returns false where its product failed.

// f32 operands for sgemm: q, k, v and dy as stored, or bf16 ones widened
// (exactly: the same products as bf16 products, summed in f32), as on a
// CPU without bf16 products.
struct WideProducts {
  static constexpr bool kRoundsOperands = false;  // (bf16 values: rounded in f32 first)
  static constexpr bool kPacksHeads = false;
  static constexpr bool kAnyRowStride = false;    // (sgemm's bits depend on its result's row stride)
  const Geometry& g;
  Heads q, k, v, dy;
  const float* ops[2] = {};

  void head(int64_t, int64_t) {}
  bool scores(const Block& x, float* s) const {
    return sgemm(false, true, x.rows, x.cols(), g.D, q.at(x.b, x.h, x.i0), q.ld, k.at(x.b, x.h, x.k0), k.ld, s,
                 x.cols(), false);
  }
  bool dprobs(const Block& x, float* ds) const {
    return sgemm(false, true, x.rows, x.cols(), g.D, dy.at(x.b, x.h, x.i0), dy.ld, v.at(x.b, x.h, x.k0), v.ld, ds,
                 x.cols(), false);
  }
  void operand(BlockOperand o, const Block&, const float* xb) { ops[o] = xb; }
  bool values(const Block& x, float* y, int64_t ldy) const {
    return sgemm(false, false, x.rows, g.D, x.cols(), ops[kProbs], x.cols(), v.at(x.b, x.h, x.k0), v.ld, y, ldy,
                 false);
  }
  bool queries(const Block& x, float* dq, int64_t ld) const {
    return sgemm(false, false, x.rows, g.D, x.cols(), ops[kScoreGrads], x.cols(), k.at(x.b, x.h, x.k0), k.ld, dq,
                 ld, false);
  }
  bool keys(BlockOperand o, const Block& x, int64_t j0, int64_t j1, float* d, int64_t ldd, bool acc) const {
    const Heads& y = o == kProbs ? dy : q;
    return sgemm(true, false, j1 - j0, g.D, x.rows, ops[o] + j0, x.cols(), y.at(x.b, x.h, x.i0), y.ld, d, ldd,
                 acc);
  }
};

// bf16 q, k, v and dy on a CPU with bf16 products: tile_product on pair
// words (bf16_tiles.h), each operand of a head packed once on the thread
// that runs the head (q and dy as A operands read in place where a head's
// rows are an even count of elements), the block's operands converted to
// bf16 as they come (rounded where autocast rounds them). The products that sum
// over keys (y = P v, dq = dS k) start at an even key, k0 rounded down: the
// key before an odd k0 adds 0 · its row of v or k (NaN only where that row
// holds an infinity or NaN, as the composite's product over every key gives).
struct PairedProducts {
  static constexpr bool kRoundsOperands = true;  // (operand() rounds f32 values to bf16)
  static constexpr bool kPacksHeads = true;      // (head() packs the head's operands)
  static constexpr bool kAnyRowStride = true;    // (a tile's sums do not depend on where it is stored)
  const Geometry& g;
  Bf16Heads q, k, v, dy;  // dy: the gradient's
  bool grad;              // the gradient's products, else the forward's
  // The head's q and dy as A operands: row t's pair p at [t·row + p·pair].
  struct AOperand {
    const uint16_t* at = nullptr;
    int64_t row = 0, pair = 0;
  } qa{}, dya{};
  // k and v as Bᵀ operands, their columns as pairs ([D/2][Tk]); k, v, q and
  // dy as B operands, their rows as pairs ([T/2][D]).
  uint32_t *kc = nullptr, *vc = nullptr, *kr = nullptr, *vr = nullptr, *qr = nullptr, *dyr = nullptr;
  // The block's operands: rows of bf16 from column k0 rounded down (an even
  // count), and (gradient) pairs of rows from column k0.
  uint16_t* rows[2] = {};
  uint32_t* pairs[2] = {};

  int64_t D2() const { return (g.D + 1) / 2; }
  void head(int64_t b, int64_t h) {
    const int64_t ck = D2() * g.Tk, rq = (g.Tq + 1) / 2 * g.D, rk = (g.Tk + 1) / 2 * g.D;
    auto cols = [&](const Bf16Heads& x, int64_t T, uint32_t* to) {
      pack_column_pairs(x.at(b, h), x.ld, T, g.D, to, T);
      return to;
    };
    auto pair = [&](const Bf16Heads& x, int64_t T, uint32_t* to) {
      pack_row_pairs(x.at(b, h), x.ld, T, g.D, to, g.D);
      return to;
    };
    auto a_operand = [&](const Bf16Heads& x, size_t which) {  // (an odd D: the rows' last pair padded with 0)
      if (g.D % 2 == 0) return AOperand{x.at(b, h), x.ld, 2};
      return AOperand{reinterpret_cast<const uint16_t*>(cols(x, g.Tq, scratch<uint32_t>(which, D2() * g.Tq))), 2,
                      2 * g.Tq};
    };
    if (!grad || !g.kept) {  // (the scores: the forward's, or the gradient's recomputed)
      qa = a_operand(q, 0);
      kc = cols(k, g.Tk, scratch<uint32_t>(1, ck));
    }
    if (!grad) {
      vr = pair(v, g.Tk, scratch<uint32_t>(2, rk));
      return;
    }
    dya = a_operand(dy, 3);
    vc = cols(v, g.Tk, scratch<uint32_t>(4, ck));
    kr = pair(k, g.Tk, scratch<uint32_t>(5, rk));
    qr = pair(q, g.Tq, scratch<uint32_t>(6, rq));
    dyr = pair(dy, g.Tq, scratch<uint32_t>(7, rq));
  }
  // s (x.rows × x.cols()) = a's rows · (the columns from k0 of c)ᵀ.
  void over_dims(const AOperand& a, const uint32_t* c, const Block& x, float* s) const {
    tile_product(x.rows, x.cols(), D2(), a.at + x.i0 * a.row, a.row, a.pair, c + x.k0, g.Tk, s, x.cols(), false);
  }
  bool scores(const Block& x, float* s) const {
    over_dims(qa, kc, x, s);
    return true;
  }
  bool dprobs(const Block& x, float* ds) const {
    over_dims(dya, vc, x, ds);
    return true;
  }
  // (Columns from k0 rounded down, as pairs: their count.)
  static int64_t lead(const Block& x) { return x.k0 % 2; }
  static int64_t width(const Block& x) { return (lead(x) + x.cols() + 1) / 2 * 2; }
  void operand(BlockOperand o, const Block& x, const float* xb) {
    const int64_t n = x.cols(), w = width(x), l = lead(x);
    uint16_t* r = rows[o] = scratch<uint16_t>(o, x.rows * w);
    for (int64_t i = 0; i < x.rows; ++i) {
      uint16_t* ri = r + i * w;
      if (l) ri[0] = 0;
      round_to_bf16(xb + i * n, ri + l, n);
      if (l + n < w) ri[w - 1] = 0;
    }
    if (grad) pack_row_pairs(r + l, w, x.rows, n, pairs[o] = scratch<uint32_t>(8 + o, (x.rows + 1) / 2 * n), n);
  }
  // c = rows[o] · (the head's rows of b as pairs, from key k0 rounded down).
  void over_keys(BlockOperand o, const Block& x, const uint32_t* b, float* c, int64_t ldc) const {
    const int64_t w = width(x);
    tile_product(x.rows, g.D, w / 2, rows[o], w, 2, b + (x.k0 - lead(x)) / 2 * g.D, g.D, c, ldc, false);
  }
  bool values(const Block& x, float* y, int64_t ldy) const {
    over_keys(kProbs, x, vr, y, ldy);
    return true;
  }
  bool queries(const Block& x, float* dq, int64_t ld) const {
    over_keys(kScoreGrads, x, kr, dq, ld);
    return true;
  }
  bool keys(BlockOperand o, const Block& x, int64_t j0, int64_t j1, float* d, int64_t ldd, bool acc) const {
    // (x.i0 is even: blocks are an even number of rows.)
    const uint32_t* b = (o == kProbs ? dyr : qr) + x.i0 / 2 * g.D;
    tile_product(j1 - j0, g.D, (x.rows + 1) / 2, reinterpret_cast<const uint16_t*>(pairs[o] + j0), 2, 2 * x.cols(),
                 b, g.D, d, ldd, acc);
    return true;
  }
};

// The block's softmax probabilities into p (rows × keys) and, with dropout,
// each element's factor (0 or 1 / (1 - dropout)) into keep. extent[r]: the
// keys of row r that may have weight (a causal row's first i + 1, rounded up
// to whole 16-key steps), past which p and keep are 0 and nothing else is
// computed. A causal row whose visible keys are all masked (largest score
// at most float lowest) spreads its weight over the later keys too, as the
// composite's does: then the block is redone with every key (x.keys = Tk)
// and that row takes them all.
template <class Products>
bool probabilities(const Geometry& g, const Products& prod, Block& x, float* p, float* keep, int64_t* extent) {
  const float lowest = std::numeric_limits<float>::lowest();
  const int64_t n = x.cols();
  if (!prod.scores(x, p)) return false;
  const float* mask = g.mask ? g.mask + x.b * g.mask_batch_stride + x.k0 : nullptr;
  for (int64_t r = 0; r < x.rows; ++r) {
    const int64_t i = x.i0 + r - x.k0;  // the row's own key, as a column
    float* pr = p + r * n;
    int64_t e = g.causal ? std::min(n, (i + 16) / 16 * 16) : n;
    int64_t first = g.window > 0 ? std::max<int64_t>(0, i - g.window + 1) : 0;  // its window's first column
    if (g.segmented()) {  // and its segment's
      first = std::max(first, g.first_key(x.b, x.i0 + r) - x.k0);
      e = std::min(e, g.end_key(x.b, x.i0 + r) - x.k0);
    }
    auto scores = [&](int64_t j0, int64_t j1) {  // scaled, causal, masked: the composite's steps
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) pr[j] *= g.scale;
      if (g.causal) std::fill(pr + std::clamp(i + 1, j0, j1), pr + j1, lowest);
      if (first > j0) std::fill(pr + j0, pr + std::min(first, j1), lowest);
      if (mask) {
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) pr[j] += mask[j];
      }
    };
    scores(0, e);
    float m = row_max(pr, e);
    if (e < n && !(m > lowest) && g.window == 0 && !g.segmented()) {
      if (n < g.Tk) {
        x.keys = g.Tk;
        return probabilities(g, prod, x, p, keep, extent);
      }
      scores(e, n);
      m = row_max(pr, n);
      e = n;
    }
    extent[r] = e;
    // (Past e, exp(lowest - m) is 0: m > lowest there.)
    const float inv = static_cast<float>(1.0 / exp_shifted_sum(pr, m, pr, e));
    std::fill(pr + e, pr + n, 0.0f);
    if (keep) {  // dropout() numbers the [B, H, Tq, Tk] elements from key[2]
      float* kr = keep + r * n;
      const uint64_t element =
          static_cast<uint64_t>(g.key[2] + ((x.b * g.H + x.h) * g.Tq + x.i0 + r) * g.Tk + x.k0);
      Philox::uniform_range(static_cast<uint64_t>(g.key[0]), static_cast<uint64_t>(g.key[1]), element, e, kr);
      const float drop = g.dropout, factor = g.inv_keep;
#pragma omp simd
      for (int64_t j = 0; j < e; ++j) {
        pr[j] *= inv;
        kr[j] = kr[j] >= drop ? factor : 0.0f;
      }
      std::fill(kr + e, kr + n, 0.0f);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < e; ++j) pr[j] *= inv;
    }
  }
  return true;
}

// x[0, n) rounded to bf16 in place.
void round_bf16(float* x, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] = std::bit_cast<float>(bf16_rounded_bits(x[j]));
}

// The probabilities the product with v reads, row by row over each row's
// extent (p and keep are 0 past it): dropped (p · factor, 0 where dropped
// even if p is NaN, as dropout()'s where) and, with `round`, rounded to bf16.
void dropped(const Block& x, const int64_t* extent, const float* p, const float* keep, bool round, float* out) {
  const int64_t n = x.cols();
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* pr = p + r * n;
    float* o = out + r * n;
    const int64_t e = extent[r];
    if (keep) {
      const float* kr = keep + r * n;
#pragma omp simd
      for (int64_t j = 0; j < e; ++j) o[j] = kr[j] != 0.0f ? pr[j] * kr[j] : 0.0f;
    } else if (o != pr) {
      std::copy(pr, pr + e, o);
    }
    if (round) round_bf16(o, e);
    if (o != pr) std::fill(o + e, o + n, 0.0f);
  }
}

// dropped() from kept probabilities: with dropout 0 where the sign bit is
// set, else p · factor; with `round` rounded to bf16.
void kept_dropped(const Geometry& g, const Block& x, const int64_t* extent, const float* p, bool round, float* out) {
  const int64_t n = x.keys;
  const float factor = g.inv_keep;
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* pr = p + r * n;
    float* o = out + r * n;
    const int64_t e = extent[r];
    if (g.key) {
#pragma omp simd
      for (int64_t j = 0; j < e; ++j) o[j] = std::signbit(pr[j]) ? 0.0f : pr[j] * factor;
    } else {
      std::copy(pr, pr + e, o);
    }
    if (round) round_bf16(o, e);
    std::fill(o + e, o + n, 0.0f);
  }
}

// A block's n probabilities into the kept ones at `to`, with dropout (keep)
// a dropped one's sign bit set (p is 0 or more, or NaN of either sign: −|p|
// marks it, |p| keeps it). Streamed past the cache where the build has
// AVX-512: the gradient reads them long after.
void keep_block(const float* p, const float* keep, int64_t n, float* to) {
  auto one = [&](int64_t j) {
    to[j] = !keep ? p[j] : keep[j] != 0.0f ? std::fabs(p[j]) : -std::fabs(p[j]);
  };
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j < n && reinterpret_cast<uintptr_t>(to + j) % 64 != 0; ++j) one(j);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (; j + 16 <= n; j += 16) {
    __m512 v = _mm512_loadu_ps(p + j);
    if (keep) {  // |p|, then the sign bit where keep is 0
      v = _mm512_andnot_ps(sign, v);
      const __mmask16 drop = _mm512_cmp_ps_mask(_mm512_loadu_ps(keep + j), _mm512_setzero_ps(), _CMP_EQ_OQ);
      v = _mm512_mask_or_ps(v, drop, v, sign);
    }
    _mm512_stream_ps(to + j, v);
  }
#endif
  for (; j < n; ++j) one(j);
}

int64_t blocks_of(const Geometry& g) { return (g.Tq + g.block - 1) / g.block; }

// The forward's blocks with the products of `products` (WideProducts or
// PairedProducts): a thread takes a block at a time, or with kPacksHeads a
// head's blocks at a time (packed once; fewer, larger pieces of work: the
// threads past B·H have none).
template <class Products>
bool forward_blocks(const Geometry& g, const Products& products, const OutHeads& y, const std::optional<Kept>& kept) {
  const int64_t blocks = blocks_of(g), per_item = Products::kPacksHeads ? std::max<int64_t>(blocks, 1) : 1;
  const bool round = g.bf16 && !Products::kRoundsOperands;  // the blocks' bf16 values, in f32
  bool ok = true;
#pragma omp parallel reduction(&& : ok)
  {
    Products prod = products;
    const int64_t n = g.block * g.Tk;
    float* p = scratch(0, n);
    float* keep = g.key ? scratch(1, n) : nullptr;
    std::vector<int64_t> extent(static_cast<size_t>(g.block));
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < g.B * g.H * blocks / per_item; ++item) {
      const int64_t bh = item * per_item / blocks, first = item * per_item % blocks;
      prod.head(bh / g.H, bh % g.H);
      for (int64_t blk = first; blk < first + per_item; ++blk) {
        Block x = block_of(g, bh, blk);
        ok = ok && probabilities(g, prod, x, p, keep, extent.data());
        if (kept) {  // (never windowed: compile.cpp keeps no probabilities for a window)
          keep_block(p, keep, x.rows * x.keys, kept->p + (bh * g.Tq + x.i0) * g.Tk);
          for (int64_t r = 0; r < x.rows; ++r) kept->extent[bh * g.Tq + x.i0 + r] = static_cast<int32_t>(extent[r]);
        }
        if (keep || round) dropped(x, extent.data(), p, keep, round, p);
        prod.operand(kProbs, x, p);
        ok = ok && prod.values(x, y.at(x.b, x.h, x.i0), y.ld);
      }
    }
#ifdef __AVX512F__
    _mm_sfence();  // keep_block's streamed stores, before the gradient reads them
#endif
  }
  return ok;
}

void forward(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra) {
  const Geometry g = geometry(ins, in);
  const OutHeads y = result_heads(ins, out, g);
  KILN_CHECK(extra.size() == (g.kept ? 1u : 0u) && extra.size() == ins.extra_outputs.size(),
             "attention: ", extra.size(), " extra outputs for ", g.kept ? "kept" : "no", " probabilities");
  const std::optional<Kept> kept = g.kept ? std::optional<Kept>(std::in_place, extra[0], ins.extra_outputs[0].out, g)
                                          : std::nullopt;
  if (g.Tk == 0 || g.D == 0) {  // an empty softmax row: the product is zero, as the composite's
    y.zero(g.B, g.H, g.Tq, g.D);
    return;
  }
  bool ok = true;
  if (g.native) {
    ok = forward_blocks(g, PairedProducts{g, bf16_heads(ins, in, 0), bf16_heads(ins, in, 1), bf16_heads(ins, in, 2),
                                          {}, false},
                        y, kept);
  } else {
    std::vector<float> wq, wk, wv;
    ok = forward_blocks(g, WideProducts{g, heads(ins, in, 0, wq), heads(ins, in, 1, wk), heads(ins, in, 2, wv), {}},
                        y, kept);
  }
  KILN_CHECK(ok, "attention: oneDNN's sgemm failed for a block of a head of [", g.Tq, "x", g.D, "]·[", g.D, "x",
             g.Tk, "]");
}

// The output gradient as autocast's products read it: rounded to bf16, as
// contiguous [B, H, Tq, D] U values (f32, or bf16 bits for native products).
template <typename U>
HeadsOf<const U> rounded_dy(const Geometry& g, const Heads& dy, std::vector<U>& to) {
  to.resize(static_cast<size_t>(g.B * g.H * g.Tq * g.D));
#pragma omp parallel for collapse(2)
  for (int64_t bh = 0; bh < g.B * g.H; ++bh)
    for (int64_t i = 0; i < g.Tq; ++i) {
      const float* from = dy.at(bh / g.H, bh % g.H, i);
      U* row = to.data() + (bh * g.Tq + i) * g.D;
      if constexpr (std::is_same_v<U, float>) {
        std::copy(from, from + g.D, row);
        round_bf16(row, g.D);
      } else {
        round_to_bf16(from, row, g.D);
      }
    }
  return {to.data(), g.H * g.Tq * g.D, g.Tq * g.D, g.D};
}

// A bf16 result's dq, dk and dv (compiler/bf16_results.cpp): each head is
// summed in f32 and rounded once it is whole.
struct Bf16Grads {
  HeadsOf<uint16_t> dq, dk, dv;
};

// The gradient's heads, a head at a time on each thread, with the products
// of `products` (WideProducts or PairedProducts).
template <class Products>
bool backward_heads(const Geometry& g, const Products& products, const std::optional<Kept>& kept, OutHeads dq,
                    OutHeads dk, OutHeads dv, const Bf16Grads* rounded) {
  const int64_t blocks = blocks_of(g);
  const bool round = g.bf16 && !Products::kRoundsOperands;  // the blocks' bf16 values, in f32
  bool ok = true;
#pragma omp parallel reduction(&& : ok) firstprivate(dq, dk, dv)
  {
    Products prod = products;
    const int64_t n = g.block * g.Tk;
    float *p = scratch(0, n), *keep = g.key ? scratch(1, n) : nullptr, *pd = scratch(2, n), *ds = scratch(3, n);
    std::vector<int64_t> extent(static_cast<size_t>(g.block));
    // A bf16 result's head: dq, dk, dv in f32, each [T, D], its rows D
    // apart where the products' bits allow (kAnyRowStride: 96 KiB a head at
    // T = 128, D = 64; the result's row stride spread bert-base's over 1.2
    // MB and GPT-2's over 7 MB, and their attention gradients took 7 % and
    // 13 % longer), else the result's row stride.
    std::vector<float> head;
    if (rounded) {
      constexpr bool compact = Products::kAnyRowStride;
      const int64_t lq = compact ? g.D : rounded->dq.ld, lk = compact ? g.D : rounded->dk.ld,
                    lv = compact ? g.D : rounded->dv.ld;
      head.resize(static_cast<size_t>(g.Tq * lq + g.Tk * (lk + lv)));
      dq = {head.data(), 0, 0, lq};
      dk = {head.data() + g.Tq * lq, 0, 0, lk};
      dv = {head.data() + g.Tq * lq + g.Tk * lk, 0, 0, lv};
    }
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < g.B * g.H; ++bh) {
      const int64_t b = bh / g.H, h = bh % g.H;
      prod.head(b, h);
      float* dkh = dk.at(b, h);
      float* dvh = dv.at(b, h);
      int64_t written = 0;  // dk and dv rows [0, written) hold a block's sum
      // dk or dv (d, from key k0) += oᵀ (dy or q) over the block's keys: the
      // rows no block wrote yet are set (β = 0, the bits of adding to zeros)
      // rather than zeroed first. (Windowed blocks start at or before the
      // keys written so far: no row is skipped.)
      const auto add_keys = [&](BlockOperand o, const Block& x, float* d, int64_t ldd) {
        const int64_t m = x.cols(), old = std::clamp<int64_t>(written - x.k0, 0, m);
        return (old == 0 || prod.keys(o, x, 0, old, d, ldd, true)) &&
               (old == m || prod.keys(o, x, old, m, d + old * ldd, ldd, false));
      };
      for (int64_t blk = 0; blk < blocks; ++blk) {
        Block x = block_of(g, bh, blk);
        const float* pr0 = p;  // the block's probabilities (kept: dropped ones with their sign bit set)
        if (kept) {
          pr0 = kept->p + (bh * g.Tq + x.i0) * g.Tk;
          for (int64_t r = 0; r < x.rows; ++r) {  // (a block redone with every key has rows that reach Tk)
            extent[r] = kept->extent[bh * g.Tq + x.i0 + r];
            x.keys = std::max(x.keys, extent[r]);
          }
        } else {
          ok = ok && probabilities(g, prod, x, p, keep, extent.data());
        }
        const int64_t m = x.cols();
        const float* pdp = pr0;  // the probabilities as the forward's product read them
        if (kept && (g.key || round)) {
          kept_dropped(g, x, extent.data(), pr0, round, pd);
          pdp = pd;
        } else if (!kept && (keep || round)) {
          dropped(x, extent.data(), p, keep, round, pd);
          pdp = pd;
        }
        // dP (into ds) and dv
        ok = ok && prod.dprobs(x, ds);
        prod.operand(kProbs, x, pdp);
        ok = ok && add_keys(kProbs, x, dvh + x.k0 * dv.ld, dv.ld);
        for (int64_t r = 0; r < x.rows; ++r) {
          const float* pr = pr0 + r * m;
          float* dr = ds + r * m;
          const int64_t e = extent[r];  // (past it p is 0: so is the gradient of the scores)
          if (g.bf16)  // the gradient of autocast's bf16 probabilities
            round_bf16(dr, e);
          if (kept && g.key) {  // dropped where the sign bit is set
            const float factor = g.inv_keep;
#pragma omp simd
            for (int64_t j = 0; j < e; ++j) dr[j] = std::signbit(pr[j]) ? 0.0f : dr[j] * factor;
          } else if (keep) {
            const float* kr = keep + r * m;
#pragma omp simd
            for (int64_t j = 0; j < e; ++j) dr[j] = kr[j] != 0.0f ? dr[j] * kr[j] : 0.0f;
          }
          // |p|: p itself (0 or more, or NaN), less a kept one's dropped mark.
          double delta = 0;
#pragma omp simd reduction(+ : delta)
          for (int64_t j = 0; j < e; ++j) delta += static_cast<double>(dr[j]) * std::fabs(pr[j]);
#pragma omp simd
          for (int64_t j = 0; j < e; ++j)
            dr[j] = static_cast<float>(std::fabs(pr[j]) * (static_cast<double>(dr[j]) - delta)) * g.scale;
          // Later keys hold a constant: no gradient, even where a row spread its weight there.
          std::fill(dr + (g.causal ? std::min(e, x.i0 + r + 1 - x.k0) : e), dr + m, 0.0f);
          if (round) round_bf16(dr, e);
        }
        prod.operand(kScoreGrads, x, ds);
        ok = ok && prod.queries(x, dq.at(x.b, x.h, x.i0), dq.ld);
        ok = ok && add_keys(kScoreGrads, x, dkh + x.k0 * dk.ld, dk.ld);
        written = std::max(written, x.keys);
      }
      for (int64_t t = written; t < g.Tk; ++t) {  // (no query rows: no block wrote them)
        std::fill(dkh + t * dk.ld, dkh + t * dk.ld + g.D, 0.0f);
        std::fill(dvh + t * dv.ld, dvh + t * dv.ld + g.D, 0.0f);
      }
      if (rounded) {
        for (int64_t t = 0; t < g.Tq; ++t) round_to_bf16(dq.at(0, 0, t), rounded->dq.at(b, h, t), g.D);
        for (int64_t t = 0; t < g.Tk; ++t) {
          round_to_bf16(dk.at(0, 0, t), rounded->dk.at(b, h, t), g.D);
          round_to_bf16(dv.at(0, 0, t), rounded->dv.at(b, h, t), g.D);
        }
      }
    }
  }
  return ok;
}

void backward(const Instr& ins, std::span<char* const> in, char* out) {
  const Geometry g = geometry(ins, in);
  std::optional<Bf16Grads> rounded;
  OutHeads dq, dk, dv;
  if (ins.output.dtype == DType::bf16)
    rounded = Bf16Grads{result_heads<uint16_t>(ins, out, g, 0), result_heads<uint16_t>(ins, out, g, 1),
                        result_heads<uint16_t>(ins, out, g, 2)};
  else
    dq = result_heads(ins, out, g, 0), dk = result_heads(ins, out, g, 1), dv = result_heads(ins, out, g, 2);
  if (g.Tk == 0 || g.D == 0) {
    if (rounded) rounded->dq.zero(g.B, g.H, g.Tq, g.D);
    else dq.zero(g.B, g.H, g.Tq, g.D);
    return;
  }
  const Bf16Grads* r = rounded ? &*rounded : nullptr;
  const size_t last = ins.inputs.size() - 1;
  const std::optional<Kept> kept =
      g.kept ? std::optional<Kept>(std::in_place, in[last - 1], ins.inputs[last - 1], g) : std::nullopt;
  std::vector<float> wq, wk, wv, wdy, wrounded;
  // dy is rounded to bf16 for bf16 operands (autocast's product of the
  // bf16 probabilities' gradient); a bf16 dy (compiler/bf16_results.cpp) is
  // that value already.
  const bool dy_bf16 = ins.inputs[last].dtype == DType::bf16;
  bool ok = true;
  if (g.native) {
    std::vector<uint16_t> dyb;
    const Bf16Heads dy = dy_bf16 ? bf16_heads(ins, in, last) : rounded_dy(g, heads(ins, in, last, wdy), dyb);
    ok = backward_heads(
        g, PairedProducts{g, bf16_heads(ins, in, 0), bf16_heads(ins, in, 1), bf16_heads(ins, in, 2), dy, true}, kept,
        dq, dk, dv, r);
  } else {
    const Heads dy = heads(ins, in, last, wdy);
    ok = backward_heads(g,
                        WideProducts{g, heads(ins, in, 0, wq), heads(ins, in, 1, wk), heads(ins, in, 2, wv),
                                     g.bf16 && !dy_bf16 ? rounded_dy(g, dy, wrounded) : dy},
                        kept, dq, dk, dv, r);
  }
  KILN_CHECK(ok, "attention: oneDNN's sgemm failed for a block of the gradient of a head of [", g.Tq, "x", g.D,
             "]·[", g.D, "x", g.Tk, "]");
}

}  // namespace

void attention_kernel(const Instr& ins, std::span<char* const> in, char* out, std::span<char* const> extra,
                      bool grad) {
  if (grad) backward(ins, in, out);
  else forward(ins, in, out, extra);
}

}  // namespace kiln::backend::cpu
