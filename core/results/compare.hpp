#pragma once
// Prediction against measurement for one step of one Program: step time, per-stream busy time,
// per-task durations and memory peaks. Both sides are a Timeline and a TimedMemory over the same
// task ids (a simulator's prediction, a backend's RunRecord); this only compares, it predicts nothing.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/base/units.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"

namespace shardcast::core {

// Every relative error is signed: (predicted - measured) / measured, so a prediction that is too
// fast or too small is negative. Empty when the measured value is 0 (no relative error exists).
std::optional<double> relativeError(int64_t predicted, int64_t measured);

struct StreamComparison {
    Stream stream = Stream::Compute;
    int64_t predicted_busy_ns = 0;
    int64_t measured_busy_ns = 0;
    std::optional<double> error;
};

struct CategoryComparison {
    MemCategory category{};
    int64_t predicted_bytes = 0;  // the category's own peak over the step (TimedMemory::max_per_category)
    int64_t measured_bytes = 0;
    int64_t errorBytes() const { return predicted_bytes - measured_bytes; }
    std::optional<double> error;
};

struct TaskComparison {
    int32_t id = -1;
    int64_t predicted_ns = 0;  // durations
    int64_t measured_ns = 0;
    int64_t errorNs() const { return predicted_ns - measured_ns; }
    std::optional<double> error;
};

struct Comparison {
    int64_t predicted_step_ns = 0;
    int64_t measured_step_ns = 0;
    std::optional<double> step_time_error;
    std::vector<StreamComparison> streams;       // streams the Program uses, in Stream order
    int64_t predicted_peak_bytes = 0;
    int64_t measured_peak_bytes = 0;
    std::optional<double> peak_memory_error;
    std::vector<CategoryComparison> categories;  // categories either side uses, in MemCategory order
    std::vector<TaskComparison> tasks;           // largest |duration error| first, ties by id
    int32_t task_count = 0;                      // tasks compared (the Program's, less the excluded)
    int32_t excluded_task_count = 0;             // CompareOptions::excluded_tasks
    int32_t unmeasured_task_count = 0;           // CompareOptions::unmeasured_tasks
};

struct CompareOptions {
    int32_t top_tasks = 10;  // how many tasks to keep in Comparison::tasks (all when larger)
    // Tasks whose measured times are not measurements (RunRecord::emulated_tasks: collectives a
    // single GPU filled locally). They are left out of the task and stream busy-time errors, and
    // the step time, which contains them, is not compared (step_time_error stays empty).
    std::vector<int32_t> excluded_tasks;
    // Tasks the measurement has no time for (RunRecord::unmeasured_tasks): left out of task and
    // stream errors; the step time, measured whole, is compared.
    std::vector<int32_t> unmeasured_tasks;
    bool memory_categories = true;  // false: the measured side has a total only (no category rows)
    bool memory_absolute = true;    // false: no memory was measured (the peak is not compared)
    bool memory_rise = false;       // the measured peak is a rise above the step's start: compared with
                                    // the predicted peak less Program::initial (the steady state)
};

// Errors (the user's input, not an invariant): a measured timeline whose task count is not the
// Program's, naming both counts; an excluded task id outside the Program. The predicted timeline must be the Program's (asserted).
Result<Comparison> compareStep(const Program& program, const Timeline& predicted, const TimedMemory& predicted_memory,
                               const Timeline& measured, const TimedMemory& measured_memory,
                               const CompareOptions& options = {});

// {"step_time_error", "predicted_step_ns", "measured_step_ns", "peak_memory_error",
//  "predicted_peak_bytes", "measured_peak_bytes", "task_count", "excluded_task_count", "streams": {name: {"predicted_busy_ns",
//  "measured_busy_ns", "error"}}, "categories": {name: {"predicted_bytes", "measured_bytes",
//  "error_bytes", "error"}}, "tasks": [{"id", "unit", "kind", "stream", "predicted_ns",
//  "measured_ns", "error"}]}; an error without a measured value is null.
nlohmann::json comparisonToJson(const Program& program, const Comparison& comparison);
// A relative error as JSON: the number, or null where there is none (every "error" key).
nlohmann::json errorToJson(const std::optional<double>& error);

// The unit a task belongs to, "(step)" for step-level tasks.
std::string taskUnitName(const Program& program, int32_t task);

}  // namespace shardcast::core
