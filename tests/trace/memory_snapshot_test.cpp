// trace::readMemorySnapshot on snapshots made by tests/data/snapshots/make_snapshots.py (the
// dict torch.cuda.memory._snapshot() returns, pickled with protocols 2, 4 and 5) and on hostile
// pickles. The figures are worked out by hand in the script's header.
#include <gtest/gtest.h>

#include <string>

#include "trace/memory_snapshot.hpp"

using namespace shardcast;
using trace::TraceAction;

namespace {

constexpr int64_t kMiB = 1 << 20;

std::filesystem::path dataFile(const std::string& name) {
    return std::filesystem::path(SHARDCAST_SOURCE_DIR) / "tests/data/snapshots" / name;
}

std::string errorOf(const std::string& name, const trace::SnapshotLimits& limits = {}) {
    auto r = trace::readMemorySnapshot(dataFile(name), limits);
    EXPECT_FALSE(r.ok()) << name;
    return r.ok() ? std::string() : r.error().message;
}

int64_t count(const trace::DeviceMemory& m, TraceAction a) { return m.action_counts[size_t(a)]; }

class SnapshotProtocols : public ::testing::TestWithParam<const char*> {};

TEST_P(SnapshotProtocols, HandWorkedFigures) {
    auto r = trace::readMemorySnapshot(dataFile(GetParam()));
    ASSERT_TRUE(r.ok()) << r.error().message;
    const trace::MemorySnapshot& s = *r;
    ASSERT_EQ(s.devices.size(), 2u);
    EXPECT_TRUE(s.oom);
    EXPECT_EQ(s.allocator_conf, "max_split_size_mb:128");
    EXPECT_FALSE(s.expandable_segments);

    const trace::DeviceMemory* d0 = s.device(0);
    ASSERT_NE(d0, nullptr);
    // Final state: segments of 20 MiB and 2 MiB.
    EXPECT_EQ(d0->segments, 2);
    EXPECT_EQ(d0->large_segments, 1);
    EXPECT_EQ(d0->blocks, 8);
    EXPECT_EQ(d0->reserved_bytes, 22 * kMiB);
    EXPECT_EQ(d0->allocated_bytes, 15 * kMiB);  // a1 8 + a3 6 + b2 1
    EXPECT_EQ(d0->pending_free_bytes, 2 * kMiB);  // a4, free requested, not completed
    EXPECT_EQ(d0->requested_bytes, 15'000'000);
    EXPECT_EQ(d0->largest_free_block, 2 * kMiB);
    EXPECT_FALSE(d0->oom);

    // Trace: 12 events, replayed from the state reconstructed backwards.
    EXPECT_EQ(d0->events, 12);
    EXPECT_EQ(count(*d0, TraceAction::Alloc), 5);
    EXPECT_EQ(count(*d0, TraceAction::FreeRequested), 3);
    EXPECT_EQ(count(*d0, TraceAction::FreeCompleted), 2);
    EXPECT_EQ(count(*d0, TraceAction::SegmentAlloc), 1);
    EXPECT_EQ(count(*d0, TraceAction::Snapshot), 1);
    EXPECT_TRUE(d0->trace_consistent);
    EXPECT_EQ(d0->initial_reserved, 20 * kMiB);  // segment A existed before the trace
    EXPECT_EQ(d0->initial_active, 8 * kMiB);     // a1 was allocated before the trace
    const std::vector<int64_t> active = {16, 24, 36, 36, 37, 39, 39, 31, 31, 30, 34, 34, 34};  // half MiB
    ASSERT_EQ(d0->active_curve.size(), active.size());
    for (size_t k = 0; k < active.size(); ++k) EXPECT_EQ(d0->active_curve[k], active[k] * kMiB / 2) << k;
    EXPECT_EQ(d0->reserved_curve.front(), 20 * kMiB);
    EXPECT_EQ(d0->reserved_curve.back(), 22 * kMiB);
    EXPECT_EQ(d0->peak_reserved, 22 * kMiB);
    EXPECT_EQ(d0->peak_reserved_point, 3);  // after e2, segment_alloc B
    EXPECT_EQ(d0->fragmentation_at_reserved_peak, 4 * kMiB);  // 22 reserved - 18 active
    EXPECT_EQ(d0->peak_active, 39 * kMiB / 2);  // 19.5 MiB after e4
    EXPECT_EQ(d0->peak_active_point, 5);
    EXPECT_EQ(d0->max_fragmentation, 12 * kMiB);  // before the trace: 20 reserved - 8 active
    EXPECT_EQ(d0->max_fragmentation_point, 0);

    const trace::DeviceMemory* d1 = s.device(1);
    ASSERT_NE(d1, nullptr);
    EXPECT_TRUE(d1->oom);
    EXPECT_EQ(d1->oom_requested_bytes, 128 * kMiB);
    EXPECT_EQ(d1->reserved_bytes, 64 * kMiB);
    EXPECT_EQ(d1->allocated_bytes, 64 * kMiB);
    EXPECT_EQ(d1->initial_reserved, 0);
    EXPECT_EQ(d1->initial_active, 0);
    EXPECT_EQ(d1->peak_reserved, 64 * kMiB);
    EXPECT_EQ(d1->peak_reserved_point, 1);
    EXPECT_EQ(d1->fragmentation_at_reserved_peak, 64 * kMiB);  // segment mapped, block not yet
    EXPECT_EQ(count(*d1, TraceAction::Oom), 1);
}

INSTANTIATE_TEST_SUITE_P(Pickle, SnapshotProtocols,
                         ::testing::Values("snapshot_p2.pickle", "snapshot_p4.pickle", "snapshot_p5.pickle"));

TEST(MemorySnapshot, TruncatedFileIsAnError) {
    const std::string e = errorOf("hostile_truncated.pickle");
    EXPECT_NE(e.find("hostile_truncated.pickle"), std::string::npos) << e;
    EXPECT_NE(e.find("byte "), std::string::npos) << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(MemorySnapshot, GlobalIsRefusedNamingTheOpcode) {
    const std::string p2 = errorOf("hostile_global_p2.pickle");
    EXPECT_NE(p2.find("GLOBAL"), std::string::npos) << p2;
    EXPECT_NE(p2.find("refused"), std::string::npos) << p2;
    const std::string p4 = errorOf("hostile_global_p4.pickle");
    EXPECT_NE(p4.find("STACK_GLOBAL"), std::string::npos) << p4;
    EXPECT_NE(p4.find("byte "), std::string::npos) << p4;
}

TEST(MemorySnapshot, DeepNestingIsRefused) {
    const std::string e = errorOf("hostile_deep.pickle");
    EXPECT_NE(e.find("max_depth"), std::string::npos) << e;
}

TEST(MemorySnapshot, HugeDeclaredStringIsRefused) {
    const std::string e = errorOf("hostile_huge_string.pickle");
    EXPECT_NE(e.find("max_string_bytes"), std::string::npos) << e;
    trace::SnapshotLimits wide;
    wide.max_string_bytes = int64_t{1} << 50;
    const std::string e2 = errorOf("hostile_huge_string.pickle", wide);
    EXPECT_NE(e2.find("remain"), std::string::npos) << e2;
}

TEST(MemorySnapshot, MemoReferenceOutOfRange) {
    const std::string e = errorOf("hostile_memo_range.pickle");
    EXPECT_NE(e.find("memo reference 5"), std::string::npos) << e;
}

TEST(MemorySnapshot, CycleIsRefused) {
    const std::string e = errorOf("hostile_cycle.pickle");
    EXPECT_NE(e.find("cycle"), std::string::npos) << e;
}

TEST(MemorySnapshot, IndirectCycleIsRefused) {
    // a = []; b = [a]; a.append(b): EMPTY_LIST MEMOIZE EMPTY_LIST BINGET0 APPEND APPEND STOP
    const std::string bytes("\x80\x04]\x94]h\x00" "aa.", 10);
    auto r = trace::readMemorySnapshotBytes(bytes, "inline", {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("cycle"), std::string::npos) << r.error().message;
}

TEST(MemorySnapshot, SharedReferencesAreNotCycles) {
    // x = []; [x, x] pickles as EMPTY_LIST MEMOIZE MARK EMPTY_LIST MEMOIZE BINGET1 APPENDS: fine,
    // but not a snapshot (the top is a list), so the summary names what was expected.
    const std::string bytes("\x80\x04]\x94(]\x94h\x01" "e.", 11);
    auto r = trace::readMemorySnapshotBytes(bytes, "inline", {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("expected the dict"), std::string::npos) << r.error().message;
}

TEST(MemorySnapshot, TooManyNodes) {
    trace::SnapshotLimits small;
    small.max_nodes = 50;
    const std::string e = errorOf("snapshot_p4.pickle", small);
    EXPECT_NE(e.find("max_nodes"), std::string::npos) << e;
}

TEST(MemorySnapshot, FileLimitAndMissingFile) {
    trace::SnapshotLimits small;
    small.max_file_bytes = 100;
    EXPECT_NE(errorOf("snapshot_p4.pickle", small).find("max_file_bytes"), std::string::npos);
    EXPECT_NE(errorOf("no_such.pickle").find("no_such.pickle"), std::string::npos);
}

TEST(MemorySnapshot, NotAPickle) {
    auto r = trace::readMemorySnapshotBytes("{\"segments\": []}", "x.json", {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("PROTO"), std::string::npos) << r.error().message;
}

TEST(MemorySnapshot, ReduceIsRefused) {
    const std::string bytes("\x80\x02N)R.", 6);
    auto r = trace::readMemorySnapshotBytes(bytes, "inline", {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("REDUCE"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("byte 4"), std::string::npos) << r.error().message;
}

}  // namespace
