#include "simulator/memory_curve.hpp"

#include <algorithm>
#include <cassert>


namespace shardcast::sim {
namespace {

int64_t sum(const core::CategoryBytes& b) {
    int64_t s = 0;
    for (int64_t v : b) s += v;
    return s;
}

}  // namespace

void MemoryTimer::compute(const core::Program& program, const Timeline& timeline, TimedMemory& out,
                          bool record_curve) {
    const int32_t n = program.size();
    assert(static_cast<int32_t>(timeline.tasks.size()) == n);
    m_points.clear();
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        const TaskTime& tt = timeline.tasks[id];
        if (tt.end_ns == tt.start_ns) {
            if (t.mem_start.count + t.mem_peak.count + t.mem_end.count > 0) m_points.push_back({tt.start_ns, id, 1});
            continue;
        }
        if (t.mem_end.count > 0) m_points.push_back({tt.end_ns, id, 0});
        if (t.mem_start.count > 0) m_points.push_back({tt.start_ns, id, 1});
        if (t.mem_peak.count > 0) m_points.push_back({tt.start_ns + (tt.end_ns - tt.start_ns) / 2, id, 2});
    }
    std::sort(m_points.begin(), m_points.end(), [](const Point& a, const Point& b) {
        if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
        if (a.phase != b.phase) return a.phase < b.phase;
        return a.task < b.task;
    });

    core::CategoryBytes bytes = program.initial;
    int64_t total = sum(bytes);
    out.peak_bytes = total;
    out.peak_time_ns = 0;
    out.peak_task = -1;
    out.at_peak = bytes;
    out.max_per_category = bytes;
    out.curve.clear();
    if (record_curve) out.curve.push_back({0, -1, bytes});

    auto apply = [&](core::Span span, int sign) {
        const core::MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            const int c = core::index(e[k].category);
            bytes[c] += sign * e[k].bytes;
            total += sign * e[k].bytes;
            assert(bytes[c] >= 0 && "a free matches an earlier allocation");
            out.max_per_category[c] = std::max(out.max_per_category[c], bytes[c]);
        }
    };
    auto observe = [&](int64_t time_ns, int32_t task) {
        if (total > out.peak_bytes) {
            out.peak_bytes = total;
            out.peak_time_ns = time_ns;
            out.peak_task = task;
            out.at_peak = bytes;
        }
        if (record_curve) out.curve.push_back({time_ns, task, bytes});
    };

    for (const Point& p : m_points) {
        const core::Task& t = program.tasks[p.task];
        if (p.phase == 0) {
            apply(t.mem_end, +1);
            observe(p.time_ns, p.task);
        } else if (p.phase == 1) {
            apply(t.mem_start, +1);
            observe(p.time_ns, p.task);
            if (timeline.tasks[p.task].end_ns == timeline.tasks[p.task].start_ns) {
                apply(t.mem_peak, +1);
                observe(p.time_ns, p.task);
                apply(t.mem_peak, -1);
                apply(t.mem_end, +1);
                observe(p.time_ns, p.task);
            }
        } else {
            apply(t.mem_peak, +1);
            observe(p.time_ns, p.task);
            apply(t.mem_peak, -1);
            if (record_curve) out.curve.push_back({p.time_ns, p.task, bytes});
        }
    }
}

}  // namespace shardcast::sim
