#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator): what torch.cuda.memory_reserved reports when a step's allocations and
// frees run through it. Rules modelled, with the source's constants:
//  - sizes rounded up to kMinBlockSize (512 B) (round_size, without roundup_power2_divisions);
//  - requests <= kSmallSize (1 MiB) use the small pool, larger ones the large pool;
//  - a new segment (cudaMalloc) is kSmallBuffer (2 MiB) for a small request, kLargeBuffer (20 MiB)
//    for a request under kMinLargeAlloc (10 MiB), else the request rounded up to kRoundLarge
//    (2 MiB) (get_allocation_size);
//  - best fit among the free blocks of the request's pool owned by the request's stream (a block
//    belongs to the stream that allocated it; other streams never reuse it), ties to the lower
//    address (get_free_block with BlockComparatorSize);
//  - a block is split when the remainder is >= kMinBlockSize (small pool, or any pool under
//    expandable segments) or > kSmallSize (large pool) and the request is under max_split_size;
//    blocks >= max_split_size serve only requests >= max_split_size within kLargeBuffer of their
//    size (should_split, get_free_block);
//  - a freed block merges with free neighbours of its segment (free_block, try_merge_blocks);
//  - nothing is returned to CUDA during the step unless a new segment would pass `limit_bytes`:
//    then every fully free cached segment is released and the allocation retried
//    (release_cached_blocks); if it still does not fit the step is marked out of memory and the
//    model goes on, so the figures still say by how much;
//  - expandable_segments:True: one segment per stream and pool that grows at its end by pages of
//    2 MiB (small pool) or 20 MiB (large pool) (ExpandableSegment, "2MB for small pool, 20MB for
//    large pool"); blocks inside it follow the same best fit.
// Not modelled: roundup_power2_divisions, garbage_collection_threshold, record_stream's deferred
// frees across streams (a block is reusable as soon as its free is replayed), CUDA graph pools.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/base/units.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

enum class AllocatorMode : uint8_t { Caching, Expandable };
std::string_view allocatorModeName(AllocatorMode m);  // "caching", "expandable"
std::optional<AllocatorMode> parseAllocatorMode(std::string_view name);

inline constexpr int64_t kAllocMinBlockSize = 512;               // kMinBlockSize
inline constexpr int64_t kAllocSmallSize = 1 << 20;              // kSmallSize: largest small request
inline constexpr int64_t kAllocSmallBuffer = 2 << 20;            // kSmallBuffer: small-pool segment
inline constexpr int64_t kAllocLargeBuffer = 20 << 20;           // kLargeBuffer
inline constexpr int64_t kAllocMinLargeAlloc = 10 << 20;         // kMinLargeAlloc
inline constexpr int64_t kAllocRoundLarge = 2 << 20;             // kRoundLarge
inline constexpr int64_t kAllocUnlimitedSplit = INT64_MAX;       // max_split_size default

struct AllocatorConfig {
    AllocatorMode mode = AllocatorMode::Caching;
    int64_t max_split_size = kAllocUnlimitedSplit;  // PYTORCH_CUDA_ALLOC_CONF max_split_size_mb
    int64_t limit_bytes = INT64_MAX;  // device memory the allocator may reserve (capacity less overhead)
    bool operator==(const AllocatorConfig&) const = default;
};

struct AllocatorStats {
    int64_t allocated_bytes = 0;       // requested bytes live now (memory_allocated without rounding)
    int64_t reserved_bytes = 0;        // segments held now (memory_reserved)
    int64_t peak_allocated_bytes = 0;
    int64_t peak_reserved_bytes = 0;
    // Reserved never falls during a step (no cudaFree unless an allocation fails), so "at the
    // reserved peak" is a span of time: the peak less the most that is allocated during it.
    int64_t fragmentation_at_reserved_peak = 0;
    int64_t max_fragmentation_bytes = 0;         // the largest reserved - allocated seen
    std::array<int64_t, kStreamCount> reserved_by_stream{};  // segments held now, by owning stream
    std::array<int64_t, kStreamCount> allocated_by_stream{};  // requested bytes live now, by owning stream
    // Each stream's pool when allocated bytes peak: what it holds, and how much of it is in use
    // (the rest is cached for that stream only).
    std::array<int64_t, kStreamCount> reserved_by_stream_at_peak{};
    std::array<int64_t, kStreamCount> allocated_by_stream_at_peak{};
    int32_t segments = 0;              // segments held now
    int32_t releases = 0;              // times cached segments were released to retry (OOM path)
    bool out_of_memory = false;        // a segment was needed past limit_bytes even after releasing
    bool operator==(const AllocatorStats&) const = default;
};

// One call of the model, as a replay records it (MemoryTimer::replayAllocator builds a step's
// calls once and runs them twice). `bytes`: Allocate's request, ReleaseTail's bytes, Adjust's
// delta; `stream`: Allocate's.
enum class AllocOpKind : uint8_t { Allocate, Free, ReleaseTail, RestoreTail, Adjust };
struct AllocOp {
    int64_t bytes = 0;
    int32_t id = -1;
    AllocOpKind kind = AllocOpKind::Allocate;
    Stream stream = Stream::Compute;
    bool operator==(const AllocOp&) const = default;
};

// What one stretch of calls did, recorded for PeriodicReplay's proof that later identical
// stretches would do the same (core/memory/allocator_replay.hpp). Filled only while attached.
struct AllocatorJournal {
    struct Pick {  // one best-fit search (get_free_block)
        int64_t request = 0;
        int64_t size = 0, addr = 0;  // the best fit, when found (taken, or refused by max_split_size)
        int32_t segment = -1;
        bool found = false;
        // The other free blocks of the pool with the best fit's size (the address decided):
        // their segments are tie_segments[tie_at .. tie_at + ties), or more than kMaxTies.
        uint32_t tie_at = 0;
        uint32_t ties = 0;
        bool small = false;
        Stream stream = Stream::Compute;
    };
    struct NewSegment {
        int32_t slot = -1;
        int64_t size = 0;
        int64_t reserved_before = 0;
        bool limited = true;  // false: made past the limit (out of memory), which no longer applies
    };
    struct SavedBlock {
        int64_t addr = 0, size = 0;
        int32_t buffer = -1;
    };
    static constexpr uint32_t kMaxTies = 64;
    int32_t segment_base = 0;  // segments below existed when recording began
    bool irregular = false;    // released cached memory or grew an expandable segment
    int32_t empty_releases = 0;  // releases that found nothing to give back (near or past the limit)
    std::vector<Pick> picks;
    std::vector<int32_t> tie_segments;
    std::vector<NewSegment> new_segments;
    // Each segment below segment_base as it was before its first change: touched[i] is its slot,
    // its blocks (in address order) are saved[saved_at[i] .. saved_at[i + 1]).
    std::vector<int32_t> touched;
    std::vector<uint32_t> saved_at;
    std::vector<SavedBlock> saved;
    std::vector<uint32_t> touch_mark;  // by slot: the epoch of its last touch
    std::vector<uint32_t> new_mark;    // by slot: the epoch in which it was created
    uint32_t epoch = 0;
};

// The outcome of each allocation's best-fit search in one step, by size only, for
// TwoStepReplay's proof that the next step repeats it (core/memory/allocator_replay.hpp).
struct AllocatorPick {
    int64_t request = 0;  // rounded
    int64_t taken = 0;    // the size of the free block taken; 0: none fitted, a new segment was made
    int64_t segment = 0;  // the new segment's size (taken == 0)
    uint8_t pool = 0;     // small * kStreamCount + stream: a search sees only its pool's blocks
};

// Reusable: keeps its buffers between resets. Buffers are named by id (0 .. reset's buffer_count-1).
class CachingAllocatorModel {
public:
    void reset(const AllocatorConfig& config, int32_t buffer_count);
    void allocate(int32_t buffer, int64_t bytes, Stream stream);
    void free(int32_t buffer);
    // A live buffer gives back its last `bytes` (rounded down to 512 B) for a while (a backward
    // freeing saved tensors op by op), then takes them back with restore().
    void releaseTail(int32_t buffer, int64_t bytes);
    void restoreTail(int32_t buffer);
    // Counts `delta` allocated bytes with no block moving: a replay that frees a buffer's tensors
    // ahead of its bookkeeping keeps allocated equal to the Program's count.
    void adjustAllocated(int32_t buffer, int64_t delta);  // counted on `buffer`'s stream
    void apply(const AllocOp& op);
    // Clears the peaks (after a warm-up step), keeping what is cached.
    void resetPeaks();
    const AllocatorStats& stats() const { return m_stats; }

    static int64_t roundSize(int64_t bytes);       // round_size
    static int64_t segmentSize(int64_t rounded);   // get_allocation_size

    // Records into `journal` until detached (nullptr); the model's figures are unaffected.
    void attachJournal(AllocatorJournal* journal);
    // Records each best-fit outcome into `picks` until detached (nullptr).
    void attachPicks(std::vector<AllocatorPick>* picks) { m_picks = picks; }

private:
    friend class PeriodicReplay;  // reads and extends the state when it skips proven repeats
    friend class TwoStepReplay;   // sets the second step's figures when it proves them
    // Blocks are nodes of a per-segment list in address order; free ones are also in their
    // pool's free list, ordered by (size, address) as the real allocator's BlockPool (a std::set
    // ordered by stream, size, address). Here each pool and stream splits its list into size
    // classes (FreeList), each a sorted vector, so that an insertion moves few entries and no
    // event allocates once the vectors have grown.
    struct Block {
        int64_t addr = 0;    // orders blocks of equal size (get_free_block takes the lowest)
        int64_t size = 0;
        int32_t prev = -1, next = -1;  // neighbours in the segment
        int32_t segment = -1;
        int32_t buffer = -1;  // -1: free
    };
    struct FreeKey {
        int64_t size;
        int64_t addr;
        int32_t block;
    };
    struct Segment {
        Stream stream = Stream::Compute;
        bool small = false;
        bool expandable = false;
        bool live = false;     // false: released, the slot may be reused
        int64_t size = 0;
        int32_t first = -1, last = -1;  // blocks at its two ends
    };
    struct BufferState {
        int32_t block = -1;
        int64_t requested = 0;
        int64_t released_tail = 0;   // block bytes given back by releaseTail
        int64_t released_bytes = 0;  // requested bytes given back by releaseTail
        Stream stream = Stream::Compute;  // of its last allocation
    };
    void countAllocated(Stream stream, int64_t delta) {
        m_stats.allocated_bytes += delta;
        m_stats.allocated_by_stream[static_cast<size_t>(stream)] += delta;
    }
    // Size classes: 4 per power of two from 512 B (sizes are multiples of 512), so class order
    // is size order and the best fit is in the request's class or the first non-empty one above.
    static constexpr int kSizeClasses = 128;
    static int sizeClass(int64_t size);
    struct FreeList {
        std::array<std::vector<FreeKey>, kSizeClasses> classes;
        std::array<uint64_t, kSizeClasses / 64> nonempty{};  // bit c: classes[c] has entries
    };
    FreeList& freeList(bool small, Stream stream) { return m_free[small ? 1 : 0][static_cast<size_t>(stream)]; }
    static uint8_t poolIndex(bool small, Stream stream) {
        return static_cast<uint8_t>((small ? kStreamCount : 0) + static_cast<int>(stream));
    }
    int32_t newBlock(const Block& b);
    std::vector<FreeKey>::iterator freeKeyOf(const Block& b, FreeList*& list, int& c);
    void insertFree(int32_t block);
    void eraseFree(int32_t block);
    void placeInBlock(int32_t block, int64_t size, int32_t buffer);
    bool tryCached(int64_t size, bool small, Stream stream, int32_t buffer);
    int32_t takeSegmentSlot();  // the slot a new segment gets: the lowest released one, else a new one
    bool newSegment(int64_t size, bool small, Stream stream, int32_t buffer);
    bool growExpandable(int64_t size, bool small, Stream stream, int32_t buffer);
    void releaseCached();
    void freeBlock(int32_t block);
    void noteChange();
    void noteTouch(int32_t segment);  // journal: a segment is about to change

    AllocatorConfig m_config;
    AllocatorJournal* m_journal = nullptr;
    std::vector<AllocatorPick>* m_picks = nullptr;
    std::vector<Segment> m_segments;
    std::vector<Block> m_blocks;
    std::vector<int32_t> m_spare_blocks;  // unused slots of m_blocks
    std::array<std::array<FreeList, kStreamCount>, 2> m_free;  // [small][stream]
    std::vector<int32_t> m_spare_segments;  // released segment slots (a min-heap), reused before new ones
    std::vector<BufferState> m_buffers;
    AllocatorStats m_stats;
    int64_t m_allocated_at_reserved_peak = 0;  // the most allocated while reserved is at its peak
    int64_t m_min_allocated = 0;  // the least allocated since the peaks were cleared
    // Segments (not expandable) that are one free block: what a release would give back. Near the
    // limit every allocation tries a release; with none, it need not scan the segments.
    int32_t m_wholly_free = 0;
};

// Replays a Program's events in the order the timed memory curve applies them (see
// MemoryTimer::compute, which calls the model): sharded parameters, optimizer state and the other
// steady-state bytes of Program::initial except Runtime Overhead are allocated first, one block per
// category on the compute stream; the step then runs twice and the second step's figures are kept,
// so the cache starts as a previous step left it (the second step is set from the first where
// TwoStepReplay proves it repeats the first's decisions, core/memory/allocator_replay.hpp).
struct ReservedMemory {
    AllocatorConfig config;
    AllocatorStats stats;   // of the second (steady-state) step
    bool operator==(const ReservedMemory&) const = default;
};

}  // namespace shardcast::core
