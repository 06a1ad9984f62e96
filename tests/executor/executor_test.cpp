// The executor's schedule and memory accounting on the in-process backend: stream order, deps,
// host_wait, per-category high-water marks, and a lowered Program run end to end.
#include "executor/executor.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/lower/lower.hpp"
#include "core/plan/plan_build.hpp"
#include "executor/null_backend.hpp"

namespace shardcast::exec {
namespace {

using core::MemCategory;
using core::Stream;
using core::TaskKind;

// A tiny Program built by hand: tasks with deps and memory events.
class Builder {
public:
    int32_t add(TaskKind kind, Stream stream, std::initializer_list<int32_t> deps = {}) {
        core::Task t;
        t.kind = kind;
        t.stream = stream;
        t.deps = {static_cast<uint32_t>(m_p.deps.size()), static_cast<uint32_t>(deps.size())};
        for (int32_t d : deps) m_p.deps.push_back(d);
        m_p.tasks.push_back(t);
        return m_p.size() - 1;
    }
    void mem(core::Span core::Task::*span, int32_t id, std::initializer_list<core::MemEvent> events) {
        m_p.tasks[static_cast<size_t>(id)].*span = {static_cast<uint32_t>(m_p.mem.size()),
                                                    static_cast<uint32_t>(events.size())};
        for (const auto& e : events) {
            m_p.mem.push_back(e);
            m_p.buffer_count = std::max(m_p.buffer_count, e.buffer + 1);
        }
    }
    core::Program& program() { return m_p; }

private:
    core::Program m_p;
};

core::MemEvent ev(int64_t bytes, MemCategory c, int32_t buffer, Stream s = Stream::Compute) {
    core::MemEvent e;
    e.bytes = bytes;
    e.category = c;
    e.buffer = buffer;
    e.stream = s;
    return e;
}

void expectScheduleKept(const core::Program& p, const core::Timeline& t) {
    ASSERT_EQ(t.tasks.size(), p.tasks.size());
    std::array<int64_t, core::kStreamCount> last_end;
    last_end.fill(-1);
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& task = p.tasks[static_cast<size_t>(id)];
        const core::TaskTime& tt = t.tasks[static_cast<size_t>(id)];
        EXPECT_GT(tt.end_ns, tt.start_ns) << p.taskLabel(id);
        EXPECT_EQ(tt.stream, task.stream);
        // One stream runs its tasks in Program order, one after another.
        EXPECT_GT(tt.start_ns, last_end[static_cast<size_t>(task.stream)]) << p.taskLabel(id);
        last_end[static_cast<size_t>(task.stream)] = tt.end_ns;
        const int32_t* deps = p.depsBegin(task);
        for (uint32_t k = 0; k < task.deps.count; ++k) {
            EXPECT_GT(tt.start_ns, t.tasks[static_cast<size_t>(deps[k])].end_ns) << p.taskLabel(id);
        }
        if (task.host_wait >= 0) {
            EXPECT_GT(tt.start_ns, t.tasks[static_cast<size_t>(task.host_wait)].end_ns) << p.taskLabel(id);
        }
    }
}

TEST(ExecutorTest, KeepsStreamOrderDepsAndHostWait) {
    Builder b;
    const int32_t ag0 = b.add(TaskKind::AllGather, Stream::AllGather);
    const int32_t ag1 = b.add(TaskKind::AllGather, Stream::AllGather);
    const int32_t fwd0 = b.add(TaskKind::Forward, Stream::Compute, {ag0});
    const int32_t fwd1 = b.add(TaskKind::Forward, Stream::Compute, {ag1});
    const int32_t rs = b.add(TaskKind::ReduceScatter, Stream::ReduceScatter, {fwd1});
    const int32_t ag2 = b.add(TaskKind::AllGather, Stream::AllGather);
    b.program().tasks[static_cast<size_t>(ag2)].host_wait = fwd0;
    const int32_t opt = b.add(TaskKind::OptimizerStep, Stream::Compute, {rs, ag2});
    b.program().tasks[static_cast<size_t>(opt)].host_blocks = true;

    NullBackend backend;
    Executor executor(backend);
    std::vector<int32_t> progress;
    executor.onStep([&](int32_t done, int32_t total) {
        EXPECT_EQ(total, 6);
        progress.push_back(done);
    });
    auto run = executor.run(b.program(), {.warmup = 1, .steps = 5});
    ASSERT_TRUE(run.ok()) << run.error().message;
    EXPECT_EQ(progress, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(backend.tasksRun(), 6 * b.program().size());
    EXPECT_EQ(run->step_ns.size(), 5u);
    EXPECT_EQ(run->worker_threads, 3);  // compute, all-gather, reduce-scatter
    expectScheduleKept(b.program(), run->timeline);
    EXPECT_EQ(run->timeline.step_ns, run->timeline.tasks[static_cast<size_t>(opt)].end_ns);
    // The median step is the middle of the sorted step times.
    std::vector<int64_t> sorted = run->step_ns;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(run->step_ns[static_cast<size_t>(run->median_step)], sorted[2]);
}

// Streams run concurrently, each on its own thread, and a slow stream holds back only the tasks
// that depend on it. All-gather and reduce-scatter tasks of 20 ms each with no deps between the
// two streams: run one after another they would take 4 x 20 = 80 ms; concurrently 2 x 20 = 40 ms.
// The compute task depending on the second all-gather starts after it (>= 40 ms), the one
// without deps at once (< 20 ms, before the first all-gather ends).
TEST(ExecutorTest, StreamsOverlapAndWaitOnlyForTheirDeps) {
    Builder b;
    const int32_t ag0 = b.add(TaskKind::AllGather, Stream::AllGather);
    const int32_t rs0 = b.add(TaskKind::ReduceScatter, Stream::ReduceScatter);
    const int32_t ag1 = b.add(TaskKind::AllGather, Stream::AllGather);
    const int32_t rs1 = b.add(TaskKind::ReduceScatter, Stream::ReduceScatter);
    const int32_t free_fwd = b.add(TaskKind::Forward, Stream::Compute);
    const int32_t fwd = b.add(TaskKind::Forward, Stream::Compute, {ag1});

    NullBackend backend;
    backend.setStreamDelay(Stream::AllGather, 20'000);
    backend.setStreamDelay(Stream::ReduceScatter, 20'000);
    Executor executor(backend);
    auto run = executor.run(b.program(), {.warmup = 0, .steps = 1});
    ASSERT_TRUE(run.ok()) << run.error().message;
    const core::Timeline& t = run->timeline;
    expectScheduleKept(b.program(), t);
    auto at = [&](int32_t id) { return t.tasks[static_cast<size_t>(id)]; };
    constexpr int64_t kMs = 1'000'000;
    EXPECT_GE(at(ag1).end_ns, 40 * kMs);
    EXPECT_GE(at(rs1).end_ns, 40 * kMs);
    EXPECT_LT(t.step_ns, 75 * kMs) << "the all-gather and reduce-scatter streams did not overlap";
    EXPECT_LT(at(rs0).start_ns, at(ag0).end_ns) << "the reduce-scatter stream waited for the all-gather stream";
    EXPECT_LT(at(free_fwd).start_ns, at(ag0).end_ns) << "a compute task without deps waited for a collective";
    EXPECT_GE(at(fwd).start_ns, at(ag1).end_ns);
    EXPECT_GE(t.stream_busy_ns[static_cast<size_t>(Stream::AllGather)], 40 * kMs);
}

TEST(ExecutorTest, CountsPerCategoryHighWaterMarks) {
    // One stream, so the order of events is fixed. Worked out by hand:
    //   initial: ShardedParam 100, OptState 200
    //   t0 start: +50 AllGather (buf 0)                              AG  50
    //   t1 start: +30 UnshardedParam (buf 1); peak +20 Temp, -10 AllGather; end -50 AllGather (buf 0)
    //   t2 start: +40 Activation (buf 2); end -30 UnshardedParam (buf 1), -40 Activation (buf 2)
    // High water: ShardedParam 100, OptState 200, AllGather 50, UnshardedParam 30, Temp 20,
    // Activation 40; the peak total is 100 + 200 + 50 + 30 + 20 - 10 = 390 at t1's peak.
    Builder b;
    b.program().initial[core::index(MemCategory::ShardedParam)] = 100;
    b.program().initial[core::index(MemCategory::OptState)] = 200;
    const int32_t t0 = b.add(TaskKind::CopyIn, Stream::Compute);
    b.mem(&core::Task::mem_start, t0, {ev(50, MemCategory::AllGather, 0)});
    const int32_t t1 = b.add(TaskKind::CopyOut, Stream::Compute);
    b.mem(&core::Task::mem_start, t1, {ev(30, MemCategory::UnshardedParam, 1)});
    b.mem(&core::Task::mem_peak, t1, {ev(20, MemCategory::Temp, 3), ev(-10, MemCategory::AllGather, 0)});
    b.mem(&core::Task::mem_end, t1, {ev(-50, MemCategory::AllGather, 0)});
    const int32_t t2 = b.add(TaskKind::Forward, Stream::Compute);
    b.mem(&core::Task::mem_start, t2, {ev(40, MemCategory::Activation, 2)});
    b.mem(&core::Task::mem_end, t2, {ev(-30, MemCategory::UnshardedParam, 1), ev(-40, MemCategory::Activation, 2)});

    NullBackend backend(/*hold_memory=*/true);
    Executor executor(backend);
    auto run = executor.run(b.program(), {.warmup = 0, .steps = 2});
    ASSERT_TRUE(run.ok()) << run.error().message;
    core::CategoryBytes expected{};
    expected[core::index(MemCategory::ShardedParam)] = 100;
    expected[core::index(MemCategory::OptState)] = 200;
    expected[core::index(MemCategory::AllGather)] = 50;
    expected[core::index(MemCategory::UnshardedParam)] = 30;
    expected[core::index(MemCategory::Temp)] = 20;
    expected[core::index(MemCategory::Activation)] = 40;
    EXPECT_EQ(run->counted_high_water, expected);
    EXPECT_EQ(run->memory.max_per_category, expected);
    EXPECT_EQ(run->memory.peak_bytes, 390);
    EXPECT_EQ(run->memory.peak_task, t1);
    EXPECT_FALSE(run->memory.curve.empty());
}

TEST(ExecutorTest, FailingTaskEndsTheRunWithItsName) {
    Builder b;
    b.add(TaskKind::Forward, Stream::Compute);
    const int32_t bad = b.add(TaskKind::AllGather, Stream::AllGather);
    b.add(TaskKind::Backward, Stream::Compute, {bad});
    NullBackend backend;
    backend.failTask(bad);
    Executor executor(backend);
    auto run = executor.run(b.program(), {});
    ASSERT_FALSE(run.ok());
    EXPECT_NE(run.error().message.find("task 1"), std::string::npos) << run.error().message;
    EXPECT_NE(run.error().message.find("injected failure"), std::string::npos) << run.error().message;
}

// Running out of memory in a task's allocation is an error naming the task, not a crash.
TEST(ExecutorTest, FailedAllocationEndsTheRunWithItsName) {
    Builder b;
    b.add(TaskKind::Forward, Stream::Compute);
    const int32_t big = b.add(TaskKind::AllGather, Stream::AllGather);
    b.mem(&core::Task::mem_start, big, {ev(1 << 20, MemCategory::AllGather, 0, Stream::AllGather)});
    NullBackend backend;
    backend.failAllocationsOver(1 << 19);
    Executor executor(backend);
    auto run = executor.run(b.program(), {});
    ASSERT_FALSE(run.ok());
    EXPECT_NE(run.error().message.find("task 1"), std::string::npos) << run.error().message;
    EXPECT_NE(run.error().message.find("allocating its buffers failed"), std::string::npos) << run.error().message;
}

core::Program lowered(const core::PlanOverrides& o) {
    auto plan = core::buildPlan(o);
    EXPECT_TRUE(plan.ok()) << plan.error().message;
    auto mesh = core::validatePlan(*plan);
    EXPECT_TRUE(mesh.ok()) << mesh.error().message;
    core::Program program;
    auto status = core::lower(*plan, *mesh, program);
    EXPECT_TRUE(status.ok()) << status.error().message;
    return program;
}

// A lowered Program runs end to end; the counted high-water marks equal MemoryTimer's on the
// measured timeline for every category (byte counts: exactly).
TEST(ExecutorTest, LoweredProgramsKeepTheirContracts) {
    for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}) {
        for (const char* fsdp : {"1", "2"}) {
            core::PlanOverrides o;
            o.model = "gpt2";
            o.nodes = 1;
            o.gpus_per_node = 2;
            o.seq_len = 128;
            o.strategy = strategy;
            o.fsdp = std::stoi(fsdp);
            o.grad_accum = 2;
            const core::Program p = lowered(o);
            ASSERT_GT(p.size(), 0);
            NullBackend backend;
            Executor executor(backend);
            auto run = executor.run(p, {.warmup = 1, .steps = 3});
            ASSERT_TRUE(run.ok()) << run.error().message;
            SCOPED_TRACE(std::string(strategy) + " FSDP" + fsdp);
            expectScheduleKept(p, run->timeline);
            EXPECT_EQ(run->counted_high_water, run->memory.max_per_category);
        }
    }
}

}  // namespace
}  // namespace shardcast::exec
