// The traced-run chain (planstore/trace_run.hpp) that import-trace, compare --torch-trace and the GUI
// share: real CPU traces with their plan, a CUDA memory snapshot's allocator figures joining the run,
// and the run saved in a real store with its plan and prediction.
#include "planstore/trace_run.hpp"

#include <string>

#include <gtest/gtest.h>

#include "tests/db/temp_store.hpp"

namespace {

using namespace shardcast;
using db::testing::TempDir;

const std::string kTraces = SHARDCAST_SOURCE_DIR "/tests/data/traces/llama-block-2r";
const std::string kSnapshots = SHARDCAST_SOURCE_DIR "/tests/data/snapshots/";

TEST(TraceRunTest, ImportsTracesWithASnapshotAndSavesTheRun) {
    TempDir dir;
    auto imported = planstore::importTraceRun({kTraces}, kTraces + "/plan.json", "", dir.path() / "store.db", {}, {},
                                              kSnapshots + "snapshot_p4.pickle");
    ASSERT_TRUE(imported) << imported.error().message;
    const core::RunRecord& run = imported->import.run;
    EXPECT_EQ(run.backend, "torch");
    EXPECT_EQ(run.timeline.tasks.size(), imported->predicted.program.tasks.size());
    // tests/data/snapshots/make_snapshots.py works these out by hand: device 0 peaks at 22 MiB
    // reserved with 18 MiB active, 4 MiB of fragmentation.
    EXPECT_EQ(run.reserved_peak_bytes, int64_t{22} << 20);
    EXPECT_EQ(run.reserved_fragmentation_bytes, int64_t{4} << 20);
    EXPECT_NE(run.reserved_source.find("snapshot_p4.pickle: device 0"), std::string::npos);
    // The record is self-contained: its plan embeds the model the traced run used.
    EXPECT_TRUE(run.plan.at("model").is_object());

    auto store = db::Store::open(dir.path() / "store.db", true);
    ASSERT_TRUE(store) << store.error().message;
    auto saved = planstore::saveMeasuredRun(**store, imported->plan, imported->predicted, imported->profile, run, "traced");
    ASSERT_TRUE(saved) << saved.error().message;
    auto back = (*store)->get(saved->run);
    ASSERT_TRUE(back) << back.error().message;
    auto record = core::runRecordFromJson(back->body.at("record"), "stored");
    ASSERT_TRUE(record) << record.error().message;
    EXPECT_EQ(*record, run);
}

TEST(TraceRunTest, AHostileSnapshotIsAnErrorNamingIt) {
    TempDir dir;
    auto imported = planstore::importTraceRun({kTraces}, kTraces + "/plan.json", "", dir.path() / "store.db", {}, {},
                                              kSnapshots + "hostile_global_p2.pickle");
    ASSERT_FALSE(imported);
    EXPECT_NE(imported.error().message.find("hostile_global_p2.pickle"), std::string::npos) << imported.error().message;
    EXPECT_NE(imported.error().message.find("GLOBAL"), std::string::npos) << imported.error().message;
}

}  // namespace
