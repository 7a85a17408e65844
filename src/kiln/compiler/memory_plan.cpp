// Memory planning: each slot's lifetime, results written over operands that
// die with them (CompileOptions::in_place), greedy best-fit placement of the
// temporaries in one arena, and donation of parameter memory to outputs.
#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "kiln/compiler/passes.h"

namespace kiln::compiler {

using ir::Graph;
using ir::Op;

namespace {

// Whether instruction `ins` may write its result over operand k
// (CompileOptions::in_place): it reads each element (fused groups) or each
// row (the row kernels: the whole row before any of it is written) of the
// operand before it writes that part of the result.
bool overwritable(const Instr& ins, size_t k) {
  if (ins.fused) return true;
  switch (ins.op) {
    case Op::Normalize: return k == 0;
    case Op::NormalizeGrad: return k <= 1;    // x and dy: both rows are read (statistics) before dx's is written
    case Op::CrossEntropyGrad: return k == 0;  // the logits
    case Op::IndexAdd: return k == 2;          // the base (copied first when apart)
    case Op::IndexCopy: return k == 0;         // x (copied first when apart; else only the slices are written)
    default: return false;
  }
}

// CompileOptions::in_place. Runs on the lifetimes, before placement. A
// merged result's slot is left unused (first = -1) and every operand that
// named it names the operand's slot, whose lifetime grows to the result's:
// a chain of elementwise groups shares one slot.
void share_dying_operands(Program& prog) {
  auto& slots = prog.slots;
  auto& instrs = prog.instrs;
  std::vector<int32_t> into(slots.size());
  std::iota(into.begin(), into.end(), 0);
  auto rename = [&](Operand& o) { o.slot = into[o.slot]; };
  for (size_t k = 0; k < instrs.size(); ++k) {
    Instr& ins = instrs[k];
    for (Operand& in : ins.inputs) rename(in);  // earlier results merged into their operands
    Slot& out = slots[ins.output.slot];
    if (out.kind != SlotKind::Temp || out.first != static_cast<int32_t>(k) || ins.with_next ||
        !ins.output.view.is_contiguous())
      continue;
    const int64_t n = numel(ins.output.view.shape);
    // The operand read in the result's element order: contiguous from the
    // same offset, as many elements of the same size.
    auto aligned = [&](const Operand& in) {
      return in.view.is_contiguous() && in.view.offset == ins.output.view.offset && numel(in.view.shape) == n &&
             dtype_size(in.dtype) == dtype_size(ins.output.dtype);
    };
    for (size_t i = 0; i < ins.inputs.size(); ++i) {
      const int32_t s = ins.inputs[i].slot;
      Slot& src = slots[s];
      if (!overwritable(ins, i) || src.kind != SlotKind::Temp || src.last != static_cast<int32_t>(k) ||
          src.nbytes != out.nbytes)
        continue;
      // Every read of that slot here (an operand may come twice, or as a transpose) in that order.
      bool ok = true;
      for (size_t j = 0; j < ins.inputs.size(); ++j)
        if (ins.inputs[j].slot == s) ok = ok && overwritable(ins, j) && aligned(ins.inputs[j]);
      if (!ok) continue;
      into[ins.output.slot] = s;
      src.last = out.last;
      out.first = out.last = -1;
      rename(ins.output);
      break;
    }
  }
  for (Instr& ins : instrs) {  // results merged after their readers were renamed
    for (Operand& in : ins.inputs) rename(in);
    rename(ins.output);
    for (ExtraOutput& e : ins.extra_outputs) rename(e.out);
  }
}

}  // namespace

void plan_memory(Program& prog, bool in_place) {
  for (size_t k = 0; k < prog.instrs.size(); ++k) {
    const Instr& ins = prog.instrs[k];
    for (const auto& op : ins.inputs) prog.slots[op.slot].last = static_cast<int32_t>(k);
    auto written = [&](const Operand& o) {
      Slot& out = prog.slots[o.slot];
      if (out.first < 0) out.first = static_cast<int32_t>(k);
      out.last = std::max(out.last, static_cast<int32_t>(k));
    };
    written(ins.output);
    for (const auto& e : ins.extra_outputs) written(e.out);
  }
  // A pair (Instr::with_next) runs at once: what either reads or writes
  // lives through both, so neither's result takes the other's operands.
  for (size_t k = 0; k + 1 < prog.instrs.size(); ++k) {
    if (!prog.instrs[k].with_next) continue;
    const auto first = static_cast<int32_t>(k), second = first + 1;
    for (Slot& slot : prog.slots) {
      if (slot.last == first) slot.last = second;
      if (slot.first == second) slot.first = first;
    }
  }
  if (in_place) share_dying_operands(prog);
  // Greedy best-fit: largest first, each at the lowest offset free of every
  // placed temporary whose lifetime overlaps.
  std::vector<int32_t> temps;
  for (size_t s = 0; s < prog.slots.size(); ++s)
    if (prog.slots[s].kind == SlotKind::Temp && prog.slots[s].first >= 0) {  // not merged into another
      temps.push_back(static_cast<int32_t>(s));
      prog.temp_bytes_total += prog.slots[s].nbytes;
    }
  std::sort(temps.begin(), temps.end(), [&](int32_t a, int32_t b) {
    return prog.slots[a].nbytes != prog.slots[b].nbytes ? prog.slots[a].nbytes > prog.slots[b].nbytes : a < b;
  });
  auto align = [](size_t x) { return (x + 63) / 64 * 64; };
  std::vector<int32_t> placed;
  for (int32_t s : temps) {
    Slot& slot = prog.slots[s];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int32_t p : placed) {
      const Slot& q = prog.slots[p];
      if (q.first <= slot.last && slot.first <= q.last) busy.push_back({q.offset, q.offset + align(q.nbytes)});
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (auto [b, e] : busy) {
      if (offset + align(slot.nbytes) <= b) break;
      offset = std::max(offset, e);
    }
    slot.offset = offset;
    prog.arena_bytes = std::max(prog.arena_bytes, offset + align(slot.nbytes));
    placed.push_back(s);
  }
}

// An output may take a donated parameter's memory when the parameter is
// not read after the output is written, and the writing instruction reads
// it (if at all) as an operand it may write its result over (overwritable),
// in the result's element order.
void donate(Program& prog, const Graph& g) {
  std::vector<int32_t> param_last(g.num_params, -1);
  std::vector<size_t> param_bytes(g.num_params, 0);
  for (const Slot& s : prog.slots)
    if (s.kind == SlotKind::Param) {
      param_last[s.index] = std::max(param_last[s.index], s.last);
      param_bytes[s.index] = s.nbytes;
    }
  // Who writes each output.
  std::vector<int32_t> writer(g.outputs.size(), -1);
  std::vector<const Operand*> written(g.outputs.size(), nullptr);
  for (size_t k = 0; k < prog.instrs.size(); ++k) {
    auto note = [&](const Operand& w) {
      const Slot& s = prog.slots[w.slot];
      if (s.kind == SlotKind::Output && writer[s.index] < 0) {
        writer[s.index] = static_cast<int32_t>(k);
        written[s.index] = &w;
      }
    };
    note(prog.instrs[k].output);
    for (const auto& e : prog.instrs[k].extra_outputs) note(e.out);
  }
  // First each output takes a parameter its writer reads (a parameter's
  // update takes the parameter's memory), then any free one of its size.
  std::vector<bool> taken(g.num_params, false);
  for (bool own_only : {true, false})
    for (size_t o = 0; o < g.outputs.size(); ++o) {
      if (writer[o] < 0 || prog.output_donor[o] >= 0) continue;
      const Instr& ins = prog.instrs[writer[o]];
      const Operand& out = *written[o];
      for (int32_t p = 0; p < g.num_params; ++p) {
        if (!g.donated[p] || taken[p] || param_bytes[p] != prog.slots[out.slot].nbytes) continue;
        if (param_last[p] > writer[o]) continue;
        auto is_p = [&](const Operand& in) {
          const Slot& s = prog.slots[in.slot];
          return s.kind == SlotKind::Param && s.index == p;
        };
        if (writer[o] > 0) {  // the first product of the writer's pair runs at the same time
          const Instr& first = prog.instrs[writer[o] - 1];
          if (first.with_next && std::any_of(first.inputs.begin(), first.inputs.end(), is_p)) continue;
        }
        // E.g. a fused instruction loads every chunk of its inputs before it
        // stores that chunk of any output, so reading p element for element is
        // safe; an IndexCopy of p writes only its slices.
        bool reads_elementwise = true, reads = false;
        for (size_t i = 0; i < ins.inputs.size(); ++i) {
          const Operand& in = ins.inputs[i];
          if (!is_p(in)) continue;
          reads = true;
          reads_elementwise = reads_elementwise && overwritable(ins, i) && in.view == out.view &&
                              dtype_size(in.dtype) == dtype_size(out.dtype);
        }
        if ((reads && !reads_elementwise) || (own_only && !reads)) continue;
        taken[p] = true;
        prog.output_donor[o] = p;
        break;
      }
    }
}

}  // namespace kiln::compiler
