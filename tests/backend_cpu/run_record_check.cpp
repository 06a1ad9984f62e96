// Checks a RUN.json written by `shardcast run` against the prediction of exactly what ran:
//   run_record_check RUN.json WORLD_SIZE STEPS
// Exit 0 when the record parses (core::loadRunRecord), has WORLD_SIZE ranks and STEPS measured
// steps, a timeline of every task of the plan's Program with start <= end, and counted memory
// equal to the prediction's counted allocations (evaluatePlan on the recorded plan and profile:
// per-category high-water marks, exact bytes); otherwise prints what differs and exits 1.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "core/base/units.hpp"
#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

using namespace shardcast;

int main(int argc, char** argv) {
    if (argc != 4) {
        fmt::print(stderr, "usage: run_record_check RUN.json WORLD_SIZE STEPS\n");
        return 2;
    }
    const std::string path = argv[1];
    const int world = std::atoi(argv[2]);
    const int steps = std::atoi(argv[3]);
    int failures = 0;
    auto fail = [&](const std::string& what) {
        fmt::print(stderr, "{}: {}\n", path, what);
        ++failures;
    };

    auto record = core::loadRunRecord(path);
    if (!record) {
        fmt::print(stderr, "{}: does not load: {}\n", path, record.error().message);
        return 1;
    }
    if (record->world_size != world) fail(fmt::format("world_size {}, expected {}", record->world_size, world));
    if (static_cast<int>(record->step_ns.size()) != steps) {
        fail(fmt::format("{} measured steps, expected {}", record->step_ns.size(), steps));
    }
    for (int64_t ns : record->step_ns) {
        if (ns <= 0) fail(fmt::format("a step of {} ns", ns));
    }
    auto plan = core::planFromJson(record->plan, path + ": plan", SHARDCAST_SOURCE_DIR);
    if (!plan) {
        fmt::print(stderr, "{}: its plan does not load: {}\n", path, plan.error().message);
        return 1;
    }
    auto profile = sim::profileFromJson(record->profile, path + ": profile", sim::HardwareProfile::fromCluster(plan->cluster));
    if (!profile) {
        fmt::print(stderr, "{}: its profile does not load: {}\n", path, profile.error().message);
        return 1;
    }
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    auto predicted = sim::evaluatePlan(*plan, &*profile, options);
    if (!predicted) {
        fmt::print(stderr, "{}: its plan does not evaluate: {}\n", path, predicted.error().message);
        return 1;
    }
    if (predicted->program.world_size != world) {
        fail(fmt::format("the recorded plan has {} ranks, expected {}", predicted->program.world_size, world));
    }

    const core::Timeline& t = record->timeline;
    if (t.tasks.size() != predicted->program.tasks.size()) {
        fail(fmt::format("timeline of {} tasks, the Program has {}", t.tasks.size(), predicted->program.tasks.size()));
    } else {
        for (size_t i = 0; i < t.tasks.size(); ++i) {
            const core::TaskTime& tt = t.tasks[i];
            if (tt.start_ns < 0 || tt.start_ns > tt.end_ns || tt.end_ns > t.step_ns) {
                fail(fmt::format("task {} runs {} .. {} ns in a step of {} ns", i, tt.start_ns, tt.end_ns, t.step_ns));
                break;
            }
            if (tt.stream != predicted->program.tasks[i].stream) {
                fail(fmt::format("task {} ran on another stream than the Program's", i));
                break;
            }
        }
    }
    if (record->medianStepNs() != t.step_ns) {
        fail(fmt::format("median step {} ns but its timeline spans {} ns", record->medianStepNs(), t.step_ns));
    }

    // Memory. The record's memory must be the Program's events placed on the recorded timeline
    // (core::MemoryTimer): the executor counts every allocation by buffer id and checks its
    // counted high-water marks against exactly this before it writes the record.
    core::TimedMemory replayed;
    core::MemoryTimer timer;
    timer.compute(predicted->program, t, replayed);
    if (replayed.max_per_category != record->memory.max_per_category || replayed.peak_bytes != record->memory.peak_bytes) {
        fail(fmt::format("recorded memory (peak {} bytes) is not the Program's events on the recorded timeline (peak {} "
                         "bytes)",
                         record->memory.peak_bytes, replayed.peak_bytes));
    }
    // Against the prediction, exact bytes, for every category whose events all come from tasks of
    // one stream: a stream runs its tasks in order, so such a category's high-water mark does not
    // depend on timing. A category touched by several streams (an all-gather buffer allocated on
    // the all-gather stream and freed after the compute stream's copy-out) peaks where the streams
    // overlap, which differs between the prediction's timeline and the measured one: reported.
    const core::Program& program = predicted->program;
    std::array<uint32_t, core::kMemCategoryCount> streams{};  // bit mask of streams per category
    for (const core::Task& task : program.tasks) {
        for (core::Span span : {task.mem_start, task.mem_peak, task.mem_end}) {
            for (uint32_t k = 0; k < span.count; ++k) {
                const core::MemEvent& e = program.mem[span.offset + k];
                const core::Stream by =
                    e.timed_after >= 0 ? program.tasks[static_cast<size_t>(e.timed_after)].stream : task.stream;
                streams[static_cast<size_t>(e.category)] |= 1u << static_cast<unsigned>(by);
            }
        }
    }
    int exact = 0;
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        const auto k = static_cast<size_t>(c);
        const int64_t measured = record->memory.max_per_category[k];
        const int64_t want = predicted->timed.max_per_category[k];
        const bool one_stream = (streams[k] & (streams[k] - 1)) == 0;
        const std::string name(core::categoryName(static_cast<core::MemCategory>(c)));
        if (one_stream) {
            ++exact;
            if (measured != want) fail(fmt::format("{} high-water mark {} bytes measured, {} bytes predicted", name, measured, want));
        } else if (measured != want) {
            fmt::print("{}: note: {} (several streams) peaks at {} bytes measured, {} bytes predicted: timing-dependent overlap\n",
                       path, name, measured, want);
        }
    }
    const int64_t measured_peak = record->memory.peak_bytes;
    const int64_t predicted_peak = predicted->timed.peak_bytes;
    fmt::print("{}: {} ranks, {} steps, median {:.2f} ms; {} single-stream categories exact; peak of counted "
               "allocations {} bytes measured, {} bytes predicted\n",
               path, record->world_size, record->step_ns.size(), static_cast<double>(record->medianStepNs()) * 1e-6,
               exact, measured_peak, predicted_peak);
    return failures == 0 ? 0 : 1;
}
