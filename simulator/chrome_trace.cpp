#include "simulator/chrome_trace.hpp"


#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"

namespace shardcast::sim {
namespace {

double toUs(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

void appendTraceProcess(nlohmann::json& events, int pid, std::string_view process_name, const core::Program& program,
                        const core::Timeline& timeline, const core::TimedMemory* memory) {
    std::array<bool, core::kStreamCount> used{};
    for (const core::Task& t : program.tasks) used[static_cast<int>(t.stream)] = true;
    events.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", std::string(process_name)}}}});
    for (int s = 0; s < core::kStreamCount; ++s) {
        if (!used[s]) continue;
        const std::string name(core::streamName(static_cast<core::Stream>(s)));
        events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", s}, {"name", "thread_name"}, {"args", {{"name", name}}}});
        events.push_back({{"ph", "M"}, {"pid", pid}, {"tid", s}, {"name", "thread_sort_index"}, {"args", {{"sort_index", s}}}});
    }
    for (int32_t id = 0; id < program.size(); ++id) {
        const core::Task& t = program.tasks[id];
        const core::TaskTime& tt = timeline.tasks[id];
        nlohmann::json args = {{"task", id}, {"micro_batch", t.micro_batch}};
        if (t.flops) args["flops"] = t.flops;
        if (t.hbm_bytes) args["hbm_bytes"] = t.hbm_bytes;
        if (t.comm_bytes) args["comm_bytes"] = t.comm_bytes;
        if (t.group_size) {
            args["group_size"] = t.group_size;
            args["group_nodes"] = t.group_nodes;
        }
        events.push_back({{"ph", "X"},
                          {"pid", pid},
                          {"tid", static_cast<int>(t.stream)},
                          {"name", program.taskLabel(id)},
                          {"cat", std::string(core::taskKindName(t.kind))},
                          {"ts", toUs(tt.start_ns)},
                          {"dur", toUs(tt.durationNs())},
                          {"args", std::move(args)}});
    }
    if (memory) {
        for (const core::MemoryPoint& p : memory->curve) {
            nlohmann::json args = nlohmann::json::object();
            for (int c = 0; c < core::kMemCategoryCount; ++c) {
                args[std::string(core::categoryName(static_cast<core::MemCategory>(c)))] =
                    static_cast<double>(p.bytes[c]) / static_cast<double>(core::kGiB);
            }
            events.push_back({{"ph", "C"}, {"pid", pid}, {"name", "Memory (GiB)"}, {"ts", toUs(p.time_ns)}, {"args", std::move(args)}});
        }
    }
}

nlohmann::json chromeTrace(const core::Program& program, const core::Timeline& timeline, const core::TimedMemory* memory) {
    nlohmann::json events = nlohmann::json::array();
    appendTraceProcess(events, 0, "shardcast rank 0", program, timeline, memory);
    return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

nlohmann::json comparisonChromeTrace(const core::Program& program, const core::Timeline& predicted,
                                     const core::TimedMemory* predicted_memory, const core::Timeline& measured,
                                     const core::TimedMemory* measured_memory) {
    nlohmann::json events = nlohmann::json::array();
    appendTraceProcess(events, 0, "predicted", program, predicted, predicted_memory);
    appendTraceProcess(events, 1, "measured", program, measured, measured_memory);
    events.push_back({{"ph", "M"}, {"pid", 0}, {"name", "process_sort_index"}, {"args", {{"sort_index", 0}}}});
    events.push_back({{"ph", "M"}, {"pid", 1}, {"name", "process_sort_index"}, {"args", {{"sort_index", 1}}}});
    return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

core::Status writeChromeTrace(const std::filesystem::path& path, const core::Program& program,
                              const core::Timeline& timeline, const core::TimedMemory* memory) {
    return core::writeFileAtomically(path, chromeTrace(program, timeline, memory).dump() + "\n");
}

}  // namespace shardcast::sim
