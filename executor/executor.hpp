#pragma once
// Runs a Program for real on a Backend and measures it (DESIGN.md section 6).
//
// Schedule: the host thread issues the tasks in Program order, waiting for Task::host_wait
// before issuing and for a host_blocks task after issuing it; one worker thread per stream the
// Program uses runs that stream's tasks in order, each once its deps have finished.
//
// Memory: every MemEvent is applied where the Program says, by buffer id, through a
// CountingAllocator: mem_start when the task starts, its mem_peak (scratch held when the work
// begins, counted at the task's midpoint as the Program states it), mem_end when it ends; a free that names a last user (MemEvent::timed_after) when that user ends. Program::initial is held once, before the steps.
//
// Clock: before each step the ranks meet in Backend::barrier(); each rank's step time zero is its
// steady_clock on leaving it, so times agree across ranks to within the barrier's exit skew.
// Each task's start and end are taken under the allocator's lock, strictly increasing, so the
// measured timeline orders the memory events as they were counted.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/base/result.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "executor/backend.hpp"

namespace shardcast::exec {

struct ExecutorOptions {
    int32_t warmup = 1;  // steps run and discarded (caches, page faults, communicators)
    int32_t steps = 3;   // steps measured, at least 1
};

struct Execution {
    std::vector<int64_t> step_ns;   // each measured step
    int32_t median_step = 0;        // index into step_ns (the lower median)
    core::Timeline timeline;        // the median step
    // MemoryTimer on the median step's measured timeline, with its curve: the same semantics as a
    // prediction's memory.
    core::TimedMemory memory;
    // The counting allocator's per-category high-water marks over the median step (its log of
    // counted changes in time order). Equal to memory.max_per_category when every event was
    // applied by the task, buffer id and size the Program says.
    core::CategoryBytes counted_high_water{};
    int32_t worker_threads = 0;
};

class Executor {
public:
    explicit Executor(Backend& backend) : m_backend(backend) {}
    // Called from the host thread after each step (warmup included) with the steps done and the
    // total: progress for people. Empty: none.
    void onStep(std::function<void(int32_t done, int32_t total)> callback) { m_on_step = std::move(callback); }
    // Errors: a step's task failed (after Backend::abortRun), or options are out of range.
    core::Result<Execution> run(const core::Program& program, const ExecutorOptions& options);

private:
    Backend& m_backend;
    std::function<void(int32_t, int32_t)> m_on_step;
};

}  // namespace shardcast::exec
