// The measured-run record (core/results/run_record.hpp): an exact round trip through a file, and errors that
// name the file and the field.
#include "core/results/run_record.hpp"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <gtest/gtest.h>

namespace shardcast::core {
namespace {

RunRecord sampleRun() {
    RunRecord r;
    r.backend = "cpu";
    r.world_size = 2;
    r.compute_note = "Eigen GEMMs in fp32";
    r.plan = {{"model", "tiny-llama"}};
    r.profile = {{"hbm_efficiency", 0.5}};
    r.environment = {{"host", "ci"}};
    r.warmup_steps = 1;
    r.step_ns = {1000, 900, 1100};
    r.median_step = 0;
    r.timeline.tasks = {{0, 500, Stream::Compute}, {100, 900, Stream::AllGather}};
    r.timeline.step_ns = 1000;
    r.memory.peak_bytes = 64;
    r.memory.at_peak[index(MemCategory::Activation)] = 64;
    r.memory.max_per_category[index(MemCategory::Activation)] = 64;
    return r;
}

TEST(RunRecordTest, RoundTripsThroughAFile) {
    const RunRecord r = sampleRun();
    const auto path = std::filesystem::temp_directory_path() / "shardcast_run_record_test.json";
    ASSERT_TRUE(saveRunRecord(path, r).ok());
    auto back = loadRunRecord(path);
    std::filesystem::remove(path);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, r);
    EXPECT_EQ(back->medianStepNs(), 1000);
}

TEST(RunRecordTest, BadFieldsAreNamed) {
    nlohmann::json j = runRecordToJson(sampleRun());
    j["median_step"] = 3;  // only 3 steps were measured
    auto r = runRecordFromJson(j, "run.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("run.json"), std::string::npos);
    EXPECT_NE(r.error().message.find("median_step"), std::string::npos) << r.error().message;
    j = runRecordToJson(sampleRun());
    j["version"] = kRunFormatVersion + 1;
    auto newer = runRecordFromJson(j, "run.json");
    ASSERT_FALSE(newer.ok());
    EXPECT_NE(newer.error().message.find("newer"), std::string::npos) << newer.error().message;
    j = runRecordToJson(sampleRun());
    j["timeline"]["tasks"][0] = {7, 3, "compute"};
    auto bad = runRecordFromJson(j, "run.json");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("timeline: tasks[0]"), std::string::npos) << bad.error().message;
}

// The CUDA backend's --emulate-rank marks tasks: an optional field, absent when none is emulated
// (so version-1 records written before it still read), round-tripped when present.
TEST(RunRecordTest, EmulatedTasksAreOptionalAndChecked) {
    RunRecord r = sampleRun();
    EXPECT_FALSE(runRecordToJson(r).contains("emulated_tasks"));
    r.emulated_tasks = {1};
    const nlohmann::json j = runRecordToJson(r);
    ASSERT_TRUE(j.contains("emulated_tasks"));
    auto back = runRecordFromJson(j, "run.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->emulated_tasks, std::vector<int32_t>{1});
    EXPECT_EQ(*back, r);
    for (const nlohmann::json& bad : {nlohmann::json{2}, nlohmann::json{1, 0}, nlohmann::json("1")}) {
        nlohmann::json k = j;
        k["emulated_tasks"] = bad;  // 2: the timeline has tasks 0 and 1 only; {1, 0}: not ascending
        auto r2 = runRecordFromJson(k, "run.json");
        ASSERT_FALSE(r2.ok()) << bad.dump();
        EXPECT_NE(r2.error().message.find("emulated_tasks"), std::string::npos) << r2.error().message;
    }
}

// A trace's run: unmeasured tasks, what its memory figure is, and the caching allocator's figures
// from a memory snapshot - each optional (absent in records written before them), round-tripped,
// and checked.
TEST(RunRecordTest, TraceFieldsAreOptionalRoundTripAndChecked) {
    RunRecord r = sampleRun();
    const nlohmann::json plain = runRecordToJson(r);
    EXPECT_FALSE(plain.contains("unmeasured_tasks") || plain.contains("memory_kind") || plain.contains("reserved") ||
                 plain.contains("memory_total_curve"));
    r.unmeasured_tasks = {0};
    r.memory_kind = RunRecord::MemoryKind::Rise;
    r.reserved_peak_bytes = 20 << 20;
    r.reserved_fragmentation_bytes = 3 << 20;
    r.reserved_source = "snap.pickle";
    r.memory_total_curve = {{0, 10}, {400, 64}, {400, 30}, {1000, 12}};
    const nlohmann::json j = runRecordToJson(r);
    EXPECT_EQ(j.at("memory_kind"), "rise");
    auto back = runRecordFromJson(j, "run.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, r);
    const CompareOptions o = compareOptionsFor(*back, 5);
    EXPECT_EQ(o.unmeasured_tasks, std::vector<int32_t>{0});
    EXPECT_TRUE(o.memory_rise);
    EXPECT_FALSE(o.memory_categories);
    for (const auto& [key, value, needle] :
         {std::tuple{"memory_kind", nlohmann::json("relative"), "memory_kind"},
          std::tuple{"unmeasured_tasks", nlohmann::json{5}, "unmeasured_tasks"},
          std::tuple{"reserved", nlohmann::json{{"peak_bytes", -1}, {"fragmentation_bytes", 0}, {"source", ""}}, "reserved.peak_bytes"},
          std::tuple{"memory_total_curve", nlohmann::json{{0, 1}, {5}}, "memory_total_curve[1] must be a pair"},
          std::tuple{"memory_total_curve", nlohmann::json{{10, 1}, {5, 2}}, "memory_total_curve[1]: time_ns"},
          std::tuple{"memory_total_curve", nlohmann::json{{-1, 1}}, "memory_total_curve[0]: time_ns"},
          std::tuple{"memory_total_curve", nlohmann::json{{0, -1}}, "memory_total_curve[0]: bytes"},
          std::tuple{"memory_total_curve", nlohmann::json::object(), "memory_total_curve must be an array"}}) {
        nlohmann::json k = j;
        k[key] = value;
        auto bad = runRecordFromJson(k, "run.json");
        ASSERT_FALSE(bad.ok()) << key;
        EXPECT_NE(bad.error().message.find(needle), std::string::npos) << bad.error().message;
    }
}

// Thinning keeps every point up to the limit; past it, each run keeps its lowest and highest point in
// time order, so the peak (and the lowest trough) survive exactly.
TEST(RunRecordTest, ThinnedCurveKeepsThePeakAndTheTroughs) {
    std::vector<TotalPoint> points;
    for (int64_t i = 0; i < 1000; ++i) points.push_back(TotalPoint{i * 10, (i * 7919) % 1009});  // a scramble of 0..1008
    points[613].bytes = 5000;  // the peak
    points[128].bytes = 0;
    EXPECT_EQ(thinCurve(points, 1000), points);
    const std::vector<TotalPoint> thin = thinCurve(points, 100);
    ASSERT_LE(thin.size(), 100U);
    ASSERT_GE(thin.size(), 50U);  // 50 runs of 20 points, one or two kept from each
    for (size_t i = 1; i < thin.size(); ++i) EXPECT_LT(thin[i - 1].time_ns, thin[i].time_ns);
    const auto max = std::max_element(thin.begin(), thin.end(), [](auto a, auto b) { return a.bytes < b.bytes; });
    EXPECT_EQ(max->time_ns, 6130);
    EXPECT_EQ(max->bytes, 5000);
    EXPECT_TRUE(std::any_of(thin.begin(), thin.end(), [](const TotalPoint& p) { return p.time_ns == 1280 && p.bytes == 0; }));
    // Run 6 (points 120..139) keeps exactly its minimum and maximum.
    int64_t hi = 0;
    for (size_t i = 120; i < 140; ++i) hi = std::max(hi, points[i].bytes);
    EXPECT_TRUE(std::any_of(thin.begin(), thin.end(), [&](const TotalPoint& p) { return p.time_ns >= 1200 && p.time_ns < 1400 && p.bytes == hi; }));
}

// The curves compare as the peaks do: a rise is held against the prediction less its steady state.
TEST(RunRecordTest, ComparableCurvesFollowTheMemoryKind) {
    Program program;
    program.initial[index(MemCategory::ShardedParam)] = 100;
    program.initial[index(MemCategory::OptState)] = 200;
    TimedMemory predicted;
    MemoryPoint a, b;
    a.time_ns = 0;
    a.bytes = program.initial;
    b.time_ns = 50;
    b.bytes = program.initial;
    b.bytes[index(MemCategory::Activation)] = 70;
    predicted.curve = {a, b};
    RunRecord run = sampleRun();
    run.memory.curve = {b};
    MemoryCurves c = comparableMemoryCurves(program, predicted, run);  // categories: absolute, the run's own curve
    EXPECT_EQ(c.predicted, (std::vector<TotalPoint>{{0, 300}, {50, 370}}));
    EXPECT_EQ(c.measured, (std::vector<TotalPoint>{{50, 370}}));
    run.memory_kind = RunRecord::MemoryKind::Rise;
    run.memory_total_curve = {{0, 0}, {40, 65}};
    c = comparableMemoryCurves(program, predicted, run);
    EXPECT_EQ(c.predicted, (std::vector<TotalPoint>{{0, 0}, {50, 70}}));
    EXPECT_EQ(c.measured, run.memory_total_curve);
    run.memory_kind = RunRecord::MemoryKind::None;
    c = comparableMemoryCurves(program, predicted, run);
    EXPECT_TRUE(c.predicted.empty() && c.measured.empty());
}

}  // namespace
}  // namespace shardcast::core
