#include "core/memory/caching_allocator.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <functional>

namespace shardcast::core {

std::string_view allocatorModeName(AllocatorMode m) {
    switch (m) {
        case AllocatorMode::Caching: return "caching";
        case AllocatorMode::Expandable: return "expandable";
    }
    return "?";
}

std::optional<AllocatorMode> parseAllocatorMode(std::string_view name) {
    if (name == "caching") return AllocatorMode::Caching;
    if (name == "expandable") return AllocatorMode::Expandable;
    return std::nullopt;
}

int64_t CachingAllocatorModel::roundSize(int64_t bytes) {
    if (bytes < kAllocMinBlockSize) return kAllocMinBlockSize;
    return kAllocMinBlockSize * ((bytes + kAllocMinBlockSize - 1) / kAllocMinBlockSize);
}

int64_t CachingAllocatorModel::segmentSize(int64_t rounded) {
    if (rounded <= kAllocSmallSize) return kAllocSmallBuffer;
    if (rounded < kAllocMinLargeAlloc) return kAllocLargeBuffer;
    return kAllocRoundLarge * ((rounded + kAllocRoundLarge - 1) / kAllocRoundLarge);
}

// Address space: segment slot s spans [s << 40, (s + 1) << 40), room for an expandable segment
// to grow; only the order of addresses matters (ties of equal size go to the lower one).
constexpr int kSegmentAddressBits = 40;

void CachingAllocatorModel::reset(const AllocatorConfig& config, int32_t buffer_count) {
    m_config = config;
    m_segments.clear();
    m_blocks.clear();
    m_spare_blocks.clear();
    m_spare_segments.clear();
    for (auto& pool : m_free) {
        for (FreeList& list : pool) {
            for (size_t w = 0; w < list.nonempty.size(); ++w) {
                for (uint64_t bits = list.nonempty[w]; bits != 0; bits &= bits - 1) {
                    list.classes[w * 64 + static_cast<size_t>(std::countr_zero(bits))].clear();
                }
                list.nonempty[w] = 0;
            }
        }
    }
    m_buffers.assign(static_cast<size_t>(buffer_count), BufferState{});
    m_stats = AllocatorStats{};
    m_allocated_at_reserved_peak = 0;
    m_min_allocated = 0;
    m_wholly_free = 0;
}

void CachingAllocatorModel::resetPeaks() {
    m_stats.peak_allocated_bytes = m_stats.allocated_bytes;
    m_stats.reserved_by_stream_at_peak = m_stats.reserved_by_stream;
    m_stats.allocated_by_stream_at_peak = m_stats.allocated_by_stream;
    m_stats.peak_reserved_bytes = m_stats.reserved_bytes;
    m_stats.fragmentation_at_reserved_peak = m_stats.reserved_bytes - m_stats.allocated_bytes;
    m_stats.max_fragmentation_bytes = m_stats.fragmentation_at_reserved_peak;
    m_allocated_at_reserved_peak = m_stats.allocated_bytes;
    m_min_allocated = m_stats.allocated_bytes;
    m_stats.releases = 0;
    m_stats.out_of_memory = false;
}

void CachingAllocatorModel::noteChange() {
    AllocatorStats& s = m_stats;
    const int64_t frag = s.reserved_bytes - s.allocated_bytes;
    if (s.allocated_bytes > s.peak_allocated_bytes) {
        s.peak_allocated_bytes = s.allocated_bytes;
        s.reserved_by_stream_at_peak = s.reserved_by_stream;
        s.allocated_by_stream_at_peak = s.allocated_by_stream;
    }
    if (s.reserved_bytes > s.peak_reserved_bytes) {
        s.peak_reserved_bytes = s.reserved_bytes;
        m_allocated_at_reserved_peak = s.allocated_bytes;
    } else if (s.reserved_bytes == s.peak_reserved_bytes && s.allocated_bytes > m_allocated_at_reserved_peak) {
        m_allocated_at_reserved_peak = s.allocated_bytes;
    }
    s.fragmentation_at_reserved_peak = s.peak_reserved_bytes - m_allocated_at_reserved_peak;
    if (frag > s.max_fragmentation_bytes) s.max_fragmentation_bytes = frag;
    if (s.allocated_bytes < m_min_allocated) m_min_allocated = s.allocated_bytes;
}

int32_t CachingAllocatorModel::newBlock(const Block& b) {
    if (!m_spare_blocks.empty()) {
        const int32_t id = m_spare_blocks.back();
        m_spare_blocks.pop_back();
        m_blocks[static_cast<size_t>(id)] = b;
        return id;
    }
    m_blocks.push_back(b);
    return static_cast<int32_t>(m_blocks.size() - 1);
}

namespace {
template <class Key>
bool keyBefore(const Key& a, int64_t size, int64_t addr) {
    return a.size != size ? a.size < size : a.addr < addr;
}
}  // namespace

int CachingAllocatorModel::sizeClass(int64_t size) {
    assert(size >= kAllocMinBlockSize);
    const int e = std::bit_width(static_cast<uint64_t>(size)) - 1;  // floor(log2(size)), >= 9
    const int sub = static_cast<int>((size >> (e - 2)) & 3);
    return std::min(kSizeClasses - 1, (e - 9) * 4 + sub);
}

// The position of `b`'s key in its pool's free list (where it is, or where it goes).
std::vector<CachingAllocatorModel::FreeKey>::iterator CachingAllocatorModel::freeKeyOf(const Block& b, FreeList*& list, int& c) {
    const Segment& seg = m_segments[static_cast<size_t>(b.segment)];
    list = &freeList(seg.small, seg.stream);
    c = sizeClass(b.size);
    auto& keys = list->classes[static_cast<size_t>(c)];
    return std::lower_bound(keys.begin(), keys.end(), b,
                            [](const FreeKey& k, const Block& x) { return keyBefore(k, x.size, x.addr); });
}

void CachingAllocatorModel::insertFree(int32_t block) {
    const Block& b = m_blocks[static_cast<size_t>(block)];
    FreeList* list = nullptr;
    int c = 0;
    const auto it = freeKeyOf(b, list, c);
    list->classes[static_cast<size_t>(c)].insert(it, FreeKey{b.size, b.addr, block});
    list->nonempty[static_cast<size_t>(c / 64)] |= uint64_t{1} << (c % 64);
}

void CachingAllocatorModel::eraseFree(int32_t block) {
    const Block& b = m_blocks[static_cast<size_t>(block)];
    FreeList* list = nullptr;
    int c = 0;
    const auto it = freeKeyOf(b, list, c);
    auto& keys = list->classes[static_cast<size_t>(c)];
    assert(it != keys.end() && it->block == block && "a free block is in its pool's free list");
    keys.erase(it);
    if (keys.empty()) list->nonempty[static_cast<size_t>(c / 64)] &= ~(uint64_t{1} << (c % 64));
}

void CachingAllocatorModel::attachJournal(AllocatorJournal* journal) {
    m_journal = journal;
    if (journal == nullptr) return;
    journal->segment_base = static_cast<int32_t>(m_segments.size());
    journal->irregular = false;
    journal->empty_releases = 0;
    journal->picks.clear();
    journal->tie_segments.clear();
    journal->new_segments.clear();
    journal->touched.clear();
    journal->saved_at.assign(1, 0);
    journal->saved.clear();
    if (journal->touch_mark.size() < m_segments.size()) {
        journal->touch_mark.resize(m_segments.size(), 0);
        journal->new_mark.resize(m_segments.size(), 0);
    }
    if (++journal->epoch == 0) {  // wrapped: old marks could read as this epoch
        std::fill(journal->touch_mark.begin(), journal->touch_mark.end(), 0);
        std::fill(journal->new_mark.begin(), journal->new_mark.end(), 0);
        journal->epoch = 1;
    }
}

void CachingAllocatorModel::noteTouch(int32_t segment) {
    AllocatorJournal& j = *m_journal;
    if (segment >= j.segment_base || j.touch_mark[static_cast<size_t>(segment)] == j.epoch) return;
    j.touch_mark[static_cast<size_t>(segment)] = j.epoch;
    j.touched.push_back(segment);
    for (int32_t id = m_segments[static_cast<size_t>(segment)].first; id >= 0; id = m_blocks[static_cast<size_t>(id)].next) {
        const Block& b = m_blocks[static_cast<size_t>(id)];
        j.saved.push_back({b.addr, b.size, b.buffer});
    }
    j.saved_at.push_back(static_cast<uint32_t>(j.saved.size()));
}

// Takes the free block (already out of its free list) for `buffer`, splitting off the remainder.
void CachingAllocatorModel::placeInBlock(int32_t block, int64_t size, int32_t buffer) {
    if (m_journal != nullptr) noteTouch(m_blocks[static_cast<size_t>(block)].segment);
    Block& b = m_blocks[static_cast<size_t>(block)];
    const Segment& seg = m_segments[static_cast<size_t>(b.segment)];
    assert(b.buffer < 0 && b.size >= size);
    const int64_t remaining = b.size - size;
    // should_split: small pool (and expandable segments) down to kMinBlockSize; the large pool
    // keeps a remainder of up to kSmallSize inside the block, and never splits for a request of
    // max_split_size or more.
    const bool split = (seg.small || seg.expandable) ? remaining >= kAllocMinBlockSize
                                                     : size < m_config.max_split_size && remaining > kAllocSmallSize;
    if (b.prev < 0 && b.next < 0 && !seg.expandable) --m_wholly_free;
    b.buffer = buffer;
    if (split) {
        b.size = size;
        const Block rest{b.addr + size, remaining, block, b.next, b.segment, -1};
        const int32_t r = newBlock(rest);  // may move m_blocks: no references held across it
        Block& bb = m_blocks[static_cast<size_t>(block)];
        if (bb.next >= 0) m_blocks[static_cast<size_t>(bb.next)].prev = r;
        else m_segments[static_cast<size_t>(bb.segment)].last = r;
        bb.next = r;
        insertFree(r);
    }
    m_buffers[static_cast<size_t>(buffer)].block = block;
}

bool CachingAllocatorModel::tryCached(int64_t size, bool small, Stream stream, int32_t buffer) {
    FreeList& list = freeList(small, stream);
    // get_free_block: the smallest free block of the stream's pool that fits, lowest address
    // first; an oversize block serves only oversize requests, and only those within kLargeBuffer.
    int c = sizeClass(size);
    auto& own = list.classes[static_cast<size_t>(c)];
    auto it = std::lower_bound(own.begin(), own.end(), size, [](const FreeKey& k, int64_t want) { return k.size < want; });
    std::vector<FreeKey>* keys = &own;
    if (it == own.end()) {
        // The first non-empty class above: its first key is the smallest block larger than any of c.
        int next = -1;
        for (int w = (c + 1) / 64; w < kSizeClasses / 64 && next < 0; ++w) {
            uint64_t bits = list.nonempty[static_cast<size_t>(w)];
            if (w == (c + 1) / 64) bits &= ~uint64_t{0} << ((c + 1) % 64);
            if (bits != 0) next = w * 64 + std::countr_zero(bits);
        }
        if (next < 0 || c + 1 >= kSizeClasses) {
            if (m_journal != nullptr) m_journal->picks.push_back({size, 0, 0, -1, false, 0, 0, small, stream});
            return false;
        }
        c = next;
        keys = &list.classes[static_cast<size_t>(c)];
        it = keys->begin();
    }
    if (m_journal != nullptr) {
        const int32_t seg = m_blocks[static_cast<size_t>(it->block)].segment;
        AllocatorJournal& j = *m_journal;
        const auto tie_at = static_cast<uint32_t>(j.tie_segments.size());
        uint32_t ties = 0;
        for (auto t = it + 1; t != keys->end() && t->size == it->size && ties <= AllocatorJournal::kMaxTies; ++t, ++ties) {
            j.tie_segments.push_back(m_blocks[static_cast<size_t>(t->block)].segment);
        }
        j.picks.push_back({size, it->size, it->addr, seg, true, tie_at, ties, small, stream});
    }
    const int64_t max_split = m_config.max_split_size;
    if (size < max_split && it->size >= max_split) return false;
    if (size >= max_split && it->size >= size + kAllocLargeBuffer) return false;
    if (m_picks != nullptr) m_picks->push_back({size, it->size, 0, poolIndex(small, stream)});
    const int32_t block = it->block;
    keys->erase(it);
    if (keys->empty()) list.nonempty[static_cast<size_t>(c / 64)] &= ~(uint64_t{1} << (c % 64));
    placeInBlock(block, size, buffer);
    return true;
}

int32_t CachingAllocatorModel::takeSegmentSlot() {
    if (m_spare_segments.empty()) {
        m_segments.emplace_back();
        return static_cast<int32_t>(m_segments.size() - 1);
    }
    // The lowest released slot, as the scan for the first free slot took it.
    std::pop_heap(m_spare_segments.begin(), m_spare_segments.end(), std::greater<>{});
    const int32_t slot = m_spare_segments.back();
    m_spare_segments.pop_back();
    return slot;
}

bool CachingAllocatorModel::newSegment(int64_t size, bool small, Stream stream, int32_t buffer) {
    const int64_t seg_size = segmentSize(size);
    if (m_stats.reserved_bytes + seg_size > m_config.limit_bytes) return false;
    const int32_t seg_id = takeSegmentSlot();
    const auto slot = static_cast<size_t>(seg_id);
    const int32_t block = newBlock(Block{int64_t{seg_id} << kSegmentAddressBits, seg_size, -1, -1, seg_id, -1});
    Segment& seg = m_segments[slot];
    seg = Segment{stream, small, false, true, seg_size, block, block};
    if (m_journal != nullptr) {
        m_journal->new_segments.push_back({seg_id, seg_size, m_stats.reserved_bytes, m_config.limit_bytes != INT64_MAX});
        if (seg_id < m_journal->segment_base) {  // a released slot: new, not an old segment changed
            m_journal->touch_mark[slot] = m_journal->epoch;
            m_journal->new_mark[slot] = m_journal->epoch;
        }
    }
    if (m_picks != nullptr) m_picks->push_back({size, 0, seg_size, poolIndex(small, stream)});
    m_stats.reserved_bytes += seg_size;
    m_stats.reserved_by_stream[static_cast<size_t>(stream)] += seg_size;
    ++m_stats.segments;
    ++m_wholly_free;  // until placeInBlock takes its block
    placeInBlock(block, size, buffer);
    return true;
}

bool CachingAllocatorModel::growExpandable(int64_t size, bool small, Stream stream, int32_t buffer) {
    // ExpandableSegment: 2 MiB pages for the small pool, 20 MiB for the large pool.
    const int64_t page = small ? kAllocSmallBuffer : kAllocLargeBuffer;
    size_t slot = m_segments.size();
    for (size_t si = 0; si < m_segments.size(); ++si) {
        const Segment& s = m_segments[si];
        if (s.live && s.expandable && s.stream == stream && s.small == small) slot = si;
    }
    const bool created = slot == m_segments.size();
    const int32_t tail = created ? -1 : m_segments[slot].last;
    const bool tail_free = tail >= 0 && m_blocks[static_cast<size_t>(tail)].buffer < 0;
    const int64_t tail_bytes = tail_free ? m_blocks[static_cast<size_t>(tail)].size : 0;
    const int64_t grow = page * ((size - tail_bytes + page - 1) / page);
    if (m_journal != nullptr) m_journal->irregular = true;
    if (m_stats.reserved_bytes + grow > m_config.limit_bytes) return false;
    if (created) {
        m_segments.emplace_back();
        m_segments.back() = Segment{stream, small, true, true, 0, -1, -1};
        ++m_stats.segments;
    }
    const auto seg_id = static_cast<int32_t>(slot);
    int32_t block = tail;
    if (tail_free) {
        eraseFree(tail);
        m_blocks[static_cast<size_t>(tail)].size += grow;
    } else {
        const int64_t addr = (int64_t{seg_id} << kSegmentAddressBits) + m_segments[slot].size;
        block = newBlock(Block{addr, grow, tail, -1, seg_id, -1});
        if (tail >= 0) m_blocks[static_cast<size_t>(tail)].next = block;
        else m_segments[slot].first = block;
        m_segments[slot].last = block;
    }
    m_segments[slot].size += grow;
    m_stats.reserved_bytes += grow;
    m_stats.reserved_by_stream[static_cast<size_t>(stream)] += grow;
    placeInBlock(block, size, buffer);
    return true;
}

void CachingAllocatorModel::releaseCached() {
    // release_cached_blocks: every segment with no allocated block goes back to CUDA; an expandable
    // segment unmaps the free pages at its end.
    ++m_stats.releases;
    m_picks = nullptr;  // a release voids TwoStepReplay's proof: nothing more to record
    const int64_t reserved_before = m_stats.reserved_bytes;
#ifndef NDEBUG
    int32_t wholly_free = 0;
    for (const Segment& g : m_segments) {
        wholly_free += g.live && !g.expandable && g.first >= 0 && g.first == g.last && m_blocks[static_cast<size_t>(g.first)].buffer < 0;
    }
    assert(wholly_free == m_wholly_free && "the count of wholly free segments is kept up to date");
#endif
    // Only expandable segments give back part of themselves; otherwise nothing to scan for.
    const bool scan = m_config.mode == AllocatorMode::Expandable || m_wholly_free > 0;
    for (size_t si = 0; scan && si < m_segments.size(); ++si) {
        Segment& seg = m_segments[si];
        if (!seg.live || seg.last < 0) continue;
        Block& tail = m_blocks[static_cast<size_t>(seg.last)];
        if (tail.buffer >= 0) continue;
        if (seg.expandable) {
            const int64_t page = seg.small ? kAllocSmallBuffer : kAllocLargeBuffer;
            const int64_t unmap = page * (tail.size / page);
            if (unmap == 0) continue;
            const int32_t id = seg.last;
            eraseFree(id);
            Block& t = m_blocks[static_cast<size_t>(id)];
            t.size -= unmap;
            if (t.size == 0) {
                seg.last = t.prev;
                if (t.prev >= 0) m_blocks[static_cast<size_t>(t.prev)].next = -1;
                else seg.first = -1;
                m_spare_blocks.push_back(id);
            } else {
                insertFree(id);
            }
            seg.size -= unmap;
            m_stats.reserved_bytes -= unmap;
            m_stats.reserved_by_stream[static_cast<size_t>(seg.stream)] -= unmap;
            continue;
        }
        if (seg.first == seg.last) {
            --m_wholly_free;
            eraseFree(seg.first);
            m_spare_blocks.push_back(seg.first);
            m_stats.reserved_bytes -= seg.size;
            m_stats.reserved_by_stream[static_cast<size_t>(seg.stream)] -= seg.size;
            --m_stats.segments;
            seg.live = false;
            seg.first = seg.last = -1;
            m_spare_segments.push_back(static_cast<int32_t>(si));
            std::push_heap(m_spare_segments.begin(), m_spare_segments.end(), std::greater<>{});
        }
    }
    // The journal accepts a release that found nothing to give back (its only effect is the count).
    if (m_journal != nullptr) {
        if (m_stats.reserved_bytes != reserved_before) m_journal->irregular = true;
        else ++m_journal->empty_releases;
    }
}

void CachingAllocatorModel::allocate(int32_t buffer, int64_t bytes, Stream stream) {
    assert(buffer >= 0 && static_cast<size_t>(buffer) < m_buffers.size());
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    assert(state.block < 0 && "a buffer is allocated once before its free");
    state.requested = bytes;
    state.released_tail = 0;
    state.released_bytes = 0;
    state.stream = stream;
    countAllocated(stream, bytes);
    if (bytes > 0) {
        const int64_t size = roundSize(bytes);
        const bool small = size <= kAllocSmallSize;
        const bool expandable = m_config.mode == AllocatorMode::Expandable;
        auto fresh = [&] {
            return expandable ? growExpandable(size, small, stream, buffer) : newSegment(size, small, stream, buffer);
        };
        if (!tryCached(size, small, stream, buffer) && !fresh()) {
            releaseCached();
            if (!tryCached(size, small, stream, buffer) && !fresh()) {
                // Past the device: PyTorch raises OutOfMemoryError here. Go on without the limit so
                // the figures say how far past it the step goes.
                m_stats.out_of_memory = true;
                const int64_t limit = m_config.limit_bytes;
                m_config.limit_bytes = INT64_MAX;
                fresh();
                m_config.limit_bytes = limit;
            }
        }
    }
    noteChange();
}

// free_block: the block merges with its free neighbours (try_merge_blocks) and joins its pool.
void CachingAllocatorModel::freeBlock(int32_t block) {
    if (m_journal != nullptr) noteTouch(m_blocks[static_cast<size_t>(block)].segment);
    // `id` takes in its next block, free and out of its pool's list.
    auto absorbNext = [&](int32_t id) {
        Block& b = m_blocks[static_cast<size_t>(id)];
        const int32_t next = b.next;
        const Block n = m_blocks[static_cast<size_t>(next)];
        b.size += n.size;
        b.next = n.next;
        if (n.next >= 0) m_blocks[static_cast<size_t>(n.next)].prev = id;
        else m_segments[static_cast<size_t>(b.segment)].last = id;
        m_spare_blocks.push_back(next);
    };
    m_blocks[static_cast<size_t>(block)].buffer = -1;
    const int32_t next = m_blocks[static_cast<size_t>(block)].next;
    if (next >= 0 && m_blocks[static_cast<size_t>(next)].buffer < 0) {
        eraseFree(next);
        absorbNext(block);
    }
    const int32_t prev = m_blocks[static_cast<size_t>(block)].prev;
    if (prev >= 0 && m_blocks[static_cast<size_t>(prev)].buffer < 0) {
        eraseFree(prev);
        absorbNext(prev);
        block = prev;
    }
    insertFree(block);
    const Block& b = m_blocks[static_cast<size_t>(block)];
    if (b.prev < 0 && b.next < 0 && !m_segments[static_cast<size_t>(b.segment)].expandable) ++m_wholly_free;
}

void CachingAllocatorModel::free(int32_t buffer) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    countAllocated(state.stream, -state.requested);
    if (state.block >= 0) freeBlock(state.block);
    state.block = -1;
    state.requested = 0;
    noteChange();
}

void CachingAllocatorModel::apply(const AllocOp& op) {
    switch (op.kind) {
        case AllocOpKind::Allocate: allocate(op.id, op.bytes, op.stream); return;
        case AllocOpKind::Free: free(op.id); return;
        case AllocOpKind::ReleaseTail: releaseTail(op.id, op.bytes); return;
        case AllocOpKind::RestoreTail: restoreTail(op.id); return;
        case AllocOpKind::Adjust: adjustAllocated(op.id, op.bytes); return;
    }
}

void CachingAllocatorModel::adjustAllocated(int32_t buffer, int64_t delta) {
    countAllocated(m_buffers[static_cast<size_t>(buffer)].stream, delta);
    noteChange();
}

void CachingAllocatorModel::releaseTail(int32_t buffer, int64_t bytes) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    if (m_journal != nullptr && state.block >= 0) noteTouch(m_blocks[static_cast<size_t>(state.block)].segment);
    countAllocated(state.stream, -bytes);
    if (state.block >= 0) {
        const int32_t id = state.block;
        const Block b = m_blocks[static_cast<size_t>(id)];
        // The block keeps at least kMinBlockSize; what it gives back is whole 512-byte blocks.
        const int64_t tail = std::min(kAllocMinBlockSize * (bytes / kAllocMinBlockSize), b.size - kAllocMinBlockSize);
        if (tail > 0) {
            const int32_t t = newBlock(Block{b.addr + b.size - tail, tail, id, b.next, b.segment, buffer});
            Block& bb = m_blocks[static_cast<size_t>(id)];
            bb.size -= tail;
            if (bb.next >= 0) m_blocks[static_cast<size_t>(bb.next)].prev = t;
            else m_segments[static_cast<size_t>(bb.segment)].last = t;
            bb.next = t;
            freeBlock(t);
            state.released_tail += tail;
        }
    }
    state.released_bytes += bytes;
    noteChange();
}

void CachingAllocatorModel::restoreTail(int32_t buffer) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    if (m_journal != nullptr && state.block >= 0) noteTouch(m_blocks[static_cast<size_t>(state.block)].segment);
    const int64_t tail = state.released_tail;
    countAllocated(state.stream, state.released_bytes);
    state.released_tail = 0;
    state.released_bytes = 0;
    if (state.block >= 0 && tail > 0) {
        const int32_t id = state.block;
        const int32_t next = m_blocks[static_cast<size_t>(id)].next;
        // Every scratch allocation of the moment is freed first, so the tail is free again.
        assert(next >= 0 && m_blocks[static_cast<size_t>(next)].buffer < 0 && m_blocks[static_cast<size_t>(next)].size >= tail);
        if (next >= 0 && m_blocks[static_cast<size_t>(next)].buffer < 0 && m_blocks[static_cast<size_t>(next)].size >= tail) {
            eraseFree(next);
            m_blocks[static_cast<size_t>(id)].size += tail;
            Block& n = m_blocks[static_cast<size_t>(next)];
            n.addr += tail;
            n.size -= tail;
            if (n.size == 0) {
                m_blocks[static_cast<size_t>(id)].next = n.next;
                if (n.next >= 0) m_blocks[static_cast<size_t>(n.next)].prev = id;
                else m_segments[static_cast<size_t>(n.segment)].last = id;
                m_spare_blocks.push_back(next);
            } else {
                insertFree(next);
            }
        }
    }
    noteChange();
}

}  // namespace shardcast::core
