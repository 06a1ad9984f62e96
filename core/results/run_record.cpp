#include "core/results/run_record.hpp"

#include "core/base/file_io.hpp"
#include "core/model/model_io.hpp"
#include "core/results/step_io.hpp"

namespace shardcast::core {

using json = nlohmann::json;

json runRecordToJson(const RunRecord& run) {
    json j = documentHeader("run", kRunFormatVersion);
    j["backend"] = run.backend;
    j["world_size"] = run.world_size;
    j["recorded_rank"] = run.recorded_rank;
    j["compute_note"] = run.compute_note;
    j["plan"] = run.plan;
    j["profile"] = run.profile;
    j["environment"] = run.environment;
    j["warmup_steps"] = run.warmup_steps;
    j["step_ns"] = run.step_ns;
    j["median_step"] = run.median_step;
    j["timeline"] = timelineToJson(run.timeline);
    j["memory"] = timedMemoryToJson(run.memory);
    if (!run.emulated_tasks.empty()) j["emulated_tasks"] = run.emulated_tasks;
    if (!run.unmeasured_tasks.empty()) j["unmeasured_tasks"] = run.unmeasured_tasks;
    if (run.memory_kind == RunRecord::MemoryKind::Total) j["memory_kind"] = "total";
    if (run.memory_kind == RunRecord::MemoryKind::Rise) j["memory_kind"] = "rise";
    if (run.reserved_peak_bytes > 0) {
        j["reserved"] = {{"peak_bytes", run.reserved_peak_bytes},
                         {"fragmentation_bytes", run.reserved_fragmentation_bytes},
                         {"source", run.reserved_source}};
    }
    if (run.memory_kind == RunRecord::MemoryKind::None) j["memory_kind"] = "none";
    if (!run.memory_total_curve.empty()) {
        json curve = json::array();
        for (const TotalPoint& p : run.memory_total_curve) curve.push_back(json::array({p.time_ns, p.bytes}));
        j["memory_total_curve"] = std::move(curve);
    }
    return j;
}

Result<RunRecord> runRecordFromJson(const json& j, const std::string& where) {
    if (auto s = checkDocumentHeader(j, "run", kRunFormatVersion, where); !s) return s.error();
    RunRecord run;
    auto field = [&](const char* key) -> Result<const json*> {
        const auto it = j.find(key);
        if (it == j.end()) return makeError(where + ": field '" + key + "' is missing");
        return &*it;
    };
    auto str = [&](const char* key, std::string& out) -> Status {
        auto f = field(key);
        if (!f) return f.error();
        if (!(*f)->is_string()) return makeError(where + ": field '" + std::string(key) + "' must be a string");
        out = (*f)->get<std::string>();
        return Ok{};
    };
    auto integer = [&](const char* key, int64_t min, int64_t max, int64_t& out) -> Status {
        auto f = field(key);
        if (!f) return f.error();
        if (!(*f)->is_number_integer() || (*f)->get<int64_t>() < min || (*f)->get<int64_t>() > max) {
            return makeError(where + ": field '" + std::string(key) + "' must be an integer from " + std::to_string(min) +
                             " to " + std::to_string(max));
        }
        out = (*f)->get<int64_t>();
        return Ok{};
    };
    if (auto s = str("backend", run.backend); !s) return s.error();
    if (auto s = str("compute_note", run.compute_note); !s) return s.error();
    int64_t v = 0;
    if (auto s = integer("world_size", 1, INT32_MAX, v); !s) return s.error();
    run.world_size = static_cast<int32_t>(v);
    if (auto s = integer("recorded_rank", 0, run.world_size - 1, v); !s) return s.error();
    run.recorded_rank = static_cast<int32_t>(v);
    if (auto s = integer("warmup_steps", 0, INT32_MAX, v); !s) return s.error();
    run.warmup_steps = static_cast<int32_t>(v);
    for (const char* key : {"plan", "profile", "environment"}) {
        auto f = field(key);
        if (!f) return f.error();
        if (!(*f)->is_object()) return makeError(where + ": field '" + std::string(key) + "' must be an object");
    }
    run.plan = j.at("plan");
    run.profile = j.at("profile");
    run.environment = j.at("environment");
    auto steps = field("step_ns");
    if (!steps) return steps.error();
    if (!(*steps)->is_array() || (*steps)->empty()) {
        return makeError(where + ": field 'step_ns' must be a non-empty array of step times in ns");
    }
    for (const json& s : **steps) {
        if (!s.is_number_integer() || s.get<int64_t>() < 0) {
            return makeError(where + ": step_ns holds a value that is not a non-negative integer of ns");
        }
        run.step_ns.push_back(s.get<int64_t>());
    }
    if (auto s = integer("median_step", 0, static_cast<int64_t>(run.step_ns.size()) - 1, v); !s) return s.error();
    run.median_step = static_cast<int32_t>(v);
    auto timeline = field("timeline");
    if (!timeline) return timeline.error();
    auto t = timelineFromJson(**timeline, where + ": timeline");
    if (!t) return t.error();
    run.timeline = std::move(*t);
    auto memory = field("memory");
    if (!memory) return memory.error();
    auto m = timedMemoryFromJson(**memory, where + ": memory");
    if (!m) return m.error();
    run.memory = std::move(*m);
    const auto taskList = [&](const char* key, std::vector<int32_t>& out) -> Status {
        const auto it = j.find(key);
        if (it == j.end()) return Ok{};
        const auto tasks = static_cast<int64_t>(run.timeline.tasks.size());
        if (!it->is_array()) return makeError(where + ": field '" + key + "' must be an array of task ids");
        int64_t previous = -1;
        for (const json& id : *it) {
            if (!id.is_number_integer() || id.get<int64_t>() <= previous || id.get<int64_t>() >= tasks) {
                return makeError(where + ": " + key + " must hold ascending task ids from 0 to " + std::to_string(tasks - 1) +
                                 " (the timeline's tasks)");
            }
            previous = id.get<int64_t>();
            out.push_back(static_cast<int32_t>(previous));
        }
        return Ok{};
    };
    if (auto s = taskList("emulated_tasks", run.emulated_tasks); !s) return s.error();
    if (auto s = taskList("unmeasured_tasks", run.unmeasured_tasks); !s) return s.error();
    if (const auto it = j.find("reserved"); it != j.end()) {
        const auto bytes = [&](const char* key, int64_t& out) -> Status {
            if (!it->is_object() || !it->contains(key) || !it->at(key).is_number_integer() || it->at(key).get<int64_t>() < 0) {
                return makeError(where + ": reserved." + key + " must be a non-negative integer of bytes");
            }
            out = it->at(key).get<int64_t>();
            return Ok{};
        };
        if (auto s = bytes("peak_bytes", run.reserved_peak_bytes); !s) return s.error();
        if (auto s = bytes("fragmentation_bytes", run.reserved_fragmentation_bytes); !s) return s.error();
        if (!it->contains("source") || !it->at("source").is_string()) return makeError(where + ": reserved.source must be a string");
        run.reserved_source = it->at("source").get<std::string>();
    }
    if (const auto it = j.find("memory_kind"); it != j.end()) {
        if (*it == "categories") {
            run.memory_kind = RunRecord::MemoryKind::Categories;
        } else if (*it == "total") {
            run.memory_kind = RunRecord::MemoryKind::Total;
        } else if (*it == "rise") {
            run.memory_kind = RunRecord::MemoryKind::Rise;
        } else if (*it == "none") {
            run.memory_kind = RunRecord::MemoryKind::None;
        } else {
            return makeError(where + ": field 'memory_kind' must be \"categories\", \"total\", \"rise\" or \"none\"");
        }
    }
    if (const auto it = j.find("memory_total_curve"); it != j.end()) {
        const std::string what = where + ": memory_total_curve";
        if (!it->is_array()) return makeError(what + " must be an array of [time_ns, bytes] pairs");
        if (it->size() > kMaxTotalCurvePoints) {
            return makeError(what + " has " + std::to_string(it->size()) + " points; at most " +
                             std::to_string(kMaxTotalCurvePoints) + " are allowed");
        }
        int64_t last = 0;
        for (size_t i = 0; i < it->size(); ++i) {
            const json& e = (*it)[i];
            const std::string at = what + "[" + std::to_string(i) + "]";
            if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number_integer()) {
                return makeError(at + " must be a pair [time_ns, bytes] of integers");
            }
            const int64_t time = e[0].get<int64_t>(), b = e[1].get<int64_t>();
            if (time < last) return makeError(at + ": time_ns must be >= 0 and not before the previous point's");
            if (b < 0) return makeError(at + ": bytes must be >= 0");
            last = time;
            run.memory_total_curve.push_back(TotalPoint{time, b});
        }
    }
    return run;
}

Result<RunRecord> loadRunRecord(const std::filesystem::path& path) {
    auto j = readJsonFile(path);
    if (!j) return j.error();
    return runRecordFromJson(*j, path.string());
}

CompareOptions compareOptionsFor(const RunRecord& run, int32_t top_tasks) {
    CompareOptions o;
    o.top_tasks = top_tasks;
    o.excluded_tasks = run.emulated_tasks;
    o.unmeasured_tasks = run.unmeasured_tasks;
    o.memory_categories = run.memory_kind == RunRecord::MemoryKind::Categories;
    o.memory_absolute = run.memory_kind != RunRecord::MemoryKind::None;
    o.memory_rise = run.memory_kind == RunRecord::MemoryKind::Rise;
    return o;
}

MemoryCurves comparableMemoryCurves(const Program& program, const TimedMemory& predicted, const RunRecord& run) {
    MemoryCurves out;
    if (run.memory_kind == RunRecord::MemoryKind::None) return out;
    int64_t steady = 0;
    if (run.memory_kind == RunRecord::MemoryKind::Rise) {
        for (const int64_t b : program.initial) steady += b;
    }
    out.predicted = totalCurve(predicted.curve, steady);
    out.measured = run.memory_total_curve.empty() ? totalCurve(run.memory.curve) : run.memory_total_curve;
    return out;
}

Status saveRunRecord(const std::filesystem::path& path, const RunRecord& run) {
    return writeFileAtomically(path, runRecordToJson(run).dump() + "\n");
}

}  // namespace shardcast::core
