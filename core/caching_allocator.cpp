#include "core/caching_allocator.hpp"

#include <algorithm>
#include <cassert>

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

void CachingAllocatorModel::reset(const AllocatorConfig& config, int32_t buffer_count) {
    m_config = config;
    for (Segment& s : m_segments) {
        s.live = false;
        s.blocks.clear();
    }
    m_buffers.assign(static_cast<size_t>(buffer_count), BufferState{});
    m_stats = AllocatorStats{};
    m_allocated_at_reserved_peak = 0;
}

void CachingAllocatorModel::resetPeaks() {
    m_stats.peak_allocated_bytes = m_stats.allocated_bytes;
    m_stats.peak_reserved_bytes = m_stats.reserved_bytes;
    m_stats.fragmentation_at_reserved_peak = m_stats.reserved_bytes - m_stats.allocated_bytes;
    m_stats.max_fragmentation_bytes = m_stats.fragmentation_at_reserved_peak;
    m_allocated_at_reserved_peak = m_stats.allocated_bytes;
    m_stats.releases = 0;
    m_stats.out_of_memory = false;
}

void CachingAllocatorModel::noteChange() {
    AllocatorStats& s = m_stats;
    const int64_t frag = s.reserved_bytes - s.allocated_bytes;
    if (s.allocated_bytes > s.peak_allocated_bytes) s.peak_allocated_bytes = s.allocated_bytes;
    if (s.reserved_bytes > s.peak_reserved_bytes) {
        s.peak_reserved_bytes = s.reserved_bytes;
        m_allocated_at_reserved_peak = s.allocated_bytes;
    } else if (s.reserved_bytes == s.peak_reserved_bytes && s.allocated_bytes > m_allocated_at_reserved_peak) {
        m_allocated_at_reserved_peak = s.allocated_bytes;
    }
    s.fragmentation_at_reserved_peak = s.peak_reserved_bytes - m_allocated_at_reserved_peak;
    if (frag > s.max_fragmentation_bytes) s.max_fragmentation_bytes = frag;
}

void CachingAllocatorModel::refreshLargest(Segment& seg) {
    int64_t largest = 0;
    for (const Block& b : seg.blocks) {
        if (b.buffer < 0 && b.size > largest) largest = b.size;
    }
    seg.largest_free = largest;
}

int32_t CachingAllocatorModel::blockIndex(const Segment& seg, int32_t buffer) const {
    for (size_t i = 0; i < seg.blocks.size(); ++i) {
        if (seg.blocks[i].buffer == buffer) return static_cast<int32_t>(i);
    }
    assert(false && "a live buffer has a block in its segment");
    return -1;
}

bool CachingAllocatorModel::placeInBlock(int32_t seg_index, int32_t block_index, int64_t size, int32_t buffer) {
    Segment& seg = m_segments[static_cast<size_t>(seg_index)];
    Block& b = seg.blocks[static_cast<size_t>(block_index)];
    assert(b.buffer < 0 && b.size >= size);
    const int64_t remaining = b.size - size;
    // should_split: small pool (and expandable segments) down to kMinBlockSize; the large pool
    // keeps a remainder of up to kSmallSize inside the block, and never splits for a request of
    // max_split_size or more.
    const bool split = (seg.small || seg.expandable) ? remaining >= kAllocMinBlockSize
                                                     : size < m_config.max_split_size && remaining > kAllocSmallSize;
    b.buffer = buffer;
    if (split) {
        b.size = size;
        seg.blocks.insert(seg.blocks.begin() + block_index + 1, Block{remaining, -1});
    }
    refreshLargest(seg);
    m_buffers[static_cast<size_t>(buffer)].segment = seg_index;
    return true;
}

bool CachingAllocatorModel::tryCached(int64_t size, bool small, Stream stream, int32_t buffer) {
    int32_t best_seg = -1, best_block = -1;
    int64_t best_size = INT64_MAX;
    const int64_t max_split = m_config.max_split_size;
    for (size_t si = 0; si < m_segments.size(); ++si) {
        const Segment& seg = m_segments[si];
        if (!seg.live || seg.stream != stream || seg.small != small || seg.largest_free < size) continue;
        for (size_t bi = 0; bi < seg.blocks.size(); ++bi) {
            const Block& b = seg.blocks[bi];
            if (b.buffer >= 0 || b.size < size || b.size >= best_size) continue;
            // get_free_block: an oversize block serves only oversize requests, and only those
            // within kLargeBuffer of its size.
            if (size < max_split && b.size >= max_split) continue;
            if (size >= max_split && b.size >= size + kAllocLargeBuffer) continue;
            best_seg = static_cast<int32_t>(si);
            best_block = static_cast<int32_t>(bi);
            best_size = b.size;
        }
    }
    if (best_seg < 0) return false;
    return placeInBlock(best_seg, best_block, size, buffer);
}

bool CachingAllocatorModel::newSegment(int64_t size, bool small, Stream stream, int32_t buffer) {
    const int64_t seg_size = segmentSize(size);
    if (m_stats.reserved_bytes + seg_size > m_config.limit_bytes) return false;
    size_t slot = 0;
    while (slot < m_segments.size() && m_segments[slot].live) ++slot;
    if (slot == m_segments.size()) m_segments.emplace_back();
    Segment& seg = m_segments[slot];
    seg.stream = stream;
    seg.small = small;
    seg.expandable = false;
    seg.live = true;
    seg.size = seg_size;
    seg.blocks.clear();
    seg.blocks.push_back(Block{seg_size, -1});
    m_stats.reserved_bytes += seg_size;
    m_stats.reserved_by_stream[static_cast<size_t>(stream)] += seg_size;
    ++m_stats.segments;
    return placeInBlock(static_cast<int32_t>(slot), 0, size, buffer);
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
    const int64_t tail_free = created || m_segments[slot].blocks.empty() || m_segments[slot].blocks.back().buffer >= 0
                                  ? 0
                                  : m_segments[slot].blocks.back().size;
    const int64_t grow = page * ((size - tail_free + page - 1) / page);
    if (m_stats.reserved_bytes + grow > m_config.limit_bytes) return false;
    if (created) {
        m_segments.emplace_back();
        Segment& seg = m_segments.back();
        seg.stream = stream;
        seg.small = small;
        seg.expandable = true;
        seg.live = true;
        seg.size = 0;
        ++m_stats.segments;
    }
    Segment& seg = m_segments[slot];
    seg.size += grow;
    if (tail_free > 0) {
        seg.blocks.back().size += grow;
    } else {
        seg.blocks.push_back(Block{grow, -1});
    }
    m_stats.reserved_bytes += grow;
    m_stats.reserved_by_stream[static_cast<size_t>(stream)] += grow;
    return placeInBlock(static_cast<int32_t>(slot), static_cast<int32_t>(seg.blocks.size()) - 1, size, buffer);
}

void CachingAllocatorModel::releaseCached() {
    // release_cached_blocks: every segment with no allocated block goes back to CUDA; an expandable
    // segment unmaps the free pages at its end.
    ++m_stats.releases;
    for (Segment& seg : m_segments) {
        if (!seg.live) continue;
        if (seg.expandable) {
            if (seg.blocks.empty() || seg.blocks.back().buffer >= 0) continue;
            const int64_t page = seg.small ? kAllocSmallBuffer : kAllocLargeBuffer;
            const int64_t unmap = page * (seg.blocks.back().size / page);
            seg.blocks.back().size -= unmap;
            if (seg.blocks.back().size == 0) seg.blocks.pop_back();
            seg.size -= unmap;
            refreshLargest(seg);
            m_stats.reserved_bytes -= unmap;
            m_stats.reserved_by_stream[static_cast<size_t>(seg.stream)] -= unmap;
            continue;
        }
        if (seg.blocks.size() == 1 && seg.blocks[0].buffer < 0) {
            m_stats.reserved_bytes -= seg.size;
            m_stats.reserved_by_stream[static_cast<size_t>(seg.stream)] -= seg.size;
            --m_stats.segments;
            seg.live = false;
            seg.blocks.clear();
        }
    }
}

void CachingAllocatorModel::allocate(int32_t buffer, int64_t bytes, Stream stream) {
    assert(buffer >= 0 && static_cast<size_t>(buffer) < m_buffers.size());
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    assert(state.segment < 0 && "a buffer is allocated once before its free");
    state.requested = bytes;
    state.released_tail = 0;
    state.released_bytes = 0;
    m_stats.allocated_bytes += bytes;
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

void CachingAllocatorModel::freeBlock(int32_t seg_index, int32_t block_index) {
    std::vector<Block>& blocks = m_segments[static_cast<size_t>(seg_index)].blocks;
    auto i = static_cast<size_t>(block_index);
    blocks[i].buffer = -1;
    // try_merge_blocks with the next, then the previous neighbour.
    if (i + 1 < blocks.size() && blocks[i + 1].buffer < 0) {
        blocks[i].size += blocks[i + 1].size;
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
    if (i > 0 && blocks[i - 1].buffer < 0) {
        blocks[i - 1].size += blocks[i].size;
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
    }
    refreshLargest(m_segments[static_cast<size_t>(seg_index)]);
}

void CachingAllocatorModel::free(int32_t buffer) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    m_stats.allocated_bytes -= state.requested;
    if (state.segment >= 0) {
        const Segment& seg = m_segments[static_cast<size_t>(state.segment)];
        freeBlock(state.segment, blockIndex(seg, buffer));
    }
    state.segment = -1;
    state.requested = 0;
    noteChange();
}

void CachingAllocatorModel::releaseTail(int32_t buffer, int64_t bytes) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    m_stats.allocated_bytes -= bytes;
    if (state.segment >= 0) {
        Segment& seg = m_segments[static_cast<size_t>(state.segment)];
        const int32_t i = blockIndex(seg, buffer);
        Block& b = seg.blocks[static_cast<size_t>(i)];
        // The block keeps at least kMinBlockSize; what it gives back is whole 512-byte blocks.
        const int64_t tail = std::min(kAllocMinBlockSize * (bytes / kAllocMinBlockSize), b.size - kAllocMinBlockSize);
        if (tail > 0) {
            b.size -= tail;
            seg.blocks.insert(seg.blocks.begin() + i + 1, Block{tail, buffer});
            freeBlock(state.segment, i + 1);
            state.released_tail += tail;
        }
    }
    state.released_bytes += bytes;
    noteChange();
}

void CachingAllocatorModel::restoreTail(int32_t buffer) {
    BufferState& state = m_buffers[static_cast<size_t>(buffer)];
    const int64_t tail = state.released_tail;
    m_stats.allocated_bytes += state.released_bytes;
    state.released_tail = 0;
    state.released_bytes = 0;
    if (state.segment >= 0 && tail > 0) {
        Segment& seg = m_segments[static_cast<size_t>(state.segment)];
        const auto i = static_cast<size_t>(blockIndex(seg, buffer));
        // Every scratch allocation of the moment is freed first, so the tail is free again.
        assert(i + 1 < seg.blocks.size() && seg.blocks[i + 1].buffer < 0 && seg.blocks[i + 1].size >= tail);
        if (i + 1 < seg.blocks.size() && seg.blocks[i + 1].buffer < 0 && seg.blocks[i + 1].size >= tail) {
            seg.blocks[i].size += tail;
            seg.blocks[i + 1].size -= tail;
            if (seg.blocks[i + 1].size == 0) seg.blocks.erase(seg.blocks.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        }
        refreshLargest(seg);
    }
    noteChange();
}

}  // namespace shardcast::core
