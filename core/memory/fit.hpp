#pragma once
// The one definition of "fits" that every front-end (plan, simulate, sweep, search, GUI) uses: the
// peak must stay under the GPU's capacity less a headroom fraction kept free for what the model
// does not see (NCCL's lazily created buffers, other processes). Where the caching allocator is
// modelled (core/memory/caching_allocator.hpp) the judged figure is its peak reserved memory plus Runtime
// Overhead: what OOMs is reserved memory, not allocated bytes.
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
    int64_t peak_bytes = 0;      // allocated bytes at the peak, Runtime Overhead included
    int64_t reserved_bytes = 0;  // the allocator's peak reserved + Runtime Overhead; 0: not modelled
    bool fits = false;           // the judged figure <= budget_bytes
    bool at_risk = false;        // the allocated peak fits but the reserved peak does not
    bool cache_flushed = false;  // the allocator reached the device's memory and had to free its
                                 // cache to go on (cudaMalloc retries): within its fragmentation of capacity
    // What is judged: reserved where modelled (never below the allocated peak), else allocated.
    int64_t judgedBytes() const { return reserved_bytes > peak_bytes ? reserved_bytes : peak_bytes; }
    // Bytes left under the budget when it fits, bytes over it when it does not (never negative).
    int64_t marginBytes() const { return fits ? budget_bytes - judgedBytes() : judgedBytes() - budget_bytes; }
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

// Judged on reserved memory: `reserved_bytes` is the allocator's peak reserved plus Runtime
// Overhead (counted once: the allocator does not hold it). A step whose allocator had to free its
// cache to go on (`cache_flushed`) does not fit even if it then stayed under the budget.
inline FitVerdict judgeFit(int64_t peak_bytes, int64_t reserved_bytes, int64_t capacity_bytes, double headroom,
                           bool cache_flushed = false) {
    FitVerdict v = judgeFit(peak_bytes, capacity_bytes, headroom);
    v.reserved_bytes = reserved_bytes;
    v.cache_flushed = cache_flushed;
    v.fits = v.judgedBytes() <= v.budget_bytes && !cache_flushed;
    v.at_risk = !v.fits && peak_bytes <= v.budget_bytes;
    return v;
}

}  // namespace shardcast::core
