#pragma once
// Replays a Program's allocations and frees in issue order: what torch.cuda.memory_allocated
// (and PyTorch's FSDP2 memory tracker) would report over one steady-state step.
#include <cstdint>
#include <vector>

#include "core/base/units.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

struct MemorySample {
    int32_t task = 0;       // after (or inside, for a transient peak) this task
    CategoryBytes bytes{};
};

struct ModelStates {
    int64_t params = 0;     // sharded (or full) parameters in the master dtype
    int64_t grads = 0;      // gradients held when the optimizer steps
    int64_t optimizer = 0;  // optimizer state
};

struct MemoryReport {
    int64_t peak_bytes = 0;
    int32_t peak_task = -1;
    CategoryBytes at_peak{};
    CategoryBytes max_per_category{};
    ModelStates model_states;
    std::vector<MemorySample> curve;  // filled only when asked
};

int64_t total(const CategoryBytes& b);

// Asserts (debug) that no category goes negative: every free matches an earlier allocation.
void replayMemory(const Program& program, MemoryReport& out, bool record_curve = false);

// An eval step (model.eval() under torch.no_grad(), one micro-batch) replayed from the training
// Program: its micro-batch 0 up to its last forward task (FSDP still unshards and reshards every
// unit as in training's forward), from the steady state, each task's Activation (what training
// keeps for backward) alive only while the task runs: nothing accumulates, the loss's logits count
// where they are made. Exact where the peak is at the loss; inside a block it counts the block's
// tensors at once, an upper bound. last_forward_task is -1 (and peak_bytes 0) without a forward.
struct EvalReplay {
    int32_t last_forward_task = -1;
    int64_t peak_bytes = 0;
};
EvalReplay replayEvalStep(const Program& program);

}  // namespace shardcast::core
