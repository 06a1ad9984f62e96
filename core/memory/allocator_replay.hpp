#pragma once
// Replaying a step's allocator calls (AllocOp) through CachingAllocatorModel, with the repeats of
// identical transformer blocks skipped where the result is provably the one replaying them gives.
//
// A run is a stretch of the tape made of R periods: op m of period j is op m of period 0 with its
// id shifted by j * D_m (same kind, bytes and stream). PeriodicReplay replays a period (the
// reference, k) concretely with a journal attached, and skips the next J periods when it can
// prove they would act as the reference did, shifted:
//  1. the reference released no cached memory (a release that found nothing counts: it finds
//     nothing later either, checked below) and grew no expandable segment; none of its buffers
//     still gives back a tail at its end;
//  2. every free (and adjustment) names a buffer allocated in the reference or in the period
//     before it, at a position of the same shift, or a family buffer: one allocated earlier that
//     the reference frees (a block's saved activations freed by its backward);
//  3. every old segment it changed is either stationary (at its end as at its start, each buffer
//     of the previous period replaced by the same position's of the reference), or a member of a
//     family's chain: the family segment (role 0: held family buffers, nothing else allocated),
//     then the segment left by the period before (role -1: found as role 0 is left now, names
//     shifted back one period), and so on. Period k + j finds its family segment where the family
//     buffers shifted j times are (checked for every j: same layout, bytes and streams, not
//     changed by the reference, in the same address order) and its role r member where period
//     k + j - 1 left role r + 1;
//  4. what the reference leaves for good (its new segments, its layer; the last chain members)
//     holds only its own buffers, none freed by the next period, and none of its free blocks
//     could have changed a best fit of the reference: each is smaller than the request, larger
//     than the block found, or as large but above it in every later period (a layer lies above
//     all old segments and below the next periods' own unless released slots are waiting; what
//     a chain leaves lies above the next periods' chains when they walk down);
//  5. ties of best fits keep their outcome: the tied blocks keep their address order in every
//     period (old segments stay, new ones lie above them unless released slots are waiting,
//     chains walking down keep their order with everything they were preferred to);
//  6. each new segment of period k + j stays within limit_bytes (reserved grows by the
//     reference's growth per period; J is cut where it would not); one that did not fit still
//     does not, and a release that found nothing still finds nothing if nothing left for good is
//     a wholly free segment.
// By induction, period k + j then makes the reference's decisions, shifted, and ends the same way;
// so the J periods are applied at once: J copies of the layer in the slots the allocator would
// give them, the chains' segments laid out as the last period to touch each leaves it, the
// carried buffers renamed, the stats moved by J times the reference's change. Allocated and
// reserved at each moment of period k + j are the reference's plus j times its change, so the
// peaks and fragmentation figures over the skipped periods are reached in period k + 1 or k + J:
// both are run through the stats update. Otherwise the period runs concretely and the next one is
// tried as a reference, with periods of 1 to 4 blocks (a pair of all-gather buffers alternating
// between two blocks repeats every two).
#include <array>
#include <cstdint>
#include <vector>

#include "core/memory/caching_allocator.hpp"

namespace shardcast::core {

// How the two steps a replay runs (TwoStepReplay) are replayed. All give the same figures.
//  - Full: every call of both steps (the reference).
//  - FastEveryStep: both steps by PeriodicReplay.
//  - Fast: the first step by PeriodicReplay; the second is not replayed where TwoStepReplay proves
//    it repeats the first, else by PeriodicReplay again, or call by call where the first step's
//    replay skipped under 30% of its calls (its proof attempts then cost about what they save).
//  - Auto: as Fast for a step of one micro-batch; with more, the first step (and the second where
//    not proven) makes every call: with gradient accumulation few repeats are provable (the
//    blocks' first micro-batch leaves gradients behind, and near the device limit each one
//    releases), and the proof attempts cost more than they save (bench/simulate_bench.cpp,
//    BM_ReplayAllocator). PeriodicReplay pays off where blocks repeat provably, as on the bench
//    plan at 8,192 tokens (180-190 us against 300-350 us for every call, both steps); at 2,048
//    tokens on the same model it proves few repeats and its first step costs about what every call
//    does (3.47 M instructions for the replay against 3.41 M for every call, both steps): which one
//    is cheaper depends on the plan, and Auto chooses only the second step's by the first's.
enum class AllocatorReplay : uint8_t { Fast, Full, Auto, FastEveryStep };

// Every call in order: the reference.
void replayTapeFull(CachingAllocatorModel& model, const std::vector<AllocOp>& tape);

// Reusable: keeps its buffers between calls.
class PeriodicReplay {
public:
    // Finds the runs of `tape`. `hints`: tape positions where a period may start (where a block's
    // forward or backward begins), in increasing order; any may be wrong, the runs are checked.
    void prepare(const std::vector<AllocOp>& tape, const std::vector<uint32_t>& hints);
    // Leaves `model` with the stats and cached blocks replayTapeFull would (buffer names of the
    // skipped periods that are freed by then are not written back: nothing reads them again).
    void replay(CachingAllocatorModel& model, const std::vector<AllocOp>& tape);
    // Every call of `tape` in order, counted in lastCalls().
    void replayEveryCall(CachingAllocatorModel& model, const std::vector<AllocOp>& tape) {
        runOps(model, tape, 0, static_cast<uint32_t>(tape.size()));
    }
    // Since prepare(): model calls made one by one, and periods skipped.
    int64_t lastCalls() const { return m_calls; }
    int64_t lastSkippedPeriods() const { return m_skipped; }

    struct Run {
        uint32_t start = 0;
        uint32_t length = 0;  // ops per period
        uint32_t count = 0;   // periods
    };
    const std::vector<Run>& runs() const { return m_runs; }

private:
    void runOps(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, uint32_t from, uint32_t to);
    // Replays the period at `at` (length `len`) and returns how many of the next (at most
    // `max_skip`) it proved and applied; -1 when it released cached memory (no length would do).
    int64_t reference(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, uint32_t at, uint32_t len, int64_t max_skip);
    void applyStats(CachingAllocatorModel& model, const AllocatorStats& start, int64_t periods);

    std::vector<Run> m_runs;
    AllocatorJournal m_journal;
    struct Moment {  // the figures after one op of the reference; an op moves one stream's
        int64_t allocated = 0, reserved = 0;
        int64_t stream_allocated = 0, stream_reserved = 0;
        size_t stream = 0;
    };
    std::vector<Moment> m_curve;
    std::vector<int64_t> m_shift;         // D_m of the reference
    std::vector<uint32_t> m_alloc_pos;    // by buffer: 1 + position of its allocation in the reference, 0: none
    std::vector<uint32_t> m_prev_pos;     // by buffer: 1 + position of its allocation in the period before
    std::vector<uint32_t> m_family_pos;   // by buffer: 1 + position of its free, for a family buffer
    std::vector<int32_t> m_family;        // the family buffers the reference frees
    std::vector<uint8_t> m_is_family;     // by touched segment of the journal
    std::vector<uint32_t> m_family_slots; // the family segments: indices into the journal's touched
    std::vector<int32_t> m_targets;       // [j - 1][family]: the slot of that family in period k + j
    std::vector<int32_t> m_chain;         // each family's chain members (touched indices) by role 0, -1, ...
    std::vector<uint32_t> m_chain_at;     // family f's are m_chain[m_chain_at[f] .. m_chain_at[f + 1])
    struct PostBlock {  // a block the reference left, offset from its segment's start
        int64_t offset = 0, size = 0;
        int32_t buffer = -1;
        int64_t requested = 0;
        Stream stream = Stream::Compute;
    };
    std::vector<PostBlock> m_posts;  // what the layer and chains held after the reference
    std::vector<uint32_t> m_posts_at;
    std::vector<uint8_t> m_role;          // by slot, for the touched ones: see reference()
    int64_t m_calls = 0;
    int64_t m_skipped = 0;
};

// Two steps of a tape from the model's state (the steady state allocated), leaving the second
// step's figures: the first fills the cache as a previous step would. The second is not replayed
// when the first step's best-fit decisions prove that it would repeat them on the cached segments
// without making one (proof at TwoStepReplay::secondStepRepeatsFirst in allocator_replay.cpp); its
// figures are then set from the first step's. Reusable: keeps its buffers between calls.
class TwoStepReplay {
public:
    // `periodic`: prepared for `tape`, replays each step (nullptr: every call is made); `shortcut`:
    // false replays the second step as the first whatever the proof says (the reference the tests
    // compare with); true sets it from the first where proven, else replays it, call by call where
    // the first step's periodic replay skipped under 30% of its calls.
    void run(CachingAllocatorModel& model, const std::vector<AllocOp>& tape, PeriodicReplay* periodic, bool shortcut);
    // Whether the last run() set the second step's figures without replaying it.
    bool secondStepSkipped() const { return m_second_skipped; }

private:
    bool secondStepRepeatsFirst();
    std::vector<AllocatorPick> m_picks;
    std::array<std::vector<int64_t>, 2 * kStreamCount> m_future;
    bool m_second_skipped = false;
};

}  // namespace shardcast::core
