#include "search/optimize_bounds.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace shardcast::sim {
namespace {

constexpr int32_t kNone = std::numeric_limits<int32_t>::max();

bool isKernel(const core::Task& t) {
    return t.stream == core::Stream::Compute &&
           (t.kind == core::TaskKind::Forward || t.kind == core::TaskKind::Backward || t.kind == core::TaskKind::Recompute);
}

// The points the memory bound looks at: forward and backward tasks (recompute tasks exist only
// under checkpointing).
bool isPoint(const core::Task& t) {
    return t.stream == core::Stream::Compute && (t.kind == core::TaskKind::Forward || t.kind == core::TaskKind::Backward);
}

// The simulator rounds every rescheduled end to a whole ns (at most half a ns each time): 1e-6 of
// the bound plus 1 us covers millions of reschedules.
int64_t withSlack(double ns) {
    constexpr int64_t kSlackNs = 1000;
    return std::max<int64_t>(0, static_cast<int64_t>(ns * (1.0 - 1e-6)) - kSlackNs);
}

}  // namespace

void BoundAnalyzer::livePerKernel(const core::Program& program) {
    const int32_t n = program.size();
    m_group_points.clear();
    m_sharding_points.clear();

    // Stream order and compute ordinals.
    m_stream_prev.assign(static_cast<size_t>(n), -1);
    m_compute_index.assign(static_cast<size_t>(n), -1);
    std::array<int32_t, core::kStreamCount> last{};
    last.fill(-1);
    int32_t computes = 0;
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        m_stream_prev[id] = last[static_cast<size_t>(t.stream)];
        last[static_cast<size_t>(t.stream)] = id;
        if (t.stream == core::Stream::Compute) m_compute_index[id] = computes++;
    }
    // The nearest compute-stream task each task strictly precedes (through dependencies and stream
    // order) and the latest one it strictly follows.
    m_min_desc.assign(static_cast<size_t>(n), kNone);
    m_max_anc.assign(static_cast<size_t>(n), -1);
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        int32_t anc = -1;
        auto from = [&](int32_t p) {
            if (p < 0) return;
            anc = std::max(anc, m_compute_index[p] >= 0 ? m_compute_index[p] : m_max_anc[p]);
        };
        from(m_stream_prev[id]);
        const int32_t* deps = program.depsBegin(t);
        for (uint32_t k = 0; k < t.deps.count; ++k) from(deps[k]);
        m_max_anc[id] = anc;
    }
    // Descendants only through edges inside one unit (a unit's copy-in -> all-gather -> copy-out or
    // first kernel): how collectives of different units chain on a process group or a stream
    // depends on prefetch, which the sharding part leaves out; fewer edges give a later start, so
    // the bound stays a bound.
    for (int32_t id = n - 1; id >= 0; --id) {
        const core::Task& t = program.tasks[id];
        const int32_t here = m_compute_index[id] >= 0 ? m_compute_index[id] : m_min_desc[id];
        auto to = [&](int32_t p) {
            if (p >= 0 && program.tasks[p].unit == t.unit) m_min_desc[p] = std::min(m_min_desc[p], here);
        };
        to(m_stream_prev[id]);
        const int32_t* deps = program.depsBegin(t);
        for (uint32_t k = 0; k < t.deps.count; ++k) to(deps[k]);
    }

    // Each buffer is live at the peaks of the compute-stream tasks lo .. hi (ordinals).
    const auto buffers = static_cast<size_t>(std::max(0, program.buffer_count));
    std::vector<int32_t>& lo = m_lo;
    std::vector<int32_t>& hi = m_hi;
    std::vector<int64_t>& bytes = m_bytes;
    std::vector<uint8_t>& activation = m_activation;
    lo.assign(buffers, kNone);
    hi.assign(buffers, kNone);
    bytes.assign(buffers, 0);
    activation.assign(buffers, 0);
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        const int32_t c = m_compute_index[id];
        for (int at_end = 0; at_end < 2; ++at_end) {
            const core::Span span = at_end ? t.mem_end : t.mem_start;
            const core::MemEvent* e = program.memBegin(span);
            for (uint32_t k = 0; k < span.count; ++k) {
                if (e[k].buffer < 0 || static_cast<size_t>(e[k].buffer) >= buffers) continue;
                const auto b = static_cast<size_t>(e[k].buffer);
                if (e[k].bytes > 0) {
                    lo[b] = c >= 0 ? c + at_end : m_min_desc[id];
                    bytes[b] = e[k].bytes;
                    activation[b] = activatesBuffer(t, e[k]);
                } else if (e[k].timed_after >= 0) {
                    hi[b] = -1;  // a deferred free: not counted
                } else {
                    hi[b] = c >= 0 ? c - 1 + at_end : m_max_anc[id];
                }
            }
        }
    }
    m_diff_activation.assign(static_cast<size_t>(computes) + 1, 0);
    m_diff_other.assign(static_cast<size_t>(computes) + 1, 0);
    for (size_t b = 0; b < buffers; ++b) {
        if (lo[b] == kNone || bytes[b] <= 0) continue;
        const int32_t top = hi[b] == kNone ? computes - 1 : std::min(hi[b], computes - 1);
        if (top < lo[b]) continue;
        auto& diff = activation[b] ? m_diff_activation : m_diff_other;
        diff[static_cast<size_t>(lo[b])] += bytes[b];
        diff[static_cast<size_t>(top) + 1] -= bytes[b];
    }

    // The points, micro-batch by micro-batch.
    const int micro_batches = std::max(1, program.micro_batches);
    std::vector<std::vector<int64_t>>& group = m_group_per_mb;
    std::vector<std::vector<int64_t>>& sharding = m_sharding_per_mb;
    group.resize(static_cast<size_t>(micro_batches));
    sharding.resize(static_cast<size_t>(micro_batches));
    for (int mb = 0; mb < micro_batches; ++mb) {
        group[static_cast<size_t>(mb)].clear();
        sharding[static_cast<size_t>(mb)].clear();
    }
    int64_t act = 0, other = 0;
    for (int32_t id = 0; id < n; ++id) {
        const int32_t c = m_compute_index[id];
        if (c < 0) continue;
        act += m_diff_activation[static_cast<size_t>(c)];
        other += m_diff_other[static_cast<size_t>(c)];
        const core::Task& t = program.tasks[id];
        if (!isPoint(t) || t.micro_batch < 0 || t.micro_batch >= micro_batches) continue;
        int64_t transient = 0;
        const core::MemEvent* e = program.memBegin(t.mem_peak);
        for (uint32_t k = 0; k < t.mem_peak.count; ++k) transient += e[k].bytes;
        group[static_cast<size_t>(t.micro_batch)].push_back(act + transient);
        sharding[static_cast<size_t>(t.micro_batch)].push_back(other);
    }
    for (int mb = 1; mb < micro_batches; ++mb) {
        if (group[static_cast<size_t>(mb)].size() != group[0].size()) return;  // no matching points
    }
    m_group_points = group[0];
    m_sharding_points = sharding[0];
    for (int mb = 1; mb < micro_batches; ++mb) {
        for (size_t j = 0; j < m_group_points.size(); ++j) {
            m_group_points[j] = std::min(m_group_points[j], group[static_cast<size_t>(mb)][j]);
            m_sharding_points[j] = std::max(m_sharding_points[j], sharding[static_cast<size_t>(mb)][j]);
        }
    }
}

GroupBoundPart BoundAnalyzer::groupPart(const core::Program& program, const CostModel& cost) {
    GroupBoundPart part;
    for (const core::Task& t : program.tasks) {
        if (isKernel(t)) part.kernels_ns += cost.durationNs(t, program);
    }
    // The compute stream's Activation in Program order: start events, the transient peak, end events.
    // A buffer is marked where it is allocated (before any of its frees, in Program order).
    m_activation.assign(static_cast<size_t>(std::max(0, program.buffer_count)), 0);
    bool premise = true;
    int64_t live = 0, high = 0;
    for (const core::Task& t : program.tasks) {
        const bool compute = t.stream == core::Stream::Compute;
        auto apply = [&](core::Span span, bool transient) {
            const core::MemEvent* e = program.memBegin(span);
            int64_t delta = 0;
            for (uint32_t k = 0; k < span.count; ++k) {
                if (!activationEvent(t, e[k])) continue;
                if (e[k].bytes > 0 && e[k].buffer >= 0 && static_cast<size_t>(e[k].buffer) < m_activation.size())
                    m_activation[static_cast<size_t>(e[k].buffer)] = 1;
                if (!compute) {
                    // Another stream may only add Activation for an instant (the copy-in cast).
                    if (!transient || e[k].bytes < 0) premise = false;
                    continue;
                }
                if (e[k].timed_after >= 0) premise = false;
                delta += e[k].bytes;
                if (!transient) {
                    live += e[k].bytes;
                    high = std::max(high, live);
                }
            }
            if (transient && compute) high = std::max(high, live + delta);
        };
        apply(t.mem_start, false);
        apply(t.mem_peak, true);
        apply(t.mem_end, false);
    }
    part.activation_peak_bytes = premise ? high : 0;
    livePerKernel(program);
    part.at_kernels = m_group_points;
    return part;
}

void BoundAnalyzer::durations(const core::Program& program, const CostModel& cost, double collective_scale) {
    m_duration.assign(static_cast<size_t>(program.size()), 0);
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& t = program.tasks[id];
        if (isKernel(t)) continue;
        const auto d = static_cast<double>(cost.durationNs(t, program));
        m_duration[id] = static_cast<int64_t>(core::isCollective(t.kind) ? d * collective_scale : d);
    }
}

ShardingBoundPart BoundAnalyzer::shardingPart(const core::Program& program, const CostModel& cost,
                                              const HardwareProfile& profile) {
    ShardingBoundPart part;
    const int32_t n = program.size();
    durations(program, cost, std::min(1.0, profile.overlap_collective_slowdown));
    int32_t first = -1, last = -1;  // the first and the last kernel
    for (int32_t id = 0; id < n; ++id) {
        if (!isKernel(program.tasks[id])) continue;
        if (first < 0) first = id;
        last = id;
    }
    std::array<int64_t, core::kStreamCount> busy{}, collectives{};
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        if (isKernel(t)) continue;
        const int64_t d = m_duration[id];
        const auto s = static_cast<size_t>(t.stream);
        if (t.stream == core::Stream::Compute) {
            part.other_compute_ns += d;
            if (id > first && id < last) part.between_kernels_ns += d;
        } else {
            busy[s] += d;
            if (core::isCollective(t.kind)) collectives[s] += d;
        }
    }
    part.collectives_ns = *std::max_element(collectives.begin(), collectives.end());
    part.stream_busy_ns = *std::max_element(busy.begin(), busy.end());
    for (int64_t b : program.initial) part.initial_bytes += b;
    livePerKernel(program);  // also fills m_stream_prev
    part.at_kernels = m_sharding_points;

    if (first >= 0) {
        // Head: the earliest start of the first kernel (every task before it, as early as possible).
        m_end.assign(static_cast<size_t>(n), 0);
        auto startOf = [&](int32_t id) {
            int64_t s = m_stream_prev[id] >= 0 ? m_end[m_stream_prev[id]] : 0;
            const core::Task& t = program.tasks[id];
            const int32_t* deps = program.depsBegin(t);
            for (uint32_t k = 0; k < t.deps.count; ++k) s = std::max(s, m_end[deps[k]]);
            return s;
        };
        for (int32_t id = 0; id < first; ++id) m_end[id] = startOf(id) + m_duration[id];
        part.head_ns = startOf(first);
        // Tail: the last kernel's descendants, as early as possible from its end.
        m_mark.assign(static_cast<size_t>(n), 0);
        m_mark[last] = 1;
        m_end[last] = 0;
        for (int32_t id = last + 1; id < n; ++id) {
            const core::Task& t = program.tasks[id];
            int64_t s = -1;
            auto from = [&](int32_t p) {
                if (p >= 0 && m_mark[p]) s = std::max(s, m_end[p]);
            };
            from(m_stream_prev[id]);
            const int32_t* deps = program.depsBegin(t);
            for (uint32_t k = 0; k < t.deps.count; ++k) from(deps[k]);
            if (s < 0) continue;
            m_mark[id] = 1;
            m_end[id] = s + m_duration[id];
            part.tail_ns = std::max(part.tail_ns, m_end[id]);
        }
    }
    return part;
}

PipelineRankPart BoundAnalyzer::pipelineRankPart(const core::Program& program, const CostModel& cost) {
    PipelineRankPart part;
    const int32_t n = program.size();
    const int pp = program.pp_size, virtual_stages = std::max(1, program.pp_virtual);
    const int stages = pp * virtual_stages;
    if (pp < 2 || n == 0) return part;
    // Stream order, and the kernels' uncontended time up to each task (m_end[id]: before task id).
    m_stream_prev.assign(static_cast<size_t>(n), -1);
    std::array<int32_t, core::kStreamCount> last{};
    last.fill(-1);
    m_end.assign(static_cast<size_t>(n) + 1, 0);
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        m_stream_prev[id] = last[static_cast<size_t>(t.stream)];
        last[static_cast<size_t>(t.stream)] = id;
        m_end[id + 1] = m_end[id] + (isKernel(t) ? cost.durationNs(t, program) : 0);
    }
    auto kernels = [&](int32_t a, int32_t b) { return m_end[static_cast<size_t>(b) + 1] - m_end[static_cast<size_t>(a)]; };
    // Whether task b waits for task a, through dependencies and stream order.
    auto waitsFor = [&](int32_t a, int32_t b) {
        if (a < 0 || b <= a) return false;
        m_mark.assign(static_cast<size_t>(b - a) + 1, 0);
        auto marked = [&](int32_t p) { return p >= a && m_mark[static_cast<size_t>(p - a)] != 0; };
        m_mark[0] = 1;
        for (int32_t id = a + 1; id <= b; ++id) {
            const core::Task& t = program.tasks[id];
            bool m = marked(m_stream_prev[id]);
            const int32_t* deps = program.depsBegin(t);
            for (uint32_t k = 0; k < t.deps.count && !m; ++k) m = marked(deps[k]);
            m_mark[static_cast<size_t>(id - a)] = m ? 1 : 0;
        }
        return m_mark.back() != 0;
    };
    // Micro-batch 0's tasks per stage the rank holds.
    struct Marks {
        int32_t first_fwd = -1, last_fwd = -1, first_bwd = -1, last_bwd = -1;
        int32_t recv_act = -1, recv_grad = -1, send_act = -1, send_grad = -1;
    };
    std::vector<Marks> marks(static_cast<size_t>(virtual_stages));
    for (int32_t id = 0; id < n; ++id) {
        const core::Task& t = program.tasks[id];
        if (t.micro_batch != 0 || t.chunk < 0 || t.chunk >= virtual_stages) continue;
        Marks& m = marks[static_cast<size_t>(t.chunk)];
        const bool compute = t.stream == core::Stream::Compute;
        if (compute && t.kind == core::TaskKind::Forward) {
            if (m.first_fwd < 0) m.first_fwd = id;
            m.last_fwd = id;
        } else if (compute && t.kind == core::TaskKind::Backward) {
            if (m.first_bwd < 0) m.first_bwd = id;
            m.last_bwd = id;
        } else if (t.kind == core::TaskKind::Recv) {
            (t.peer < 0 ? m.recv_act : m.recv_grad) = id;
        } else if (t.kind == core::TaskKind::Send) {
            (t.peer > 0 ? m.send_act : m.send_grad) = id;
        }
    }
    for (int c = 0; c < virtual_stages; ++c) {
        const Marks& m = marks[static_cast<size_t>(c)];
        const int g = c * pp + program.pp_stage;
        const bool first = g == 0, final = g == stages - 1;
        bool ordered = m.first_fwd >= 0 && m.first_bwd >= 0;
        if (ordered && !first) ordered = waitsFor(m.recv_act, m.first_fwd) && waitsFor(m.last_bwd, m.send_grad);
        if (ordered && !final) ordered = waitsFor(m.last_fwd, m.send_act) && waitsFor(m.recv_grad, m.first_bwd);
        if (!ordered) return PipelineRankPart{};
        const int32_t from = first ? 0 : m.first_fwd;
        part.forward.push_back(final ? kernels(from, m.last_bwd) : kernels(from, m.last_fwd));
        part.backward.push_back(final ? 0 : kernels(m.first_bwd, first ? n - 1 : m.last_bwd));
    }
    return part;
}

int64_t pipelineChainNs(const std::vector<PipelineRankPart>& ranks) {
    if (ranks.size() < 2) return 0;
    const size_t virtual_stages = ranks.front().forward.size();
    int64_t chain = 0;
    for (const PipelineRankPart& r : ranks) {
        if (r.forward.empty() || r.forward.size() != virtual_stages || r.backward.size() != virtual_stages) return 0;
        for (size_t c = 0; c < virtual_stages; ++c) chain += r.forward[c] + r.backward[c];
    }
    // The pipeline's timer settles each landing time to within 1 us (simulator/pipeline.cpp): once
    // per transfer of the chain.
    constexpr int64_t kSettledNs = 1000;
    const auto transfers = static_cast<int64_t>(2 * (ranks.size() * virtual_stages - 1));
    return std::max<int64_t>(0, chain - transfers * kSettledNs);
}

ConfigurationBounds combineBounds(const GroupBoundPart& group, const ShardingBoundPart& sharding,
                                  const HardwareProfile& profile) {
    ConfigurationBounds b;
    const double f = profile.overlap_compute_slowdown;
    if (f >= 1.0) {
        const auto kernels = static_cast<double>(group.kernels_ns);
        const double contended = kernels + static_cast<double>(sharding.other_compute_ns) +
                                 static_cast<double>(sharding.collectives_ns) * (1.0 - 1.0 / f);
        const double middle = kernels + static_cast<double>(sharding.between_kernels_ns);
        const double outside = static_cast<double>(sharding.head_ns) + static_cast<double>(sharding.tail_ns);
        const double chain = middle + outside;
        const double chain_contended =
            middle + static_cast<double>(sharding.collectives_ns) * (1.0 - 1.0 / f) + outside / f;
        b.step_ns = withSlack(std::max({contended, chain, chain_contended, static_cast<double>(sharding.stream_busy_ns),
                                        static_cast<double>(group.pipeline_ns)}));
    }
    int64_t live = group.activation_peak_bytes;
    if (!group.at_kernels.empty() && group.at_kernels.size() == sharding.at_kernels.size()) {
        for (size_t j = 0; j < group.at_kernels.size(); ++j) live = std::max(live, group.at_kernels[j] + sharding.at_kernels[j]);
    }
    b.peak_bytes = sharding.initial_bytes + live;
    return b;
}

}  // namespace shardcast::sim
