#include "core/memory/allocator_replay.hpp"

#include <algorithm>
#include <cassert>
#include <climits>

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
        m_family_pos.assign(model.m_buffers.size(), 0);
    }
    uint32_t pos = 0;
    for (const Run& run : m_runs) {
        runOps(model, tape, pos, run.start);
        const uint32_t L = run.length;
        uint32_t p = 0;     // periods of the run done
        uint32_t q = 1;     // base periods per reference
        uint32_t rest = 0;  // periods to run before the next try
        while (p < run.count) {
            const uint32_t at = run.start + p * L;
            // A reference needs the period before it and at least one after it in the run.
            if (p < q || p + 2 * q > run.count || rest > 0) {
                runOps(model, tape, at, at + L);
                ++p;
                rest -= rest > 0 ? 1 : 0;
                continue;
            }
            const int64_t after = (run.count - p - q) / q;
            std::vector<AllocatorPick>* picks = model.m_picks;
            const size_t picked = picks != nullptr ? picks->size() : 0;
            const int64_t skipped = reference(model, tape, at, q * L, after);
            p += q + static_cast<uint32_t>(std::max<int64_t>(skipped, 0)) * q;
            if (skipped > 0) {
                m_skipped += skipped * q;
                // Each skipped period made the reference's best-fit decisions (sizes unshifted).
                if (picks != nullptr) {
                    const size_t end = picks->size();
                    picks->reserve(end + static_cast<size_t>(skipped) * (end - picked));
                    for (int64_t r = 0; r < skipped; ++r) {
                        for (size_t i = picked; i < end; ++i) picks->push_back((*picks)[i]);
                    }
                }
                continue;
            }
            // A release (irregular, whatever the length) or each length failed: the rest of the
            // run is replayed call by call. Trying again later (after 2, 4, ... 16 periods) found
            // no repeat on the bench plans, and cost Llama-3.1-8B at 2,048 tokens 17% more
            // instructions per replay (callgrind: 4.42 M against 3.80 M; the 8,192-token plan
            // unchanged at 1.70 M).
            if (skipped < 0 || q == kMaxBlocksPerPeriod) rest = run.count;
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
        const AllocatorStats& s = model.m_stats;
        const size_t stream = static_cast<size_t>(
            ops[m].kind == AllocOpKind::Allocate ? ops[m].stream : model.m_buffers[static_cast<size_t>(ops[m].id)].stream);
        m_curve[m] = {s.allocated_bytes, s.reserved_bytes, s.allocated_by_stream[stream], s.reserved_by_stream[stream], stream};
    }
    model.attachJournal(nullptr);
    m_calls += len;
    const AllocatorJournal& jn = m_journal;
    if (jn.irregular) return -1;
    if (max_skip < 1) return 0;

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
    // 2: frees and adjustments name a buffer of the reference or of the period before, same
    // shift; or one allocated earlier that the reference frees (a family buffer: a block's saved
    // activations freed by its backward), at the same shift wherever it is named.
    m_family.clear();
    for (uint32_t m = 0; m < len && proven; ++m) {
        if (ops[m].kind == AllocOpKind::Allocate) continue;
        const auto id = static_cast<size_t>(ops[m].id);
        const uint32_t src = m_alloc_pos[id] != 0 ? m_alloc_pos[id] : m_prev_pos[id];
        if (src != 0) {
            proven = m_shift[src - 1] == m_shift[m];
        } else if (m_family_pos[id] != 0) {
            proven = m_shift[m_family_pos[id] - 1] == m_shift[m];
        } else {
            proven = ops[m].kind == AllocOpKind::Free && m_shift[m] != 0;
            m_family_pos[id] = m + 1;
            m_family.push_back(ops[m].id);
        }
    }
    auto clearMaps = [&] {
        for (uint32_t m = 0; m < len; ++m) {
            if (ops[m].kind != AllocOpKind::Allocate) continue;
            m_alloc_pos[static_cast<size_t>(ops[m].id)] = 0;
            const int64_t prev = ops[m].id - m_shift[m];
            if (prev >= 0 && static_cast<size_t>(prev) < m_prev_pos.size()) m_prev_pos[static_cast<size_t>(prev)] = 0;
        }
        for (int32_t id : m_family) m_family_pos[static_cast<size_t>(id)] = 0;
        for (int32_t slot : jn.touched) {
            if (static_cast<size_t>(slot) < m_role.size()) m_role[static_cast<size_t>(slot)] = 0;
        }
    };
    const int32_t base = jn.segment_base;
    auto isNew = [&](int32_t slot) { return slot >= base || jn.new_mark[static_cast<size_t>(slot)] == jn.epoch; };
    // Old segments the reference changed: a family segment held family buffers (and nothing else
    // allocated); the others must be left as found.
    m_is_family.assign(jn.touched.size(), 0);
    for (size_t t = 0; t < jn.touched.size() && proven; ++t) {
        bool family = false, other = false;
        for (uint32_t k = jn.saved_at[t]; k < jn.saved_at[t + 1]; ++k) {
            const int32_t b = jn.saved[k].buffer;
            if (b < 0) continue;
            if (m_family_pos[static_cast<size_t>(b)] != 0) family = true;
            else other = true;
        }
        proven = !(family && other);
        m_is_family[t] = family ? 1 : 0;
    }
    // A buffer's name after the reference, given its name before: the previous period's buffers
    // are replaced by the same positions' of the reference.
    auto renamed = [&](int32_t buffer) -> int64_t {
        if (buffer < 0) return -1;
        const uint32_t src = m_prev_pos[static_cast<size_t>(buffer)];
        return src != 0 ? buffer + m_shift[src - 1] : buffer;
    };
    // 3: every other old segment it changed either is as it found it, up to the carried buffers'
    // names (stationary), or continues a family's chain: the family segment of the period before
    // (role -1), of the one before that (role -2), ...: found laid out as the chain's previous
    // member is left now, with the previous period's buffers for the reference's. Period k + j
    // then finds its role r segment where period k + j - 1 left its role r + 1 one.
    auto sameLayout = [&](size_t t, int32_t slot) {  // touched[t]'s saved layout, renamed, vs slot's now
        const Segment& a = model.m_segments[static_cast<size_t>(jn.touched[t])];
        const Segment& b = model.m_segments[static_cast<size_t>(slot)];
        if (a.size != b.size || a.stream != b.stream || a.small != b.small || b.expandable) return false;
        const int64_t moved = (int64_t{slot} - jn.touched[t]) * (int64_t{1} << kSegmentAddressBits);
        uint32_t k = jn.saved_at[t];
        for (int32_t id = b.first; id >= 0; id = model.m_blocks[static_cast<size_t>(id)].next, ++k) {
            const Block& x = model.m_blocks[static_cast<size_t>(id)];
            if (k >= jn.saved_at[t + 1] || jn.saved[k].addr + moved != x.addr || jn.saved[k].size != x.size ||
                renamed(jn.saved[k].buffer) != x.buffer) {
                return false;
            }
        }
        return k == jn.saved_at[t + 1];
    };
    m_family_slots.clear();
    for (size_t t = 0; t < jn.touched.size(); ++t) {
        if (m_is_family[t] == 1) m_family_slots.push_back(static_cast<uint32_t>(t));
    }
    // In address order, so that comparing neighbours keeps the whole order.
    std::sort(m_family_slots.begin(), m_family_slots.end(), [&](uint32_t a, uint32_t b) { return jn.touched[a] < jn.touched[b]; });
    const size_t families = m_family_slots.size();
    // Chains: m_chain[m_chain_at[f] ..] holds family f's members by role 0, -1, ... (touched
    // indices); each next member the nearest matching segment above the last.
    m_chain.clear();
    m_chain_at.assign(1, 0);
    for (size_t f = 0; f < families; ++f) {
        size_t tail = m_family_slots[f];
        m_chain.push_back(static_cast<int32_t>(tail));
        m_is_family[tail] = 2;  // a chain member
        for (;;) {
            size_t next = jn.touched.size();
            for (size_t t = 0; t < jn.touched.size(); ++t) {
                if (m_is_family[t] != 0 || jn.touched[t] <= jn.touched[tail]) continue;
                if (next < jn.touched.size() && jn.touched[t] >= jn.touched[next]) continue;
                if (sameLayout(t, jn.touched[tail])) next = t;
            }
            if (next == jn.touched.size()) break;
            m_is_family[next] = 2;
            m_chain.push_back(static_cast<int32_t>(next));
            tail = next;
        }
        m_chain_at.push_back(static_cast<uint32_t>(m_chain.size()));
    }
    for (size_t t = 0; t < jn.touched.size() && proven; ++t) {
        if (m_is_family[t] == 0) proven = sameLayout(t, jn.touched[t]);
    }
    // Family segments of period k + j: where the family buffers shifted j times are, each laid out
    // as the reference's was before it (same offsets and sizes, the shifted buffers, of the same
    // requested bytes and stream), not changed by the reference, in the same address order.
    auto familyShift = [&](int32_t buffer) { return m_shift[m_family_pos[static_cast<size_t>(buffer)] - 1]; };
    auto requestedOf = [&](int32_t buffer) {  // a family buffer's bytes: what its free took off
        const uint32_t m = m_family_pos[static_cast<size_t>(buffer)] - 1;
        return (m == 0 ? start.allocated_bytes : m_curve[m - 1].allocated) - m_curve[m].allocated;
    };
    m_targets.clear();
    for (int64_t j = 1; j <= skip && proven && families > 0; ++j) {
        bool fits = true;
        for (size_t f = 0; f < families && fits; ++f) {
            const size_t t = m_family_slots[f];
            const Segment& from = model.m_segments[static_cast<size_t>(jn.touched[t])];
            int32_t target = -1;
            for (uint32_t k = jn.saved_at[t]; k < jn.saved_at[t + 1] && target < 0; ++k) {
                const int32_t b = jn.saved[k].buffer;
                if (b < 0) continue;
                const int64_t shifted = b + j * familyShift(b);
                if (shifted < 0 || static_cast<size_t>(shifted) >= model.m_buffers.size()) break;
                const int32_t block = model.m_buffers[static_cast<size_t>(shifted)].block;
                if (block >= 0) target = model.m_blocks[static_cast<size_t>(block)].segment;
            }
            fits = target >= 0 && !isNew(target) && jn.touch_mark[static_cast<size_t>(target)] != jn.epoch;
            if (!fits) break;
            const Segment& to = model.m_segments[static_cast<size_t>(target)];
            fits = to.live && !to.expandable && to.size == from.size && to.stream == from.stream && to.small == from.small;
            const int64_t moved = (int64_t{target} - jn.touched[t]) * (int64_t{1} << kSegmentAddressBits);
            uint32_t k = jn.saved_at[t];
            for (int32_t id = to.first; id >= 0 && fits; id = model.m_blocks[static_cast<size_t>(id)].next, ++k) {
                const Block& b = model.m_blocks[static_cast<size_t>(id)];
                fits = k < jn.saved_at[t + 1] && jn.saved[k].addr + moved == b.addr && jn.saved[k].size == b.size;
                const int32_t was = fits ? jn.saved[k].buffer : -1;
                if (!fits || was < 0) {
                    fits = fits && b.buffer < 0;
                    continue;
                }
                const auto& now = model.m_buffers[static_cast<size_t>(b.buffer >= 0 ? b.buffer : 0)];
                fits = b.buffer == was + j * familyShift(was) && now.requested == requestedOf(was) &&
                       now.stream == model.m_buffers[static_cast<size_t>(was)].stream && now.released_tail == 0;
            }
            fits = fits && k == jn.saved_at[t + 1];
            // In the reference's address order, and apart from the other families of this period.
            if (fits && f > 0) fits = target > m_targets.back();
            for (size_t g = m_targets.size() - f; g < m_targets.size() && fits; ++g) fits = m_targets[g] != target;
            if (fits) m_targets.push_back(target);
        }
        if (!fits) {
            m_targets.resize(static_cast<size_t>(j - 1) * families);
            skip = j - 1;
        }
    }
    // The slot of family f's segment of period k + i (i <= 0: the reference's chain member of role i).
    auto chainSlot = [&](size_t f, int64_t i) {
        return i >= 1 ? m_targets[static_cast<size_t>(i - 1) * families + f]
                      : jn.touched[static_cast<size_t>(m_chain[m_chain_at[f] + static_cast<size_t>(-i)])];
    };
    auto chainLength = [&](size_t f) { return static_cast<int64_t>(m_chain_at[f + 1] - m_chain_at[f]); };
    // Roles by slot: 1 a chain member another period takes up, 2 the last member of a chain (what
    // it leaves there stays), 0 anything else.
    if (m_role.size() < model.m_segments.size()) m_role.resize(model.m_segments.size(), 0);
    for (size_t f = 0; f < families; ++f) {
        for (int64_t r = 0; r < chainLength(f); ++r) m_role[static_cast<size_t>(chainSlot(f, -r))] = r + 1 == chainLength(f) ? 2 : 1;
    }
    auto role = [&](int32_t slot) { return m_role[static_cast<size_t>(slot)]; };
    // Descending: the family segments of each period lie below all of the period before's (a
    // backward walks down the segments the forward filled upwards), chains included. Then a block
    // the reference takes in a chain member moves down with it, every free block it was preferred
    // to (above it) stays above it, and what earlier periods leave behind lies above it too: ties
    // with it keep their outcome.
    bool descending = proven && families > 0 && m_targets.size() == static_cast<size_t>(skip) * families;
    int64_t oldest = 0;  // the lowest period index a chain reaches back to
    for (size_t f = 0; f < families; ++f) oldest = std::min(oldest, 1 - chainLength(f));
    for (int64_t i = oldest + 1; i <= skip && descending; ++i) {
        int32_t high = -1, low_before = INT32_MAX;
        for (size_t f = 0; f < families; ++f) {
            if (i >= 1 - chainLength(f)) high = std::max(high, chainSlot(f, i));
            if (i - 1 >= 1 - chainLength(f)) low_before = std::min(low_before, chainSlot(f, i - 1));
        }
        descending = high < low_before;
    }
    auto walksDown = [&](int32_t slot) { return descending && role(slot) != 0; };
    // 4: what the reference leaves in its new segments (its layer) and in the last member of each
    // chain holds its own buffers, none of which the next period frees; their free blocks change
    // no best fit. The chains' other members hold only its own buffers too (they move on).
    auto leftBehind = [&](int32_t slot, bool layer) {
        const Segment& seg = model.m_segments[static_cast<size_t>(slot)];
        for (int32_t id = seg.first; id >= 0 && proven; id = model.m_blocks[static_cast<size_t>(id)].next) {
            const Block& b = model.m_blocks[static_cast<size_t>(id)];
            if (b.buffer >= 0) {
                proven = m_alloc_pos[static_cast<size_t>(b.buffer)] != 0;
                continue;
            }
            if (!layer && role(slot) == 1) continue;
            for (const AllocatorJournal::Pick& pick : jn.picks) {
                if (pick.small != seg.small || pick.stream != seg.stream || b.size < pick.request) continue;
                // A layer lies above every old segment and below the next periods' own (unless
                // released slots are waiting); what a chain leaves above the next periods' chains
                // when they walk down.
                const bool tie_above = b.size == pick.size && ((layer && !strict && !isNew(pick.segment) && role(pick.segment) == 0) ||
                                                               (!layer && walksDown(pick.segment)));
                if (!pick.found || (b.size <= pick.size && !tie_above)) {
                    proven = false;
                    break;
                }
            }
        }
    };
    for (const AllocatorJournal::NewSegment& ns : jn.new_segments) leftBehind(ns.slot, true);
    for (int32_t t : m_chain) leftBehind(jn.touched[static_cast<size_t>(t)], false);
    for (uint32_t m = 0; m < len && proven; ++m) {
        if (ops[m].kind != AllocOpKind::Free) continue;
        const int64_t next = ops[m].id + m_shift[m];  // freed by period k + 1
        if (next < 0 || static_cast<size_t>(next) >= model.m_buffers.size() || m_alloc_pos[static_cast<size_t>(next)] == 0) continue;
        const int32_t block = model.m_buffers[static_cast<size_t>(next)].block;
        if (block < 0) continue;
        const int32_t slot = model.m_blocks[static_cast<size_t>(block)].segment;
        proven = !isNew(slot) && role(slot) != 2;  // in a chain member that moves on: its next member proves it
    }
    // Ties of best fits: the address order of the tied blocks must be the same in every period.
    // Old segments keep their addresses; new ones lie above them unless released slots are
    // waiting; chains walking down keep theirs.
    auto group = [&](int32_t slot) { return role(slot) != 0 ? 2 : isNew(slot) ? 1 : 0; };
    for (size_t p = 0; p < jn.picks.size() && proven; ++p) {
        const AllocatorJournal::Pick& pick = jn.picks[p];
        if (!pick.found || pick.ties == 0) continue;
        proven = pick.ties <= AllocatorJournal::kMaxTies;
        const int chosen = group(pick.segment);
        for (uint32_t i = 0; i < pick.ties && proven; ++i) {
            const int other = group(jn.tie_segments[pick.tie_at + i]);
            proven = (other == chosen && chosen != 2) || (!strict && chosen <= 1 && other <= 1) ||
                     (walksDown(pick.segment) && (!strict || other != 1));
        }
    }
    // A release that found nothing to give back (reserved only grows, so a new segment that did
    // not fit still does not) finds nothing in period k + j either if nothing left behind is a
    // wholly free segment.
    auto whollyFree = [&](int32_t slot) {
        const Segment& seg = model.m_segments[static_cast<size_t>(slot)];
        return seg.first >= 0 && seg.first == seg.last && model.m_blocks[static_cast<size_t>(seg.first)].buffer < 0;
    };
    if (jn.empty_releases > 0) {
        for (const AllocatorJournal::NewSegment& ns : jn.new_segments) proven = proven && !whollyFree(ns.slot);
        for (size_t f = 0; f < families && proven; ++f) {
            proven = !whollyFree(jn.touched[static_cast<size_t>(m_chain[m_chain_at[f + 1] - 1])]);
        }
    }
    // A buffer of the reference still giving back a tail at its end would be copied without it.
    for (uint32_t m = 0; m < len && proven; ++m) {
        if (ops[m].kind != AllocOpKind::Allocate) continue;
        const CachingAllocatorModel::BufferState& state = model.m_buffers[static_cast<size_t>(ops[m].id)];
        proven = state.block < 0 || (state.released_tail == 0 && state.released_bytes == 0);
    }
    // 5: reserved grows by the reference's growth per period; each new segment stays in the limit.
    const int64_t grow = m_curve[len - 1].reserved - start.reserved_bytes;
    if (proven && grow > 0) {
        for (const AllocatorJournal::NewSegment& ns : jn.new_segments) {
            if (ns.limited) skip = std::min(skip, (model.m_config.limit_bytes - ns.size - ns.reserved_before) / grow);
        }
    }
    if (!proven || skip < 1) {
        clearMaps();
        return 0;
    }

    // Rebuilds segment `slot` from `blocks` (offsets from the segment's start), its buffers
    // shifted j periods.
    auto rebuild = [&](int32_t slot, const Segment& like, const PostBlock* blocks, size_t count, int64_t j) {
        model.m_segments[static_cast<size_t>(slot)] = Segment{like.stream, like.small, false, true, like.size, -1, -1};
        if (count == 1 && blocks[0].buffer < 0) ++model.m_wholly_free;
        const int64_t origin = int64_t{slot} * (int64_t{1} << kSegmentAddressBits);
        int32_t last = -1;
        for (size_t i = 0; i < count; ++i) {
            const PostBlock& b = blocks[i];
            int32_t buffer = -1;
            if (b.buffer >= 0) {
                buffer = static_cast<int32_t>(b.buffer + j * m_shift[m_alloc_pos[static_cast<size_t>(b.buffer)] - 1]);
            }
            const int32_t nid = model.newBlock(Block{origin + b.offset, b.size, last, -1, slot, buffer});
            Segment& seg = model.m_segments[static_cast<size_t>(slot)];
            if (last >= 0) model.m_blocks[static_cast<size_t>(last)].next = nid;
            else seg.first = nid;
            seg.last = nid;
            last = nid;
            if (buffer < 0) {
                model.insertFree(nid);
            } else {
                model.m_buffers[static_cast<size_t>(buffer)] = {nid, b.requested, 0, 0, b.stream};
            }
        }
    };
    // What a segment holds now, offsets from its start (into m_posts).
    auto snapshot = [&](int32_t slot) {
        const int64_t origin = int64_t{slot} * (int64_t{1} << kSegmentAddressBits);
        for (int32_t id = model.m_segments[static_cast<size_t>(slot)].first; id >= 0; id = model.m_blocks[static_cast<size_t>(id)].next) {
            const Block& b = model.m_blocks[static_cast<size_t>(id)];
            const CachingAllocatorModel::BufferState* state = b.buffer >= 0 ? &model.m_buffers[static_cast<size_t>(b.buffer)] : nullptr;
            m_posts.push_back({b.addr - origin, b.size, b.buffer, state ? state->requested : 0, state ? state->stream : Stream::Compute});
        }
        m_posts_at.push_back(static_cast<uint32_t>(m_posts.size()));
    };
    // Empties segment `slot` (its free blocks out of the free lists, its buffers freed).
    auto clearSegment = [&](int32_t slot) {
        const Segment& seg = model.m_segments[static_cast<size_t>(slot)];
        if (seg.first >= 0 && seg.first == seg.last && model.m_blocks[static_cast<size_t>(seg.first)].buffer < 0) --model.m_wholly_free;
        for (int32_t id = model.m_segments[static_cast<size_t>(slot)].first; id >= 0;) {
            const Block b = model.m_blocks[static_cast<size_t>(id)];
            if (b.buffer < 0) {
                model.eraseFree(id);
            } else {
                auto& state = model.m_buffers[static_cast<size_t>(b.buffer)];
                state.block = -1;
                state.requested = 0;
            }
            model.m_spare_blocks.push_back(id);
            id = b.next;
        }
    };
    // What the reference left in its layer and chains, before any of it is overwritten.
    m_posts.clear();
    m_posts_at.assign(1, 0);
    for (const AllocatorJournal::NewSegment& ns : jn.new_segments) snapshot(ns.slot);
    for (int32_t t : m_chain) snapshot(jn.touched[static_cast<size_t>(t)]);
    // Whether segment `slot` already holds `blocks` shifted j periods.
    auto holds = [&](int32_t slot, const PostBlock* blocks, size_t count, int64_t j) {
        const int64_t origin = int64_t{slot} * (int64_t{1} << kSegmentAddressBits);
        size_t i = 0;
        for (int32_t id = model.m_segments[static_cast<size_t>(slot)].first; id >= 0; id = model.m_blocks[static_cast<size_t>(id)].next, ++i) {
            const Block& b = model.m_blocks[static_cast<size_t>(id)];
            if (i >= count || b.addr - origin != blocks[i].offset || b.size != blocks[i].size) return false;
            if (blocks[i].buffer < 0 || b.buffer < 0) {
                if (blocks[i].buffer != b.buffer) return false;
                continue;
            }
            const int64_t name = blocks[i].buffer + j * m_shift[m_alloc_pos[static_cast<size_t>(blocks[i].buffer)] - 1];
            const CachingAllocatorModel::BufferState& state = model.m_buffers[static_cast<size_t>(b.buffer)];
            if (b.buffer != name || state.requested != blocks[i].requested || state.stream != blocks[i].stream) return false;
        }
        return i == count;
    };
    // Apply `skip` periods: period k + j adds a copy of the layer, each segment in the slot the
    // allocator would give it, and leaves family f's segment of period k + j - r as the reference
    // left its role -r member. A segment is written once, as the last period to touch it leaves it.
    for (int64_t j = 1; j <= skip; ++j) {
        for (size_t i = 0; i < jn.new_segments.size(); ++i) {
            const Segment like = model.m_segments[static_cast<size_t>(jn.new_segments[i].slot)];
            rebuild(model.takeSegmentSlot(), like, m_posts.data() + m_posts_at[i], m_posts_at[i + 1] - m_posts_at[i], j);
        }
    }
    for (size_t f = 0; f < families; ++f) {
        const int64_t c = chainLength(f);
        for (int64_t i = 2 - c; i <= skip; ++i) {
            const int64_t j = std::min(skip, i + c - 1);  // the last period to touch it, as role -(j - i)
            const size_t post = jn.new_segments.size() + m_chain_at[f] + static_cast<size_t>(j - i);
            const PostBlock* blocks = m_posts.data() + m_posts_at[post];
            const size_t count = m_posts_at[post + 1] - m_posts_at[post];
            const int32_t target = chainSlot(f, i);
            if (holds(target, blocks, count, j)) continue;
            const Segment like = model.m_segments[static_cast<size_t>(target)];
            clearSegment(target);
            rebuild(target, like, blocks, count, j);
        }
    }
    // The buffers the reference carries in old segments take the names of period k + skip's.
    for (uint32_t m = 0; m < len; ++m) {
        if (ops[m].kind != AllocOpKind::Allocate) continue;
        auto& state = model.m_buffers[static_cast<size_t>(ops[m].id)];
        if (state.block < 0) continue;
        const int32_t slot = model.m_blocks[static_cast<size_t>(state.block)].segment;
        if (isNew(slot) || role(slot) != 0) continue;
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
    auto shifted = [&](auto member, size_t i, int64_t value, int64_t j) { return value + j * ((end.*member)[i] - (start.*member)[i]); };
    for (int64_t j : {int64_t{1}, periods}) {
        for (size_t i = 0; i < s.reserved_by_stream.size(); ++i) {
            s.reserved_by_stream[i] = shifted(&AllocatorStats::reserved_by_stream, i, start.reserved_by_stream[i], j);
            s.allocated_by_stream[i] = shifted(&AllocatorStats::allocated_by_stream, i, start.allocated_by_stream[i], j);
        }
        for (const Moment& at : m_curve) {
            s.allocated_bytes = at.allocated + j * (end.allocated_bytes - start.allocated_bytes);
            s.reserved_bytes = at.reserved + j * (end.reserved_bytes - start.reserved_bytes);
            s.allocated_by_stream[at.stream] = shifted(&AllocatorStats::allocated_by_stream, at.stream, at.stream_allocated, j);
            s.reserved_by_stream[at.stream] = shifted(&AllocatorStats::reserved_by_stream, at.stream, at.stream_reserved, j);
            model.noteChange();
        }
        if (periods == 1) break;
    }
    s.allocated_bytes = end.allocated_bytes + periods * (end.allocated_bytes - start.allocated_bytes);
    s.reserved_bytes = end.reserved_bytes + periods * (end.reserved_bytes - start.reserved_bytes);
    for (size_t i = 0; i < s.reserved_by_stream.size(); ++i) {
        s.reserved_by_stream[i] = shifted(&AllocatorStats::reserved_by_stream, i, end.reserved_by_stream[i], periods);
        s.allocated_by_stream[i] = shifted(&AllocatorStats::allocated_by_stream, i, end.allocated_by_stream[i], periods);
    }
    s.segments = static_cast<int32_t>(end.segments + periods * (end.segments - start.segments));
    s.releases = static_cast<int32_t>(end.releases + periods * (end.releases - start.releases));
}

// Why the second step may be skipped (TwoStepReplay::run). Let S0 be the state before step 1 (the
// steady state allocated) and C_1, C_2, ... the segments step 1 makes, in order. With no release
// in step 1, a new segment takes the next slot, so C_j lies above every segment made before it.
// Every buffer of the tape is freed by its end and free neighbours merge, so step 1 ends with S0's
// blocks as they were plus C_1, C_2, ... wholly free: step 2 starts where step 1 did, with the C_j
// cached. Claim: at each moment of step 2 the state is step 1's at that moment plus the C_j that
// step 1 has not made yet, each one free block. Allocations: step 2's best fit sees step 1's free
// blocks and those C_j (of its pool). Where step 1 took a block of size x for request r, step 2
// takes the same block unless some C_j not made yet has r <= size < x (a C_j of size x lies above
// it and loses the tie); where step 1 made C_k (nothing of its pool fitted), step 2 takes C_k
// unless a later C_j has r <= size < |C_k|. Either way the split and the layout that follow are
// step 1's, and frees act on the same neighbours. So if no pick meets such a C_j, step 2 makes
// step 1's decisions, never makes a segment (its reserved is constant: step 1's end), and its
// allocated bytes move as step 1's did from the same start. Its figures follow from step 1's
// allocated peak (and the streams' at it) and least allocated, with reserved fixed.
bool TwoStepReplay::secondStepRepeatsFirst() {
    for (auto& f : m_future) f.clear();
    for (auto it = m_picks.rbegin(); it != m_picks.rend(); ++it) {
        std::vector<int64_t>& later = m_future[it->pool];  // sizes of the segments made after this pick
        const int64_t beaten_below = it->taken > 0 ? it->taken : it->segment;
        const auto lb = std::lower_bound(later.begin(), later.end(), it->request);
        if (lb != later.end() && *lb < beaten_below) return false;
        if (it->taken == 0) later.insert(std::upper_bound(later.begin(), later.end(), it->segment), it->segment);
    }
    return true;
}

void TwoStepReplay::run(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, PeriodicReplay* periodic, bool shortcut) {
    auto step = [&] {
        if (periodic != nullptr) periodic->replay(model, tape);
        else replayTapeFull(model, tape);
    };
    // Where the proof's premises cannot hold: blocks refused by max_split_size, expandable
    // segments growing in place, released slots waiting (new segments would take them, below old
    // ones).
    const AllocatorConfig& config = model.m_config;
    const bool prove = shortcut && config.mode == AllocatorMode::Caching && config.max_split_size == kAllocUnlimitedSplit &&
                       model.m_spare_segments.empty();
    // Step 1's allocated curve is step 2's: from the same start, the same calls. Clearing the
    // peaks first makes step 1's allocated peak (and the streams' at it) step 2's.
    model.resetPeaks();
    const AllocatorStats start = model.m_stats;
    m_picks.clear();
    if (prove) model.attachPicks(&m_picks);
    const int64_t calls_before = periodic != nullptr ? periodic->lastCalls() : 0;
    step();
    model.attachPicks(nullptr);
    const int64_t step_one_calls = periodic != nullptr ? periodic->lastCalls() - calls_before : 0;
    const AllocatorStats& end = model.m_stats;
    // Step 2 starts from step 1's allocated bytes: the same curve only if the step gives back
    // what it takes.
    m_second_skipped = prove && end.releases == 0 && !end.out_of_memory && end.allocated_bytes == start.allocated_bytes &&
                       end.allocated_by_stream == start.allocated_by_stream && secondStepRepeatsFirst();
    if (!m_second_skipped) {
        model.resetPeaks();
        // Where step 1's periodic replay skipped under 30% of its calls, its proof attempts cost
        // about what they saved, and step 2 (on a fuller cache) skipped no more in the plans
        // measured: step 2 makes every call. Same figures either way; callgrind instructions per
        // replay, Llama-3.1-8B on 8 H100s: 2,048 tokens 3.87 -> 3.47 M, 1,024 tokens 4.33 -> 3.99 M;
        // GPT-2 1.33 -> 1.27 M; unchanged at 8,192 tokens, Llama-2-7B, 70B, 405B on 16,384 GPUs.
        if (shortcut && periodic != nullptr && step_one_calls * 10 > static_cast<int64_t>(tape.size()) * 7) {
            periodic->replayEveryCall(model, tape);
        } else {
            step();
        }
        return;
    }
    AllocatorStats& s = model.m_stats;
    s.peak_reserved_bytes = s.reserved_bytes;
    s.reserved_by_stream_at_peak = s.reserved_by_stream;
    model.m_allocated_at_reserved_peak = s.peak_allocated_bytes;  // reserved is at its peak all along
    s.fragmentation_at_reserved_peak = s.reserved_bytes - s.peak_allocated_bytes;
    s.max_fragmentation_bytes = s.reserved_bytes - model.m_min_allocated;
}

}  // namespace shardcast::core
