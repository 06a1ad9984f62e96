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
    SpanDuration* span = nullptr;
    // The tasks CostModel::computeSeconds times kernel by kernel (not CPU work on Stream::Host):
    // their duration kept per span is one load away, so it is looked up before the last task's.
    const bool by_kernels = t.ops.count > 0 && t.stream != core::Stream::Host && !core::isCollective(t.kind) &&
                            t.kind != core::TaskKind::HostToDevice && t.kind != core::TaskKind::DeviceToHost;
    if (by_kernels) {
        span = &m_span_ns[2 * static_cast<size_t>(t.ops.offset) + (t.kind == core::TaskKind::Backward ? 1 : 0)];
        if (span->count == t.ops.count) return span->ns;
    }
    LastDuration& last = m_last_duration[static_cast<int>(t.kind)];
    if (last.valid && last.stream == t.stream && last.flops == t.flops && last.hbm_bytes == t.hbm_bytes &&
        last.comm_bytes == t.comm_bytes && last.group_size == t.group_size && last.group_nodes == t.group_nodes &&
        last.ops == t.ops) {
        return last.ns;
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
    m_skipped_periods = 0;
    m_start_log.clear();
    m_finish_log.clear();
    m_anchor = kNoTask;
    m_last_compute_unit = -2;
    m_snapshots[0].valid = m_snapshots[1].valid = false;
    m_scan_period = 0;
    if (n == 0) return;

    schedule(kHostSlot, m_issue_cost_ns[0]);
    for (;;) {
        if (m_anchor != kNoTask) {
            // Between events, after the one that started an anchor: the host must be done issuing.
            const bool host_done = m_next_issue == n && m_slot_ns[kHostSlot] == kNever && m_host_waits_for == kNoTask;
            if (m_skip_repeats && !m_ready && host_done) {
                Snapshot& prev = m_snapshots[m_prev_snapshot];
                Snapshot& now = m_snapshots[1 - m_prev_snapshot];
                takeSnapshot(m_anchor, now);
                if (prev.valid && trySkip(prev, now)) {
                    now.valid = false;
                    prev.valid = false;
                } else {
                    m_prev_snapshot = 1 - m_prev_snapshot;
                }
            }
            m_anchor = kNoTask;
        }
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
    int64_t work = m_work_ns[id];
    if (m_ready && static_cast<size_t>(id) < m_ready->size() && (*m_ready)[static_cast<size_t>(id)] > now + work) {
        work = (*m_ready)[static_cast<size_t>(id)] - now;  // a receive waits for its send
    }
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
    m_start_log.push_back(id);
    if (s == streamIndex(core::Stream::Compute) && m_program->tasks[id].unit != m_last_compute_unit) {
        m_last_compute_unit = m_program->tasks[id].unit;
        m_anchor = id;
    }
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
    m_finish_log.push_back(id);
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

void Simulator::takeSnapshot(int32_t anchor, Snapshot& out) const {
    out.valid = true;
    out.anchor = anchor;
    out.now_ns = m_now_ns;
    out.starts = m_start_log.size();
    out.finishes = m_finish_log.size();
    out.done = m_done;
    out.active_collectives = m_active_collectives;
    out.active_compute = m_active_compute;
    out.rescaled_streams = m_rescaled_streams;
    out.busy_ns = m_out->stream_busy_ns;
    for (int k = 0; k < m_used_stream_count; ++k) {
        const int s = m_used_streams[k];
        const StreamState& st = m_streams[s];
        StreamSnapshot& o = out.streams[s];
        o.next = st.next;
        o.next_id = st.next < st.tasks.size() ? st.tasks[st.next] : std::numeric_limits<int32_t>::max();
        o.running = st.running;
        o.head_deps_done = st.head_deps_done;
        o.waits_for = st.waits_for;
        o.remaining_ns = st.remaining_ns;
        o.last_update_ns = st.last_update_ns;
        o.factor = st.factor;
        o.slot_ns = m_slot_ns[s];
        o.slot_rank = 0;
        for (int q = 0; q < m_used_stream_count; ++q) {
            const int r = m_used_streams[q];
            o.slot_rank += m_slot_ns[r] != kNever && m_slot_seq[r] < m_slot_seq[s];
        }
    }
}

// Task x behaves in the event loop, once every task is issued, as task x - period does, shifted:
// same stream, duration and traits, and dependencies `period` ids earlier on the same streams.
// (Issue costs, host waits and units matter only while the host issues.)
bool Simulator::samePeriodTask(int32_t x, int32_t period) const {
    const int32_t y = x - period;
    const core::Task& tx = m_program->tasks[x];
    const core::Task& ty = m_program->tasks[y];
    if (tx.stream != ty.stream || m_work_ns[x] != m_work_ns[y] || m_traits[x] != m_traits[y] || tx.deps.count != ty.deps.count) {
        return false;
    }
    const int32_t* dx = m_program->depsBegin(tx);
    const int32_t* dy = m_program->depsBegin(ty);
    for (uint32_t k = 0; k < tx.deps.count; ++k) {
        if (dx[k] - period != dy[k] || m_program->tasks[dx[k]].stream != m_program->tasks[dy[k]].stream) return false;
    }
    return true;
}

// Snapshots a (anchor i - P, time Ta) and c (anchor i, time Tc = Ta + D), both taken between events
// with every task issued. Once the host is done, an event's effect depends only on:
//  - per stream: the running task, its end event (time, and its scheduling rank among the pending
//    events: ties fire in that order, and every later event ranks after all pending ones), and for
//    a task whose speed contention sets, its remaining work, last update and factor; the next task
//    (its index in the stream), the count of its dependencies seen done and the one it waits for;
//  - the counts of running contending collectives and compute tasks and the rescaled streams;
//  - for the tasks it touches: stream, duration, traits and dependencies (samePeriodTask), and
//    whether each dependency is done. With every task issued and each stream running its tasks in
//    order, task d is done exactly when d lies before its stream's next task and is not running.
// Times enter only as differences (ends at now + work x factor, rescaling by now - last update),
// so the loop's arithmetic is the same under a shift of all times.
// If c equals a shifted by (P ids, D ns) -- a stream either "touched" (next task, running task,
// waited task all P later; times D later) or "untouched" (the same next task at or beyond the
// repeated range, nothing running or awaited before it) -- and every task the events between a
// and c touched, and those of the state c, repeat P ids earlier up to P x m ids further
// (samePeriodTask), then "done" answers the same for every dependency d vs d - P (same stream,
// positions shifted alike), so the events after c are those after a shifted by (P, D) until the
// state is c shifted by (P, D); by induction, m times. The timeline of those m periods is the
// logged starts and ends between a and c shifted by (r P, r D), r = 1..m; the state jumps to c
// shifted by (m P, m D).
bool Simulator::trySkip(const Snapshot& a, const Snapshot& c) {
    const int32_t period = c.anchor - a.anchor;
    const int64_t shift_ns = c.now_ns - a.now_ns;
    if (period <= 0 || shift_ns < 0 || c.active_collectives != a.active_collectives ||
        c.active_compute != a.active_compute || c.rescaled_streams != a.rescaled_streams) {
        return false;
    }
    constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
    int32_t lo = a.anchor, hi = c.anchor;  // ids the events between a and c, and state c, touch
    auto shifted = [&](int32_t ia, int32_t ic) { return (ia < 0 && ic < 0) || (ia >= 0 && ic == ia + period); };
    std::array<bool, core::kStreamCount> touched{};
    int32_t untouched_from = kNone;  // the smallest next task of an untouched stream
    for (int k = 0; k < m_used_stream_count; ++k) {
        const int s = m_used_streams[k];
        const StreamSnapshot& x = a.streams[s];
        const StreamSnapshot& y = c.streams[s];
        if (x.head_deps_done != y.head_deps_done) return false;
        if (y.next_id == x.next_id) {
            if (x.running >= 0 || y.running >= 0 || x.waits_for != y.waits_for || x.next != y.next) return false;
            untouched_from = std::min({untouched_from, y.next_id, y.waits_for < 0 ? kNone : y.waits_for});
            continue;
        }
        if (x.next_id == kNone || y.next_id != x.next_id + period || !shifted(x.running, y.running) ||
            !shifted(x.waits_for, y.waits_for)) {
            return false;
        }
        if (x.running >= 0) {
            if (y.slot_ns - c.now_ns != x.slot_ns - a.now_ns || y.slot_rank != x.slot_rank) return false;
            if ((c.rescaled_streams >> s) & 1u) {
                if (y.remaining_ns != x.remaining_ns || y.factor != x.factor ||
                    y.last_update_ns - c.now_ns != x.last_update_ns - a.now_ns) {
                    return false;
                }
            }
        }
        touched[s] = true;
        for (int32_t id : {x.next_id, x.running, x.waits_for}) {
            if (id >= 0) lo = std::min(lo, id);
        }
        for (int32_t id : {y.next_id, y.running, y.waits_for}) hi = std::max(hi, id);
    }
    for (size_t i = a.starts; i < c.starts; ++i) {
        lo = std::min(lo, m_start_log[i]);
        hi = std::max(hi, m_start_log[i] + period);
    }
    for (size_t i = a.finishes; i < c.finishes; ++i) {
        lo = std::min(lo, m_finish_log[i]);
        hi = std::max(hi, m_finish_log[i] + period);
    }
    // Tasks lo + P .. end - 1 repeat P ids earlier (a scan for the same period that covers lo + P
    // is reused).
    const int32_t n = m_program->size();
    int32_t end = lo + period;
    if (period == m_scan_period && end >= m_scan_from && end <= m_scan_end) {
        end = m_scan_end;
    } else {
        m_scan_period = period;
        m_scan_from = end;
        while (end < n && samePeriodTask(end, period)) ++end;
        m_scan_end = end;
    }
    if (end <= hi) return false;
    int64_t periods = (end - 1 - hi) / period;
    // Untouched streams' next tasks (and what they wait for) lie beyond the repeated range.
    if (untouched_from != kNone) periods = std::min<int64_t>(periods, (static_cast<int64_t>(untouched_from) - 1 - hi) / period);
    if (periods < 1) return false;
    const int32_t jump = static_cast<int32_t>(periods) * period;
    // Each touched stream's next task after the jump is its next task in c plus m P.
    std::array<size_t, core::kStreamCount> next{};
    for (int k = 0; k < m_used_stream_count; ++k) {
        const int s = m_used_streams[k];
        if (!touched[s]) continue;
        next[s] = c.streams[s].next + static_cast<size_t>(periods) * (c.streams[s].next - a.streams[s].next);
        if (next[s] >= m_streams[s].tasks.size() || m_streams[s].tasks[next[s]] != c.streams[s].next_id + jump) return false;
    }

    for (int64_t r = 1; r <= periods; ++r) {
        const auto ids = static_cast<int32_t>(r) * period;
        const int64_t ns = r * shift_ns;
        for (size_t i = a.starts; i < c.starts; ++i) {
            const int32_t x = m_start_log[i];
            m_out->tasks[x + ids].start_ns = m_out->tasks[x].start_ns + ns;
        }
        for (size_t i = a.finishes; i < c.finishes; ++i) {
            const int32_t x = m_finish_log[i];
            m_out->tasks[x + ids].end_ns = m_out->tasks[x].end_ns + ns;
            m_finished[x + ids] = 1;
        }
    }
    const int64_t jump_ns = periods * shift_ns;
    m_done += static_cast<int32_t>(periods) * (c.done - a.done);
    for (int s = 0; s < core::kStreamCount; ++s) m_out->stream_busy_ns[s] += periods * (c.busy_ns[s] - a.busy_ns[s]);
    for (int k = 0; k < m_used_stream_count; ++k) {
        const int s = m_used_streams[k];
        if (!touched[s]) continue;
        StreamState& st = m_streams[s];
        st.next = next[s];
        if (st.running >= 0) {
            st.running += jump;
            st.last_update_ns += jump_ns;
            m_slot_ns[s] += jump_ns;
        }
        if (st.waits_for >= 0) st.waits_for += jump;
    }
    m_now_ns += jump_ns;
    m_skipped_periods += periods;
    return true;
}

}  // namespace shardcast::sim
