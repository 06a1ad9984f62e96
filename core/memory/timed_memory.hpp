#pragma once
// Memory over simulated time: the tasks' MemEvents placed on a Timeline (mem_start at a task's
// start, mem_peak applied and undone at its midpoint, mem_end at its end), in time order. Unlike
// replayMemory (issue order), the peak here depends on what actually overlaps in time.
#include <array>
#include <cstdint>
#include <vector>

#include "core/base/units.hpp"
#include "core/memory/allocator_replay.hpp"
#include "core/memory/caching_allocator.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"

namespace shardcast::core {

struct MemoryPoint {
    int64_t time_ns = 0;
    int32_t task = -1;
    CategoryBytes bytes{};
    bool operator==(const MemoryPoint&) const = default;
};

// One total over time, where a measurement has no categories (a trace's [memory] events).
struct TotalPoint {
    int64_t time_ns = 0;
    int64_t bytes = 0;
    bool operator==(const TotalPoint&) const = default;
};

// At most about `limit` points of `points` (in time order): where there are more, each of
// limit / 2 equal runs of points keeps its lowest and its highest, in time order, so the peak and
// the troughs survive. limit < 4 is taken as 4.
std::vector<TotalPoint> thinCurve(const std::vector<TotalPoint>& points, size_t limit);

// The curve's totals (the sum of its categories at each point), less `offset` (clamped at 0).
std::vector<TotalPoint> totalCurve(const std::vector<MemoryPoint>& curve, int64_t offset = 0);

struct TimedMemory {
    int64_t peak_bytes = 0;
    int64_t peak_time_ns = 0;
    int32_t peak_task = -1;              // the task whose event reached the peak; -1: initial state
    CategoryBytes at_peak{};
    CategoryBytes max_per_category{};
    std::vector<MemoryPoint> curve;      // filled only when asked
    bool operator==(const TimedMemory&) const = default;
};

// Reusable: keeps its buffers between calls.
class MemoryTimer {
public:
    // At equal times: ends before starts before midpoints, then by task id; a task of zero
    // duration applies start, peak and end in that order.
    void compute(const Program& program, const Timeline& timeline, TimedMemory& out,
                 bool record_curve = false);

    // Replays the same events, in the same order, through a model of PyTorch's caching allocator
    // (ReservedMemory says how), tensor by tensor (Program::buffer_tensors). Call after compute()
    // on the same program and timeline.
    // Fast skips the repeats of identical blocks where it proves the result unchanged
    // (PeriodicReplay); Full replays every call (the reference the tests compare with); Auto picks
    // the cheaper for the program (core/memory/allocator_replay.hpp).
    void replayAllocator(const Program& program, const Timeline& timeline, const AllocatorConfig& config, CachingAllocatorModel& model,
                         ReservedMemory& out, AllocatorReplay mode = AllocatorReplay::Auto);
    // The last fast replay (both steps): its runs, calls made and periods skipped.
    const PeriodicReplay& allocatorReplay() const { return m_fast; }
    // The last replay's steps: whether the second was proven and not replayed.
    const TwoStepReplay& stepReplay() const { return m_steps; }
    // Model calls the full replay of the last program makes (two steps).
    int64_t fullReplayCalls() const { return 2 * static_cast<int64_t>(m_tape.size()); }

    // Keep the results of the last `entries` replays (0, the default: none) and answer a replay
    // whose calls are those of a kept one - same tape, steady state and allocator settings, compared
    // in full - from it: the model is deterministic, so the figures are the replay's. For searches,
    // where configurations that differ in time only (prefetch, overlap) replay the same calls. The
    // model and allocatorReplay() then say nothing of a replay answered so.
    void keepReplays(size_t entries);
    // Replays answered from kept results since keepReplays().
    int64_t replaysReused() const { return m_reused; }

private:
    // Points in time order; at equal times: deferred frees, ends, starts, midpoints, then by task.
    enum Phase : uint8_t { kDeferred = 0, kEnd = 1, kStart = 2, kMid = 3 };
    struct Point {
        int64_t time_ns;
        int32_t task;   // the task whose events apply (for kDeferred: the task carrying the event)
        uint8_t phase;  // Phase; kStart covers all three phases of a zero-duration task
        int32_t event = -1;  // kDeferred: index of the event in Program::mem
    };
    void orderPoints(const Program& program, const Timeline& timeline);

    // A stream runs its tasks one after another, so its points, taken in Program order, are
    // usually already in time order: they are merged across streams instead of sorted.
    std::array<std::vector<Point>, kStreamCount> m_stream_points;
    std::vector<Point> m_points;  // all points in time order
    std::vector<Point> m_merged;  // scratch for merging
    std::vector<Point> m_deferred;  // frees placed at their buffer's last use (MemEvent::timed_after)
    // replayAllocator: a buffer's first tensor id in the allocator model, and how many of its
    // tensors (from the last) a backward has already freed.
    std::vector<int32_t> m_tensor_base;
    std::vector<uint32_t> m_tensors_freed;
    std::vector<AllocOp> m_tape;  // one step's allocator calls
    std::vector<uint32_t> m_hints;  // tape positions where a block's forward or backward begins
    PeriodicReplay m_fast;
    TwoStepReplay m_steps;
    // keepReplays: what decides a replay's figures, and the figures.
    struct KeptReplay {
        AllocatorConfig config;
        int32_t ids = 0;           // buffer tensor ids; the steady state's follow
        CategoryBytes initial{};
        std::vector<AllocOp> tape;
        AllocatorStats stats;
    };
    std::vector<KeptReplay> m_kept;
    size_t m_keep = 0, m_next_kept = 0;
    int64_t m_reused = 0;
};

}  // namespace shardcast::core
