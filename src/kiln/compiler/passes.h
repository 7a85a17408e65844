#pragma once
// The compiler's passes around lowering (compile.cpp runs them in this order):
// the graph rewrite before it, then on the lowered Program the scheduling
// passes (schedule.cpp) and the memory plan with donation (memory_plan.cpp).
// Each pass is switched by a CompileOptions flag (compile.h says why).
// Internal to the compiler.
#include <cstdint>
#include <vector>

#include "kiln/compiler/program.h"
#include "kiln/ir/graph.h"

namespace kiln::compiler {

// Each node's readers, in order, each once.
std::vector<std::vector<int32_t>> users_of(const ir::Graph& g);
// A new slot of the program; its number.
int32_t add_slot(Program& prog, SlotKind kind, int32_t index, size_t nbytes);

// schedule.cpp
void interleave_attention_grads(ir::Graph& g);    // CompileOptions::token_major_attention, before lowering
void merge_losses_into_gradients(Program& prog);  // CompileOptions::loss_with_gradient
void keep_attention_probabilities(Program& prog);  // CompileOptions::attention_probabilities
void pair_products(Program& prog);                // CompileOptions::concurrent_products

// remat_casts.cpp: a parameter's bf16 copy made again for readers far after
// the others (the backward's products), before lowering.
void rematerialize_parameter_casts(ir::Graph& g);

// bf16_results.cpp: kernels that write the bf16 values autocast rounds their
// f32 result to (CompileOptions::bf16_results), before lowering.
void write_bf16_results(ir::Graph& g);
// ... and a bf16 value widened for several elementwise readers widened in
// each of their fused groups instead of once into an f32 copy.
void widen_in_readers(ir::Graph& g);

// simplify.cpp: the graph without the nodes no result depends on.
ir::Graph eliminate_dead(const ir::Graph& g);

// memory_plan.cpp
// Slot lifetimes, in-place results (CompileOptions::in_place), and the
// temporaries' offsets in the arena.
void plan_memory(Program& prog, bool in_place);
// Outputs that may take a donated parameter's memory.
void donate(Program& prog, const ir::Graph& g);

}  // namespace kiln::compiler
