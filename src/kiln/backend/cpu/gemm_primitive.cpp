// oneDNN's matmul primitive for the GEMM shapes where it beats oneDNN's
// sgemm (see prefers_matmul_primitive), and for every product of bf16
// operands on a CPU with bf16 dot products (AVX512-BF16, AMX), created once
// per shape and layout.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/kernels.h"
#include "kiln/core/env.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

// Measured with AVX-512 (oneDNN 2.6.3 picks its brgemm matmul there; on an
// AVX2-only CPU both run the same jit GEMM, so the choice changes nothing):
// sgemm's row-major NT products (x·Wᵀ) with a long reduction and a small
// output fall to 250–330 GFLOP/s on 2 threads where the primitive holds
// 380–390, e.g. [1024x3072]·[768x3072]ᵀ (BERT's FFN down-projection, GPT-2's
// input gradient through c_fc) 318 vs 385, [256x3072]·[768x3072]ᵀ 250 vs
// 389, [1024x2304]·[768x2304]ᵀ 370 vs 385. With K ≤ N, or with 2²⁰ output
// elements or more (1024x1024x4096: 394 vs 382; 2048x768x3072: 400 vs 390),
// and for the NN and TN layouts, sgemm is as fast or faster.
bool prefers_matmul_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  return !ta && tb && K > N && M * N < (int64_t{1} << 20) && M > 1 && N > 1;
}

namespace {

struct Key {
  int64_t M, N, K, lda, ldb, ldc;
  bool ta, tb, bias, accumulate, bf16;  // bf16: bf16 operands (the bias stays f32)
  bool bf16_result = false;             // the f32 result rounded to bf16 as it is stored
  bool packed_b = false;                // b is packed into oneDNN's own layout first (packs_b)
  auto tie() const { return std::tie(M, N, K, lda, ldb, ldc, ta, tb, bias, accumulate, bf16, bf16_result, packed_b); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Primitive {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias, scratch;
  std::string impl;  // oneDNN's name for the implementation, e.g. brg:avx512_core_bf16
  // Key::packed_b: b as the caller stores it, and the reorder that packs it
  // into `b` (oneDNN's blocked layout for this product).
  std::optional<dnnl::memory::desc> plain_b;
  dnnl::reorder pack;
};

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The primitive for a key, or null where oneDNN has only its reference
// implementation (slower than sgemm) or declines the layout.
std::shared_ptr<const Primitive> make_or_find_primitive(const Key& k) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Primitive>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const Primitive> made;
  try {
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const auto operands = k.bf16 ? memory::data_type::bf16 : f32;
    // Row-major storage: element (i, j) of a transposed operand sits at j·ld + i.
    auto desc = [&](int64_t rows, int64_t cols, bool trans, int64_t ld, memory::data_type t) {
      return memory::desc({rows, cols}, t, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
    };
    auto p = std::make_shared<Primitive>();
    p->a = desc(k.M, k.K, k.ta, k.lda, operands);
    p->b = k.packed_b ? memory::desc({k.K, k.N}, operands, memory::format_tag::any)
                      : desc(k.K, k.N, k.tb, k.ldb, operands);
    p->c = desc(k.M, k.N, false, k.ldc, k.bf16_result ? memory::data_type::bf16 : f32);
    if (k.bias) p->bias = memory::desc({1, k.N}, f32, memory::dims{k.N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one scratchpad per call: replicas may share a primitive
    if (k.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc d = k.bias ? dnnl::matmul::desc(p->a, p->b, p->bias, p->c)
                                        : dnnl::matmul::desc(p->a, p->b, p->c);
    dnnl::matmul::primitive_desc pd(d, attr, engine());
    if (std::strncmp(pd.impl_info_str(), "ref", 3) != 0) {
      p->scratch = pd.scratchpad_desc();
      p->impl = pd.impl_info_str();
      p->prim = dnnl::matmul(pd);
      if (k.packed_b) {
        p->b = pd.weights_desc();
        p->plain_b = desc(k.K, k.N, k.tb, k.ldb, operands);
        p->pack = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), *p->plain_b, engine(), p->b));
      }
      made = std::move(p);
    }
  } catch (const dnnl::error&) {
    made = nullptr;  // sgemm runs it
  }
  cache.emplace(k, made);
  return made;
}

// The same, remembered per thread: the fused attention runs thousands of
// small block products a step from both threads, and the shared cache's lock
// and lookup were a measurable part of them.
std::shared_ptr<const Primitive> primitive_for(const Key& k) {
  thread_local std::map<Key, std::shared_ptr<const Primitive>> seen;
  auto it = seen.find(k);
  if (it == seen.end()) it = seen.emplace(k, make_or_find_primitive(k)).first;
  return it->second;
}

// A thread's buffer for a packed b (Key::packed_b), 64-byte aligned, kept
// between calls.
void* packed_b_buffer(size_t bytes) {
  struct Buffer {
    void* at = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(at); }
  };
  thread_local Buffer buf;
  if (buf.size < bytes) {
    std::free(buf.at);
    buf.size = (bytes + 63) / 64 * 64;
    buf.at = std::aligned_alloc(64, buf.size);
    KILN_CHECK(buf.at != nullptr, "matmul: out of memory for a packed bf16 operand of ", bytes, " bytes");
  }
  return buf.at;
}

// b packed into p's layout (Key::packed_b) in this thread's buffer.
const void* pack_b(const Primitive* p, const void* b, dnnl::stream& s) {
  thread_local std::unordered_map<const Primitive*, std::pair<dnnl::memory, dnnl::memory>> bound;
  auto [found, fresh] = bound.try_emplace(p);
  auto& [from, to] = found->second;
  if (fresh) {
    from = dnnl::memory(*p->plain_b, engine(), DNNL_MEMORY_NONE);
    to = dnnl::memory(p->b, engine(), DNNL_MEMORY_NONE);
  }
  from.set_data_handle(const_cast<void*>(b));
  to.set_data_handle(packed_b_buffer(p->b.get_size()));
  p->pack.execute(s, from, to);
  return to.get_data_handle();
}

// One product with its primitive (made for key k). Each thread keeps a
// primitive's memory objects and argument map and points them at the call's
// operands (making them per call cost as much as a small product's work).
void execute(const Primitive* p, const Key& k, const void* a, const void* b, void* c, const float* bias) {
  thread_local std::vector<char> scratch;
  scratch.resize(p->scratch.get_size());
  const dnnl::engine& e = engine();
  thread_local dnnl::stream s(e);
  thread_local std::unordered_map<const Primitive*, std::unordered_map<int, dnnl::memory>> bound;
  auto [found, fresh] = bound.try_emplace(p);
  std::unordered_map<int, dnnl::memory>& args = found->second;
  if (fresh) {
    args.emplace(DNNL_ARG_SRC, dnnl::memory(p->a, e, DNNL_MEMORY_NONE));
    args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(p->b, e, DNNL_MEMORY_NONE));
    args.emplace(DNNL_ARG_DST, dnnl::memory(p->c, e, DNNL_MEMORY_NONE));
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p->scratch, e, DNNL_MEMORY_NONE));
    if (k.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias, e, DNNL_MEMORY_NONE));
  }
  args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(a));
  args.at(DNNL_ARG_DST).set_data_handle(c);
  args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratch.data());
  if (k.bias) args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<float*>(bias));
  try {
    args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(k.packed_b ? pack_b(p, b, s) : b));
    p->prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error& err) {
    throw Error(std::string("matmul: oneDNN's ") + (k.bf16 ? "bf16 " : "") + "matmul primitive failed for M=" +
                std::to_string(k.M) + " N=" + std::to_string(k.N) + " K=" + std::to_string(k.K) + ": " + err.what());
  }
}

bool run(const Key& k, const void* a, const void* b, void* c, const float* bias) {
  const auto p = primitive_for(k);
  if (!p) return false;
  execute(p.get(), k, a, b, c, bias);
  return true;
}

// A bf16 product as oneDNN 2.6 runs it fastest: in pieces where one call of
// the whole shape runs far under the bf16 peak (measured on 2 threads of an
// AVX512-BF16 CPU, bench/bf16_pieces.cpp; oneDNN runs the pieces with its
// bf16 gemm where it ran the whole with its brgemm matmul):
// - Tᵀ·N with more than kManyRows rows (the LM head's weight gradient,
//   [T, V]ᵀ·[T, H]): blocks of kRows rows, 810-890 GFLOP/s against 580-650
//   for V = 50257. Row counts that are multiples of 4096 run as fast whole,
//   so they stay whole. Small blocks: the gemm packs a block's rows per
//   thread, and the LM head's gradients run at the step's peak memory
//   (blocks of 8192 rows raised GPT-2's peak resident memory by 30 MB).
// - N·N and N·T with a reduction longer than kLongDepth (the LM head's input
//   gradient, [T, V]·[V, H]): the reduction in near-equal pieces of at most
//   kDepth, each piece's f32 sums added onto c, 860-940 GFLOP/s against
//   690-740. A bf16 result is summed in an f32 buffer and rounded once at
//   the end, as the whole product rounds it.
// Every piece's primitive is made before any runs, so a shape oneDNN
// declines leaves c untouched for the caller's fallback.
constexpr int64_t kManyRows = 8192, kRows = 2048, kLongDepth = 12288, kDepth = 6144;
std::atomic<bool> g_pieces{true};

struct Piece {
  Key key;                      // key.bias: the caller's bias goes with this piece
  int64_t a_off, b_off, c_off;  // in elements
};

struct Pieces {
  std::vector<Piece> pieces;
  bool in_f32 = false;  // the pieces sum into an f32 [M, N] buffer, rounded into c at the end
};

Pieces bf16_pieces(const Key& k) {
  Pieces plan;
  if (!g_pieces.load(std::memory_order_relaxed)) {
    plan.pieces.push_back({k, 0, 0, 0});
  } else if (k.ta && k.M > kManyRows && k.M % 4096 != 0) {
    for (int64_t m0 = 0; m0 < k.M; m0 += kRows) {
      Key p = k;
      p.M = std::min(kRows, k.M - m0);
      plan.pieces.push_back({p, m0, 0, m0 * k.ldc});  // Aᵀ: row i of the product is column i of a
    }
  } else if (!k.ta && k.K > kLongDepth) {
    plan.in_f32 = k.bf16_result;
    const int64_t n = (k.K + kDepth - 1) / kDepth, step = ((k.K + n - 1) / n + 63) / 64 * 64;
    for (int64_t k0 = 0; k0 < k.K; k0 += step) {
      Key p = k;
      p.K = std::min(step, k.K - k0);
      p.bias = k.bias && k0 == 0;
      p.accumulate = k.accumulate || k0 > 0;
      if (plan.in_f32) p.bf16_result = false, p.ldc = k.N;
      plan.pieces.push_back({p, k0, k.tb ? k0 : k0 * k.ldb, 0});
    }
  } else {
    plan.pieces.push_back({k, 0, 0, 0});
  }
  return plan;
}

// Whether a bf16 product packs b into oneDNN's blocked layout itself (one
// reorder into a buffer of the thread's) before the product reads it. Given
// b as stored, oneDNN 2.6's brgemm matmul copies b's blocks as it goes, on
// 2 threads more slowly than one reorder of the whole: packed first, 1024-row
// products ran 5-10 % faster alone (1024 x 768-3072 x 768-3072, NN and NT,
// cold operands; TN weight gradients 2-5 %), GPT-2's step ~1.5 %, with the
// same sums, bit for bit (the same kernel reads the same blocks; with AMX,
// an accumulated product whose reduction is not whole blocks may sum in
// another order, within f32 summation error). Not for
// x·Wᵀ with a longer reduction than output (NT, K > N: as fast alone, 8 %
// slower in bert-base's step), nor on one thread (the paired products' parallel
// region: 2 % faster to 1.5 % slower), nor under kPackRows rows, where the
// reorder costs more than it saves (3 % faster at 512 x 3072 x 768, slower
// at 256), nor for a b over kMaxPacked bytes (the LM head's [H, V]: 77 MB
// more at the step's peak).
constexpr int64_t kPackRows = 512, kMaxPacked = int64_t{16} << 20;
std::atomic<bool> g_pack_b{true};

bool packs_b(const Key& k) {
  return k.bf16 && g_pack_b.load(std::memory_order_relaxed) && k.M >= kPackRows && !(k.tb && k.K > k.N) &&
         k.K * k.N * 2 <= kMaxPacked && !omp_in_parallel() && omp_get_max_threads() > 1;
}

bool run_bf16(const Key& k, const uint16_t* a, const uint16_t* b, void* c, const float* bias) {
  Pieces plan = bf16_pieces(k);
  for (Piece& p : plan.pieces) p.key.packed_b = packs_b(p.key);
  std::vector<std::shared_ptr<const Primitive>> prims;
  for (const Piece& p : plan.pieces) {
    prims.push_back(primitive_for(p.key));
    if (!prims.back()) return false;
  }
  // A bf16 result summed in pieces: in an f32 buffer first (per call, not
  // kept: [tokens, hidden] of a large model is tens of MB).
  std::vector<float> sums(plan.in_f32 ? static_cast<size_t>(k.M * k.N) : 0);
  char* dst = plan.in_f32 ? reinterpret_cast<char*>(sums.data()) : static_cast<char*>(c);
  const size_t dst_size = k.bf16_result && !plan.in_f32 ? sizeof(uint16_t) : sizeof(float);
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const Piece& p = plan.pieces[i];
    execute(prims[i].get(), p.key, a + p.a_off, b + p.b_off, dst + p.c_off * dst_size, p.key.bias ? bias : nullptr);
  }
  if (plan.in_f32) {
    const float* from = sums.data();
    auto* out = static_cast<uint16_t*>(c);
#pragma omp parallel for schedule(static) if (k.M * k.N > 65536 && !omp_in_parallel())
    for (int64_t i = 0; i < k.M; ++i) round_to_bf16(from + i * k.N, out + i * k.ldc, k.N);
  }
  return true;
}

// KILN_CPU_BF16: auto (native bf16 products where the CPU has them) or
// emulate (always widen to f32, as on a CPU without them).
bool bf16_forced_off() {
  static const bool off = env_choice("KILN_CPU_BF16", {"auto", "emulate"}) == "emulate";
  return off;
}

}  // namespace

bool matmul_primitive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float* c, int64_t ldc, const float* bias, bool accumulate) {
  return run({M, N, K, lda, ldb, ldc, ta, tb, bias != nullptr, accumulate, false}, a, b, c, bias);
}

bool matmul_primitive_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda,
                           const uint16_t* b, int64_t ldb, float* c, int64_t ldc, const float* bias, bool accumulate) {
  return run_bf16({M, N, K, lda, ldb, ldc, ta, tb, bias != nullptr, accumulate, true}, a, b, c, bias);
}

bool matmul_primitive_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* a, int64_t lda,
                           const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc, const float* bias) {
  return run_bf16({M, N, K, lda, ldb, ldc, ta, tb, bias != nullptr, false, true, true}, a, b, c, bias);
}

void set_bf16_product_pieces(bool on) { g_pieces.store(on); }

void set_bf16_packed_operands(bool on) { g_pack_b.store(on); }

bool bf16_product_packs_b(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  return packs_b({M, N, K, ta ? M : K, tb ? K : N, N, ta, tb, false, false, true});
}

bool cpu_has_bf16_products() {
  // oneDNN's ISA masks nest: AVX512-BF16 (0xe7) and AMX (0x3e7) both hold
  // every bit of avx512_core_bf16.
  const auto bits = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & bf16) == bf16;
}

namespace {
std::atomic<int> g_native{-1};  // -1: not decided yet
}

bool native_bf16_products() {
  int v = g_native.load();
  if (v < 0) {
    const int decided = cpu_has_bf16_products() && !bf16_forced_off() ? 1 : 0;
    v = g_native.compare_exchange_strong(v, decided) ? decided : g_native.load();  // a setter wins
  }
  return v == 1;
}

void set_native_bf16_products(bool on) { g_native.store(on && cpu_has_bf16_products() ? 1 : 0); }

std::string bf16_matmul_implementation() {
  const auto p = primitive_for({64, 64, 64, 64, 64, 64, false, true, false, false, true});
  return p ? p->impl : "";
}

void note_emulated_bf16() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr, "kiln: %s: bf16 matrix products are emulated (operands widened to f32 for sgemm: "
                 "exact, but no faster than fp32)\n",
                 cpu_has_bf16_products() ? "bf16 products turned off (KILN_CPU_BF16=emulate)"
                                         : "this CPU has no bf16 instructions (AVX512-BF16 or AMX)");
  });
}

}  // namespace kiln::backend::cpu
