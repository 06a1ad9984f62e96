#include "core/results/compare.hpp"

#include <algorithm>
#include <cassert>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace shardcast::core {

std::optional<double> relativeError(int64_t predicted, int64_t measured) {
    if (measured == 0) return std::nullopt;
    return static_cast<double>(predicted - measured) / static_cast<double>(measured);
}

std::string taskUnitName(const Program& program, int32_t task) {
    const int32_t unit = program.tasks[static_cast<size_t>(task)].unit;
    return unit < 0 ? std::string("(step)") : program.units[static_cast<size_t>(unit)].name;
}

Result<Comparison> compareStep(const Program& program, const Timeline& predicted, const TimedMemory& predicted_memory,
                               const Timeline& measured, const TimedMemory& measured_memory,
                               const CompareOptions& options) {
    assert(predicted.tasks.size() == program.tasks.size());
    if (measured.tasks.size() != program.tasks.size()) {
        return makeError(fmt::format(
            "the measured timeline has {} tasks but the plan's program has {}: the run is not of this plan",
            measured.tasks.size(), program.tasks.size()));
    }
    std::vector<uint8_t> excluded(program.tasks.size(), 0);
    for (const int32_t id : options.excluded_tasks) {
        if (id < 0 || id >= program.size()) {
            return makeError(fmt::format("emulated task {} is not a task of the plan's program (ids 0 .. {})", id,
                                         program.size() - 1));
        }
        excluded[static_cast<size_t>(id)] = 1;
    }
    for (const int32_t id : options.unmeasured_tasks) {
        if (id < 0 || id >= program.size()) {
            return makeError(fmt::format("unmeasured task {} is not a task of the plan's program (ids 0 .. {})", id,
                                         program.size() - 1));
        }
        if (excluded[static_cast<size_t>(id)] == 0) excluded[static_cast<size_t>(id)] = 2;
    }
    Comparison c;
    c.excluded_task_count = static_cast<int32_t>(std::count(excluded.begin(), excluded.end(), uint8_t{1}));
    c.unmeasured_task_count = static_cast<int32_t>(std::count(excluded.begin(), excluded.end(), uint8_t{2}));
    c.task_count = program.size() - c.excluded_task_count - c.unmeasured_task_count;
    c.predicted_step_ns = predicted.step_ns;
    c.measured_step_ns = measured.step_ns;
    if (c.excluded_task_count == 0) c.step_time_error = relativeError(c.predicted_step_ns, c.measured_step_ns);

    // Busy time of the tasks compared: a stream runs one task at a time, so it is the sum of their
    // durations (the Timeline's busy time when nothing is excluded).
    std::array<bool, kStreamCount> used{};
    std::array<int64_t, kStreamCount> predicted_busy{}, measured_busy{};
    for (int32_t id = 0; id < program.size(); ++id) {
        if (excluded[static_cast<size_t>(id)] != 0) continue;
        const auto s = static_cast<size_t>(program.tasks[static_cast<size_t>(id)].stream);
        used[s] = true;
        predicted_busy[s] += predicted.tasks[static_cast<size_t>(id)].durationNs();
        measured_busy[s] += measured.tasks[static_cast<size_t>(id)].durationNs();
    }
    for (int s = 0; s < kStreamCount; ++s) {
        if (!used[static_cast<size_t>(s)]) continue;
        StreamComparison sc{static_cast<Stream>(s), predicted_busy[static_cast<size_t>(s)],
                            measured_busy[static_cast<size_t>(s)], std::nullopt};
        sc.error = relativeError(sc.predicted_busy_ns, sc.measured_busy_ns);
        c.streams.push_back(sc);
    }

    c.predicted_peak_bytes = predicted_memory.peak_bytes;
    if (options.memory_rise) {
        for (const int64_t b : program.initial) c.predicted_peak_bytes -= b;
    }
    c.measured_peak_bytes = measured_memory.peak_bytes;
    if (options.memory_absolute) c.peak_memory_error = relativeError(c.predicted_peak_bytes, c.measured_peak_bytes);
    for (int k = 0; k < kMemCategoryCount && options.memory_categories; ++k) {
        const int64_t p = predicted_memory.max_per_category[static_cast<size_t>(k)];
        const int64_t m = measured_memory.max_per_category[static_cast<size_t>(k)];
        if (p == 0 && m == 0) continue;
        c.categories.push_back(CategoryComparison{static_cast<MemCategory>(k), p, m, relativeError(p, m)});
    }

    std::vector<TaskComparison> all;
    all.reserve(program.tasks.size());
    for (int32_t id = 0; id < program.size(); ++id) {
        if (excluded[static_cast<size_t>(id)] != 0) continue;
        const int64_t p = predicted.tasks[static_cast<size_t>(id)].durationNs();
        const int64_t m = measured.tasks[static_cast<size_t>(id)].durationNs();
        all.push_back(TaskComparison{id, p, m, relativeError(p, m)});
    }
    const size_t keep = std::min(all.size(), static_cast<size_t>(std::max(options.top_tasks, 0)));
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(),
                      [](const TaskComparison& a, const TaskComparison& b) {
                          const int64_t ea = std::llabs(a.errorNs()), eb = std::llabs(b.errorNs());
                          return ea != eb ? ea > eb : a.id < b.id;
                      });
    all.resize(keep);
    c.tasks = std::move(all);
    return c;
}

nlohmann::json errorToJson(const std::optional<double>& error) {
    return error ? nlohmann::json(*error) : nlohmann::json(nullptr);
}

nlohmann::json comparisonToJson(const Program& program, const Comparison& c) {
    using json = nlohmann::json;
    json j;
    j["step_time_error"] = errorToJson(c.step_time_error);
    j["predicted_step_ns"] = c.predicted_step_ns;
    j["measured_step_ns"] = c.measured_step_ns;
    j["peak_memory_error"] = errorToJson(c.peak_memory_error);
    j["predicted_peak_bytes"] = c.predicted_peak_bytes;
    j["measured_peak_bytes"] = c.measured_peak_bytes;
    j["task_count"] = c.task_count;
    j["excluded_task_count"] = c.excluded_task_count;
    j["unmeasured_task_count"] = c.unmeasured_task_count;
    json streams = json::object();
    for (const StreamComparison& s : c.streams) {
        streams[std::string(streamName(s.stream))] = {{"predicted_busy_ns", s.predicted_busy_ns},
                                                      {"measured_busy_ns", s.measured_busy_ns},
                                                      {"error", errorToJson(s.error)}};
    }
    j["streams"] = std::move(streams);
    json categories = json::object();
    for (const CategoryComparison& k : c.categories) {
        categories[std::string(categoryName(k.category))] = {{"predicted_bytes", k.predicted_bytes},
                                                             {"measured_bytes", k.measured_bytes},
                                                             {"error_bytes", k.errorBytes()},
                                                             {"error", errorToJson(k.error)}};
    }
    j["categories"] = std::move(categories);
    json tasks = json::array();
    for (const TaskComparison& t : c.tasks) {
        const Task& task = program.tasks[static_cast<size_t>(t.id)];
        tasks.push_back({{"id", t.id},
                         {"unit", taskUnitName(program, t.id)},
                         {"kind", std::string(taskKindName(task.kind))},
                         {"stream", std::string(streamName(task.stream))},
                         {"predicted_ns", t.predicted_ns},
                         {"measured_ns", t.measured_ns},
                         {"error", errorToJson(t.error)}});
    }
    j["tasks"] = std::move(tasks);
    return j;
}

}  // namespace shardcast::core
