// Prediction against measurement (core/results/compare.hpp), on a "measured" run made from the prediction
// with known perturbations (tests/simulator/perturbed_run.hpp), so every error is known exactly.
#include "core/results/compare.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/model_io.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/perturbed_run.hpp"

namespace shardcast::sim {
namespace {

core::Plan tinyPlan() {
    auto m = core::resolveModel("tiny-llama");
    EXPECT_TRUE(m.ok()) << m.error().message;
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*m));
    plan.model_ref = "tiny-llama";
    plan.cluster.gpu = *core::findGpuPreset("H100-SXM");
    plan.cluster.nodes = 1;
    plan.cluster.gpus_per_node = 4;
    plan.training.seq_len = 512;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return plan;
}

core::CompareOptions topTasks(int32_t top) {
    core::CompareOptions o;
    o.top_tasks = top;
    return o;
}

// The prediction of tinyPlan() and a "measured" run made from it by `perturbation`.
struct Fixture {
    core::Plan plan = tinyPlan();
    Evaluation e;
    core::RunRecord run;
    explicit Fixture(const testing::Perturbation& perturbation) {
        EvaluationOptions options;
        options.record_curve = true;
        auto r = evaluatePlan(plan, nullptr, options);
        EXPECT_TRUE(r.ok()) << r.error().message;
        e = std::move(*r);
        run = testing::perturbedRun(plan, e, perturbation);
    }
    core::Result<core::Comparison> compare(int32_t top) const {
        return core::compareStep(e.program, e.timeline, e.timed, run.timeline, run.memory, topTasks(top));
    }
};

// A machine twice as slow in everything and twice the memory in every category: every error is
// (1 - 2) / 2 = -1/2 exactly.
TEST(CompareTest, UniformFactorsComeOutExactly) {
    const Fixture f(testing::Perturbation{.stretch = 2, .memory_factor = 2});
    auto c = f.compare(1'000'000);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->task_count, f.e.program.size());
    EXPECT_EQ(c->predicted_step_ns, f.e.timeline.step_ns);
    EXPECT_EQ(c->measured_step_ns, 2 * f.e.timeline.step_ns);
    ASSERT_TRUE(c->step_time_error.has_value());
    EXPECT_EQ(*c->step_time_error, -0.5);

    ASSERT_FALSE(c->streams.empty());
    for (const core::StreamComparison& s : c->streams) {
        SCOPED_TRACE(std::string(core::streamName(s.stream)));
        EXPECT_EQ(s.predicted_busy_ns, f.e.timeline.busyNs(s.stream));
        EXPECT_EQ(s.measured_busy_ns, 2 * s.predicted_busy_ns);
        if (s.predicted_busy_ns == 0) continue;
        ASSERT_TRUE(s.error.has_value());
        EXPECT_EQ(*s.error, -0.5);
    }

    EXPECT_EQ(c->predicted_peak_bytes, f.e.timed.peak_bytes);
    EXPECT_EQ(c->measured_peak_bytes, 2 * f.e.timed.peak_bytes);
    ASSERT_TRUE(c->peak_memory_error.has_value());
    EXPECT_EQ(*c->peak_memory_error, -0.5);
    ASSERT_FALSE(c->categories.empty());
    for (const core::CategoryComparison& k : c->categories) {
        SCOPED_TRACE(std::string(core::categoryName(k.category)));
        EXPECT_EQ(k.measured_bytes, 2 * k.predicted_bytes);
        ASSERT_TRUE(k.error.has_value());
        EXPECT_EQ(*k.error, -0.5);
    }

    // Every task of nonzero duration is off by -1/2; the list holds each task once.
    ASSERT_EQ(c->tasks.size(), static_cast<size_t>(f.e.program.size()));
    for (const core::TaskComparison& t : c->tasks) {
        EXPECT_EQ(t.measured_ns, 2 * t.predicted_ns);
        if (t.measured_ns == 0) {
            EXPECT_FALSE(t.error.has_value());
        } else {
            ASSERT_TRUE(t.error.has_value());
            EXPECT_EQ(*t.error, -0.5);
        }
    }
}

// Compute tasks four times as long (starting where predicted), communication as predicted: the
// compute stream is off by (1 - 4) / 4 = -3/4, the collective streams by 0, and the tasks with the
// largest deviation are the longest compute tasks, each off by -3/4.
TEST(CompareTest, PerKindFactorLandsOnItsStreamAndTasks) {
    const Fixture f(testing::Perturbation{.compute_factor = 4});
    auto c = f.compare(3);
    ASSERT_TRUE(c.ok()) << c.error().message;
    bool saw_compute = false, saw_collective = false;
    for (const core::StreamComparison& s : c->streams) {
        SCOPED_TRACE(std::string(core::streamName(s.stream)));
        if (s.predicted_busy_ns == 0) continue;
        ASSERT_TRUE(s.error.has_value());
        if (s.stream == core::Stream::Compute) {
            saw_compute = true;
            EXPECT_EQ(*s.error, testing::errorOfFactor(4));
            EXPECT_EQ(*s.error, -0.75);
        } else if (s.stream == core::Stream::AllGather || s.stream == core::Stream::ReduceScatter) {
            saw_collective = true;
            EXPECT_EQ(*s.error, 0.0);
        }
    }
    EXPECT_TRUE(saw_compute);
    EXPECT_TRUE(saw_collective);
    // The step ends later than predicted.
    ASSERT_TRUE(c->step_time_error.has_value());
    EXPECT_LT(*c->step_time_error, 0.0);
    EXPECT_EQ(*c->step_time_error, static_cast<double>(f.e.timeline.step_ns - f.run.timeline.step_ns) /
                                       static_cast<double>(f.run.timeline.step_ns));

    int64_t longest = 0;
    for (int32_t id = 0; id < f.e.program.size(); ++id) {
        if (core::isCompute(f.e.program.tasks[static_cast<size_t>(id)].kind))
            longest = std::max(longest, f.e.timeline.tasks[static_cast<size_t>(id)].durationNs());
    }
    ASSERT_GT(longest, 0);
    ASSERT_EQ(c->tasks.size(), 3u);
    EXPECT_EQ(c->tasks[0].predicted_ns, longest);
    EXPECT_EQ(c->tasks[0].measured_ns, 4 * longest);
    EXPECT_EQ(c->tasks[0].errorNs(), -3 * longest);
    for (size_t i = 0; i < c->tasks.size(); ++i) {
        SCOPED_TRACE(i);
        const core::TaskComparison& t = c->tasks[i];
        EXPECT_TRUE(core::isCompute(f.e.program.tasks[static_cast<size_t>(t.id)].kind));
        ASSERT_TRUE(t.error.has_value());
        EXPECT_EQ(*t.error, -0.75);
        if (i > 0) {
            EXPECT_GE(std::llabs(c->tasks[i - 1].errorNs()), std::llabs(t.errorNs()));
        }
    }
}

// One category measured at three times the prediction: it is off by -2/3, the others by 0, and the
// total peak by exactly its extra bytes at the peak.
TEST(CompareTest, OneCategoryFactorLandsOnThatCategory) {
    const Fixture f(testing::Perturbation{.category = core::MemCategory::Activation, .category_factor = 3});
    auto c = f.compare(1);
    ASSERT_TRUE(c.ok()) << c.error().message;
    int64_t sum_at_peak = 0;
    for (const int64_t b : f.e.timed.at_peak) sum_at_peak += b;
    ASSERT_EQ(sum_at_peak, f.e.timed.peak_bytes);  // what the perturbation relies on
    const int64_t activation_at_peak = f.e.timed.at_peak[static_cast<size_t>(core::MemCategory::Activation)];
    ASSERT_GT(activation_at_peak, 0);
    EXPECT_EQ(c->measured_peak_bytes, f.e.timed.peak_bytes + 2 * activation_at_peak);
    ASSERT_TRUE(c->peak_memory_error.has_value());
    EXPECT_DOUBLE_EQ(*c->peak_memory_error, static_cast<double>(-2 * activation_at_peak) /
                                                static_cast<double>(f.e.timed.peak_bytes + 2 * activation_at_peak));
    bool saw_activation = false;
    for (const core::CategoryComparison& k : c->categories) {
        SCOPED_TRACE(std::string(core::categoryName(k.category)));
        EXPECT_EQ(k.predicted_bytes, f.e.timed.max_per_category[static_cast<size_t>(k.category)]);
        ASSERT_TRUE(k.error.has_value());
        if (k.category == core::MemCategory::Activation) {
            saw_activation = true;
            EXPECT_EQ(k.errorBytes(), -2 * k.predicted_bytes);
            EXPECT_DOUBLE_EQ(*k.error, -2.0 / 3.0);
        } else {
            EXPECT_EQ(k.errorBytes(), 0);
            EXPECT_EQ(*k.error, 0.0);
        }
    }
    EXPECT_TRUE(saw_activation);
}

// Unmeasured tasks (a trace has no time for them) leave the task and stream errors as emulated ones
// do, but the step, measured whole, is compared; a total-only memory has no category rows and a
// relative one no peak error.
TEST(CompareTest, UnmeasuredTasksKeepTheStepTimeAndMemoryKindsSayWhatIsCompared) {
    const Fixture f(testing::Perturbation{.stretch = 2});
    core::CompareOptions options = topTasks(1'000'000);
    for (int32_t id = 0; id < f.e.program.size(); ++id) {
        if (core::isCollective(f.e.program.tasks[static_cast<size_t>(id)].kind)) options.unmeasured_tasks.push_back(id);
    }
    options.memory_categories = false;
    auto c = core::compareStep(f.e.program, f.e.timeline, f.e.timed, f.run.timeline, f.run.memory, options);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->unmeasured_task_count, static_cast<int32_t>(options.unmeasured_tasks.size()));
    EXPECT_EQ(c->excluded_task_count, 0);
    EXPECT_EQ(c->task_count, f.e.program.size() - c->unmeasured_task_count);
    ASSERT_TRUE(c->step_time_error);
    EXPECT_DOUBLE_EQ(*c->step_time_error, testing::errorOfFactor(2));
    for (const core::TaskComparison& t : c->tasks) {
        EXPECT_FALSE(core::isCollective(f.e.program.tasks[static_cast<size_t>(t.id)].kind));
    }
    EXPECT_TRUE(c->categories.empty());
    ASSERT_TRUE(c->peak_memory_error);
    options.memory_absolute = false;
    auto relative = core::compareStep(f.e.program, f.e.timeline, f.e.timed, f.run.timeline, f.run.memory, options);
    ASSERT_TRUE(relative.ok());
    EXPECT_FALSE(relative->peak_memory_error);
    EXPECT_EQ(relative->measured_peak_bytes, f.run.memory.peak_bytes);
    // A rise above the step's start is held against the predicted peak less the steady state.
    options.memory_absolute = true;
    options.memory_rise = true;
    auto rise = core::compareStep(f.e.program, f.e.timeline, f.e.timed, f.run.timeline, f.run.memory, options);
    ASSERT_TRUE(rise.ok());
    int64_t steady = 0;
    for (const int64_t b : f.e.program.initial) steady += b;
    EXPECT_GT(steady, 0);
    EXPECT_EQ(rise->predicted_peak_bytes, f.e.timed.peak_bytes - steady);
}

// Emulated collectives (a single GPU playing one rank) are no measurements: the compute stream is
// still compared exactly, the collective streams and the step time are not.
TEST(CompareTest, EmulatedTasksAreLeftOutOfTimeErrors) {
    const Fixture f(testing::Perturbation{.stretch = 2});
    core::CompareOptions options = topTasks(1'000'000);
    for (int32_t id = 0; id < f.e.program.size(); ++id) {
        if (core::isCollective(f.e.program.tasks[static_cast<size_t>(id)].kind)) options.excluded_tasks.push_back(id);
    }
    ASSERT_FALSE(options.excluded_tasks.empty());
    auto c = core::compareStep(f.e.program, f.e.timeline, f.e.timed, f.run.timeline, f.run.memory, options);
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_FALSE(c->step_time_error.has_value());
    EXPECT_EQ(c->excluded_task_count, static_cast<int32_t>(options.excluded_tasks.size()));
    EXPECT_EQ(c->task_count, f.e.program.size() - c->excluded_task_count);
    EXPECT_EQ(c->tasks.size(), static_cast<size_t>(c->task_count));
    for (const core::TaskComparison& t : c->tasks) {
        EXPECT_FALSE(core::isCollective(f.e.program.tasks[static_cast<size_t>(t.id)].kind)) << t.id;
    }
    bool compute_seen = false;
    for (const core::StreamComparison& s : c->streams) {
        EXPECT_NE(s.stream, core::Stream::AllGather);
        EXPECT_NE(s.stream, core::Stream::ReduceScatter);
        if (s.stream == core::Stream::Compute) {
            compute_seen = true;
            ASSERT_TRUE(s.error.has_value());
            EXPECT_DOUBLE_EQ(*s.error, testing::errorOfFactor(2));
        }
    }
    EXPECT_TRUE(compute_seen);
    // Memory is still compared: the emulated run allocates every buffer for real.
    ASSERT_TRUE(c->peak_memory_error.has_value());
    EXPECT_DOUBLE_EQ(*c->peak_memory_error, 0.0);

    options.excluded_tasks = {f.e.program.size()};
    auto bad = core::compareStep(f.e.program, f.e.timeline, f.e.timed, f.run.timeline, f.run.memory, options);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("not a task"), std::string::npos) << bad.error().message;
}

TEST(CompareTest, RefusesATimelineOfAnotherTaskCount) {
    Fixture f(testing::Perturbation{});
    const size_t n = f.run.timeline.tasks.size();
    f.run.timeline.tasks.pop_back();
    auto c = f.compare(3);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.error().message.find(std::to_string(n - 1) + " tasks"), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("has " + std::to_string(n)), std::string::npos) << c.error().message;
}

TEST(CompareTest, RelativeErrorWithoutAMeasurementIsEmpty) {
    EXPECT_FALSE(core::relativeError(5, 0).has_value());
    EXPECT_DOUBLE_EQ(*core::relativeError(110, 100), 0.1);
    EXPECT_DOUBLE_EQ(*core::relativeError(90, 100), -0.1);
}

TEST(CompareTest, JsonHasTheDocumentedKeys) {
    const Fixture f(testing::Perturbation{.compute_factor = 4, .category = core::MemCategory::Activation,
                                          .category_factor = 2});
    auto c = f.compare(2);
    ASSERT_TRUE(c.ok());
    const nlohmann::json j = core::comparisonToJson(f.e.program, *c);
    for (const char* key : {"step_time_error", "peak_memory_error", "streams", "categories", "tasks"})
        EXPECT_TRUE(j.contains(key)) << key;
    const int64_t activation = f.e.timed.max_per_category[static_cast<size_t>(core::MemCategory::Activation)];
    EXPECT_EQ(j.at("categories").at("Activation").at("error_bytes").get<int64_t>(), -activation);
    EXPECT_EQ(j.at("categories").at("Activation").at("error").get<double>(), -0.5);
    EXPECT_EQ(j.at("streams").at("compute").at("error").get<double>(), -0.75) << j.at("streams").dump();
    EXPECT_EQ(j.at("streams").at("all-gather").at("error").get<double>(), 0.0) << j.at("streams").dump();
    ASSERT_EQ(j.at("tasks").size(), 2u);
    const nlohmann::json& t = j.at("tasks")[0];
    for (const char* key : {"id", "unit", "kind", "stream", "predicted_ns", "measured_ns", "error"})
        EXPECT_TRUE(t.contains(key)) << key;
}

TEST(CompareTest, TraceShowsPredictedAndMeasuredAsTwoProcesses) {
    const Fixture f(testing::Perturbation{.stretch = 2});
    const nlohmann::json trace =
        comparisonChromeTrace(f.e.program, f.e.timeline, &f.e.timed, f.run.timeline, &f.run.memory);
    std::array<int, 2> complete{};
    std::array<std::string, 2> names;
    std::array<std::map<int, double>, 2> start_us;
    for (const nlohmann::json& ev : trace.at("traceEvents")) {
        const int pid = ev.at("pid").get<int>();
        ASSERT_TRUE(pid == 0 || pid == 1);
        if (ev.at("ph") == "M" && ev.at("name") == "process_name") names[static_cast<size_t>(pid)] = ev.at("args").at("name");
        if (ev.at("ph") != "X") continue;
        ++complete[static_cast<size_t>(pid)];
        const int task = ev.at("args").at("task").get<int>();
        const core::Timeline& tl = pid == 0 ? f.e.timeline : f.run.timeline;
        EXPECT_DOUBLE_EQ(ev.at("dur").get<double>(), static_cast<double>(tl.tasks[static_cast<size_t>(task)].durationNs()) / 1e3);
        start_us[static_cast<size_t>(pid)][task] = ev.at("ts").get<double>();
    }
    // Both are placed from their own step's start (ts = the Timeline's start_ns, time 0 = step start)
    // and, the run being twice as slow, each measured task starts at twice its predicted time.
    for (size_t pid = 0; pid < 2; ++pid) {
        const core::Timeline& tl = pid == 0 ? f.e.timeline : f.run.timeline;
        for (const auto& [task, ts] : start_us[pid])
            EXPECT_DOUBLE_EQ(ts, static_cast<double>(tl.tasks[static_cast<size_t>(task)].start_ns) / 1e3) << task;
    }
    for (const auto& [task, ts] : start_us[0]) EXPECT_DOUBLE_EQ(start_us[1].at(task), 2 * ts) << "task " << task;
    EXPECT_EQ(names[0], "predicted");
    EXPECT_EQ(names[1], "measured");
    EXPECT_EQ(complete[0], f.e.program.size());
    EXPECT_EQ(complete[1], f.e.program.size());
}

}  // namespace
}  // namespace shardcast::sim
