#pragma once
// When each task of a Program ran: the simulator predicts it, the backends measure it, and both
// report it in this shape so prediction and measurement compare task by task.
#include <array>
#include <cstdint>
#include <vector>

#include "core/program/program.hpp"

namespace shardcast::core {

struct TaskTime {
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    Stream stream = Stream::Compute;
    int64_t durationNs() const { return end_ns - start_ns; }
    bool operator==(const TaskTime&) const = default;
};

// What a measurement shows of one compute task's kernels (a trace's ops inside the task's span):
// the time in GEMMs, in attention kernels and in everything else, and how many ops ran. The rest
// of the task's measured time ran no op (host time between them).
struct MeasuredOps {
    bool measured = false;  // false: the measurement does not break this task down
    int64_t gemm_ns = 0;
    int64_t attention_ns = 0;
    int64_t other_ns = 0;
    int32_t count = 0;
    bool operator==(const MeasuredOps&) const = default;
};

struct Timeline {
    std::vector<TaskTime> tasks;  // indexed by task id
    std::array<int64_t, kStreamCount> stream_busy_ns{};  // sum of task durations per stream
    int64_t step_ns = 0;  // from 0 (the step's start) to the last task's end

    bool operator==(const Timeline&) const = default;
    int64_t busyNs(Stream s) const { return stream_busy_ns[static_cast<int>(s)]; }
    void clear() {
        tasks.clear();
        stream_busy_ns.fill(0);
        step_ns = 0;
    }
};

}  // namespace shardcast::core
