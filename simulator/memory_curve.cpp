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

void MemoryTimer::orderPoints(const core::Program& program, const core::Timeline& timeline) {
    const int32_t n = program.size();
    for (auto& points : m_stream_points) points.clear();
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        const core::TaskTime& tt = timeline.tasks[id];
        std::vector<Point>& points = m_stream_points[static_cast<int>(t.stream)];
        if (tt.end_ns == tt.start_ns) {
            if (t.mem_start.count + t.mem_peak.count + t.mem_end.count > 0) points.push_back({tt.start_ns, id, 1});
            continue;
        }
        if (t.mem_start.count > 0) points.push_back({tt.start_ns, id, 1});
        if (t.mem_peak.count > 0) points.push_back({tt.start_ns + (tt.end_ns - tt.start_ns) / 2, id, 2});
        if (t.mem_end.count > 0) points.push_back({tt.end_ns, id, 0});
    }

    // (time, phase, task) is a total order: no two points share a task and a phase.
    auto before = [](const Point& a, const Point& b) {
        if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
        if (a.phase != b.phase) return a.phase < b.phase;
        return a.task < b.task;
    };
    m_points.clear();
    bool in_order = true;
    for (const auto& points : m_stream_points) {
        in_order = in_order && std::is_sorted(points.begin(), points.end(), before);
    }
    if (!in_order) {
        // A stream's tasks overlap (a measured timeline may): fall back to sorting everything.
        for (const auto& points : m_stream_points) m_points.insert(m_points.end(), points.begin(), points.end());
        std::sort(m_points.begin(), m_points.end(), before);
        return;
    }
    // Merge the streams' runs into the result one at a time, the compute stream (which holds most
    // points) last so that its points are copied once.
    for (int s = core::kStreamCount - 1; s >= 0; --s) {
        const std::vector<Point>& run = m_stream_points[s];
        if (run.empty()) continue;
        m_merged.resize(m_points.size() + run.size());
        std::merge(m_points.begin(), m_points.end(), run.begin(), run.end(), m_merged.begin(), before);
        m_points.swap(m_merged);
    }
}

void MemoryTimer::compute(const core::Program& program, const core::Timeline& timeline, TimedMemory& out,
                          bool record_curve) {
    assert(static_cast<int32_t>(timeline.tasks.size()) == program.size());
    orderPoints(program, timeline);

    core::CategoryBytes bytes = program.initial;
    int64_t total = sum(bytes);
    out.peak_bytes = total;
    out.peak_time_ns = 0;
    out.peak_task = -1;
    out.at_peak = bytes;
    core::CategoryBytes max_per_category = bytes;  // a local: the compiler keeps it apart from `out`
    out.curve.clear();
    if (record_curve) out.curve.push_back({0, -1, bytes});

    auto apply = [&](core::Span span, int sign) {
        const core::MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            const int c = core::index(e[k].category);
            const int64_t delta = sign * e[k].bytes;
            bytes[c] += delta;
            total += delta;
            assert(bytes[c] >= 0 && "a free matches an earlier allocation");
            if (bytes[c] > max_per_category[c]) max_per_category[c] = bytes[c];
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
    out.max_per_category = max_per_category;
}

}  // namespace shardcast::sim
