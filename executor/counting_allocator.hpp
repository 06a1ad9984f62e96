#pragma once
// The Program's buffers held for real and counted per memory category (what PyTorch's
// memory_allocated reports, by FSDPMemTracker's categories). Blocks freed are cached by exact
// size and handed to the next request of that size, as the caching allocator does, so that steady
// steps do not pay page faults; the counts cover live buffers only.
#include <cstdint>
#include <map>
#include <vector>

#include "core/base/units.hpp"
#include "core/program/program.hpp"
#include "executor/backend.hpp"

namespace shardcast::exec {

// Not thread-safe: the executor serialises calls (it takes the event's timestamp under the same lock).
//
// High-water marks: every counted change is logged with its time on the step's clock; highWater()
// replays the log in time order. Allocations and frees are logged when they happen; a task's
// transient bytes (mem_peak), which the Program states as one instant, are held for real when the
// task's work begins and logged at the task's midpoint once its end is known: the instant a
// prediction (core::MemoryTimer) places them at. At equal times, stamped events come before
// transients, as in MemoryTimer.
class CountingAllocator {
public:
    explicit CountingAllocator(Backend& backend) : m_backend(backend) {}
    CountingAllocator(const CountingAllocator&) = delete;
    CountingAllocator& operator=(const CountingAllocator&) = delete;
    ~CountingAllocator();

    // Sizes the buffer table (ids 0 .. buffer_count - 1) and holds Program::initial, once.
    void holdInitial(const core::Program& program);
    // Starts a step's log from the bytes live now.
    void beginStep();

    // A mem_start / mem_end event at `time_ns`: +bytes allocates its buffer, -bytes frees it.
    void apply(const core::MemEvent& e, int64_t time_ns);
    // A task's mem_peak events: their scratch blocks (positive events) allocated and freed for
    // real now; logTransient counts all of them, applied and undone at `time_ns`.
    void touchScratch(const core::MemEvent* events, uint32_t count);
    void logTransient(const core::MemEvent* events, uint32_t count, int64_t time_ns);

    const core::CategoryBytes& live() const { return m_live; }
    core::CategoryBytes highWater();  // over the step's log
    int32_t liveBuffers() const { return m_live_buffers; }
    int64_t heldBytes() const { return m_held_bytes; }  // live plus cached, initial included

private:
    void* take(int64_t bytes);
    void give(void* ptr, int64_t bytes);

    Backend& m_backend;
    struct Block {
        void* ptr = nullptr;
        int64_t bytes = 0;
    };
    std::vector<Block> m_buffers;                  // by buffer id; ptr null when not live
    std::vector<Block> m_initial;                  // one block per category of Program::initial
    struct Change {
        int64_t time_ns;
        uint8_t transient;  // 0: allocation or free, 1: mem_peak (after stamped events at equal times)
        uint32_t seq;       // log order: keeps a transient's apply and undo together
        core::MemCategory category;
        int64_t delta;
    };
    std::vector<Change> m_log;
    core::CategoryBytes m_step_start{};
    std::multimap<int64_t, void*> m_cache;         // freed blocks by size
    core::CategoryBytes m_live{};
    int32_t m_live_buffers = 0;
    int64_t m_held_bytes = 0;
};

}  // namespace shardcast::exec
