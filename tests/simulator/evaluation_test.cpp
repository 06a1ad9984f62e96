// The shared planning chain (simulator/evaluation.hpp): it reproduces the hand-chained steps, is
// reusable, reports progress, can be cancelled, reads every GPU figure from the profile, judges fit
// one way, and its results round-trip through JSON across processes.
#include "simulator/evaluation.hpp"
#include "tests/simulator/test_plan.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/model/model_io.hpp"
#include "core/results/step_io.hpp"
#include "search/sweep.hpp"

namespace shardcast::sim {
namespace {

namespace fs = std::filesystem;

core::Plan planOf(const char* model, int nodes, int64_t seq_len) { return testing::h100Plan(model, nodes, seq_len); }

TEST(EvaluationTest, MatchesTheStepsChainedByHand) {
    const core::Plan plan = planOf("llama-3.1-8b", 1, 4096);
    auto e = evaluatePlan(plan, nullptr);
    ASSERT_TRUE(e.ok()) << e.error().message;

    auto mesh = core::validatePlan(plan);
    ASSERT_TRUE(mesh.ok());
    core::Program program;
    ASSERT_TRUE(core::lower(plan, *mesh, program).ok());
    core::MemoryReport replay;
    core::replayMemory(program, replay);
    const HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    Simulator simulator(profile);
    core::Timeline timeline;
    simulator.run(program, timeline);
    core::MemoryTimer timer;
    core::TimedMemory timed;
    timer.compute(program, timeline, timed);
    const core::StepSummary summary = core::summarize(program, timeline, timed, profile.gpu.peak_flops_bf16);

    EXPECT_EQ(e->timeline, timeline);
    EXPECT_EQ(e->timed, timed);
    EXPECT_EQ(e->summary, summary);
    EXPECT_EQ(e->issue_order_peak_bytes, replay.peak_bytes);
    EXPECT_EQ(e->memory.model_states.optimizer, replay.model_states.optimizer);
    EXPECT_EQ(e->memory.peak_bytes, timed.peak_bytes);  // the report shows the timed peak
    EXPECT_EQ(e->comm, core::communicationTotals(program));
    EXPECT_EQ(e->fit.capacity_bytes, plan.cluster.gpu.memory_bytes);
}

// clip_grad_norm_ on Llama-3.1-8B over 8 H100s: 12,045,391,872 bytes per rank (3 fp32 accesses to
// 1,003,782,656 gradient elements) at the preset's 3.35 TB/s x 0.8, plus one kernel launch (3 us):
// 4.4976 ms, on the compute stream between the last reduce-scatter and the optimizer step, so the
// step grows by exactly that.
TEST(EvaluationTest, ClipGradNormAddsItsPassesToTheStep) {
    core::Plan plan = planOf("llama-3.1-8b", 1, 4096);
    auto none = evaluatePlan(plan, nullptr);
    ASSERT_TRUE(none.ok()) << none.error().message;
    plan.training.clip_grad_norm = 1.0;
    auto clipped = evaluatePlan(plan, nullptr);
    ASSERT_TRUE(clipped.ok()) << clipped.error().message;
    const double expected_ns = 12'045'391'872.0 / (3.35e12 * 0.8) * 1e9 + 3'000;
    int64_t clip_ns = -1;
    for (size_t id = 0; id < clipped->program.tasks.size(); ++id) {
        if (clipped->program.tasks[id].kind == core::TaskKind::ClipGrad) clip_ns = clipped->timeline.tasks[id].durationNs();
    }
    EXPECT_NEAR(static_cast<double>(clip_ns), expected_ns, 2.0);
    EXPECT_NEAR(static_cast<double>(clipped->timeline.step_ns - none->timeline.step_ns), expected_ns, 2.0);
    EXPECT_EQ(clipped->memory.peak_bytes, none->memory.peak_bytes);
}

TEST(EvaluationTest, ReusedEvaluatorGivesTheSameAnswerAsAFreshOne) {
    const core::Plan a = planOf("llama-3.1-8b", 1, 4096);
    core::Plan b = planOf("llama-3.1-70b", 4, 8192);
    b.sharding.strategy = core::Strategy::HybridShard;
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions options;
    ASSERT_TRUE(evaluator.evaluate(a, nullptr, options, e).ok());
    ASSERT_TRUE(evaluator.evaluate(b, nullptr, options, e).ok());
    ASSERT_TRUE(evaluator.evaluate(a, nullptr, options, e).ok());
    auto fresh = evaluatePlan(a, nullptr, options);
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(e.timeline, fresh->timeline);
    EXPECT_EQ(e.summary, fresh->summary);
    EXPECT_EQ(e.timed, fresh->timed);
}

TEST(EvaluationTest, ReportsEachStageInOrder) {
    std::vector<EvaluationStage> stages;
    EvaluationOptions options;
    options.progress = [&](EvaluationStage s) { stages.push_back(s); };
    ASSERT_TRUE(evaluatePlan(planOf("gpt2", 1, 1024), nullptr, options).ok());
    EXPECT_EQ(stages, (std::vector<EvaluationStage>{EvaluationStage::Validate, EvaluationStage::Lower,
                                                    EvaluationStage::ReplayMemory, EvaluationStage::Simulate,
                                                    EvaluationStage::TimeMemory, EvaluationStage::Summarize,
                                                    EvaluationStage::ReplayAllocator}));
}

TEST(EvaluationTest, CancelStopsBetweenStages) {
    CancelToken token;
    EvaluationOptions options;
    options.cancel = &token;
    // Cancelled while lowering (as another thread would): the simulation never runs.
    bool simulated = false;
    options.progress = [&](EvaluationStage s) {
        if (s == EvaluationStage::Lower) token.cancel();
        if (s == EvaluationStage::Simulate) simulated = true;
    };
    auto r = evaluatePlan(planOf("gpt2", 1, 1024), nullptr, options);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.error().cancelled);
    EXPECT_FALSE(simulated);
    // An invalid plan is not a cancellation.
    core::Plan bad = planOf("gpt2", 1, 1024);
    bad.training.micro_batch = 0;
    token.reset();
    options.progress = nullptr;
    auto invalid = evaluatePlan(bad, nullptr, options);
    ASSERT_FALSE(invalid.ok());
    EXPECT_FALSE(invalid.error().cancelled);
    EXPECT_NE(invalid.error().message.find("micro_batch"), std::string::npos) << invalid.error().message;
}

TEST(EvaluationTest, SweepCancelledFromAnotherThreadStopsEarly) {
    const core::Plan plan = planOf("llama-3.1-8b", 1, 4096);
    SweepOptions options;
    options.threads = 2;
    for (int64_t mb = 1; mb <= 8; ++mb) options.micro_batches.push_back(mb);
    const auto candidates = sweepCandidates(plan, options);
    ASSERT_GT(candidates.size(), 100u);
    CancelToken token;
    options.cancel = &token;
    std::atomic<size_t> seen{0};
    options.progress = [&](size_t done, size_t) {
        seen = done;
        if (done == 10) std::thread([&token] { token.cancel(); }).join();
    };
    const auto results = runSweep(plan, candidates, HardwareProfile::fromCluster(plan.cluster), options);
    size_t evaluated = 0;
    for (const auto& r : results) evaluated += r.evaluated() ? 1 : 0;
    EXPECT_GE(evaluated, 10u);
    EXPECT_LE(evaluated, 12u);  // each of the two workers finishes at most its current candidate
    EXPECT_EQ(seen.load(), evaluated);
}

TEST(EvaluationTest, EveryGpuFigureComesFromTheProfile) {
    const core::Plan plan = planOf("llama-3.1-8b", 1, 4096);
    HardwareProfile profile = HardwareProfile::fromCluster(plan.cluster);
    profile.gpu.peak_flops_bf16 = 500e12;              // a throttled card
    profile.gpu.memory_bytes = int64_t{40} << 30;      // and a smaller one
    profile.gpu.cuda_context_bytes += int64_t{1} << 30;  // 1 GiB more runtime overhead
    auto base = evaluatePlan(plan, nullptr);
    auto e = evaluatePlan(plan, &profile);
    ASSERT_TRUE(base.ok() && e.ok());
    EXPECT_DOUBLE_EQ(e->summary.peak_flops, 500e12);
    // MFU against the label it is printed with: model FLOPs / (step x the profile's peak).
    EXPECT_DOUBLE_EQ(e->summary.mfu, static_cast<double>(e->program.model_flops_per_step) / (e->summary.step_s * 500e12));
    EXPECT_EQ(e->fit.capacity_bytes, int64_t{40} << 30);
    EXPECT_EQ(e->program.initial[core::index(core::MemCategory::RuntimeOverhead)],
              base->program.initial[core::index(core::MemCategory::RuntimeOverhead)] + (int64_t{1} << 30));
}

TEST(EvaluationTest, OneDefinitionOfFits) {
    const core::Plan plan = planOf("llama-3.1-8b", 1, 8448);
    EvaluationOptions options;
    options.reserved_memory = false;  // judged on allocated bytes (reserved: reserved_memory_test)
    auto e = evaluatePlan(plan, nullptr, options);
    ASSERT_TRUE(e.ok());
    const int64_t capacity = plan.cluster.gpu.memory_bytes;
    const int64_t peak = e->summary.peak_bytes;
    // This plan sits between 95% and 100% of the card (77.2 of 79.65 GiB).
    ASSERT_GT(peak, capacity * 95 / 100);
    ASSERT_LT(peak, capacity);
    EXPECT_DOUBLE_EQ(e->fit.headroom, core::kDefaultHeadroom);
    EXPECT_FALSE(e->fit.fits);
    EXPECT_EQ(e->fit.marginBytes(), peak - e->fit.budget_bytes);
    options.headroom = 0;
    auto lenient = evaluatePlan(plan, nullptr, options);
    ASSERT_TRUE(lenient.ok());
    EXPECT_TRUE(lenient->fit.fits);
    EXPECT_EQ(lenient->fit.marginBytes(), capacity - peak);
    options.headroom = 1.0;
    auto bad = evaluatePlan(plan, nullptr, options);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("headroom"), std::string::npos);
}

// judgeReserved after an allocated-only evaluation is the evaluation with reserved memory: the same
// replay and verdict (a search evaluates allocated-only and judges only where it must). The README
// plan at 11,264 tokens is AT RISK: the two verdicts differ, so the test sees the judgement happen.
TEST(EvaluationTest, JudgingReservedLaterEqualsEvaluatingWithIt) {
    core::Plan plan = planOf("llama-3.1-8b", 1, 11264);
    plan.training.ac = core::Checkpointing::Layer;
    plan.training.ac_every = 2;
    EvaluationOptions with;
    auto reference = evaluatePlan(plan, nullptr, with);
    ASSERT_TRUE(reference.ok()) << reference.error().message;
    ASSERT_TRUE(reference->fit.at_risk);

    EvaluationOptions without = with;
    without.reserved_memory = false;
    Evaluator evaluator;
    Evaluation e;
    ASSERT_TRUE(evaluator.evaluate(plan, nullptr, without, e).ok());
    EXPECT_TRUE(e.fit.fits) << "on allocated memory alone it fits";
    EXPECT_EQ(e.reserved, core::ReservedMemory{});
    evaluator.judgeReserved(with.headroom, e);
    EXPECT_EQ(e.reserved, reference->reserved);
    EXPECT_EQ(e.fit.reserved_bytes, reference->fit.reserved_bytes);
    EXPECT_EQ(e.fit.fits, reference->fit.fits);
    EXPECT_EQ(e.fit.at_risk, reference->fit.at_risk);
    EXPECT_EQ(e.fit.cache_flushed, reference->fit.cache_flushed);
}

// The child half of CrossProcessRoundTrip: reads the files the parent wrote and compares them with
// its own evaluation of the same plan. Skipped unless the parent started it.
TEST(EvaluationTest, CrossProcessChild) {
    const char* dir = std::getenv("SHARDCAST_ROUNDTRIP_DIR");
    if (!dir) GTEST_SKIP() << "run by EvaluationTest.CrossProcessRoundTrip";
    auto e = evaluatePlan(planOf("mixtral-8x7b", 2, 4096), nullptr, [] {
        EvaluationOptions o;
        o.record_curve = true;
        return o;
    }());
    ASSERT_TRUE(e.ok());
    const fs::path d(dir);
    auto timeline = core::readJsonFile(d / "timeline.json");
    auto timed = core::readJsonFile(d / "timed.json");
    auto summary = core::readJsonFile(d / "summary.json");
    ASSERT_TRUE(timeline.ok() && timed.ok() && summary.ok());
    auto t = core::timelineFromJson(*timeline, "timeline.json");
    auto m = core::timedMemoryFromJson(*timed, "timed.json");
    auto s = core::stepSummaryFromJson(*summary, "summary.json");
    ASSERT_TRUE(t.ok()) << t.error().message;
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(*t, e->timeline);
    EXPECT_EQ(*m, e->timed);
    EXPECT_EQ(*s, e->summary);
}

TEST(EvaluationTest, CrossProcessRoundTrip) {
    EvaluationOptions options;
    options.record_curve = true;
    auto e = evaluatePlan(planOf("mixtral-8x7b", 2, 4096), nullptr, options);
    ASSERT_TRUE(e.ok());
    ASSERT_FALSE(e->timed.curve.empty());
    const fs::path dir = fs::temp_directory_path() / ("shardcast_roundtrip_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    ASSERT_TRUE(core::writeFileAtomically(dir / "timeline.json", core::timelineToJson(e->timeline).dump()).ok());
    ASSERT_TRUE(core::writeFileAtomically(dir / "timed.json", core::timedMemoryToJson(e->timed).dump()).ok());
    ASSERT_TRUE(core::writeFileAtomically(dir / "summary.json", core::stepSummaryToJson(e->summary).dump()).ok());
    const std::string cmd = "SHARDCAST_ROUNDTRIP_DIR='" + dir.string() + "' '" + fs::read_symlink("/proc/self/exe").string() +
                            "' --gtest_filter=EvaluationTest.CrossProcessChild > '" + (dir / "child.log").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir / "child.log");
    const std::string child_output((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(rc, 0) << child_output;
    EXPECT_NE(child_output.find("[  PASSED  ] 1 test"), std::string::npos) << child_output;
    fs::remove_all(dir);
}

TEST(EvaluationTest, NewerFormatVersionIsRefusedNamingFileAndVersions) {
    auto e = evaluatePlan(planOf("gpt2", 1, 1024), nullptr);
    ASSERT_TRUE(e.ok());
    nlohmann::json j = core::timelineToJson(e->timeline);
    j["version"] = core::kTimelineFormatVersion + 1;
    auto r = core::timelineFromJson(j, "run-42.timeline.json");
    ASSERT_FALSE(r.ok());
    const std::string& msg = r.error().message;
    EXPECT_NE(msg.find("run-42.timeline.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("version 1"), std::string::npos) << msg;
    nlohmann::json s = core::stepSummaryToJson(e->summary);
    s["version"] = 7;
    EXPECT_FALSE(core::stepSummaryFromJson(s, "s.json").ok());
    nlohmann::json m = core::timedMemoryToJson(e->timed);
    m["format"] = "shardcast-timeline";
    auto wrong = core::timedMemoryFromJson(m, "m.json");
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.error().message.find("shardcast-timed-memory"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::sim

namespace shardcast::sim {
namespace {

// The host as the device (CPUs, gloo): the host runs every kernel itself and waits for each
// collective, so no two tasks overlap and the step is at least the sum of all task durations; no
// caching allocator reserves more than is allocated.
TEST(EvaluationTest, HostDeviceRunsTasksOneAtATimeWithoutACachingAllocator) {
    core::Plan plan = planOf("tiny-llama", 1, 128);
    plan.cluster.gpu = *core::findGpuPreset("cpu");
    plan.cluster.gpus_per_node = 2;
    auto e = evaluatePlan(plan, nullptr, {});
    ASSERT_TRUE(e) << e.error().message;
    std::vector<std::pair<int64_t, int64_t>> spans;
    int64_t busy = 0;
    for (int32_t id = 0; id < e->program.size(); ++id) {
        EXPECT_TRUE(e->program.tasks[static_cast<size_t>(id)].host_blocks) << id;
        const core::TaskTime& t = e->timeline.tasks[static_cast<size_t>(id)];
        spans.emplace_back(t.start_ns, t.end_ns);
        busy += t.durationNs();
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << i;
    EXPECT_GE(e->timeline.step_ns, busy);
    EXPECT_EQ(e->reserved.stats.peak_reserved_bytes, e->summary.peak_bytes);
    EXPECT_EQ(e->fit.reserved_bytes, e->summary.peak_bytes);

    // The same plan on a GPU overlaps communication with compute.
    plan.cluster.gpu = *core::findGpuPreset("H100");
    auto gpu = evaluatePlan(plan, nullptr, {});
    ASSERT_TRUE(gpu);
    EXPECT_FALSE(gpu->program.tasks.front().host_blocks && gpu->program.tasks.back().host_blocks &&
                 gpu->program.tasks[1].host_blocks);
}

}  // namespace
}  // namespace shardcast::sim
