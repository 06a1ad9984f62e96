#include "simulator/simulator.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace shardcast::sim {
namespace {

enum TaskState : uint8_t { kWaiting, kIssued, kRunning, kDone };
constexpr int32_t kNoTask = -1;

int streamIndex(core::Stream s) { return static_cast<int>(s); }

}  // namespace

Simulator::Simulator(HardwareProfile profile) : m_profile(std::move(profile)), m_cost(m_profile) {}

void Simulator::prepare(const core::Program& program) {
    const int32_t n = program.size();
    m_work_ns.resize(n);
    m_issue_cost_ns.resize(n);
    m_pending.resize(n);
    m_state.assign(n, kWaiting);
    m_generation.assign(n, 0);
    m_remaining_ns.assign(n, 0.0);
    m_last_update_ns.assign(n, 0);
    m_dependents_offset.assign(n + 1, 0);
    for (auto& list : m_stream_tasks) list.clear();

    // Host pass per micro-batch: forward until its first backward task; a unit's hooks are charged
    // at its first task of each (micro-batch, pass).
    m_unit_pass.assign(program.units.size(), -1);
    int16_t micro_batch = -1;
    bool backward = false;
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        m_work_ns[id] = m_cost.durationNs(t, program.compute_dtype);
        m_pending[id] = static_cast<int32_t>(t.deps.count);
        m_stream_tasks[streamIndex(t.stream)].push_back(id);
        const int32_t* deps = program.depsBegin(t);
        for (uint32_t k = 0; k < t.deps.count; ++k) {
            assert(deps[k] >= 0 && deps[k] < id && "a task depends only on earlier tasks");
            ++m_dependents_offset[deps[k] + 1];
        }
        if (t.micro_batch != micro_batch) {
            micro_batch = t.micro_batch;
            backward = false;
        }
        if (t.kind == core::TaskKind::Backward || t.kind == core::TaskKind::Recompute) backward = true;
        if (t.kind == core::TaskKind::Forward) backward = false;
        int64_t cost = m_profile.task_launch_ns;
        if (t.unit >= 0 && static_cast<size_t>(t.unit) < m_unit_pass.size()) {
            const int32_t pass = micro_batch * 2 + (backward ? 1 : 0);
            if (m_unit_pass[t.unit] != pass) {
                m_unit_pass[t.unit] = pass;
                cost += m_profile.unit_hook_ns;
            }
        }
        m_issue_cost_ns[id] = cost;
    }
    for (int32_t i = 0; i < n; ++i) m_dependents_offset[i + 1] += m_dependents_offset[i];
    m_dependents.resize(m_dependents_offset[n]);
    // Fill in id order so each task's dependents are listed in Program order.
    std::vector<int32_t>& fill = m_cursor;
    fill.assign(m_dependents_offset.begin(), m_dependents_offset.end() - 1);
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        const int32_t* deps = program.depsBegin(t);
        for (uint32_t k = 0; k < t.deps.count; ++k) m_dependents[fill[deps[k]]++] = id;
    }
}

void Simulator::run(const core::Program& program, Timeline& out) {
    m_program = &program;
    m_out = &out;
    const int32_t n = program.size();
    prepare(program);
    out.clear();
    out.tasks.resize(n);
    for (int32_t id = 0; id < n; ++id) out.tasks[id] = TaskTime{0, 0, program.tasks[id].stream};

    m_queue.clear();
    m_stream_pos.fill(0);
    m_running.fill(kNoTask);
    m_next_issue = 0;
    m_host_waits_for = kNoTask;
    m_active_collectives = 0;
    m_slowdown = 1.0;
    m_done = 0;
    if (n == 0) return;

    m_queue.push(m_issue_cost_ns[0], kNoTask);
    while (!m_queue.empty()) {
        const Event e = m_queue.pop();
        if (e.task == kNoTask) {
            issueNext(e.time_ns);
            continue;
        }
        if (m_state[e.task] != kRunning || e.generation != m_generation[e.task]) continue;  // rescheduled
        finishTask(e.task, e.time_ns);
    }
    assert(m_done == n && "every task ends: dependencies point backwards and streams run in order");
    for (const TaskTime& t : out.tasks) out.step_ns = std::max(out.step_ns, t.end_ns);
    m_program = nullptr;
    m_out = nullptr;
}

void Simulator::issueNext(int64_t now) {
    const int32_t id = m_next_issue++;
    const core::Task& t = m_program->tasks[id];
    m_state[id] = kIssued;
    tryStart(streamIndex(t.stream), now);
    const bool waits = t.host_blocks || t.stream == core::Stream::Host;
    if (waits && m_state[id] != kDone) {
        m_host_waits_for = id;
    } else if (m_next_issue < m_program->size()) {
        m_queue.push(now + m_issue_cost_ns[m_next_issue], kNoTask);
    }
}

void Simulator::tryStart(int stream, int64_t now) {
    if (m_running[stream] != kNoTask) return;
    const auto& list = m_stream_tasks[stream];
    const size_t pos = m_stream_pos[stream];
    if (pos == list.size()) return;
    const int32_t id = list[pos];
    if (m_state[id] != kIssued || m_pending[id] > 0) return;
    startTask(id, now);
}

void Simulator::startTask(int32_t id, int64_t now) {
    const core::Task& t = m_program->tasks[id];
    const int s = streamIndex(t.stream);
    ++m_stream_pos[s];
    m_running[s] = id;
    m_state[id] = kRunning;
    m_out->tasks[id].start_ns = now;
    const int64_t work = m_work_ns[id];
    if (core::isCollective(t.kind) && work > 0) {
        if (++m_active_collectives == 1) setContention(true, now);
    }
    int64_t end = now + work;
    if (CostModel::slowedByOverlap(t)) {
        m_remaining_ns[id] = static_cast<double>(work);
        m_last_update_ns[id] = now;
        end = now + std::llround(m_remaining_ns[id] * m_slowdown);
    }
    m_queue.push(end, id, ++m_generation[id]);
}

void Simulator::finishTask(int32_t id, int64_t now) {
    const core::Task& t = m_program->tasks[id];
    const int s = streamIndex(t.stream);
    m_state[id] = kDone;
    ++m_done;
    m_running[s] = kNoTask;
    TaskTime& tt = m_out->tasks[id];
    tt.end_ns = now;
    m_out->stream_busy_ns[s] += now - tt.start_ns;
    if (core::isCollective(t.kind) && m_work_ns[id] > 0) {
        if (--m_active_collectives == 0) setContention(false, now);
    }
    for (int32_t k = m_dependents_offset[id]; k < m_dependents_offset[id + 1]; ++k) --m_pending[m_dependents[k]];
    if (m_host_waits_for == id) {
        m_host_waits_for = kNoTask;
        if (m_next_issue < m_program->size()) m_queue.push(now + m_issue_cost_ns[m_next_issue], kNoTask);
    }
    for (int stream = 0; stream < core::kStreamCount; ++stream) tryStart(stream, now);
}

void Simulator::setContention(bool on, int64_t now) {
    const double slowdown = on ? m_profile.overlap_compute_slowdown : 1.0;
    if (slowdown == m_slowdown) return;
    for (int stream = 0; stream < core::kStreamCount; ++stream) {
        const int32_t id = m_running[stream];
        if (id == kNoTask || !CostModel::slowedByOverlap(m_program->tasks[id])) continue;
        const double done = static_cast<double>(now - m_last_update_ns[id]) / m_slowdown;
        m_remaining_ns[id] = std::max(0.0, m_remaining_ns[id] - done);
        m_last_update_ns[id] = now;
        m_queue.push(now + std::llround(m_remaining_ns[id] * slowdown), id, ++m_generation[id]);
    }
    m_slowdown = slowdown;
}

}  // namespace shardcast::sim
