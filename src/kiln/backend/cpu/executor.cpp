#include "kiln/backend/cpu/executor.h"

#include <vector>

#include "kiln/core/error.h"

namespace kiln::backend::cpu {

using compiler::SlotKind;

void execute(const compiler::Program& program, std::span<void* const> params,
             std::span<void* const> outputs, void* arena) {
  std::vector<char*> base(program.slots.size());
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const auto& slot = program.slots[s];
    switch (slot.kind) {
      case SlotKind::Param: base[s] = static_cast<char*>(params[slot.index]); break;
      case SlotKind::Output: base[s] = static_cast<char*>(outputs[slot.index]); break;
      case SlotKind::Temp: base[s] = static_cast<char*>(arena) + slot.offset; break;
    }
  }
  std::vector<char*> in;
  for (const auto& ins : program.instrs) {
    in.clear();
    for (const auto& op : ins.inputs) in.push_back(base[op.slot]);
    char* out = base[ins.output.slot];
    if (ins.fused) run_fused(ins, in, out);
    else run_kernel(ins, in, out);
  }
}

}  // namespace kiln::backend::cpu
