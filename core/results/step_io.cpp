#include "core/results/step_io.hpp"

#include <cmath>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"

namespace shardcast::core {

using json = nlohmann::json;

namespace {

// Reading helpers: each names `where` and the field, and says what would be valid.
class Reader {
public:
    Reader(const json& j, const std::string& where) : m_j(j), m_where(where) {}

    Result<const json*> field(std::string_view key, json::value_t type) const {
        const auto it = m_j.find(key);
        if (it == m_j.end()) return makeError(m_where + ": field '" + std::string(key) + "' is missing");
        const bool ok = type == json::value_t::number_integer ? it->is_number_integer()
                        : type == json::value_t::number_float ? it->is_number()
                                                              : it->type() == type;
        if (!ok) {
            return makeError(m_where + ": field '" + std::string(key) + "' must be " + typeName(type) + " (got " +
                             std::string(it->type_name()) + ")");
        }
        return &*it;
    }
    Result<int64_t> integer(std::string_view key, int64_t min) const {
        auto f = field(key, json::value_t::number_integer);
        if (!f) return f.error();
        if ((*f)->is_number_unsigned() && (*f)->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
            return makeError(m_where + ": field '" + std::string(key) + "' is out of range");
        }
        const int64_t v = (*f)->get<int64_t>();
        if (v < min) {
            return makeError(m_where + ": field '" + std::string(key) + "' must be >= " + std::to_string(min) +
                             " (got " + std::to_string(v) + ")");
        }
        return v;
    }
    Result<double> number(std::string_view key) const {
        auto f = field(key, json::value_t::number_float);
        if (!f) return f.error();
        const double v = (*f)->get<double>();
        if (!std::isfinite(v) || v < 0) {
            return makeError(m_where + ": field '" + std::string(key) + "' must be a finite number >= 0");
        }
        return v;
    }
    const std::string& where() const { return m_where; }

private:
    static std::string typeName(json::value_t t) {
        switch (t) {
            case json::value_t::number_integer: return "an integer";
            case json::value_t::number_float: return "a number";
            case json::value_t::array: return "an array";
            case json::value_t::object: return "an object";
            case json::value_t::string: return "a string";
            default: return "a value";
        }
    }
    const json& m_j;
    const std::string& m_where;
};

std::optional<Stream> parseStreamName(std::string_view name) {
    for (int s = 0; s < kStreamCount; ++s) {
        if (streamName(static_cast<Stream>(s)) == name) return static_cast<Stream>(s);
    }
    return std::nullopt;
}

std::string streamNames() {
    std::string s;
    for (int i = 0; i < kStreamCount; ++i) s += (i ? ", " : "") + std::string(streamName(static_cast<Stream>(i)));
    return s;
}

bool isInt64(const json& v) {
    return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
}

json categoriesToJson(const CategoryBytes& b) {
    json j = json::object();
    for (int c = 0; c < kMemCategoryCount; ++c) j[std::string(categoryName(static_cast<MemCategory>(c)))] = b[c];
    return j;
}

// Every category must be present once, as an integer (bytes may be negative only in a broken file:
// refused).
Status categoriesFromJson(const json& j, const std::string& where, CategoryBytes& out) {
    if (!j.is_object()) return makeError(where + " must be an object of bytes per memory category");
    out.fill(0);
    std::array<bool, kMemCategoryCount> seen{};
    for (const auto& [key, value] : j.items()) {
        const auto c = parseCategory(key);
        if (!c) return makeError(where + ": unknown memory category '" + key + "'");
        if (!isInt64(value) || value.get<int64_t>() < 0) {
            return makeError(where + "." + key + " must be a non-negative integer of bytes");
        }
        out[index(*c)] = value.get<int64_t>();
        seen[index(*c)] = true;
    }
    for (int c = 0; c < kMemCategoryCount; ++c) {
        if (!seen[c]) return makeError(where + ": category '" + std::string(categoryName(static_cast<MemCategory>(c))) + "' is missing");
    }
    return Ok{};
}

}  // namespace

json timelineToJson(const Timeline& timeline) {
    json j = documentHeader("timeline", kTimelineFormatVersion);
    j["step_ns"] = timeline.step_ns;
    json busy = json::object();
    for (int s = 0; s < kStreamCount; ++s) busy[std::string(streamName(static_cast<Stream>(s)))] = timeline.stream_busy_ns[s];
    j["stream_busy_ns"] = std::move(busy);
    json tasks = json::array();
    for (const TaskTime& t : timeline.tasks) tasks.push_back(json::array({t.start_ns, t.end_ns, streamName(t.stream)}));
    j["tasks"] = std::move(tasks);
    return j;
}

Result<Timeline> timelineFromJson(const json& j, const std::string& where) {
    if (auto s = checkDocumentHeader(j, "timeline", kTimelineFormatVersion, where); !s) return s.error();
    const Reader r(j, where);
    Timeline t;
    auto step = r.integer("step_ns", 0);
    if (!step) return step.error();
    t.step_ns = *step;
    auto busy = r.field("stream_busy_ns", json::value_t::object);
    if (!busy) return busy.error();
    for (const auto& [key, value] : (*busy)->items()) {
        const auto s = parseStreamName(key);
        if (!s) return makeError(where + ": stream_busy_ns: unknown stream '" + key + "'; valid: " + streamNames());
        if (!isInt64(value) || value.get<int64_t>() < 0) {
            return makeError(where + ": stream_busy_ns." + key + " must be a non-negative integer of ns");
        }
        t.stream_busy_ns[static_cast<size_t>(*s)] = value.get<int64_t>();
    }
    auto tasks = r.field("tasks", json::value_t::array);
    if (!tasks) return tasks.error();
    t.tasks.reserve((*tasks)->size());
    for (size_t i = 0; i < (*tasks)->size(); ++i) {
        const json& e = (**tasks)[i];
        const std::string at = where + ": tasks[" + std::to_string(i) + "]";
        if (!e.is_array() || e.size() != 3 || !isInt64(e[0]) || !isInt64(e[1]) || !e[2].is_string()) {
            return makeError(at + " must be [start_ns, end_ns, stream]");
        }
        TaskTime tt;
        tt.start_ns = e[0].get<int64_t>();
        tt.end_ns = e[1].get<int64_t>();
        if (tt.start_ns < 0 || tt.end_ns < tt.start_ns) return makeError(at + ": needs 0 <= start_ns <= end_ns");
        const auto s = parseStreamName(e[2].get<std::string>());
        if (!s) return makeError(at + ": unknown stream '" + e[2].get<std::string>() + "'; valid: " + streamNames());
        tt.stream = *s;
        t.tasks.push_back(tt);
    }
    return t;
}

json timedMemoryToJson(const TimedMemory& m) {
    json j = documentHeader("timed-memory", kTimedMemoryFormatVersion);
    j["peak_bytes"] = m.peak_bytes;
    j["peak_time_ns"] = m.peak_time_ns;
    j["peak_task"] = m.peak_task;
    j["at_peak"] = categoriesToJson(m.at_peak);
    j["max_per_category"] = categoriesToJson(m.max_per_category);
    json names = json::array();
    for (int c = 0; c < kMemCategoryCount; ++c) names.push_back(categoryName(static_cast<MemCategory>(c)));
    j["categories"] = std::move(names);
    json curve = json::array();
    for (const MemoryPoint& p : m.curve) {
        curve.push_back(json::array({p.time_ns, p.task, json(p.bytes)}));
    }
    j["curve"] = std::move(curve);
    return j;
}

Result<TimedMemory> timedMemoryFromJson(const json& j, const std::string& where) {
    if (auto s = checkDocumentHeader(j, "timed-memory", kTimedMemoryFormatVersion, where); !s) return s.error();
    const Reader r(j, where);
    TimedMemory m;
    auto peak = r.integer("peak_bytes", 0);
    if (!peak) return peak.error();
    m.peak_bytes = *peak;
    auto peak_time = r.integer("peak_time_ns", 0);
    if (!peak_time) return peak_time.error();
    m.peak_time_ns = *peak_time;
    auto peak_task = r.integer("peak_task", -1);
    if (!peak_task) return peak_task.error();
    if (*peak_task > INT32_MAX) return makeError(where + ": field 'peak_task' is out of range");
    m.peak_task = static_cast<int32_t>(*peak_task);
    for (auto [key, target] : {std::pair{"at_peak", &m.at_peak}, std::pair{"max_per_category", &m.max_per_category}}) {
        auto f = r.field(key, json::value_t::object);
        if (!f) return f.error();
        if (auto s = categoriesFromJson(**f, where + ": " + key, *target); !s) return s.error();
    }
    auto names = r.field("categories", json::value_t::array);
    if (!names) return names.error();
    bool same_order = (*names)->size() == static_cast<size_t>(kMemCategoryCount);
    for (int c = 0; same_order && c < kMemCategoryCount; ++c) {
        const json& n = (**names)[static_cast<size_t>(c)];
        same_order = n.is_string() && n.get<std::string>() == categoryName(static_cast<MemCategory>(c));
    }
    if (!same_order) {
        return makeError(where + ": field 'categories' must list the " + std::to_string(kMemCategoryCount) +
                         " memory categories in this shardcast's order");
    }
    auto curve = r.field("curve", json::value_t::array);
    if (!curve) return curve.error();
    m.curve.reserve((*curve)->size());
    for (size_t i = 0; i < (*curve)->size(); ++i) {
        const json& e = (**curve)[i];
        const std::string at = where + ": curve[" + std::to_string(i) + "]";
        if (!e.is_array() || e.size() != 3 || !isInt64(e[0]) || !isInt64(e[1]) || !e[2].is_array() ||
            e[2].size() != static_cast<size_t>(kMemCategoryCount)) {
            return makeError(at + " must be [time_ns, task, [" + std::to_string(kMemCategoryCount) + " byte counts]]");
        }
        MemoryPoint p;
        p.time_ns = e[0].get<int64_t>();
        const int64_t task = e[1].get<int64_t>();
        if (p.time_ns < 0 || task < -1 || task > INT32_MAX) return makeError(at + ": time_ns must be >= 0 and task >= -1");
        p.task = static_cast<int32_t>(task);
        for (int c = 0; c < kMemCategoryCount; ++c) {
            const json& b = e[2][static_cast<size_t>(c)];
            if (!isInt64(b) || b.get<int64_t>() < 0) return makeError(at + ": byte counts must be non-negative integers");
            p.bytes[c] = b.get<int64_t>();
        }
        m.curve.push_back(p);
    }
    return m;
}

json stepSummaryToJson(const StepSummary& s) {
    json j = documentHeader("step-summary", kStepSummaryFormatVersion);
    j["step_s"] = s.step_s;
    j["compute_s"] = s.compute_s;
    j["exposed_comm_s"] = s.exposed_comm_s;
    j["all_gather_s"] = s.all_gather_s;
    j["reduce_scatter_s"] = s.reduce_scatter_s;
    j["all_reduce_s"] = s.all_reduce_s;
    j["mfu"] = s.mfu;
    j["hfu"] = s.hfu;
    j["tokens_per_s_per_gpu"] = s.tokens_per_s_per_gpu;
    j["peak_flops"] = s.peak_flops;
    j["peak_bytes"] = s.peak_bytes;
    j["peak_task"] = s.peak_task;
    j["at_peak"] = categoriesToJson(s.at_peak);
    json busy = json::object();
    for (int st = 0; st < kStreamCount; ++st) busy[std::string(streamName(static_cast<Stream>(st)))] = s.stream_busy_s[st];
    j["stream_busy_s"] = std::move(busy);
    json units = json::array();
    for (const UnitTime& u : s.units) {
        units.push_back({{"compute_ns", u.compute_ns},
                         {"all_gather_ns", u.all_gather_ns},
                         {"reduce_scatter_ns", u.reduce_scatter_ns},
                         {"all_reduce_ns", u.all_reduce_ns},
                         {"host_copy_ns", u.host_copy_ns}});
    }
    j["units"] = std::move(units);
    return j;
}

Result<StepSummary> stepSummaryFromJson(const json& j, const std::string& where) {
    if (auto st = checkDocumentHeader(j, "step-summary", kStepSummaryFormatVersion, where); !st) return st.error();
    const Reader r(j, where);
    StepSummary s;
    const std::pair<const char*, double*> doubles[] = {
        {"step_s", &s.step_s},
        {"compute_s", &s.compute_s},
        {"exposed_comm_s", &s.exposed_comm_s},
        {"all_gather_s", &s.all_gather_s},
        {"reduce_scatter_s", &s.reduce_scatter_s},
        {"all_reduce_s", &s.all_reduce_s},
        {"mfu", &s.mfu},
        {"hfu", &s.hfu},
        {"tokens_per_s_per_gpu", &s.tokens_per_s_per_gpu},
        {"peak_flops", &s.peak_flops},
    };
    for (const auto& [key, target] : doubles) {
        auto v = r.number(key);
        if (!v) return v.error();
        *target = *v;
    }
    auto peak = r.integer("peak_bytes", 0);
    if (!peak) return peak.error();
    s.peak_bytes = *peak;
    auto peak_task = r.integer("peak_task", -1);
    if (!peak_task) return peak_task.error();
    if (*peak_task > INT32_MAX) return makeError(where + ": field 'peak_task' is out of range");
    s.peak_task = static_cast<int32_t>(*peak_task);
    auto at_peak = r.field("at_peak", json::value_t::object);
    if (!at_peak) return at_peak.error();
    if (auto st = categoriesFromJson(**at_peak, where + ": at_peak", s.at_peak); !st) return st.error();
    auto busy = r.field("stream_busy_s", json::value_t::object);
    if (!busy) return busy.error();
    for (const auto& [key, value] : (*busy)->items()) {
        const auto stream = parseStreamName(key);
        if (!stream) return makeError(where + ": stream_busy_s: unknown stream '" + key + "'; valid: " + streamNames());
        if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0) {
            return makeError(where + ": stream_busy_s." + key + " must be a finite number of seconds >= 0");
        }
        s.stream_busy_s[static_cast<size_t>(*stream)] = value.get<double>();
    }
    auto units = r.field("units", json::value_t::array);
    if (!units) return units.error();
    for (size_t i = 0; i < (*units)->size(); ++i) {
        const json& u = (**units)[i];
        const std::string at = where + ": units[" + std::to_string(i) + "]";
        if (!u.is_object()) return makeError(at + " must be an object");
        const Reader ur(u, at);
        UnitTime t;
        const std::pair<const char*, int64_t*> fields[] = {{"compute_ns", &t.compute_ns},
                                                           {"all_gather_ns", &t.all_gather_ns},
                                                           {"reduce_scatter_ns", &t.reduce_scatter_ns},
                                                           {"all_reduce_ns", &t.all_reduce_ns},
                                                           {"host_copy_ns", &t.host_copy_ns}};
        for (const auto& [key, target] : fields) {
            auto v = ur.integer(key, 0);
            if (!v) return v.error();
            *target = *v;
        }
        s.units.push_back(t);
    }
    return s;
}

}  // namespace shardcast::core
