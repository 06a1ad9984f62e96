#include "executor/counting_allocator.hpp"

#include <algorithm>
#include <cassert>

namespace shardcast::exec {

CountingAllocator::~CountingAllocator() {
    for (const Block& b : m_buffers) {
        if (b.ptr != nullptr) m_backend.release(b.ptr, b.bytes);
    }
    for (const Block& b : m_initial) m_backend.release(b.ptr, b.bytes);
    for (const auto& [bytes, ptr] : m_cache) m_backend.release(ptr, bytes);
}

void* CountingAllocator::take(int64_t bytes) {
    if (bytes <= 0) return nullptr;
    if (auto it = m_cache.find(bytes); it != m_cache.end()) {
        void* p = it->second;
        m_cache.erase(it);
        return p;
    }
    m_held_bytes += bytes;
    return m_backend.allocate(bytes);
}

void CountingAllocator::give(void* ptr, int64_t bytes) {
    if (ptr != nullptr) m_cache.emplace(bytes, ptr);
}

void CountingAllocator::holdInitial(const core::Program& program) {
    assert(m_initial.empty() && "Program::initial is held once");
    m_buffers.assign(static_cast<size_t>(program.buffer_count), Block{});
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        const int64_t bytes = program.initial[static_cast<size_t>(c)];
        if (bytes <= 0) continue;
        m_initial.push_back({take(bytes), bytes});
        m_live[static_cast<size_t>(c)] += bytes;
    }
    beginStep();
}

void CountingAllocator::beginStep() {
    m_log.clear();
    m_step_start = m_live;
}

void CountingAllocator::apply(const core::MemEvent& e, int64_t time_ns) {
    assert(e.buffer >= 0 && e.buffer < static_cast<int32_t>(m_buffers.size()));
    Block& b = m_buffers[static_cast<size_t>(e.buffer)];
    if (e.bytes > 0) {
        assert(b.ptr == nullptr && b.bytes == 0 && "each buffer is allocated once before its free");
        b = {take(e.bytes), e.bytes};
        ++m_live_buffers;
    } else {
        assert(b.bytes == -e.bytes && "a free names its buffer with the allocated size");
        give(b.ptr, b.bytes);
        b = {};
        --m_live_buffers;
    }
    const auto c = static_cast<size_t>(core::index(e.category));
    m_live[c] += e.bytes;
    assert(m_live[c] >= 0 && "a free matches an earlier allocation");
    m_log.push_back({time_ns, 0, static_cast<uint32_t>(m_log.size()), e.category, e.bytes});
}

void CountingAllocator::touchScratch(const core::MemEvent* events, uint32_t count) {
    for (uint32_t k = 0; k < count; ++k) {
        if (events[k].bytes > 0) give(take(events[k].bytes), events[k].bytes);
    }
}

void CountingAllocator::logTransient(const core::MemEvent* events, uint32_t count, int64_t time_ns) {
    for (uint32_t k = 0; k < count; ++k) {
        m_log.push_back({time_ns, 1, static_cast<uint32_t>(m_log.size()), events[k].category, events[k].bytes});
    }
    for (uint32_t k = 0; k < count; ++k) {
        m_log.push_back({time_ns, 1, static_cast<uint32_t>(m_log.size()), events[k].category, -events[k].bytes});
    }
}

core::CategoryBytes CountingAllocator::highWater() {
    std::sort(m_log.begin(), m_log.end(), [](const Change& a, const Change& b) {
        if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
        if (a.transient != b.transient) return a.transient < b.transient;
        return a.seq < b.seq;
    });
    core::CategoryBytes bytes = m_step_start;
    core::CategoryBytes high = bytes;
    for (const Change& ch : m_log) {
        const auto c = static_cast<size_t>(core::index(ch.category));
        bytes[c] += ch.delta;
        high[c] = std::max(high[c], bytes[c]);
    }
    return high;
}

}  // namespace shardcast::exec
