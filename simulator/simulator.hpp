#pragma once
// Discrete-event simulation of a Program (DESIGN.md section 4). Each stream runs its tasks one at
// a time in Program order; a task starts when its stream is free, its dependencies have ended and
// the host has issued it. The host issues tasks in Program order, paying a launch cost per task
// and a hook cost at each unit's first task of a pass, and waits only where the Program says so:
// after issuing a Task::host_blocks task (and CPU work on Stream::Host, which runs on the host
// thread) until it ends, and before issuing a task with Task::host_wait until that task ends
// (FSDP1's rate limiter). While any collective
// runs, compute kernels run overlap_compute_slowdown times slower, and while any such compute
// kernel runs, collectives run overlap_collective_slowdown times slower: the remaining work of
// every running task is rescaled exactly whenever either state changes.
//
// Events fire in (time, scheduling order): equal times break ties by the order they were
// scheduled, and an assertion checks that time never goes backwards. Each stream runs one
// task at a time, so at most kStreamCount task ends and one host issue are ever pending: they live
// in fixed slots (rescheduling a task's end overwrites its slot) and the next event is the
// earliest slot.
//
// Repeated blocks: once the host has issued every task, the streams' future depends only on their
// state and on the tasks left. When that state, taken where a unit's first compute task starts,
// equals the state one unit earlier shifted by P task ids and some time, and the tasks ahead repeat
// those P ids earlier, the events in between repeat too, shifted: run() then copies them for as
// many periods as the tasks repeat instead of simulating them (trySkip() holds the proof). The
// timeline is the one simulating every event gives; setSkipRepeats(false) simulates every event.
//
// A Simulator keeps its scratch vectors between runs: reuse one per thread to time many plans.
#include <array>
#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

class Simulator {
public:
    explicit Simulator(HardwareProfile profile);
    Simulator(const Simulator&) = delete;
    Simulator& operator=(const Simulator&) = delete;

    const HardwareProfile& profile() const { return m_profile; }
    void setProfile(const HardwareProfile& profile) {
        m_profile = profile;
        m_span_ops.clear();  // the kernel durations kept were timed on the old profile
    }
    const CostModel& costModel() const { return m_cost; }

    // Times `program` into `out`. When the step could last beyond kMaxStepSeconds (every task one
    // after the other at the worst contention factor, plus every issue cost: an upper bound of the
    // simulated step), nothing is simulated, `out` is left empty and inRange() is false, so that no
    // simulated time leaves int64 nanoseconds.
    void run(const core::Program& program, core::Timeline& out);
    bool inRange() const { return m_in_range; }
    double stepBoundSeconds() const { return m_step_bound_s; }  // of the last run

    // Host time spent issuing each task (launch plus hooks), as charged by the last run.
    const std::vector<int64_t>& issueCostNs() const { return m_issue_cost_ns; }

    // Pipeline parallelism: per task id, the time (ns from the step's start) the data of a
    // receive lands, sent by another stage; -1 for other tasks. A receive then lasts until then
    // at least (NCCL's receive kernel waits for its send). Null (the default): receives take
    // their transfer time. Repeats are not skipped while set. The vector must outlive the runs.
    void setReadyTimes(const std::vector<int64_t>* ready_ns) { m_ready = ready_ns; }

    // Ranks sharing CPU cores: every task's CPU work takes `slowdown` times as long
    // (CostModel::setCoreSlowdown). Kept for the next runs; 1 (the default) for devices of their own.
    void setCoreSlowdown(double slowdown) {
        if (slowdown == m_cost.coreSlowdown()) return;
        m_cost.setCoreSlowdown(slowdown);
        m_span_ops.clear();  // the kernel durations kept were timed at the old share
    }
    double coreSlowdown() const { return m_cost.coreSlowdown(); }
    // Copy proven repeats of identical blocks instead of simulating them (the default); false
    // simulates every event (the reference the tests compare with).
    void setSkipRepeats(bool on) { m_skip_repeats = on; }
    // Periods the last run copied instead of simulating.
    int64_t lastSkippedPeriods() const { return m_skipped_periods; }

private:
    // Slot kStreamCount holds the host's next issue; slots below it, each stream's running task.
    static constexpr int kHostSlot = core::kStreamCount;
    static constexpr int kSlotCount = core::kStreamCount + 1;

    struct StreamState {
        std::vector<int32_t> tasks;      // ids in Program order
        size_t next = 0;                 // index in `tasks` of the next task to start
        uint32_t head_deps_done = 0;     // leading deps of tasks[next] already seen finished
        int32_t waits_for = -1;          // the unfinished dependency tasks[next] was last blocked on
        int32_t running = -1;
        double remaining_ns = 0;         // slowed task: uncontended work left at last_update_ns
        int64_t last_update_ns = 0;
        double factor = 1.0;             // slowed task: the slowdown it runs at since last_update_ns
    };

    // The inputs of CostModel::durationNs besides the kind (and the run's compute dtype).
    struct LastDuration {
        bool valid = false;
        core::Stream stream = core::Stream::Compute;
        int64_t flops = 0, hbm_bytes = 0, comm_bytes = 0;
        int32_t group_size = 0, group_nodes = 0;
        core::Span ops;
        int64_t ns = 0;
    };

    int64_t durationNs(const core::Task& task, const core::Program& program);
    void prepare(const core::Program& program, core::Timeline& out);
    void schedule(int slot, int64_t time_ns);
    void issueNext(int64_t now);
    void tryStart(int stream, int64_t now);
    void startTask(int32_t id, int64_t now);
    void finishTask(int stream, int64_t now);
    double factorFor(uint8_t traits) const;
    void rescale(int64_t now);

    // The event loop's state between two events, in the terms trySkip() compares (see there).
    struct StreamSnapshot {
        size_t next = 0;
        int32_t next_id = 0;   // tasks[next], INT32_MAX when the stream has no task left
        int32_t running = -1;
        uint32_t head_deps_done = 0;
        int32_t waits_for = -1;
        double remaining_ns = 0;
        int64_t last_update_ns = 0;
        double factor = 1.0;
        int64_t slot_ns = 0;
        int slot_rank = 0;     // among the pending events, by scheduling order
    };
    struct Snapshot {
        bool valid = false;
        int32_t anchor = -1;   // the compute task whose start was the last event
        int64_t now_ns = 0;
        size_t starts = 0, finishes = 0;  // m_start_log / m_finish_log sizes
        int32_t done = 0;
        int active_collectives = 0, active_compute = 0;
        uint32_t rescaled_streams = 0;
        std::array<int64_t, core::kStreamCount> busy_ns{};
        std::array<StreamSnapshot, core::kStreamCount> streams{};
    };
    void takeSnapshot(int32_t anchor, Snapshot& out) const;
    bool samePeriodTask(int32_t x, int32_t period) const;
    bool trySkip(const Snapshot& a, const Snapshot& c);

    HardwareProfile m_profile;
    CostModel m_cost;
    const core::Program* m_program = nullptr;
    core::Timeline* m_out = nullptr;

    // Per task, sized once per run.
    std::vector<int64_t> m_work_ns;       // uncontended duration
    std::vector<int64_t> m_issue_cost_ns;
    std::vector<uint8_t> m_traits;        // TaskTrait bits
    std::vector<uint8_t> m_finished;      // 1 once the task has ended
    std::vector<int32_t> m_unit_pass;     // scratch: last pass each unit was hooked in
    std::array<LastDuration, core::kTaskKindCount> m_last_duration{};
    // A GPU task's duration is the sum of its kernels' times (CostModel::computeSeconds), which
    // depend only on the kernels and on whether the task is a Backward. Tasks running the same
    // kernels share a span of Program::ops, so durations are kept per (span, backward or not):
    // m_span_ns[2 * span.offset + backward], with the span's count (count 0: not timed yet).
    // They stay valid for the next run while its Program::ops equals m_span_ops (the same kernels
    // at the same places) and the profile is unchanged: plans evaluated again, or differing only
    // in what the kernels do not see (collectives, memory), skip the op-by-op timing.
    struct SpanDuration {
        uint32_t count = 0;
        int64_t ns = 0;
    };
    std::vector<SpanDuration> m_span_ns;
    std::vector<core::OpShape> m_span_ops;
    bool m_in_range = true;      // every task's duration within kMaxStepSeconds (last run)
    double m_step_bound_s = 0;   // serial upper bound of the last run's step

    std::array<StreamState, core::kStreamCount> m_streams;
    std::array<int8_t, core::kStreamCount> m_used_streams{};  // streams with tasks, ascending
    int m_used_stream_count = 0;

    // Pending events: time and scheduling sequence number per slot; kNever when empty.
    std::array<int64_t, kSlotCount> m_slot_ns{};
    std::array<uint64_t, kSlotCount> m_slot_seq{};
    uint64_t m_next_seq = 0;
    int64_t m_now_ns = 0;

    int32_t m_next_issue = 0;
    int32_t m_host_waits_for = -1;
    bool m_host_resumes_now = false;  // the host blocked before issuing (Task::host_wait)
    int m_active_collectives = 0;  // running collectives with work (they slow compute)
    int m_active_compute = 0;      // running compute tasks slowed by overlap (they slow collectives)
    uint32_t m_rescaled_streams = 0;  // bit per stream whose running task's speed contention sets
    int32_t m_done = 0;

    // Repeats (trySkip): tasks in the order they started and ended, the anchor the last event
    // started (-1: none), the compute stream's last unit, the snapshot at the previous anchor.
    bool m_skip_repeats = true;
    const std::vector<int64_t>* m_ready = nullptr;
    int64_t m_skipped_periods = 0;
    std::vector<int32_t> m_start_log, m_finish_log;
    int32_t m_anchor = -1;
    int32_t m_last_compute_unit = -2;
    std::array<Snapshot, 2> m_snapshots;  // the previous anchor's and this one's, alternately
    int m_prev_snapshot = 0;
    // The last scan of repeating tasks: for `period`, tasks from .. end - 1 repeat (end: the first
    // that does not, or the program's size).
    int32_t m_scan_period = 0, m_scan_from = 0, m_scan_end = 0;
};

}  // namespace shardcast::sim
