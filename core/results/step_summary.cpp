#include "core/results/step_summary.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace shardcast::core {

namespace {

constexpr double kNsPerS = 1e9;

// Adds each task's duration to its collective's total and, with `units`, to its unit's.
void addTaskTimes(const Program& program, const Timeline& timeline, StepTotals& totals, std::vector<UnitTime>* units) {
    for (int32_t id = 0; id < program.size(); ++id) {
        const Task& t = program.tasks[id];
        const int64_t d = timeline.tasks[id].durationNs();
        int64_t* unit_slot = nullptr;
        UnitTime* u = units && t.unit >= 0 && static_cast<size_t>(t.unit) < units->size() ? &(*units)[t.unit] : nullptr;
        switch (t.kind) {
            case TaskKind::AllGather: totals.all_gather_ns += d; if (u) unit_slot = &u->all_gather_ns; break;
            case TaskKind::ReduceScatter: totals.reduce_scatter_ns += d; if (u) unit_slot = &u->reduce_scatter_ns; break;
            case TaskKind::AllReduce: totals.all_reduce_ns += d; if (u) unit_slot = &u->all_reduce_ns; break;
            case TaskKind::HostToDevice:
            case TaskKind::DeviceToHost: if (u) unit_slot = &u->host_copy_ns; break;
            default: if (u) unit_slot = &u->compute_ns; break;
        }
        if (unit_slot) *unit_slot += d;
    }
}

StepTotals timelineTotals(const Timeline& timeline) {
    StepTotals totals;
    totals.step_ns = timeline.step_ns;
    totals.stream_busy_ns = timeline.stream_busy_ns;
    return totals;
}

}  // namespace

StepTotals stepTotals(const Program& program, const Timeline& timeline) {
    StepTotals totals = timelineTotals(timeline);
    addTaskTimes(program, timeline, totals, nullptr);
    return totals;
}

void setStepFigures(const StepTotals& totals, double model_flops, double hardware_flops, double tokens,
                    double peak_flops, StepSummary& out) {
    const int64_t step_ns = totals.step_ns;
    const int64_t compute_ns = totals.stream_busy_ns[static_cast<int>(Stream::Compute)];
    out.step_s = static_cast<double>(step_ns) / kNsPerS;
    out.compute_s = static_cast<double>(compute_ns) / kNsPerS;
    out.exposed_comm_s = static_cast<double>(std::max<int64_t>(0, step_ns - compute_ns)) / kNsPerS;
    for (int s = 0; s < kStreamCount; ++s) {
        out.stream_busy_s[s] = static_cast<double>(totals.stream_busy_ns[s]) / kNsPerS;
    }
    out.all_gather_s = static_cast<double>(totals.all_gather_ns) / kNsPerS;
    out.reduce_scatter_s = static_cast<double>(totals.reduce_scatter_ns) / kNsPerS;
    out.all_reduce_s = static_cast<double>(totals.all_reduce_ns) / kNsPerS;
    out.peak_flops = peak_flops;
    if (step_ns > 0 && peak_flops > 0) {
        out.mfu = model_flops / (out.step_s * peak_flops);
        out.hfu = hardware_flops / (out.step_s * peak_flops);
    } else {
        out.mfu = out.hfu = 0;
    }
    out.tokens_per_s_per_gpu = step_ns > 0 ? tokens / out.step_s : 0;
}

void summarizeStep(const Program& program, const Timeline& timeline, const TimedMemory& memory,
                   double peak_flops, StepSummary& out, bool per_unit) {
    StepTotals totals = timelineTotals(timeline);
    if (per_unit) out.units.assign(program.units.size(), UnitTime{});
    addTaskTimes(program, timeline, totals, per_unit ? &out.units : nullptr);
    setStepFigures(totals, program.model_flops_per_step, program.hardware_flops_per_step,
                   program.rankTokens(program.micro_batches),
                   peak_flops, out);
    out.peak_bytes = memory.peak_bytes;
    out.peak_task = memory.peak_task;
    out.at_peak = memory.at_peak;
}

StepSummary summarize(const Program& program, const Timeline& timeline, const TimedMemory& memory,
                      double peak_flops) {
    StepSummary s;
    summarizeStep(program, timeline, memory, peak_flops, s, true);
    return s;
}

nlohmann::json summaryReportJson(const Program& program, const StepSummary& s) {
    nlohmann::json j;
    j["step_s"] = s.step_s;
    j["compute_s"] = s.compute_s;
    j["exposed_comm_s"] = s.exposed_comm_s;
    j["comm_s"] = {{"all_gather", s.all_gather_s}, {"reduce_scatter", s.reduce_scatter_s}, {"all_reduce", s.all_reduce_s}};
    j["mfu"] = s.mfu;
    j["hfu"] = s.hfu;
    j["flop_conventions"] = {{"mfu", kMfuConvention}, {"hfu", kHfuConvention}};
    j["tokens_per_s_per_gpu"] = s.tokens_per_s_per_gpu;
    j["peak_flops"] = s.peak_flops;
    j["peak_bytes"] = s.peak_bytes;
    j["peak_task"] = s.peak_task >= 0 ? program.taskLabel(s.peak_task) : std::string("(initial)");
    nlohmann::json at_peak = nlohmann::json::object();
    for (int c = 0; c < kMemCategoryCount; ++c) {
        at_peak[std::string(categoryName(static_cast<MemCategory>(c)))] = s.at_peak[c];
    }
    j["at_peak_bytes"] = at_peak;
    nlohmann::json streams = nlohmann::json::object();
    for (int st = 0; st < kStreamCount; ++st) {
        if (s.stream_busy_s[st] > 0) streams[std::string(streamName(static_cast<Stream>(st)))] = s.stream_busy_s[st];
    }
    j["stream_busy_s"] = streams;
    nlohmann::json units = nlohmann::json::array();
    for (size_t u = 0; u < s.units.size() && u < program.units.size(); ++u) {
        const UnitTime& t = s.units[u];
        units.push_back({{"unit", program.units[u].name},
                         {"compute_s", static_cast<double>(t.compute_ns) / 1e9},
                         {"all_gather_s", static_cast<double>(t.all_gather_ns) / 1e9},
                         {"reduce_scatter_s", static_cast<double>(t.reduce_scatter_ns) / 1e9},
                         {"all_reduce_s", static_cast<double>(t.all_reduce_ns) / 1e9},
                         {"host_copy_s", static_cast<double>(t.host_copy_ns) / 1e9}});
    }
    j["units"] = units;
    return j;
}

CommTotals communicationTotals(const Program& program) {
    CommTotals c;
    for (const Task& t : program.tasks) {
        switch (t.kind) {
            case TaskKind::AllGather: c.all_gather_bytes += t.comm_bytes; break;
            case TaskKind::ReduceScatter: c.reduce_scatter_bytes += t.comm_bytes; break;
            case TaskKind::AllReduce: c.all_reduce_bytes += t.comm_bytes; break;
            default: break;
        }
    }
    return c;
}

}  // namespace shardcast::core
