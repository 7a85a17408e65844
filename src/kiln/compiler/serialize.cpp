#include "kiln/compiler/serialize.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/core/error.h"

namespace kiln::compiler {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'R', 'O', 'G'};
constexpr uint32_t kFormat = 1;
// The largest valid values of the enums a record holds.
constexpr ir::Op kLastOp = static_cast<ir::Op>(static_cast<int>(ir::Op::kCount) - 1);
constexpr DType kLastDType = DType::bf16;

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void count(size_t n) { pod<uint64_t>(n); }
  void text(const std::string& s) {
    count(s.size());
    out_ += s;
  }
  template <typename T>
  void pods(const std::vector<T>& v) {
    count(v.size());
    for (const T& x : v) pod(x);
  }
  void attrs(const ir::Attrs& a) {
    pods(a.ints);
    pods(a.floats);
  }
  void view(const View& v) {
    pod(v.offset);
    pods(v.shape);
    pods(v.strides);
  }
  void operand(const Operand& o) {
    pod(o.slot);
    view(o.view);
    pod(o.dtype);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  // An element count, bounded by the bytes left (each element takes at least one).
  size_t count() {
    const uint64_t n = pod<uint64_t>();
    KILN_CHECK(n <= in_.size() - at_, "compiled program record: a count of ", n, " at byte ", at_ - 8,
               " exceeds the ", in_.size() - at_, " bytes left");
    return static_cast<size_t>(n);
  }
  std::string text() {
    const size_t n = count();
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> pods() {
    std::vector<T> v(count());
    for (T& x : v) x = pod<T>();
    return v;
  }
  template <typename E>
  E enumerator(E limit) {
    const auto raw = pod<std::underlying_type_t<E>>();
    KILN_CHECK(raw <= static_cast<std::underlying_type_t<E>>(limit), "compiled program record: value ",
               static_cast<int64_t>(raw), " at byte ", at_ - sizeof raw, " is not a valid enumerator");
    return static_cast<E>(raw);
  }
  ir::Attrs attrs() {
    ir::Attrs a;
    a.ints = pods<int64_t>();
    a.floats = pods<double>();
    return a;
  }
  View view() {
    View v;
    v.offset = pod<int64_t>();
    v.shape = pods<int64_t>();
    v.strides = pods<int64_t>();
    KILN_CHECK(v.shape.size() == v.strides.size(), "compiled program record: a view of rank ", v.shape.size(),
               " has ", v.strides.size(), " strides");
    return v;
  }
  Operand operand() {
    Operand o;
    o.slot = pod<int32_t>();
    o.view = view();
    o.dtype = enumerator(kLastDType);
    return o;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void need(size_t n) const {
    KILN_CHECK(n <= in_.size() - at_, "compiled program record: truncated at byte ", at_, " of ", in_.size());
  }
  const std::string& in_;
  size_t at_ = 0;
};

void write_graph(Writer& w, const ir::Graph& g) {
  w.count(g.nodes.size());
  for (const auto& n : g.nodes) {
    w.pod(n.op);
    w.pod(n.dtype);
    w.pods(n.shape);
    w.pods(n.inputs);
    w.attrs(n.attrs);
  }
  w.pods(g.outputs);
  w.count(g.donated.size());
  for (bool d : g.donated) w.pod<uint8_t>(d);
  w.pod(g.num_params);
}

ir::Graph read_graph(Reader& r) {
  ir::Graph g;
  g.nodes.resize(r.count());
  for (auto& n : g.nodes) {
    n.op = r.enumerator(kLastOp);
    n.dtype = r.enumerator(kLastDType);
    n.shape = r.pods<int64_t>();
    n.inputs = r.pods<int32_t>();
    n.attrs = r.attrs();
  }
  g.outputs = r.pods<int32_t>();
  g.donated.resize(r.count());
  for (size_t i = 0; i < g.donated.size(); ++i) g.donated[i] = r.pod<uint8_t>() != 0;
  g.num_params = r.pod<int32_t>();
  return g;
}

// Whether `s`'s extents are >= 0 and every product of them fits int64_t
// (zeros counted as ones), so numel and split_axes cannot overflow on it.
bool extents_fit(const Shape& s) {
  int64_t n = 1;
  return std::all_of(s.begin(), s.end(),
                     [&](int64_t d) { return d >= 0 && !__builtin_mul_overflow(n, std::max<int64_t>(d, 1), &n); });
}

// A Sum that carries a program (a fused reduction) must describe a sum over
// trailing axes of program_shape into one value per leading position, with
// every loaded operand of that shape: else its kernel would read or write
// outside its operands.
void check_fused_reduction(const Instr& ins) {
  const Shape& s = ins.program_shape;
  const bool sum = ins.op == ir::Op::Sum && !ins.attrs.ints.empty();
  // A run of consecutive axes.
  const std::vector<int64_t> axes = sum ? ir::ReduceAttrs::of(ins.attrs).axes : std::vector<int64_t>{};
  const auto rank = static_cast<int64_t>(s.size());
  bool trailing = sum && rank > 0 && !axes.empty() && axes.front() >= 0 && axes.back() == rank - 1 &&
                  extents_fit(s);
  for (size_t k = 1; trailing && k < axes.size(); ++k) trailing = axes[k] == axes[k - 1] + 1;
  KILN_CHECK(trailing, "compiled program record: a program on an instruction that is not a sum over trailing axes");
  KILN_CHECK(numel(ins.output.view.shape) == split_axes(s, axes.front(), axes.back()).outer &&
                 ins.output.dtype == DType::f32,
             "compiled program record: a fused reduction's output does not match its program shape");
  for (const FusedStep& step : ins.program)
    KILN_CHECK(step.op != ir::Op::Data || ins.inputs[step.load].view.shape == s,
               "compiled program record: a fused reduction loads an operand of another shape");
}

}  // namespace

std::string serialize_program(const ir::Graph& graph, const Program& p) {
  Writer w;
  for (char c : kMagic) w.pod(c);
  w.pod(kFormat);
  w.text(compiler_fingerprint());
  write_graph(w, graph);
  w.count(p.slots.size());
  for (const Slot& s : p.slots) {
    w.pod(s.kind);
    w.pod(s.index);
    w.pod<uint64_t>(s.nbytes);
    w.pod<uint64_t>(s.offset);
    w.pod(s.first);
    w.pod(s.last);
  }
  w.count(p.instrs.size());
  for (const Instr& ins : p.instrs) {
    w.pod<uint8_t>(ins.fused);
    w.pod(ins.op);
    w.count(ins.inputs.size());
    for (const Operand& o : ins.inputs) w.operand(o);
    w.operand(ins.output);
    w.attrs(ins.attrs);
    w.count(ins.program.size());
    for (const FusedStep& s : ins.program) {
      w.pod(s.op);
      w.pod(s.dtype);
      w.pod(s.a);
      w.pod(s.b);
      w.pod(s.c);
      w.pod(s.load);
      w.attrs(s.attrs);
    }
    w.pods(ins.program_shape);
    w.count(ins.extra_outputs.size());
    for (const ExtraOutput& e : ins.extra_outputs) {
      w.pod(e.reg);
      w.operand(e.out);
    }
    w.pod<uint8_t>(ins.with_next);
  }
  w.pod<uint64_t>(p.arena_bytes);
  w.pod(p.num_params);
  w.count(p.output_nbytes.size());
  for (size_t n : p.output_nbytes) w.pod<uint64_t>(n);
  w.pods(p.output_donor);
  w.pod<uint64_t>(p.temp_bytes_total);
  w.pod(p.num_fused);
  return w.take();
}

std::optional<Program> deserialize_program(const std::string& bytes, const ir::Graph& graph) {
  Reader r(bytes);
  for (char c : kMagic)
    KILN_CHECK(r.pod<char>() == c, "compiled program record: not a kiln program record (bad magic)");
  const uint32_t format = r.pod<uint32_t>();
  if (format != kFormat || r.text() != compiler_fingerprint()) return std::nullopt;  // another kiln wrote it
  if (read_graph(r) != graph) return std::nullopt;  // another graph with the same hash
  Program p;
  p.slots.resize(r.count());
  for (Slot& s : p.slots) {
    s.kind = r.enumerator(SlotKind::Temp);
    s.index = r.pod<int32_t>();
    s.nbytes = r.pod<uint64_t>();
    s.offset = r.pod<uint64_t>();
    s.first = r.pod<int32_t>();
    s.last = r.pod<int32_t>();
  }
  const auto num_slots = static_cast<int32_t>(p.slots.size());
  for (const Slot& s : p.slots) {
    const size_t limit = s.kind == SlotKind::Param ? static_cast<size_t>(graph.num_params)
                         : s.kind == SlotKind::Output ? graph.outputs.size()
                                                      : 1;
    KILN_CHECK(s.kind == SlotKind::Temp || (s.index >= 0 && static_cast<size_t>(s.index) < limit),
               "compiled program record: slot of parameter/output ", s.index, " (", limit, " exist)");
  }
  // Every operand stays inside its slot: a damaged record must not make a kernel write elsewhere.
  auto operand = [&] {
    Operand o = r.operand();
    KILN_CHECK(o.slot >= 0 && o.slot < num_slots, "compiled program record: operand of slot ", o.slot, " (",
               num_slots, " slots)");
    int64_t last = o.view.offset, reach = 0, bytes = 0;
    bool empty = false, overflow = o.view.offset < 0;
    for (size_t d = 0; d < o.view.shape.size(); ++d) {
      KILN_CHECK(o.view.shape[d] >= 0 && o.view.strides[d] >= 0, "compiled program record: a view with shape ",
                 to_string(o.view.shape));
      empty = empty || o.view.shape[d] == 0;
      if (o.view.shape[d] > 0)
        overflow = overflow || __builtin_mul_overflow(o.view.shape[d] - 1, o.view.strides[d], &reach) ||
                   __builtin_add_overflow(last, reach, &last);
    }
    // A view's elements are counted (numel) even where its strides are 0.
    KILN_CHECK(extents_fit(o.view.shape), "compiled program record: a view with shape ", to_string(o.view.shape),
               " has more elements than an int64_t counts");
    int64_t elems = 0;
    overflow = overflow || __builtin_add_overflow(last, 1, &elems) ||
               __builtin_mul_overflow(elems, static_cast<int64_t>(dtype_size(o.dtype)), &bytes);
    KILN_CHECK(empty || (!overflow && static_cast<uint64_t>(bytes) <= p.slots[o.slot].nbytes),
               "compiled program record: a view reaching past its slot of ", p.slots[o.slot].nbytes, " bytes");
    return o;
  };
  p.instrs.resize(r.count());
  for (Instr& ins : p.instrs) {
    ins.fused = r.pod<uint8_t>() != 0;
    ins.op = r.enumerator(kLastOp);
    ins.inputs.resize(r.count());
    for (Operand& o : ins.inputs) o = operand();
    ins.output = operand();
    ins.attrs = r.attrs();
    ins.program.resize(r.count());
    const auto steps = static_cast<int32_t>(ins.program.size());
    for (int32_t k = 0; k < steps; ++k) {
      FusedStep& s = ins.program[k];
      s.op = r.enumerator(kLastOp);
      s.dtype = r.enumerator(kLastDType);
      s.a = r.pod<int32_t>();
      s.b = r.pod<int32_t>();
      s.c = r.pod<int32_t>();
      s.load = r.pod<int32_t>();
      s.attrs = r.attrs();
      for (int32_t x : {s.a, s.b, s.c})
        KILN_CHECK(x >= -1 && x < k, "compiled program record: step ", k, " reads register ", x);
      // Data and the random draws read operand `load` (the executors index
      // the inputs with it); the other steps read none.
      const bool loads = s.op == ir::Op::Data || s.op == ir::Op::RandUniform || s.op == ir::Op::RandNormal;
      KILN_CHECK(loads ? s.load >= 0 && s.load < static_cast<int32_t>(ins.inputs.size()) : s.load == -1,
                 "compiled program record: step ", k, " (", ir::op_name(s.op), ") loads operand ", s.load, " of ",
                 ins.inputs.size());
    }
    ins.program_shape = r.pods<int64_t>();
    if (!ins.fused && steps > 0) check_fused_reduction(ins);
    else KILN_CHECK(ins.program_shape.empty(), "compiled program record: a program shape on an instruction that is "
                    "not a fused reduction");
    ins.extra_outputs.resize(r.count());
    for (ExtraOutput& e : ins.extra_outputs) {
      e.reg = r.pod<int32_t>();
      // (A kernel's extra output: the loss of CompileOptions::loss_with_gradient,
      // the probabilities of CompileOptions::attention_probabilities.)
      KILN_CHECK(ins.fused ? e.reg >= 0 && e.reg < steps
                           : e.reg == -1 && (ins.op == ir::Op::CrossEntropyGrad || ins.op == ir::Op::Attention),
                 "compiled program record: extra output of register ", e.reg);
      e.out = operand();
    }
    const auto with_next = r.pod<uint8_t>();
    KILN_CHECK(with_next <= 1, "compiled program record: instruction ", &ins - p.instrs.data(), " pairing flag ",
               int(with_next));
    ins.with_next = with_next != 0;
  }
  KILN_CHECK(p.instrs.empty() || !p.instrs.back().with_next,
             "compiled program record: the last instruction is paired with one after it");
  p.arena_bytes = r.pod<uint64_t>();
  p.num_params = r.pod<int32_t>();
  p.output_nbytes.resize(r.count());
  for (size_t& n : p.output_nbytes) n = r.pod<uint64_t>();
  p.output_donor = r.pods<int32_t>();
  p.temp_bytes_total = r.pod<uint64_t>();
  p.num_fused = r.pod<int32_t>();
  KILN_CHECK(r.done(), "compiled program record: bytes after the end of the program");
  KILN_CHECK(p.num_params == graph.num_params && p.output_nbytes.size() == graph.outputs.size() &&
                 p.output_donor.size() == p.output_nbytes.size(),
             "compiled program record: its parameters and outputs do not match its graph");
  for (const Slot& s : p.slots)
    KILN_CHECK(s.kind != SlotKind::Temp || (s.nbytes <= p.arena_bytes && s.offset <= p.arena_bytes - s.nbytes),
               "compiled program record: a temporary at byte ", s.offset, " of ", s.nbytes,
               " bytes lies outside the arena of ", p.arena_bytes);
  return p;
}

}  // namespace kiln::compiler
