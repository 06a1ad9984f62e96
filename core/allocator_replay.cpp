#include "core/allocator_replay.hpp"

#include <algorithm>
#include <cassert>

namespace shardcast::core {
namespace {

constexpr int kSegmentAddressBits = 40;  // as CachingAllocatorModel: segment slot s starts at s << 40
constexpr int kMaxBlocksPerPeriod = 4;   // reference periods of 1 to 4 base periods are tried

bool sameShape(const AllocOp& a, const AllocOp& b) {
    return a.kind == b.kind && a.bytes == b.bytes && a.stream == b.stream;
}

// Periods c - 1 and c of the run at `start` (period `length`) match periods 0 and 1: same shapes,
// and each position's id moves by the same amount.
bool periodRepeats(const std::vector<AllocOp>& tape, uint32_t start, uint32_t length, uint32_t c) {
    const AllocOp* p0 = tape.data() + start;
    const AllocOp* prev = p0 + static_cast<size_t>(c - 1) * length;
    const AllocOp* cur = prev + length;
    for (uint32_t m = 0; m < length; ++m) {
        if (!sameShape(cur[m], p0[m])) return false;
        if (int64_t{cur[m].id} - prev[m].id != int64_t{p0[length + m].id} - p0[m].id) return false;
    }
    return true;
}

}  // namespace

void replayTapeFull(CachingAllocatorModel& model, const std::vector<AllocOp>& tape) {
    for (const AllocOp& op : tape) model.apply(op);
}

void PeriodicReplay::prepare(const std::vector<AllocOp>& tape, const std::vector<uint32_t>& hints) {
    m_runs.clear();
    m_calls = 0;
    m_skipped = 0;
    const auto n = static_cast<uint32_t>(tape.size());
    uint32_t done = 0;  // runs found so far end here
    for (size_t h = 0; h < hints.size(); ++h) {
        const uint32_t start = hints[h];
        if (start < done) continue;
        // Candidate lengths: to the next few hints (a period may span several).
        for (size_t g = h + 1; g < hints.size() && g <= h + 8; ++g) {
            const uint32_t length = hints[g] - start;
            if (length == 0 || start + 3 * static_cast<uint64_t>(length) > n) break;
            uint32_t count = 1;
            while (start + static_cast<uint64_t>(count + 1) * length <= n && periodRepeats(tape, start, length, count)) ++count;
            if (count >= 3) {
                m_runs.push_back({start, length, count});
                done = start + count * length;
                break;
            }
        }
    }
}

void PeriodicReplay::runOps(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; ++i) model.apply(tape[i]);
    m_calls += to - from;
}

void PeriodicReplay::replay(CachingAllocatorModel& model, const std::vector<AllocOp>& tape) {
    if (m_alloc_pos.size() < model.m_buffers.size()) {
        m_alloc_pos.assign(model.m_buffers.size(), 0);
        m_prev_pos.assign(model.m_buffers.size(), 0);
    }
    uint32_t pos = 0;
    for (const Run& run : m_runs) {
        runOps(model, tape, pos, run.start);
        const uint32_t L = run.length;
        uint32_t p = 0;  // periods of the run done
        uint32_t q = 1;  // base periods per reference
        while (p < run.count) {
            const uint32_t at = run.start + p * L;
            // A reference needs the period before it and at least one after it in the run.
            if (p < q || p + 2 * q > run.count) {
                runOps(model, tape, at, at + L);
                ++p;
                continue;
            }
            const int64_t after = (run.count - p - q) / q;
            const int64_t skipped = reference(model, tape, at, q * L, after);
            p += q + static_cast<uint32_t>(skipped) * q;
            m_skipped += skipped * q;
            if (skipped == 0) q = q % kMaxBlocksPerPeriod + 1;
        }
        pos = run.start + run.count * L;
    }
    runOps(model, tape, pos, static_cast<uint32_t>(tape.size()));
}

int64_t PeriodicReplay::reference(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, uint32_t at, uint32_t len,
                                  int64_t max_skip) {
    using Block = CachingAllocatorModel::Block;
    using Segment = CachingAllocatorModel::Segment;
    // Released slots waiting: new segments take them, anywhere among the old ones, so no best fit
    // may rest on the address order of a new and an old block, nor of a layer's and another.
    const bool strict = !model.m_spare_segments.empty();
    const AllocatorStats start = model.stats();
    const AllocOp* ops = tape.data() + at;
    m_curve.resize(len);
    model.attachJournal(&m_journal);
    for (uint32_t m = 0; m < len; ++m) {
        model.apply(ops[m]);
        m_curve[m] = model.stats();
    }
    model.attachJournal(nullptr);
    m_calls += len;
    const AllocatorJournal& jn = m_journal;
    if (jn.irregular || max_skip < 1) return 0;

    // Buffers by the position that allocated them, in the reference and in the period before.
    m_shift.resize(len);
    for (uint32_t m = 0; m < len; ++m) m_shift[m] = int64_t{ops[len + m].id} - ops[m].id;
    int64_t skip = max_skip;
    bool proven = true;
    for (uint32_t m = 0; m < len; ++m) {
        if (ops[m].kind != AllocOpKind::Allocate) continue;
        m_alloc_pos[static_cast<size_t>(ops[m].id)] = m + 1;
        const int64_t prev = ops[m].id - m_shift[m];
        if (prev >= 0 && static_cast<size_t>(prev) < m_prev_pos.size()) m_prev_pos[static_cast<size_t>(prev)] = m + 1;
        else proven = false;
    }
    auto clearMaps = [&] {
        for (uint32_t m = 0; m < len; ++m) {
            if (ops[m].kind != AllocOpKind::Allocate) continue;
            m_alloc_pos[static_cast<size_t>(ops[m].id)] = 0;
            const int64_t prev = ops[m].id - m_shift[m];
            if (prev >= 0 && static_cast<size_t>(prev) < m_prev_pos.size()) m_prev_pos[static_cast<size_t>(prev)] = 0;
        }
    };
    // 2: frees and adjustments name a buffer of the reference or of the period before, same shift.
    for (uint32_t m = 0; m < len && proven; ++m) {
        if (ops[m].kind == AllocOpKind::Allocate) continue;
        const auto id = static_cast<size_t>(ops[m].id);
        const uint32_t src = m_alloc_pos[id] != 0 ? m_alloc_pos[id] : m_prev_pos[id];
        proven = src != 0 && m_shift[src - 1] == m_shift[m];
    }
    // A buffer's name after the reference, given its name before: the previous period's buffers
    // are replaced by the same positions' of the reference.
    auto renamed = [&](int32_t buffer) -> int64_t {
        if (buffer < 0) return -1;
        const uint32_t src = m_prev_pos[static_cast<size_t>(buffer)];
        return src != 0 ? buffer + m_shift[src - 1] : buffer;
    };
    // 3: the old segments it changed are as it found them, up to the carried buffers' names.
    for (size_t t = 0; t < jn.touched.size() && proven; ++t) {
        const Segment& seg = model.m_segments[static_cast<size_t>(jn.touched[t])];
        uint32_t k = jn.saved_at[t];
        for (int32_t id = seg.first; id >= 0 && proven; id = model.m_blocks[static_cast<size_t>(id)].next, ++k) {
            const Block& b = model.m_blocks[static_cast<size_t>(id)];
            proven = k < jn.saved_at[t + 1] && jn.saved[k].addr == b.addr && jn.saved[k].size == b.size &&
                     renamed(jn.saved[k].buffer) == b.buffer;
        }
        proven = proven && k == jn.saved_at[t + 1];
    }
    // 4: the layer holds the reference's buffers; its free blocks change no best fit.
    const int32_t base = jn.segment_base;
    auto isNew = [&](int32_t slot) { return slot >= base || jn.new_mark[static_cast<size_t>(slot)] == jn.epoch; };
    if (strict && !jn.new_segments.empty()) {
        for (const AllocatorJournal::Pick& pick : jn.picks) proven = proven && !pick.mixed_tie;
    }
    for (size_t i = 0; i < jn.new_segments.size() && proven; ++i) {
        const Segment& seg = model.m_segments[static_cast<size_t>(jn.new_segments[i].slot)];
        for (int32_t id = seg.first; id >= 0 && proven; id = model.m_blocks[static_cast<size_t>(id)].next) {
            const Block& b = model.m_blocks[static_cast<size_t>(id)];
            if (b.buffer >= 0) {
                proven = m_alloc_pos[static_cast<size_t>(b.buffer)] != 0;
                continue;
            }
            for (const AllocatorJournal::Pick& pick : jn.picks) {
                if (pick.small != seg.small || pick.stream != seg.stream || b.size < pick.request) continue;
                const bool tie_above = !strict && b.size == pick.size && !isNew(pick.segment);
                if (!pick.found || (b.size <= pick.size && !tie_above)) {
                    proven = false;
                    break;
                }
            }
        }
    }
    // 5: reserved grows by the reference's growth per period; each new segment stays in the limit.
    const int64_t grow = m_curve[len - 1].reserved_bytes - start.reserved_bytes;
    if (proven && grow > 0) {
        for (const AllocatorJournal::NewSegment& ns : jn.new_segments) {
            skip = std::min(skip, (model.m_config.limit_bytes - ns.size - ns.reserved_before) / grow);
        }
    }
    if (!proven || skip < 1) {
        clearMaps();
        return 0;
    }

    // Apply `skip` periods: copies of the layer, each segment in the slot the allocator would give it.
    for (int64_t j = 1; j <= skip; ++j) {
        for (const AllocatorJournal::NewSegment& ns : jn.new_segments) {
            const int32_t slot = model.takeSegmentSlot();
            const Segment src = model.m_segments[static_cast<size_t>(ns.slot)];
            model.m_segments[static_cast<size_t>(slot)] = Segment{src.stream, src.small, false, true, src.size, -1, -1};
            const int64_t moved = (int64_t{slot} - ns.slot) * (int64_t{1} << kSegmentAddressBits);
            int32_t last = -1;
            for (int32_t id = src.first; id >= 0; id = model.m_blocks[static_cast<size_t>(id)].next) {
                const Block b = model.m_blocks[static_cast<size_t>(id)];
                int32_t buffer = -1;
                if (b.buffer >= 0) {
                    buffer = static_cast<int32_t>(b.buffer + j * m_shift[m_alloc_pos[static_cast<size_t>(b.buffer)] - 1]);
                }
                const int32_t nid = model.newBlock(Block{b.addr + moved, b.size, last, -1, slot, buffer});
                Segment& seg = model.m_segments[static_cast<size_t>(slot)];
                if (last >= 0) model.m_blocks[static_cast<size_t>(last)].next = nid;
                else seg.first = nid;
                seg.last = nid;
                last = nid;
                if (buffer < 0) {
                    model.insertFree(nid);
                } else {
                    const CachingAllocatorModel::BufferState& from = model.m_buffers[static_cast<size_t>(b.buffer)];
                    model.m_buffers[static_cast<size_t>(buffer)] = {nid, from.requested, 0, 0, from.stream};
                }
            }
        }
    }
    // The buffers the reference carries in old segments take the names of period k + skip's.
    for (uint32_t m = 0; m < len; ++m) {
        if (ops[m].kind != AllocOpKind::Allocate) continue;
        auto& state = model.m_buffers[static_cast<size_t>(ops[m].id)];
        if (state.block < 0 || isNew(model.m_blocks[static_cast<size_t>(state.block)].segment)) continue;
        const auto name = static_cast<size_t>(ops[m].id + skip * m_shift[m]);
        model.m_buffers[name] = state;
        model.m_blocks[static_cast<size_t>(state.block)].buffer = static_cast<int32_t>(name);
        state.block = -1;
        state.requested = 0;
    }
    applyStats(model, start, skip);
    clearMaps();
    return skip;
}

// The figures of `periods` more periods like the reference (m_curve, from `start`): each moment's
// allocated and reserved bytes move by the reference's change per period, so every maximum over
// them is reached in the first or the last of those periods; both run through noteChange.
void PeriodicReplay::applyStats(CachingAllocatorModel& model, const AllocatorStats& start, int64_t periods) {
    AllocatorStats& s = model.m_stats;
    const AllocatorStats end = s;
    auto place = [&](const AllocatorStats& at, int64_t j) {
        s.allocated_bytes = at.allocated_bytes + j * (end.allocated_bytes - start.allocated_bytes);
        s.reserved_bytes = at.reserved_bytes + j * (end.reserved_bytes - start.reserved_bytes);
        for (size_t i = 0; i < s.reserved_by_stream.size(); ++i) {
            s.reserved_by_stream[i] = at.reserved_by_stream[i] + j * (end.reserved_by_stream[i] - start.reserved_by_stream[i]);
            s.allocated_by_stream[i] = at.allocated_by_stream[i] + j * (end.allocated_by_stream[i] - start.allocated_by_stream[i]);
        }
        s.segments = static_cast<int32_t>(at.segments + j * (end.segments - start.segments));
    };
    const int64_t firsts[2] = {1, periods};
    for (int64_t j : firsts) {
        for (const AllocatorStats& at : m_curve) {
            place(at, j);
            model.noteChange();
        }
        if (periods == 1) break;
    }
    place(end, periods);
}

}  // namespace shardcast::core
