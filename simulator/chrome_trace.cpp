#include "simulator/chrome_trace.hpp"


#include <nlohmann/json.hpp>

#include "core/file_io.hpp"

namespace shardcast::sim {
namespace {

constexpr int kPid = 0;
double toUs(int64_t ns) { return static_cast<double>(ns) / 1e3; }

}  // namespace

nlohmann::json chromeTrace(const core::Program& program, const core::Timeline& timeline, const core::TimedMemory* memory) {
    nlohmann::json events = nlohmann::json::array();
    std::array<bool, core::kStreamCount> used{};
    for (const core::Task& t : program.tasks) used[static_cast<int>(t.stream)] = true;
    events.push_back({{"ph", "M"}, {"pid", kPid}, {"name", "process_name"}, {"args", {{"name", "shardcast rank 0"}}}});
    for (int s = 0; s < core::kStreamCount; ++s) {
        if (!used[s]) continue;
        const std::string name(core::streamName(static_cast<core::Stream>(s)));
        events.push_back({{"ph", "M"}, {"pid", kPid}, {"tid", s}, {"name", "thread_name"}, {"args", {{"name", name}}}});
        events.push_back({{"ph", "M"}, {"pid", kPid}, {"tid", s}, {"name", "thread_sort_index"}, {"args", {{"sort_index", s}}}});
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
                          {"pid", kPid},
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
            events.push_back({{"ph", "C"}, {"pid", kPid}, {"name", "Memory (GiB)"}, {"ts", toUs(p.time_ns)}, {"args", std::move(args)}});
        }
    }
    return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

core::Status writeChromeTrace(const std::filesystem::path& path, const core::Program& program,
                              const core::Timeline& timeline, const core::TimedMemory* memory) {
    return core::writeFileAtomically(path, chromeTrace(program, timeline, memory).dump() + "\n");
}

}  // namespace shardcast::sim
