#include "core/memory/reserved_floor.hpp"

#include <algorithm>
#include <array>
#include <bit>

namespace shardcast::core {

int64_t reservedFloorBytes(const Program& program, const TimedMemory& timed) {
    const int overhead = index(MemCategory::RuntimeOverhead);
    std::array<uint32_t, kMemCategoryCount> streams{};  // bit s: allocated on stream s
    for (int c = 0; c < kMemCategoryCount; ++c) {
        if (c != overhead && program.initial[c] > 0) streams[c] |= 1u << static_cast<int>(Stream::Compute);
    }
    for (const MemEvent& m : program.mem) {
        if (m.bytes > 0) streams[index(m.category)] |= 1u << static_cast<int>(m.stream);
    }
    std::array<int64_t, kStreamCount> at_peak{}, largest{}, upper{};
    for (int c = 0; c < kMemCategoryCount; ++c) {
        if (c == overhead) continue;
        for (uint32_t bits = streams[c]; bits != 0; bits &= bits - 1) {
            upper[static_cast<size_t>(std::countr_zero(bits))] += timed.at_peak[c];
        }
        if (std::popcount(streams[c]) != 1) continue;
        const auto st = static_cast<size_t>(std::countr_zero(streams[c]));
        at_peak[st] += timed.at_peak[c];
        largest[st] = std::max(largest[st], timed.max_per_category[c]);
    }
    int64_t by_stream = program.initial[overhead];
    int64_t from_peak = timed.peak_bytes;
    for (size_t st = 0; st < at_peak.size(); ++st) {
        const int64_t least = std::max(at_peak[st], largest[st]);
        by_stream += least;
        if (st != static_cast<size_t>(Stream::Compute)) from_peak += std::max<int64_t>(0, least - upper[st]);
    }
    return std::max(by_stream, from_peak);
}

}  // namespace shardcast::core
