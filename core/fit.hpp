#pragma once
// The one definition of "fits" that every front-end (plan, simulate, sweep, search, GUI) uses: the
// peak must stay under the GPU's capacity less a headroom fraction kept free for what the model
// does not see (allocator fragmentation, NCCL's lazily created buffers, other processes).
#include <cmath>
#include <cstdint>

namespace shardcast::core {

// 5% of the card, about 4 GiB of an 80 GiB GPU: the margin users keep for the caching allocator's
// reserved-but-unallocated memory (torchtitan's logs show reserved 2-6% above max allocated).
inline constexpr double kDefaultHeadroom = 0.05;

struct FitVerdict {
    int64_t capacity_bytes = 0;  // the GPU's memory
    double headroom = kDefaultHeadroom;
    int64_t budget_bytes = 0;    // capacity less the headroom: what the peak may reach
    int64_t peak_bytes = 0;
    bool fits = false;           // peak_bytes <= budget_bytes
    // Bytes left under the budget when it fits, bytes over it when it does not (never negative).
    int64_t marginBytes() const { return fits ? budget_bytes - peak_bytes : peak_bytes - budget_bytes; }
};

// `headroom` in [0, 1).
inline FitVerdict judgeFit(int64_t peak_bytes, int64_t capacity_bytes, double headroom) {
    FitVerdict v;
    v.capacity_bytes = capacity_bytes;
    v.headroom = headroom;
    v.budget_bytes = static_cast<int64_t>(std::floor(static_cast<double>(capacity_bytes) * (1.0 - headroom)));
    v.peak_bytes = peak_bytes;
    v.fits = peak_bytes <= v.budget_bytes;
    return v;
}

}  // namespace shardcast::core
