// Versioned JSON of a step's Timeline, timed memory and summary (core/results/step_io.hpp): exact round
// trips and errors that name the file and the field.
#include "core/results/step_io.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace shardcast::core {
namespace {

Timeline sampleTimeline() {
    Timeline t;
    t.tasks = {{0, 1500, Stream::Compute}, {200, 900, Stream::AllGather}, {1500, 1500, Stream::Host}};
    t.stream_busy_ns[static_cast<int>(Stream::Compute)] = 1500;
    t.stream_busy_ns[static_cast<int>(Stream::AllGather)] = 700;
    t.step_ns = 1500;
    return t;
}

TEST(StepIoTest, TimelineRoundTripsExactly) {
    const Timeline t = sampleTimeline();
    const nlohmann::json j = timelineToJson(t);
    EXPECT_EQ(j["format"], "shardcast-timeline");
    EXPECT_EQ(j["version"], kTimelineFormatVersion);
    auto back = timelineFromJson(nlohmann::json::parse(j.dump()), "t.json");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, t);
}

TEST(StepIoTest, TimedMemoryAndSummaryRoundTripExactly) {
    TimedMemory m;
    m.peak_bytes = 123456789012;
    m.peak_time_ns = 42;
    m.peak_task = 7;
    m.at_peak[index(MemCategory::Activation)] = 100;
    m.max_per_category[index(MemCategory::OptState)] = 5;
    MemoryPoint p;
    p.time_ns = 3;
    p.task = -1;
    p.bytes[index(MemCategory::Temp)] = 9;
    m.curve = {p, p};
    auto mb = timedMemoryFromJson(nlohmann::json::parse(timedMemoryToJson(m).dump()), "m.json");
    ASSERT_TRUE(mb.ok()) << mb.error().message;
    EXPECT_EQ(*mb, m);

    StepSummary s;
    s.step_s = 0.1 + 0.2;  // not representable in few digits: the double must survive exactly
    s.mfu = 1.0 / 3.0;
    s.peak_flops = 989e12;
    s.peak_bytes = 77;
    s.peak_task = 3;
    s.stream_busy_s[static_cast<int>(Stream::ReduceScatter)] = 2.0 / 7.0;
    s.units = {UnitTime{1, 2, 3, 4, 5}, UnitTime{6, 7, 8, 9, 10}};
    auto sb = stepSummaryFromJson(nlohmann::json::parse(stepSummaryToJson(s).dump()), "s.json");
    ASSERT_TRUE(sb.ok()) << sb.error().message;
    EXPECT_EQ(*sb, s);
}

TEST(StepIoTest, MalformedDocumentsAreErrorsNamingFileAndField) {
    const nlohmann::json good = timelineToJson(sampleTimeline());
    struct Case {
        const char* what;
        nlohmann::json doc;
        const char* expect;
    };
    std::vector<Case> cases;
    {
        nlohmann::json j = good;
        j["tasks"][1] = {5, 4, "compute"};
        cases.push_back({"end before start", j, "tasks[1]"});
    }
    {
        nlohmann::json j = good;
        j["tasks"][0][2] = "warp-drive";
        cases.push_back({"unknown stream", j, "warp-drive"});
    }
    {
        nlohmann::json j = good;
        j["step_ns"] = -1;
        cases.push_back({"negative step", j, "step_ns"});
    }
    {
        nlohmann::json j = good;
        j.erase("tasks");
        cases.push_back({"missing tasks", j, "'tasks' is missing"});
    }
    {
        nlohmann::json j = good;
        j["tasks"] = "lots";
        cases.push_back({"tasks not an array", j, "'tasks' must be an array"});
    }
    {
        nlohmann::json j = good;
        j.erase("format");
        cases.push_back({"no header", j, "shardcast-timeline"});
    }
    for (const Case& c : cases) {
        auto r = timelineFromJson(c.doc, "runs/a.timeline.json");
        ASSERT_FALSE(r.ok()) << c.what;
        EXPECT_NE(r.error().message.find("runs/a.timeline.json"), std::string::npos) << c.what << ": " << r.error().message;
        EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << c.what << ": " << r.error().message;
    }
    nlohmann::json m = timedMemoryToJson(TimedMemory{});
    m["at_peak"].erase("Temp");
    auto r = timedMemoryFromJson(m, "m.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("'Temp' is missing"), std::string::npos) << r.error().message;
    nlohmann::json s = stepSummaryToJson(StepSummary{});
    s["mfu"] = "high";
    auto rs = stepSummaryFromJson(s, "s.json");
    ASSERT_FALSE(rs.ok());
    EXPECT_NE(rs.error().message.find("'mfu' must be a number"), std::string::npos) << rs.error().message;
}

}  // namespace
}  // namespace shardcast::core
