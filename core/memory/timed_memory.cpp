#include "core/memory/timed_memory.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdint>

namespace shardcast::core {
namespace {

int64_t sum(const CategoryBytes& b) {
    int64_t s = 0;
    for (int64_t v : b) s += v;
    return s;
}

}  // namespace

void MemoryTimer::orderPoints(const Program& program, const Timeline& timeline) {
    const int32_t n = program.size();
    for (auto& points : m_stream_points) points.clear();
    m_deferred.clear();
    auto deferFrees = [&](Span span, int32_t id) {
        const MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].timed_after < 0) continue;
            const int64_t at = timeline.tasks[static_cast<size_t>(e[k].timed_after)].end_ns;
            m_deferred.push_back({at, id, kDeferred, static_cast<int32_t>(span.offset + k)});
        }
    };
    // A stream's points, in Program order, are in time order when none of its tasks starts
    // before the one before it ended (a task's own points are: start, mid, end).
    std::array<int64_t, kStreamCount> stream_end;
    stream_end.fill(INT64_MIN);
    bool in_order = true;
    for (int32_t id = 0; id < n; ++id) {
        const Task& t = program.tasks[id];
        const TaskTime& tt = timeline.tasks[id];
        const auto s = static_cast<size_t>(t.stream);
        std::vector<Point>& points = m_stream_points[s];
        deferFrees(t.mem_start, id);
        deferFrees(t.mem_end, id);
        in_order = in_order && tt.start_ns >= stream_end[s] && tt.end_ns >= tt.start_ns;
        stream_end[s] = tt.end_ns;
        if (tt.end_ns == tt.start_ns) {
            if (t.mem_start.count + t.mem_peak.count + t.mem_end.count > 0) points.push_back({tt.start_ns, id, kStart});
            continue;
        }
        if (t.mem_start.count > 0) points.push_back({tt.start_ns, id, kStart});
        if (t.mem_peak.count > 0) points.push_back({tt.start_ns + (tt.end_ns - tt.start_ns) / 2, id, kMid});
        if (t.mem_end.count > 0) points.push_back({tt.end_ns, id, kEnd});
    }

    // (time, phase, task, event) is a total order. Evaluated without branches: which run a merge
    // takes from next is data, not a pattern a branch predictor learns.
    auto before = [](const Point& a, const Point& b) {
        return (a.time_ns < b.time_ns) |
               ((a.time_ns == b.time_ns) &
                ((a.phase < b.phase) | ((a.phase == b.phase) & ((a.task < b.task) | ((a.task == b.task) & (a.event < b.event))))));
    };
    std::sort(m_deferred.begin(), m_deferred.end(), before);
    m_points.clear();
    if (!in_order) {
        // A stream's tasks overlap (a measured timeline may): fall back to sorting everything.
        for (const auto& points : m_stream_points) m_points.insert(m_points.end(), points.begin(), points.end());
        m_points.insert(m_points.end(), m_deferred.begin(), m_deferred.end());
        std::sort(m_points.begin(), m_points.end(), before);
        return;
    }
    // Merge the time-ordered runs into the result one at a time, the compute stream (which holds
    // most points) last so that its points are copied once. Equal points do not occur (the order
    // is total), so which run wins a tie does not matter. Both buffers are sized once (no
    // element is initialised twice): the first `merged` points of m_points are the result so far.
    size_t total = m_deferred.size();
    for (const auto& points : m_stream_points) total += points.size();
    m_points.resize(total);
    m_merged.resize(total);
    size_t merged = 0;
    auto mergeRun = [&](const std::vector<Point>& run) {
        if (run.empty()) return;
        const Point* a = m_points.data();
        const Point* const a_end = a + merged;
        const Point* b = run.data();
        const Point* const b_end = b + run.size();
        Point* out = m_merged.data();
        while (a != a_end && b != b_end) {
            const bool take_b = before(*b, *a);
            *out++ = take_b ? *b : *a;
            b += take_b;
            a += !take_b;
        }
        out = std::copy(a, a_end, out);
        std::copy(b, b_end, out);
        m_points.swap(m_merged);
        merged += run.size();
    };
    mergeRun(m_deferred);
    for (int s = kStreamCount - 1; s >= 0; --s) mergeRun(m_stream_points[s]);
}

std::vector<TotalPoint> thinCurve(const std::vector<TotalPoint>& points, size_t limit) {
    limit = std::max<size_t>(limit, 4);
    if (points.size() <= limit) return points;
    const size_t runs = limit / 2;
    std::vector<TotalPoint> out;
    out.reserve(2 * runs);
    for (size_t r = 0; r < runs; ++r) {
        // Runs of near-equal length covering every point: [n*r/runs, n*(r+1)/runs).
        const size_t begin = points.size() * r / runs, end = points.size() * (r + 1) / runs;
        size_t lo = begin, hi = begin;
        for (size_t i = begin + 1; i < end; ++i) {
            if (points[i].bytes < points[lo].bytes) lo = i;
            if (points[i].bytes > points[hi].bytes) hi = i;
        }
        out.push_back(points[std::min(lo, hi)]);
        if (lo != hi) out.push_back(points[std::max(lo, hi)]);
    }
    return out;
}

std::vector<TotalPoint> totalCurve(const std::vector<MemoryPoint>& curve, int64_t offset) {
    std::vector<TotalPoint> out;
    out.reserve(curve.size());
    for (const MemoryPoint& p : curve) out.push_back(TotalPoint{p.time_ns, std::max<int64_t>(0, sum(p.bytes) - offset)});
    return out;
}

void MemoryTimer::compute(const Program& program, const Timeline& timeline, TimedMemory& out,
                          bool record_curve) {
    assert(static_cast<int32_t>(timeline.tasks.size()) == program.size());
    orderPoints(program, timeline);

    CategoryBytes bytes = program.initial;
    int64_t total = sum(bytes);
    out.peak_bytes = total;
    out.peak_time_ns = 0;
    out.peak_task = -1;
    out.at_peak = bytes;
    CategoryBytes max_per_category = bytes;  // a local: the compiler keeps it apart from `out`
    out.curve.clear();
    if (record_curve) out.curve.push_back({0, -1, bytes});

    // The categories at the peak are copied when the bytes next change, not at every new peak:
    // while they only grow, each allocation is a new peak and would copy them again.
    bool peak_pending = false;  // out.at_peak is still to be taken from `bytes`
    auto takePeak = [&] {
        if (peak_pending) out.at_peak = bytes;
        peak_pending = false;
    };
    auto notePeak = [&](int64_t time_ns, int32_t task) {
        if (total > out.peak_bytes) {
            out.peak_bytes = total;
            out.peak_time_ns = time_ns;
            out.peak_task = task;
            peak_pending = true;
        }
    };
    // A free takes the pending peak first; an allocation need not, as it makes a new peak (while
    // one is pending, total is the peak).
    auto change = [&](const MemEvent& e, int64_t delta) {
        const int c = index(e.category);
        if (delta < 0) takePeak();
        bytes[c] += delta;
        total += delta;
        assert(bytes[c] >= 0 && "a free matches an earlier allocation");
        if (delta > 0) max_per_category[c] = std::max(max_per_category[c], bytes[c]);
    };
    // A task's start or end events apply in their order, each allocation a possible peak (as in
    // replayMemory); frees deferred to their buffer's last use are skipped here.
    auto applyInOrder = [&](Span span, int64_t time_ns, int32_t task) {
        const MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].timed_after >= 0) continue;
            change(e[k], e[k].bytes);
            if (e[k].bytes > 0) notePeak(time_ns, task);
        }
        if (record_curve) out.curve.push_back({time_ns, task, bytes});
    };
    // A task's transient events hold at one instant: noted as a whole, then undone. Its
    // allocations are not each a peak, so the pending one is taken before them.
    auto applyTransient = [&](Span span, int64_t time_ns, int32_t task) {
        const MemEvent* e = program.memBegin(span);
        takePeak();
        for (uint32_t k = 0; k < span.count; ++k) change(e[k], e[k].bytes);
        notePeak(time_ns, task);
        if (record_curve) out.curve.push_back({time_ns, task, bytes});
        takePeak();
        for (uint32_t k = 0; k < span.count; ++k) change(e[k], -e[k].bytes);
        if (record_curve) out.curve.push_back({time_ns, task, bytes});
    };

    for (const Point& p : m_points) {
        const Task& t = program.tasks[p.task];
        switch (p.phase) {
            case kDeferred: {
                const MemEvent& e = program.mem[static_cast<size_t>(p.event)];
                change(e, e.bytes);
                if (e.bytes > 0) notePeak(p.time_ns, p.task);
                if (record_curve) out.curve.push_back({p.time_ns, p.task, bytes});
                break;
            }
            case kEnd:
                applyInOrder(t.mem_end, p.time_ns, p.task);
                break;
            case kStart:
                applyInOrder(t.mem_start, p.time_ns, p.task);
                if (timeline.tasks[p.task].end_ns == timeline.tasks[p.task].start_ns) {
                    if (t.mem_peak.count > 0) applyTransient(t.mem_peak, p.time_ns, p.task);
                    applyInOrder(t.mem_end, p.time_ns, p.task);
                }
                break;
            case kMid:
                applyTransient(t.mem_peak, p.time_ns, p.task);
                break;
        }
    }
    takePeak();
    out.max_per_category = max_per_category;
}

void MemoryTimer::replayAllocator(const Program& program, const Timeline& timeline, const AllocatorConfig& config, CachingAllocatorModel& model,
                                  ReservedMemory& out, AllocatorReplay mode) {
    const bool split = !program.buffer_tensors.empty();
    auto tensorsOf = [&](int32_t buffer) { return split ? program.buffer_tensors[static_cast<size_t>(buffer)] : Span{}; };
    // Model ids: each buffer's tensors in a row, then one per category for the steady state.
    m_tensor_base.resize(static_cast<size_t>(program.buffer_count) + 1);
    int32_t ids = 0;
    for (int32_t b = 0; b < program.buffer_count; ++b) {
        m_tensor_base[static_cast<size_t>(b)] = ids;
        ids += static_cast<int32_t>(std::max<uint32_t>(1, tensorsOf(b).count));
    }
    m_tensor_base[static_cast<size_t>(program.buffer_count)] = ids;
    m_tensors_freed.assign(static_cast<size_t>(program.buffer_count), 0);
    model.reset(config, ids + kMemCategoryCount);
    // The steady state first: one block per category (ids after the buffers' tensors), except
    // Runtime Overhead, which the allocator does not hold.
    for (int c = 0; c < kMemCategoryCount; ++c) {
        if (c == index(MemCategory::RuntimeOverhead) || program.initial[c] <= 0) continue;
        model.allocate(ids + c, program.initial[c], Stream::Compute);
    }
    // One step's allocator calls, in order: both steps replay the same tape.
    m_tape.clear();
    auto emit = [&](AllocOpKind kind, int32_t id, int64_t bytes, Stream stream = Stream::Compute) {
        m_tape.push_back(AllocOp{bytes, id, kind, stream});
    };
    auto emitFree = [&](int32_t id) { emit(AllocOpKind::Free, id, 0); };
    auto emitId = [&](AllocOpKind kind, int32_t id) { emit(kind, id, 0); };
    auto apply = [&](const MemEvent& e) {
        assert(e.buffer >= 0 && e.buffer < program.buffer_count);
        const int32_t base = m_tensor_base[static_cast<size_t>(e.buffer)];
        const Span ts = tensorsOf(e.buffer);
        if (e.bytes > 0) {
            if (ts.count == 0) {
                emit(AllocOpKind::Allocate, base, e.bytes, e.stream);
                return;
            }
            m_tensors_freed[static_cast<size_t>(e.buffer)] = 0;
            for (uint32_t k = 0; k < ts.count; ++k) {
                emit(AllocOpKind::Allocate, base + static_cast<int32_t>(k), program.tensor_bytes[ts.offset + k], e.stream);
            }
        } else if (e.bytes < 0) {
            if (ts.count == 0) {
                emitFree(base);
                return;
            }
            // A backward frees saved tensors from the last; what it has not freed goes now (the
            // bytes of those it freed stayed counted as allocated until this free).
            const uint32_t live = ts.count - m_tensors_freed[static_cast<size_t>(e.buffer)];
            int64_t freed_bytes = -e.bytes;
            for (uint32_t k = live; k-- > 0;) {
                freed_bytes -= program.tensor_bytes[ts.offset + k];
                emitFree(base + static_cast<int32_t>(k));
            }
            if (freed_bytes != 0) emit(AllocOpKind::Adjust, base, -freed_bytes);
        }
    };
    auto applyInOrder = [&](Span span) {
        const MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].timed_after < 0) apply(e[k]);
        }
    };
    // At a backward's peak its saved tensors freed op by op are back in the cache before its
    // scratch is allocated. A buffer of several tensors frees them for good, from the last, as
    // many as make up the bytes released (its free later frees the rest); a one-tensor buffer
    // gives back the tail of its block until the scratch is freed (the bookkeeping undo).
    auto applyTransient = [&](Span span) {
        const MemEvent* e = program.memBegin(span);
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].bytes >= 0) continue;
            const Span ts = tensorsOf(e[k].buffer);
            const int32_t base = m_tensor_base[static_cast<size_t>(e[k].buffer)];
            if (ts.count == 0) {
                emit(AllocOpKind::ReleaseTail, base, -e[k].bytes);
                continue;
            }
            uint32_t& freed = m_tensors_freed[static_cast<size_t>(e[k].buffer)];
            // The released bytes count from the buffer's end, tensors freed by an earlier peak included.
            int64_t released = 0;
            for (uint32_t i = ts.count - freed; i < ts.count; ++i) released += program.tensor_bytes[ts.offset + i];
            while (freed < ts.count) {
                const uint32_t i = ts.count - 1 - freed;
                const int64_t bytes = program.tensor_bytes[ts.offset + i];
                if (released + bytes > -e[k].bytes) break;
                released += bytes;
                emitFree(base + static_cast<int32_t>(i));
                emit(AllocOpKind::Adjust, base, bytes);  // still counted until the peak's accounting below
                ++freed;
            }
            emit(AllocOpKind::Adjust, base, e[k].bytes);  // allocated falls by the released bytes, as the curve's
        }
        // Scratch: each of its tensors, in order, then freed.
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].bytes <= 0) continue;
            const int32_t base = m_tensor_base[static_cast<size_t>(e[k].buffer)];
            const Span ts = tensorsOf(e[k].buffer);
            if (ts.count == 0) {
                emit(AllocOpKind::Allocate, base, e[k].bytes, e[k].stream);
                continue;
            }
            for (uint32_t i = 0; i < ts.count; ++i) {
                emit(AllocOpKind::Allocate, base + static_cast<int32_t>(i), program.tensor_bytes[ts.offset + i], e[k].stream);
            }
        }
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].bytes <= 0) continue;
            const int32_t base = m_tensor_base[static_cast<size_t>(e[k].buffer)];
            const uint32_t n = std::max<uint32_t>(1, tensorsOf(e[k].buffer).count);
            for (uint32_t i = n; i-- > 0;) emitFree(base + static_cast<int32_t>(i));
        }
        for (uint32_t k = 0; k < span.count; ++k) {
            if (e[k].bytes >= 0) continue;
            if (tensorsOf(e[k].buffer).count == 0) {
                emitId(AllocOpKind::RestoreTail, m_tensor_base[static_cast<size_t>(e[k].buffer)]);
            } else {
                emit(AllocOpKind::Adjust, m_tensor_base[static_cast<size_t>(e[k].buffer)], -e[k].bytes);  // the bookkeeping undo; the blocks stay free
            }
        }
    };
    // Where a block's forward or backward begins, a period of the tape may begin.
    m_hints.clear();
    for (const Point& p : m_points) {
        const Task& t = program.tasks[p.task];
        if (t.unit >= 0 && (t.kind == TaskKind::Forward || t.kind == TaskKind::Backward) && p.phase != kDeferred &&
            (m_hints.empty() || m_hints.back() != m_tape.size())) {
            m_hints.push_back(static_cast<uint32_t>(m_tape.size()));
        }
        switch (p.phase) {
            case kDeferred: apply(program.mem[static_cast<size_t>(p.event)]); break;
            case kEnd: applyInOrder(t.mem_end); break;
            case kStart:
                applyInOrder(t.mem_start);
                if (timeline.tasks[p.task].end_ns == timeline.tasks[p.task].start_ns) {
                    if (t.mem_peak.count > 0) applyTransient(t.mem_peak);
                    applyInOrder(t.mem_end);
                }
                break;
            case kMid: applyTransient(t.mem_peak); break;
        }
    }
    out.config = config;
    KeptReplay* slot = nullptr;
    if (m_keep > 0) {
        const int32_t tensor_ids = m_tensor_base[static_cast<size_t>(program.buffer_count)];
        for (KeptReplay& k : m_kept) {
            if (k.config == config && k.ids == tensor_ids && k.initial == program.initial && k.tape == m_tape) {
                out.stats = k.stats;
                ++m_reused;
                return;
            }
        }
        if (m_kept.size() < m_keep) {
            slot = &m_kept.emplace_back();
        } else {
            slot = &m_kept[m_next_kept];
            m_next_kept = (m_next_kept + 1) % m_keep;
        }
        slot->config = config;
        slot->ids = tensor_ids;
        slot->initial = program.initial;
        slot->tape = m_tape;
    }
    // Two steps: the first fills the cache as a previous step would; the second is reported.
    if (mode == AllocatorReplay::Full) {
        m_steps.run(model, m_tape, nullptr, false);
    } else if (mode == AllocatorReplay::Auto && program.micro_batches > 1) {
        m_steps.run(model, m_tape, nullptr, true);
    } else {
        m_fast.prepare(m_tape, m_hints);
        m_steps.run(model, m_tape, &m_fast, mode != AllocatorReplay::FastEveryStep);
    }
    out.stats = model.stats();
    if (slot) slot->stats = out.stats;
}

void MemoryTimer::keepReplays(size_t entries) {
    m_keep = entries;
    m_kept.clear();
    m_next_kept = 0;
    m_reused = 0;
}

}  // namespace shardcast::core
