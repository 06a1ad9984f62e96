#include "simulator/simulator.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <type_traits>

namespace shardcast::sim {
namespace {

constexpr int32_t kNoTask = -1;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// What the event loop needs to know of a task, computed once per run.
enum TaskTrait : uint8_t {
    kContends = 1,         // a collective with work: while one runs, compute is slowed; it is slowed by compute
    kSlowed = 2,           // CostModel::slowedByOverlap
    kHostWaits = 4,        // the host waits for it after issuing it
    kComputeContends = 8,  // kSlowed with work: while one runs, collectives are slowed
};

int streamIndex(core::Stream s) { return static_cast<int>(s); }

// Kernels byte for byte: equal bytes are equal kernels (OpShape holds integers only). Equal
// kernels whose padding bytes differ compare unequal, which only costs timing them again.
static_assert(std::is_trivially_copyable_v<core::OpShape>);
bool sameBytes(const std::vector<core::OpShape>& a, const std::vector<core::OpShape>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(core::OpShape)) == 0);
}

}  // namespace

Simulator::Simulator(HardwareProfile profile) : m_profile(std::move(profile)), m_cost(m_profile) {}

// Consecutive tasks of one kind mostly repeat the same work (block after block), so the duration
// of the last task of each kind is kept and reused when the next one's work is identical.
// Tasks that run the same kernels share one span of Program::ops (the lowering's contract), so
// the other tasks timed by their kernels find their duration in m_span_ns.
int64_t Simulator::durationNs(const core::Task& t, const core::Program& program) {
    LastDuration& last = m_last_duration[static_cast<int>(t.kind)];
    if (last.valid && last.stream == t.stream && last.flops == t.flops && last.hbm_bytes == t.hbm_bytes &&
        last.comm_bytes == t.comm_bytes && last.group_size == t.group_size && last.group_nodes == t.group_nodes &&
        last.ops == t.ops) {
        return last.ns;
    }
    SpanDuration* span = nullptr;
    // The tasks CostModel::computeSeconds times kernel by kernel (not CPU work on Stream::Host).
    const bool by_kernels = t.ops.count > 0 && t.stream != core::Stream::Host && !core::isCollective(t.kind) &&
                            t.kind != core::TaskKind::HostToDevice && t.kind != core::TaskKind::DeviceToHost;
    if (by_kernels) {
        span = &m_span_ns[2 * static_cast<size_t>(t.ops.offset) + (t.kind == core::TaskKind::Backward ? 1 : 0)];
        if (span->count == t.ops.count) {
            last = LastDuration{true, t.stream, t.flops, t.hbm_bytes, t.comm_bytes, t.group_size, t.group_nodes, t.ops, span->ns};
            return span->ns;
        }
    }
    // Seconds first: a duration beyond the step limit is not converted (it would leave int64 ns).
    const double s = m_cost.durationSeconds(t, program);
    int64_t ns = 0;
    if (s <= kMaxStepSeconds) {
        ns = roundToInt64(s * 1e9);
    } else {
        m_in_range = false;
    }
    if (span && s <= kMaxStepSeconds) *span = SpanDuration{t.ops.count, ns};
    last = LastDuration{true, t.stream, t.flops, t.hbm_bytes, t.comm_bytes, t.group_size, t.group_nodes, t.ops, ns};
    return last.ns;
}

void Simulator::prepare(const core::Program& program, core::Timeline& out) {
    const int32_t n = program.size();
    m_work_ns.resize(n);
    m_issue_cost_ns.resize(n);
    m_traits.resize(n);
    m_finished.assign(n, 0);
    for (StreamState& st : m_streams) {
        st.tasks.clear();
        st.next = 0;
        st.head_deps_done = 0;
        st.waits_for = kNoTask;
        st.running = kNoTask;
    }
    out.clear();
    out.tasks.resize(n);

    // Host pass per micro-batch: forward until its first backward task; a unit's hooks are charged
    // at its first task of each (micro-batch, pass).
    m_unit_pass.assign(program.units.size(), -1);
    m_last_duration.fill(LastDuration{});
    if (!sameBytes(program.ops, m_span_ops)) {
        m_span_ops = program.ops;
        m_span_ns.assign(2 * program.ops.size(), SpanDuration{});
    }
    m_in_range = true;
    double serial_ns = 0, issue_ns = 0;
    int16_t micro_batch = -1;
    bool backward = false;
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        const int64_t work = durationNs(t, program);
        m_work_ns[id] = work;
        serial_ns += static_cast<double>(work);
        uint8_t traits = 0;
        if (core::isCollective(t.kind) && work > 0) traits |= kContends;
        if (CostModel::slowedByOverlap(t)) traits |= kSlowed;
        if ((traits & kSlowed) && work > 0) traits |= kComputeContends;
        if (t.host_blocks || t.stream == core::Stream::Host) traits |= kHostWaits;
        m_traits[id] = traits;
        m_streams[streamIndex(t.stream)].tasks.push_back(id);
        out.tasks[id].stream = t.stream;
#ifndef NDEBUG
        const int32_t* deps = program.depsBegin(t);
        for (uint32_t k = 0; k < t.deps.count; ++k) {
            assert(deps[k] >= 0 && deps[k] < id && "a task depends only on earlier tasks");
        }
#endif
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
        issue_ns += static_cast<double>(cost);
    }
    const double slowdown =
        std::max({1.0, m_profile.overlap_compute_slowdown, m_profile.overlap_collective_slowdown});
    m_step_bound_s = m_in_range ? (serial_ns * slowdown + issue_ns) / 1e9 : std::numeric_limits<double>::infinity();
    if (!(m_step_bound_s <= kMaxStepSeconds)) m_in_range = false;
    // Streams no task uses never run anything: leave them out of the per-event scans.
    m_used_stream_count = 0;
    for (int s = 0; s < core::kStreamCount; ++s) {
        if (!m_streams[s].tasks.empty()) m_used_streams[m_used_stream_count++] = static_cast<int8_t>(s);
    }
}

void Simulator::run(const core::Program& program, core::Timeline& out) {
    m_program = &program;
    m_out = &out;
    const int32_t n = program.size();
    prepare(program, out);
    if (!m_in_range) {
        out.clear();
        return;
    }

    m_slot_ns.fill(kNever);
    m_slot_seq.fill(0);
    m_next_seq = 0;
    m_now_ns = 0;
    m_next_issue = 0;
    m_host_waits_for = kNoTask;
    m_host_resumes_now = false;
    m_active_collectives = 0;
    m_active_compute = 0;
    m_rescaled_streams = 0;
    m_done = 0;
    if (n == 0) return;

    schedule(kHostSlot, m_issue_cost_ns[0]);
    for (;;) {
        int slot = kHostSlot;
        int64_t time_ns = m_slot_ns[kHostSlot];
        uint64_t seq = m_slot_seq[kHostSlot];
        for (int k = 0; k < m_used_stream_count; ++k) {
            const int s = m_used_streams[k];
            if (m_slot_ns[s] < time_ns || (m_slot_ns[s] == time_ns && m_slot_seq[s] < seq)) {
                slot = s;
                time_ns = m_slot_ns[s];
                seq = m_slot_seq[s];
            }
        }
        if (time_ns == kNever) break;
        assert(time_ns >= m_now_ns && "simulated time went backwards");
        m_now_ns = time_ns;
        m_slot_ns[slot] = kNever;
        if (slot == kHostSlot) {
            issueNext(time_ns);
        } else {
            finishTask(slot, time_ns);
        }
    }
    assert(m_done == n && "every task ends: dependencies point backwards and streams run in order");
    // Ends fire in time order, so the last one is the step's end.
    out.step_ns = m_now_ns;
    m_program = nullptr;
    m_out = nullptr;
}

void Simulator::schedule(int slot, int64_t time_ns) {
    assert(time_ns >= m_now_ns && "an event may not be scheduled in the past");
    m_slot_ns[slot] = time_ns;
    m_slot_seq[slot] = m_next_seq++;
}

void Simulator::issueNext(int64_t now) {
    const int32_t wait = m_program->tasks[m_next_issue].host_wait;
    if (wait >= 0 && !m_finished[wait]) {
        // FSDP1's rate limiter: the host blocks before issuing this task until `wait` ends; the
        // issue cost is already paid, so it resumes with no further delay.
        m_host_waits_for = wait;
        m_host_resumes_now = true;
        return;
    }
    const int32_t id = m_next_issue++;
    tryStart(streamIndex(m_program->tasks[id].stream), now);
    if ((m_traits[id] & kHostWaits) && !m_finished[id]) {
        m_host_waits_for = id;
    } else if (m_next_issue < m_program->size()) {
        schedule(kHostSlot, now + m_issue_cost_ns[m_next_issue]);
    }
}

// Starts the stream's next task if it is free, that task has been issued and its dependencies have
// ended. Dependencies are checked in order and the count of those seen ended is kept, so each
// dependency is looked at about once however often the stream is tried; a blocked stream records
// the dependency it waits for, so that only that task's end tries it again.
void Simulator::tryStart(int stream, int64_t now) {
    StreamState& st = m_streams[stream];
    if (st.running != kNoTask || st.next == st.tasks.size()) return;
    const int32_t id = st.tasks[st.next];
    if (id >= m_next_issue) return;  // not issued yet: issueNext tries it
    const core::Task& t = m_program->tasks[id];
    const int32_t* deps = m_program->depsBegin(t);
    for (; st.head_deps_done < t.deps.count; ++st.head_deps_done) {
        const int32_t dep = deps[st.head_deps_done];
        if (!m_finished[dep]) {
            st.waits_for = dep;
            return;
        }
    }
    startTask(id, now);
}

void Simulator::startTask(int32_t id, int64_t now) {
    const int s = streamIndex(m_program->tasks[id].stream);
    StreamState& st = m_streams[s];
    const int64_t work = m_work_ns[id];
    const uint8_t traits = m_traits[id];
    // The running tasks change speed first (this one is not running yet), then this one starts at
    // the speed the new state gives it.
    bool changed = (traits & kContends) && ++m_active_collectives == 1;
    changed = ((traits & kComputeContends) && ++m_active_compute == 1) || changed;
    if (changed) rescale(now);
    ++st.next;
    st.head_deps_done = 0;
    st.waits_for = kNoTask;
    st.running = id;
    if (traits & (kSlowed | kContends)) m_rescaled_streams |= 1u << s;
    m_out->tasks[id].start_ns = now;
    int64_t end = now + work;
    if (traits & (kSlowed | kContends)) {
        st.remaining_ns = static_cast<double>(work);
        st.last_update_ns = now;
        st.factor = factorFor(traits);
        end = now + roundToInt64(st.remaining_ns * st.factor);
    }
    schedule(s, end);
}

void Simulator::finishTask(int stream, int64_t now) {
    StreamState& st = m_streams[stream];
    const int32_t id = st.running;
    m_finished[id] = 1;
    ++m_done;
    st.running = kNoTask;
    m_rescaled_streams &= ~(1u << stream);
    core::TaskTime& tt = m_out->tasks[id];
    tt.end_ns = now;
    m_out->stream_busy_ns[stream] += now - tt.start_ns;
    bool changed = (m_traits[id] & kContends) && --m_active_collectives == 0;
    changed = ((m_traits[id] & kComputeContends) && --m_active_compute == 0) || changed;
    if (changed) rescale(now);
    if (m_host_waits_for == id) {
        m_host_waits_for = kNoTask;
        if (m_next_issue < m_program->size()) {
            schedule(kHostSlot, m_host_resumes_now ? now : now + m_issue_cost_ns[m_next_issue]);
        }
        m_host_resumes_now = false;
    }
    // Only this stream and those blocked on this task can start now; trying them in stream order
    // starts them in the order trying every stream would.
    for (int k = 0; k < m_used_stream_count; ++k) {
        const int s = m_used_streams[k];
        if (s == stream || m_streams[s].waits_for == id) tryStart(s, now);
    }
}

double Simulator::factorFor(uint8_t traits) const {
    if (traits & kSlowed) return m_active_collectives > 0 ? m_profile.overlap_compute_slowdown : 1.0;
    if (traits & kContends) return m_active_compute > 0 ? m_profile.overlap_collective_slowdown : 1.0;
    return 1.0;
}

// Every running task whose speed the contention state sets: the work done since its last update at
// its old speed is taken off, and its end rescheduled at its new speed.
void Simulator::rescale(int64_t now) {
    // Ascending stream order, as the streams are scanned elsewhere (rescheduling orders ties).
    for (uint32_t streams = m_rescaled_streams; streams != 0; streams &= streams - 1) {
        const int s = std::countr_zero(streams);
        StreamState& st = m_streams[s];
        const double factor = factorFor(m_traits[st.running]);
        if (factor == st.factor) continue;
        const double done = static_cast<double>(now - st.last_update_ns) / st.factor;
        st.remaining_ns = std::max(0.0, st.remaining_ns - done);
        st.last_update_ns = now;
        st.factor = factor;
        schedule(s, now + roundToInt64(st.remaining_ns * factor));
    }
}

}  // namespace shardcast::sim
