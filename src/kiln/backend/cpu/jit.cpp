#include "kiln/backend/cpu/jit.h"

#ifdef KILN_HAVE_XBYAK
#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/vecmath.h"
#include "kiln/core/bf16.h"
#include "kiln/core/env.h"
#include "kiln/core/error.h"

namespace kiln::backend::cpu {

using compiler::FusedStep;
using compiler::Instr;
using compiler::Operand;
using ir::Op;

// fn(ptrs, begin, end): elements [begin, end), end - begin a multiple of 8.
// ptrs: each input's first element (at its view's offset), then the main
// output's, then the extra outputs'. A fused reduction's loop (a Sum with a
// program) stores nothing: it adds value i to lanes[(i - begin) % 8].
class JitKernel {
 public:
  using Fn = void (*)(const char* const* ptrs, int64_t begin, int64_t end);
  using SumFn = void (*)(const char* const* ptrs, int64_t begin, int64_t end, double* lanes);
#ifdef KILN_HAVE_XBYAK
  std::unique_ptr<Xbyak::CodeGenerator> code;
#endif
  Fn fn = nullptr;         // elementwise
  SumFn sum_fn = nullptr;  // fused reduction
  int64_t step = 8;        // values an iteration: end - begin is a multiple of it
};

namespace {

std::atomic<int> g_enabled{-1};  // -1: not read from KILN_JIT yet

#ifdef KILN_HAVE_XBYAK

// (An i32 or i64 load makes the program integral: evaluated in double.)
bool loadable(DType t) { return t == DType::f32 || t == DType::b8 || t == DType::bf16; }
bool storable(DType t) { return t == DType::f32 || t == DType::b8 || t == DType::bf16; }

#ifdef KILN_HAVE_LIBMVEC
// Steps of ops.def's Call ops: the compiled loop calls their lane forms
// (elementwise.h's lanes through vecmath.h's VecForm) with the operands in ymm0 (and ymm1), or zmm0 (and
// zmm1) for loops that take 16 values an iteration.
template <Op op, bool tanh_form>
__m256 call8(__m256 x, __m256 y) {
  return vec::VecForm<op>::lanes8(x, y, tanh_form);
}
#endif
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
template <Op op, bool tanh_form>
__m512 call16(__m512 x, __m512 y) {
  return vec::VecForm<op>::lanes16(x, y, tanh_form);
}
#pragma GCC diagnostic pop
constexpr bool kHave16 = true;
#else
constexpr bool kHave16 = false;
#endif

#ifdef KILN_HAVE_LIBMVEC
template <Op op>
const void* callee_of([[maybe_unused]] bool tanh_form, [[maybe_unused]] bool wide) {
  if constexpr (ir::op_fused_form(op) != ir::FusedForm::Call) {
    return nullptr;
  } else {
#ifdef __AVX512F__
    if (wide) return reinterpret_cast<const void*>(tanh_form ? &call16<op, true> : &call16<op, false>);
#endif
    return reinterpret_cast<const void*>(tanh_form ? &call8<op, true> : &call8<op, false>);
  }
}
#endif

// The function a step of a Call op calls (its 16-lane form with `wide`);
// null for the others.
const void* callee(const FusedStep& s, bool wide = false) {
#ifdef KILN_HAVE_LIBMVEC
  const bool tanh_form = ir::GeluAttrs::of(s.attrs).tanh_form;
  switch (s.op) {
#define KILN_OP(Name, ...) \
  case Op::Name: return callee_of<Op::Name>(tanh_form, wide);
#include "kiln/ir/ops.def"
    default: return nullptr;
  }
#else
  (void)s, (void)wide;
  return nullptr;
#endif
}

// The ops the compiled loops emit as instructions or load (ir/ops.def's
// Inline and Load forms), and those they call.
bool supported(const FusedStep& s) {
  const ir::FusedForm form = ir::op_fused_form(s.op);
  return form == ir::FusedForm::Load || form == ir::FusedForm::Inline || callee(s);
}

// Whether an elementwise instruction's input is read row by row (run_rows):
// not contiguous, but each row of the output's last axis is a contiguous run
// of the input (a broadcast bias, LayerNorm's scale and shift, a slice of the
// last axis), rows a whole number of 8-value steps long and at least
// kMinRow values: the loop is called once per row. At [4, 12, 256, L] (a
// head's rows, Llama's rotary embedding) a call a row beats the
// interpreter's copies from L = 64; at 8-32 neither wins clearly (chosen with
// KILN_PROFILE on bench/llama's step; docs/performance.md).
constexpr int64_t kMinRow = 64;
bool row_strided(const Instr& ins, const compiler::View& v) {
  const Shape& out = ins.output.view.shape;
  return ins.op != Op::Sum && !out.empty() && out.back() % 8 == 0 && out.back() >= kMinRow && v.shape == out &&
         v.strides.back() == 1 && !v.is_contiguous();
}

// Whether an elementwise instruction's input holds one value per row of the
// output's last axis (RMSNorm's [B, T, 1] factor broadcast over [B, T, C]),
// rows as row_strided's: the loop, called once per row, broadcasts the
// row's value like a scalar's.
bool row_broadcast(const Instr& ins, const compiler::View& v) {
  const Shape& out = ins.output.view.shape;
  return ins.op != Op::Sum && !out.empty() && out.back() % 8 == 0 && out.back() >= kMinRow && v.shape == out &&
         v.strides.back() == 0 && !v.is_broadcast_scalar();
}

// Whether the code generator takes the instruction (see jit.h).
bool compilable(const Instr& ins) {
  const bool sum = ins.op == Op::Sum;
  if (!(ins.fused || sum) || ins.program.empty() || compiler::computes_in_double(ins)) return false;
  auto stored_ok = [](const Operand& o) { return storable(o.dtype) && o.view.is_contiguous(); };
  if (sum ? ins.output.dtype != DType::f32 : !stored_ok(ins.output)) return false;
  for (const auto& e : ins.extra_outputs)
    if (!stored_ok(e.out)) return false;
  for (const auto& s : ins.program) {
    if (!supported(s)) return false;
    if (s.op == Op::Data) {
      const Operand& in = ins.inputs[static_cast<size_t>(s.load)];
      if (!loadable(in.dtype) || !(in.view.is_contiguous() || in.view.is_broadcast_scalar() ||
                                   row_strided(ins, in.view) || row_broadcast(ins, in.view)))
        return false;
    }
  }
  return true;
}

// What the generated code depends on: equal signatures, equal code.
std::string signature(const Instr& ins) {
  std::string sig;
  auto put = [&](const auto& v) { sig.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(ins.program.size());
  for (const auto& s : ins.program) {
    put(s.op), put(s.dtype), put(s.a), put(s.b), put(s.c), put(s.load);
    put(s.attrs.ints.size());  // GELU's form
    for (int64_t v : s.attrs.ints) put(v);
    if (s.op == Op::Constant) put(static_cast<float>(ir::ConstantAttrs::of(s.attrs).value));
    if (s.op == Op::Data) {
      const Operand& in = ins.inputs[static_cast<size_t>(s.load)];
      put(in.dtype), put(in.view.is_broadcast_scalar()), put(row_broadcast(ins, in.view));
    }
  }
  put(ins.op == Op::Sum), put(ins.inputs.size()), put(ins.output.dtype);
  for (const auto& e : ins.extra_outputs) put(e.reg), put(e.out.dtype);
  return sig;
}

// Stack slots of 32 bytes: the constants, then one per step (a value's home
// when it is not in a register). kLsb..kQuietLow: bf16 rounding (bf16.h's
// bf16_from_float, lane for lane).
enum ConstSlot { kZero = 0, kOne, kSign, kAbs, kLsb, kRound, kHigh, kQuiet, kQuietLow, kConstSlots };
// vcmpps predicates, as C++ compares floats (ordered, except !=).
enum Pred : uint8_t { kEq = 0x00, kLt = 0x01, kLe = 0x02, kUnord = 0x03, kNe = 0x04, kGe = 0x0D, kGt = 0x0E };

// Values are numbered per half of an iteration: step k's value in half h is
// k · halves + h (an invariant step has one value, half 0's, for both).
class Generator : public Xbyak::CodeGenerator {
 public:
  Generator(const Instr& ins, size_t size, int halves)
      : Xbyak::CodeGenerator(size, Xbyak::DontSetProtectRWE),
        ins_(ins),
        prog_(ins.program),
        invariant_(compiler::invariant_steps(ins, row_broadcast)),  // computed once per call (a row's, there)
        last_(compiler::last_reads(ins)),
        halves_(halves) {
    const int32_t n = static_cast<int32_t>(prog_.size());
    reg_of_.assign(static_cast<size_t>(n * halves_), -1);
    in_slot_.assign(static_cast<size_t>(n * halves_), 0);
    // A fused reduction without calls keeps its lanes in ymm12 and ymm13
    // for the whole loop (a call may change every register): the lanes
    // then wait on the adds' latency, not on a store and a reload.
    lanes_in_regs_ = ins.op == Op::Sum && std::none_of(prog_.begin(), prog_.end(), [](const FusedStep& s) {
      return callee(s) != nullptr;
    });
    emit();
  }

 private:
  static constexpr int kRegs = 14;  // ymm0-13 hold values; ymm14, ymm15 are scratch
  const Xbyak::Ymm t0_{14}, t1_{15};
  const Xbyak::Ymm lane0_{12}, lane1_{13};  // a reduction's lanes 0-3 and 4-7, when in registers

  int regs() const { return lanes_in_regs_ ? kRegs - 2 : kRegs; }  // registers that hold values

  // Value v's home: step k's halves side by side (64 bytes: one zmm).
  Xbyak::Address slot(int32_t v) { return ptr[rsp + 32 * (kConstSlots + v)]; }
  Xbyak::Address cslot(ConstSlot c) { return ptr[rsp + 32 * static_cast<int>(c)]; }
  int32_t value(int32_t k, int h) const { return invariant_[k] ? k * halves_ : k * halves_ + h; }
  int32_t last_of(int32_t v) const { return last_[v / halves_]; }

  void bind(int32_t k, int r) {
    reg_of_[k] = r;
    holder_[r] = k;
  }
  void unbind(int r) {
    if (holder_[r] >= 0) reg_of_[holder_[r]] = -1;
    holder_[r] = -1;
  }
  // A free register, one whose value nothing reads any more, or the one
  // whose value is read last (stored to its slot first unless it is there).
  int alloc() {
    for (int r = 0; r < regs(); ++r)
      if (holder_[r] < 0) return r;
    for (int r = 0; r < regs(); ++r)
      if (!((pinned_ >> r) & 1u) && last_of(holder_[r]) < now_) {
        unbind(r);
        return r;
      }
    int best = -1;
    int32_t far = -2;
    for (int r = 0; r < regs(); ++r)
      if (!((pinned_ >> r) & 1u) && last_of(holder_[r]) > far) far = last_of(holder_[r]), best = r;
    KILN_ASSERT(best >= 0);
    const int32_t k = holder_[best];
    if (!in_slot_[k]) {
      vmovups(slot(k), Xbyak::Ymm(best));
      in_slot_[k] = 1;
    }
    unbind(best);
    return best;
  }
  // Value k in a register, pinned until the step being emitted is done.
  Xbyak::Ymm use(int32_t k) {
    int r = reg_of_[k];
    if (r < 0) {
      KILN_ASSERT(in_slot_[k]);
      r = alloc();
      vmovups(Xbyak::Ymm(r), slot(k));
      bind(k, r);
    }
    pinned_ |= 1u << r;
    return Xbyak::Ymm(r);
  }
  void broadcast_bits(const Xbyak::Ymm& y, uint32_t bits) {
    mov(eax, bits);
    vmovd(Xbyak::Xmm(y.getIdx()), eax);
    vbroadcastss(y, Xbyak::Xmm(y.getIdx()));
  }

  void load_input(int32_t k, int h, const Xbyak::Ymm& d) {
    const FusedStep& s = prog_[k];
    const Operand& in = ins_.inputs[static_cast<size_t>(s.load)];
    mov(rax, ptr[rbx + 8 * s.load]);
    const Xbyak::Xmm x(d.getIdx());
    if (invariant_[k]) {  // one value for every element (of the call's row: row_broadcast)
      if (in.dtype == DType::f32) {
        vbroadcastss(d, dword[rax]);
      } else if (in.dtype == DType::bf16) {  // the top half of an f32
        movzx(eax, word[rax]);
        shl(eax, 16);
        vmovd(x, eax);
        vbroadcastss(d, x);
      } else {  // b8
        movzx(eax, byte[rax]);
        vcvtsi2ss(x, x, eax);
        vbroadcastss(d, x);
      }
      return;
    }
    if (in.dtype == DType::f32) {
      vmovups(d, ptr[rax + r12 * 4 + 32 * h]);
    } else if (in.dtype == DType::bf16) {  // exact: the bits to the top half
      vpmovzxwd(d, ptr[rax + r12 * 2 + 16 * h]);
      vpslld(d, d, 16);
    } else {  // b8: 0 or 1 per byte
      vpmovzxbd(d, ptr[rax + r12 + 8 * h]);
      vcvtdq2ps(d, d);
    }
  }

  static float constant_value(const FusedStep& s) {
    const float v = static_cast<float>(ir::ConstantAttrs::of(s.attrs).value);
    return s.dtype == DType::bf16 ? kiln::round_to_bf16(v) : v;
  }

  // mask (all ones / zero per lane) -> 1.0f / 0.0f
  void mask_to_one(const Xbyak::Ymm& d, const Xbyak::Ymm& mask) { vandps(d, mask, cslot(kOne)); }

  // t0 = v's bits plus bf16_from_float's rounding increment (0x7fff plus
  // the kept half's lowest bit; none for a NaN), t1 = v's NaN lanes.
  void bf16_round_up(const Xbyak::Ymm& v) {
    vcmpps(t1_, v, v, kUnord);
    vpsrld(t0_, v, 16);
    vpand(t0_, t0_, cslot(kLsb));
    vpaddd(t0_, t0_, cslot(kRound));
    vpandn(t0_, t1_, t0_);
    vpaddd(t0_, t0_, v);
  }
  // d = v rounded to the nearest bf16 value (ties to even), as a float; a
  // NaN keeps its top half and becomes quiet (round_to_bf16).
  void round_to_bf16(const Xbyak::Ymm& d, const Xbyak::Ymm& v) {
    bf16_round_up(v);
    vpand(t0_, t0_, cslot(kHigh));
    vpand(t1_, t1_, cslot(kQuiet));
    vpor(d, t0_, t1_);
  }

  // A transcendental step: every value in a register goes to its slot (the
  // callee may change every ymm register), the operands to ymm0 and ymm1.
  // With two halves (in the loop), the 16-lane function on both at once:
  // an operand's zmm is put together from its halves' slots (an
  // invariant's one value goes to both), and the result's high half is
  // stored to its slot, its low half stays in ymm0. (32 bytes at a time:
  // a 64-byte load of two 32-byte stores, or the reverse, cannot be
  // forwarded and waits for the stores to retire — measured 1.6x the
  // loop's time.)
  void emit_call(int32_t k, bool wide) {
    const FusedStep& s = prog_[k];
    spill_all();
    const int32_t a = value(s.a, 0), b = s.b >= 0 ? value(s.b, 0) : -1;
    KILN_ASSERT(in_slot_[a] && (b < 0 || in_slot_[b]));
    if (!wide) {
      vmovups(ymm0, slot(a));
      if (b >= 0) vmovups(ymm1, slot(b));
    } else {
      auto operand = [&](int32_t step, int32_t v, const Xbyak::Zmm& z) {
        if (invariant_[step]) return vbroadcastf64x4(z, slot(v));  // (the 32 bytes to both halves)
        vmovups(Xbyak::Ymm(z.getIdx()), slot(v));
        vinsertf64x4(z, z, slot(v + 1), 1);
      };
      operand(s.a, a, zmm0);
      if (b >= 0) operand(s.b, b, zmm1);
    }
    mov(rax, reinterpret_cast<size_t>(callee(s, wide)));
    call(rax);
    const int32_t v = value(k, 0);
    if (wide) {
      vextractf64x4(slot(v + 1), zmm0, 1);
      in_slot_[v + 1] = 1;
    }
    bind(v, 0);
  }

  void emit_step(int32_t k) {
    const FusedStep& s = prog_[k];
    now_ = invariant_[k] ? -1 : k;  // before the loop, every value read in it is live
    if (callee(s)) {
      pinned_ = 0;
      return emit_call(k, halves_ == 2 && !invariant_[k]);
    }
    for (int h = 0; h < (invariant_[k] ? 1 : halves_); ++h) emit_half(k, h);
  }

  void emit_half(int32_t k, int h) {
    const FusedStep& s = prog_[k];
    pinned_ = 0;
    const int32_t out = value(k, h);
    if (s.op == Op::Data || s.op == Op::Constant) {
      const Xbyak::Ymm d(alloc());
      if (s.op == Op::Data) load_input(k, h, d);
      else broadcast_bits(d, std::bit_cast<uint32_t>(constant_value(s)));
      bind(out, d.getIdx());
      return;
    }
    const Xbyak::Ymm a = use(value(s.a, h));
    const Xbyak::Ymm b = s.b >= 0 ? use(value(s.b, h)) : a;
    const Xbyak::Ymm c = s.c >= 0 ? use(value(s.c, h)) : a;
    const Xbyak::Ymm d(alloc());
    auto compare = [&](Pred p) {
      vcmpps(t0_, a, b, p);
      mask_to_one(d, t0_);
    };
    auto nonzero = [&](const Xbyak::Ymm& m, const Xbyak::Ymm& x) {  // x != 0 (NaN: true)
      vxorps(t1_, t1_, t1_);
      vcmpps(m, x, t1_, kNe);
    };
    switch (s.op) {
      case Op::Add: vaddps(d, a, b); break;
      case Op::Sub: vsubps(d, a, b); break;
      case Op::Mul: vmulps(d, a, b); break;
      case Op::Div: vdivps(d, a, b); break;
      // a > b || isnan(a) ? a : b — vmaxps is a > b ? a : b
      case Op::Max: case Op::Min:
        if (s.op == Op::Max) vmaxps(d, a, b);
        else vminps(d, a, b);
        vcmpps(t0_, a, a, kUnord);
        vblendvps(d, d, a, t0_);
        break;
      case Op::Eq: compare(kEq); break;
      case Op::Ne: compare(kNe); break;
      case Op::Lt: compare(kLt); break;
      case Op::Le: compare(kLe); break;
      case Op::Gt: compare(kGt); break;
      case Op::Ge: compare(kGe); break;
      case Op::And: case Op::Or:
        nonzero(t0_, a);
        vcmpps(t1_, b, t1_, kNe);
        if (s.op == Op::And) vandps(t0_, t0_, t1_);
        else vorps(t0_, t0_, t1_);
        mask_to_one(d, t0_);
        break;
      case Op::Not:
        vxorps(t1_, t1_, t1_);
        vcmpps(t0_, a, t1_, kEq);
        mask_to_one(d, t0_);
        break;
      case Op::Where:  // a != 0 ? b : c
        nonzero(t0_, a);
        vblendvps(d, c, b, t0_);
        break;
      case Op::Neg: vxorps(d, a, cslot(kSign)); break;
      case Op::Abs: vandps(d, a, cslot(kAbs)); break;
      case Op::Sqrt: vsqrtps(d, a); break;
      case Op::Rsqrt:  // 1 / sqrt(a), as the interpreter: no approximation
        vsqrtps(t0_, a);
        vmovups(d, cslot(kOne));
        vdivps(d, d, t0_);
        break;
      case Op::Relu:  // a > 0 ? a : 0
        vxorps(t1_, t1_, t1_);
        vmaxps(d, a, t1_);
        break;
      case Op::Cast:
        if (s.dtype == DType::b8) {
          nonzero(t0_, a);
          mask_to_one(d, t0_);
        } else {
          vmovaps(d, a);  // f32 or bf16 from f32 or bf16 (rounded below)
        }
        break;
      case Op::Detach: vmovaps(d, a); break;
      default: KILN_ASSERT(false);
    }
    if (s.dtype == DType::bf16) round_to_bf16(d, d);  // a bf16 value, as the interpreter rounds it
    // (Not before the loop: an invariant step may be the last reader of a
    // value that earlier loop steps read too. spill_all stores them all.)
    // (An invariant read by both halves is unbound after the first: it
    // stays in its slot.)
    if (!invariant_[k])
      for (int32_t x : {s.a, s.b, s.c})
        if (x >= 0 && last_[x] == k && reg_of_[value(x, h)] >= 0) unbind(reg_of_[value(x, h)]);
    bind(out, d.getIdx());
  }

  void store_output(int32_t reg, int h, const Operand& out, int32_t index) {
    pinned_ = 0;
    now_ = static_cast<int32_t>(prog_.size());
    const Xbyak::Ymm v = use(value(reg, h));
    mov(rax, ptr[rbx + 8 * index]);
    if (out.dtype == DType::f32) {
      vmovups(ptr[rax + r12 * 4 + 32 * h], v);
      return;
    }
    if (out.dtype == DType::bf16) {  // bf16_from_float: the rounded top halves, packed
      if (prog_[reg].dtype == DType::bf16) {
        vpsrld(t0_, v, 16);  // a bf16 value already (rounded, a NaN quiet): its top half as it is
      } else {
        bf16_round_up(v);
        vpsrld(t0_, t0_, 16);
        vpand(t1_, t1_, cslot(kQuietLow));
        vpor(t0_, t0_, t1_);
      }
      vextracti128(Xbyak::Xmm(15), t0_, 1);
      vpackusdw(Xbyak::Xmm(14), Xbyak::Xmm(14), Xbyak::Xmm(15));
      vmovdqu(ptr[rax + r12 * 2 + 16 * h], Xbyak::Xmm(14));
      return;
    }
    // b8: v != 0 -> 1 byte per lane
    vxorps(t1_, t1_, t1_);
    vcmpps(t0_, v, t1_, kNe);
    vpsrld(t0_, t0_, 31);
    vextracti128(Xbyak::Xmm(15), t0_, 1);
    vpackusdw(Xbyak::Xmm(14), Xbyak::Xmm(14), Xbyak::Xmm(15));
    vpackuswb(Xbyak::Xmm(14), Xbyak::Xmm(14), Xbyak::Xmm(14));
    vmovq(ptr[rax + r12 + 8 * h], Xbyak::Xmm(14));
  }

  // A fused reduction: the 8 values widened to double and added to lanes[0..7]
  // (in memory: a transcendental step's call may change every register).
  void add_to_lanes(int32_t reg, int h) {
    pinned_ = 0;
    now_ = static_cast<int32_t>(prog_.size());
    const Xbyak::Ymm v = use(value(reg, h));
    if (lanes_in_regs_) {
      vcvtps2pd(t0_, Xbyak::Xmm(v.getIdx()));
      vaddpd(lane0_, lane0_, t0_);
      vextractf128(Xbyak::Xmm(t1_.getIdx()), v, 1);
      vcvtps2pd(t1_, Xbyak::Xmm(t1_.getIdx()));
      vaddpd(lane1_, lane1_, t1_);
      return;
    }
    vcvtps2pd(t0_, Xbyak::Xmm(v.getIdx()));
    vaddpd(t0_, t0_, ptr[r14]);
    vmovupd(ptr[r14], t0_);
    vextractf128(Xbyak::Xmm(t1_.getIdx()), v, 1);
    vcvtps2pd(t1_, Xbyak::Xmm(t1_.getIdx()));
    vaddpd(t1_, t1_, ptr[r14 + 32]);
    vmovupd(ptr[r14 + 32], t1_);
  }

  // Every register's value still to be read (from now_ on) to its slot;
  // all registers free.
  void spill_all() {
    for (int r = 0; r < regs(); ++r) {
      const int32_t v = holder_[r];
      if (v >= 0 && !in_slot_[v] && last_of(v) >= now_) vmovups(slot(v), Xbyak::Ymm(r)), in_slot_[v] = 1;
      unbind(r);
    }
  }

  void emit() {
    const int32_t n = static_cast<int32_t>(prog_.size());
    const int32_t nin = static_cast<int32_t>(ins_.inputs.size());
    const bool sum = ins_.op == Op::Sum;
    // void fn(ptrs = rdi, begin = rsi, end = rdx[, lanes = rcx])
    push(rbx), push(rbp), push(r12), push(r13), push(r14), push(r15);
    mov(rbp, rsp);
    sub(rsp, 32 * (kConstSlots + n * halves_));
    and_(rsp, -64);
    mov(rbx, rdi);
    mov(r12, rsi);
    mov(r13, rdx);
    mov(r14, rcx);
    vxorps(t0_, t0_, t0_);
    vmovups(cslot(kZero), t0_);
    broadcast_bits(t0_, 0x3F800000u);
    vmovups(cslot(kOne), t0_);
    broadcast_bits(t0_, 0x80000000u);
    vmovups(cslot(kSign), t0_);
    broadcast_bits(t0_, 0x7FFFFFFFu);
    vmovups(cslot(kAbs), t0_);
    const std::pair<ConstSlot, uint32_t> bf16_bits[] = {
        {kLsb, 1u}, {kRound, 0x7FFFu}, {kHigh, 0xFFFF0000u}, {kQuiet, 0x00400000u}, {kQuietLow, 0x40u}};
    for (const auto& [c, bits] : bf16_bits) {
      broadcast_bits(t0_, bits);
      vmovups(cslot(c), t0_);
    }
    // Values that are the same for every element, once, into their slots.
    for (int32_t k = 0; k < n; ++k)
      if (invariant_[k]) emit_step(k);
    now_ = -1;  // every invariant the loop reads
    spill_all();
    // Everything else, 8 elements an iteration (16 with two halves); outputs
    // stored last, so an output may share memory with an input it reads
    // element for element.
    if (lanes_in_regs_) {
      vmovupd(lane0_, ptr[r14]);
      vmovupd(lane1_, ptr[r14 + 32]);
    }
    Xbyak::Label loop, done;
    L(loop);
    cmp(r12, r13);
    jge(done, T_NEAR);
    for (int32_t k = 0; k < n; ++k)
      if (!invariant_[k] && last_[k] >= 0) emit_step(k);  // stored steps are read at n
    for (int h = 0; h < halves_; ++h) {  // (a sum: half 0's 8 values into the lanes, then half 1's)
      if (sum) add_to_lanes(n - 1, h);
      else store_output(n - 1, h, ins_.output, nin);
      for (size_t e = 0; e < ins_.extra_outputs.size(); ++e)
        store_output(ins_.extra_outputs[e].reg, h, ins_.extra_outputs[e].out, nin + 1 + static_cast<int32_t>(e));
    }
    for (int r = 0; r < regs(); ++r) unbind(r);  // the next iteration starts as this one did
    for (int32_t k = 0; k < n; ++k)
      if (!invariant_[k])
        for (int h = 0; h < halves_; ++h) in_slot_[value(k, h)] = 0;
    add(r12, 8 * halves_);
    jmp(loop, T_NEAR);
    L(done);
    if (lanes_in_regs_) {
      vmovupd(ptr[r14], lane0_);
      vmovupd(ptr[r14 + 32], lane1_);
    }
    vzeroupper();
    mov(rsp, rbp);
    pop(r15), pop(r14), pop(r13), pop(r12), pop(rbp), pop(rbx);
    ret();
  }

  const Instr& ins_;
  const std::vector<FusedStep>& prog_;
  const std::vector<uint8_t> invariant_;
  const std::vector<int32_t> last_;
  std::vector<uint8_t> in_slot_;
  std::vector<int32_t> reg_of_;
  const int halves_;  // 1: 8 values an iteration; 2: 16, as two ymm halves
  int32_t holder_[kRegs] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  uint32_t pinned_ = 0;
  int32_t now_ = 0;  // the step being emitted (program.size(): the stores)
  bool lanes_in_regs_ = false;
};

bool cpu_has_avx2() {
  static const bool ok = Xbyak::util::Cpu().has(Xbyak::util::Cpu::tAVX2);
  return ok;
}

// Whether the loop takes 16 values an iteration, two ymm halves per value,
// so that its transcendental steps call the 16-lane functions (one zmm
// call where two 8-lane ones ran: libmvec's AVX-512 erff and the GELU
// composites cost per call what the 8-lane forms do). Where the build and
// the CPU have AVX-512, a step in the loop calls one, rows read row by row
// are whole 16-value steps, and KILN_JIT_WIDE is not 0.
bool wide_loop(const Instr& ins) {
  if (!jit_wide_enabled()) return false;
  const std::vector<uint8_t> invariant = compiler::invariant_steps(ins, row_broadcast);
  bool calls = false;
  for (size_t k = 0; k < ins.program.size(); ++k) calls = calls || (!invariant[k] && callee(ins.program[k]));
  if (!calls) return false;
  for (const auto& s : ins.program)
    if (s.op == Op::Data) {
      const Operand& in = ins.inputs[static_cast<size_t>(s.load)];
      if ((row_strided(ins, in.view) || row_broadcast(ins, in.view)) && ins.output.view.shape.back() % 16 != 0)
        return false;
    }
  return true;
}
#else
bool cpu_has_avx2() { return false; }
#endif

}  // namespace

bool jit_enabled() {
  int e = g_enabled.load();
  if (e < 0) {
    const int read = env_switch("KILN_JIT") ? 1 : 0;
    e = g_enabled.compare_exchange_strong(e, read) ? read : g_enabled.load();  // set_jit_enabled wins
  }
  return e == 1 && cpu_has_avx2();
}

void set_jit_enabled(bool on) { g_enabled.store(on ? 1 : 0); }

bool jit_wide_enabled() {
#ifdef KILN_HAVE_XBYAK
  static const bool on = kHave16 && Xbyak::util::Cpu().has(Xbyak::util::Cpu::tAVX512F) && env_switch("KILN_JIT_WIDE");
  return on;
#else
  return false;
#endif
}

int64_t jit_values_an_iteration(const JitKernel& kernel) { return kernel.step; }

std::shared_ptr<const JitKernel> jit_compile(const Instr& ins) {
#ifndef KILN_HAVE_XBYAK
  (void)ins;
  return nullptr;
#else
  if (!jit_enabled() || !compilable(ins)) return nullptr;
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const JitKernel>> cache;
  const int halves = wide_loop(ins) ? 2 : 1;
  std::string sig = signature(ins) + static_cast<char>(halves);
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[sig];
  if (!slot) {
    auto k = std::make_shared<JitKernel>();
    try {
      k->code = std::make_unique<Generator>(ins, 4096 + 256 * halves * ins.program.size(), halves);
      k->step = 8 * halves;
      k->code->ready();
      k->code->setProtectModeRE();  // written, then executable: never both
    } catch (const std::exception& e) {  // a code generator bug: the interpreter runs it, and says so
      std::fprintf(stderr, "kiln: fused loop not compiled, interpreted instead (%s): %s\n", e.what(),
                   compiler::op_label(ins).c_str());
      return nullptr;
    }
    if (ins.op == Op::Sum) k->sum_fn = k->code->getCode<JitKernel::SumFn>();
    else k->fn = k->code->getCode<JitKernel::Fn>();
    slot = std::move(k);
  }
  return slot;
#endif
}

namespace {

// A fused reduction (executor.h's sum_fused_blocks, as the interpreter).
void run_jit_sum(const JitKernel& kernel, const Instr& ins, std::span<const char* const> ptrs,
                 std::span<char* const> inputs, char* output) {
  float* y = reinterpret_cast<float*>(output) + ins.output.view.offset;
  sum_fused_blocks(ins, y, [&] {
    return [&](int64_t begin, int64_t len, double* lanes) {
      const int64_t body = len - len % kernel.step;
      if (body) kernel.sum_fn(ptrs.data(), begin, begin + body, lanes);
      if (body < len) {  // the ragged end, interpreted, into the lanes it falls in
        float tail[16];
        run_fused_values(ins, inputs, begin + body, len - body, tail);
        for (int64_t j = 0; j < len - body; ++j) lanes[j % kSumLanes] += static_cast<double>(tail[j]);
      }
    };
  });
}

// An elementwise loop with row-strided inputs (compilable's row_strided):
// the loop is called once per row of the output's last axis (L values, a
// multiple of 8), each such input's pointer moved so that the loop's element
// i of row r, which it reads at pointer + i, is the row's element i - r·L.
// The compiled code is the contiguous loop's: only the pointers change. A
// row_broadcast input's pointer is its row's value, which the loop
// broadcasts.
void run_rows(const JitKernel& kernel, const Instr& ins, const std::vector<const char*>& ptrs,
              const std::vector<size_t>& strided, int64_t n, int64_t block) {
  const Shape& shape = ins.output.view.shape;
  const int64_t L = shape.back(), rows = n / L, rank = static_cast<int64_t>(shape.size());
  KILN_ASSERT(L % kernel.step == 0);  // (wide_loop: rows of whole 16-value steps)
  const int64_t rows_a_block = std::max<int64_t>(1, block / L);
#pragma omp parallel if (n > 32768)
  {
    std::vector<const char*> mine(ptrs);
    std::vector<int64_t> idx(static_cast<size_t>(rank));
#pragma omp for schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += rows_a_block) {
      // The multi-index of row r0's first element over the outer axes.
      int64_t rem = r0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
      }
      for (int64_t r = r0; r < std::min(rows, r0 + rows_a_block); ++r) {
        for (size_t k : strided) {
          const compiler::View& v = ins.inputs[k].view;
          int64_t at = 0;  // the row's first element, in elements from the operand's first
          for (int64_t d = 0; d + 1 < rank; ++d) at += idx[d] * v.strides[d];
          const auto size = static_cast<int64_t>(dtype_size(ins.inputs[k].dtype));
          const int64_t from = v.strides.back() == 0 ? at : at - r * L;  // row_broadcast: the value itself
          mine[k] = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(ptrs[k]) +
                                                  static_cast<uintptr_t>(from * size));
        }
        kernel.fn(mine.data(), r * L, (r + 1) * L);
        for (int64_t d = rank - 2; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
      }
    }
  }
}

}  // namespace

void run_jit(const JitKernel& kernel, const Instr& ins, std::span<char* const> inputs, char* output,
             std::span<char* const> extra) {
  auto first = [](char* base, const Operand& op) {
    return base + op.view.offset * static_cast<int64_t>(dtype_size(op.dtype));
  };
  std::vector<const char*> ptrs;
  ptrs.reserve(ins.inputs.size() + 1 + extra.size());
  for (size_t k = 0; k < ins.inputs.size(); ++k) ptrs.push_back(first(inputs[k], ins.inputs[k]));
  if (ins.op == Op::Sum) return run_jit_sum(kernel, ins, ptrs, inputs, output);
  ptrs.push_back(first(output, ins.output));
  for (size_t e = 0; e < extra.size(); ++e) ptrs.push_back(first(extra[e], ins.extra_outputs[e].out));
  const int64_t n = numel(ins.output.view.shape);
  constexpr int64_t kBlock = 8192;
  std::vector<size_t> strided;  // inputs read row by row
  for (size_t k = 0; k < ins.inputs.size(); ++k) {
    const compiler::View& v = ins.inputs[k].view;
    if (!v.is_contiguous() && !v.is_broadcast_scalar()) strided.push_back(k);
  }
  if (!strided.empty()) return run_rows(kernel, ins, ptrs, strided, n, kBlock);
  const int64_t body = n - n % kernel.step;
  const int64_t blocks = (body + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t b = 0; b < blocks; ++b) kernel.fn(ptrs.data(), b * kBlock, std::min(body, (b + 1) * kBlock));
  if (body < n) run_fused_range(ins, inputs, output, extra, body, n - body);
}

std::shared_ptr<Plan> prepare(const compiler::Program& program) {
  auto plan = std::make_shared<Plan>();
  plan->kernels.reserve(program.instrs.size());
  for (const auto& ins : program.instrs)
    plan->kernels.push_back((ins.fused || !ins.program.empty()) && !own_loop(ins) ? jit_compile(ins) : nullptr);
  return plan;
}

}  // namespace kiln::backend::cpu
