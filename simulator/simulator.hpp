#pragma once
// Discrete-event simulation of a Program (DESIGN.md section 4). Each stream runs its tasks one at
// a time in Program order; a task starts when its stream is free, its dependencies have ended and
// the host has issued it. The host issues tasks in Program order, paying a launch cost per task
// and a hook cost at each unit's first task of a pass, and waits only where Task::host_blocks is
// set (and for CPU work on Stream::Host, which runs on the host thread). While any collective
// runs, compute kernels run overlap_compute_slowdown times slower: their remaining work is
// rescaled exactly whenever that state changes.
//
// A Simulator keeps its scratch vectors between runs: reuse one per thread to time many plans.
#include <array>
#include <cstdint>
#include <vector>

#include "core/program.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/event_queue.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/timeline.hpp"

namespace shardcast::sim {

class Simulator {
public:
    explicit Simulator(HardwareProfile profile);
    Simulator(const Simulator&) = delete;
    Simulator& operator=(const Simulator&) = delete;

    const HardwareProfile& profile() const { return m_profile; }
    void setProfile(const HardwareProfile& profile) { m_profile = profile; }
    const CostModel& costModel() const { return m_cost; }

    void run(const core::Program& program, Timeline& out);

    // Host time spent issuing each task (launch plus hooks), as charged by the last run.
    const std::vector<int64_t>& issueCostNs() const { return m_issue_cost_ns; }

private:
    void prepare(const core::Program& program);
    void issueNext(int64_t now);
    void tryStart(int stream, int64_t now);
    void startTask(int32_t id, int64_t now);
    void finishTask(int32_t id, int64_t now);
    void setContention(bool on, int64_t now);

    HardwareProfile m_profile;
    CostModel m_cost;
    EventQueue m_queue;
    const core::Program* m_program = nullptr;
    Timeline* m_out = nullptr;

    // Per task.
    std::vector<int64_t> m_work_ns;       // uncontended duration
    std::vector<int64_t> m_issue_cost_ns;
    std::vector<int32_t> m_pending;       // dependencies not yet ended
    std::vector<int32_t> m_dependents_offset, m_dependents;  // reverse edges (CSR)
    std::vector<uint8_t> m_state;         // TaskState
    std::vector<uint32_t> m_generation;
    std::vector<double> m_remaining_ns;   // uncontended work left at m_last_update_ns
    std::vector<int64_t> m_last_update_ns;
    std::vector<int32_t> m_unit_pass;     // scratch: last pass each unit was hooked in
    std::vector<int32_t> m_cursor;        // scratch: fill position per task in m_dependents

    // Per stream.
    std::array<std::vector<int32_t>, core::kStreamCount> m_stream_tasks;
    std::array<size_t, core::kStreamCount> m_stream_pos{};
    std::array<int32_t, core::kStreamCount> m_running{};

    int32_t m_next_issue = 0;
    int32_t m_host_waits_for = -1;
    int m_active_collectives = 0;
    double m_slowdown = 1.0;  // current slowdown of compute tasks
    int32_t m_done = 0;
};

}  // namespace shardcast::sim
