#include "core/program/program_io.hpp"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/base/json_text.hpp"
#include "core/model/model_io.hpp"
#include "core/program/program_check.hpp"

namespace shardcast::core {

using nlohmann::json;

namespace {

constexpr std::string_view kDocumentKind = "program";

json spanJson(Span s) { return json::array({s.offset, s.count}); }

json collectiveJson(const UnitCollective& c) {
    return json{{"bytes", c.bytes}, {"group_size", c.group_size}, {"group_nodes", c.group_nodes}};
}

json unitJson(const UnitInfo& u) {
    return json{{"name", u.name},
                {"is_root", u.is_root},
                {"reshard_after_forward", u.reshard_after_forward},
                {"blocks", u.blocks},
                {"params", u.params},
                {"trainable_params", u.trainable_params},
                {"sharded_bytes", u.sharded_bytes},
                {"unsharded_bytes", u.unsharded_bytes},
                {"grad_shard_bytes", u.grad_shard_bytes},
                {"fwd_flops", u.fwd_flops},
                {"activation_bytes", u.activation_bytes},
                {"unshard_in_flight_bytes", u.unshard_in_flight_bytes},
                {"unshard_wait_bytes", u.unshard_wait_bytes},
                {"unsharded_param_bytes", u.unsharded_param_bytes},
                {"post_forward_shard_bytes", u.post_forward_shard_bytes},
                {"reduce_scatter_input_bytes", u.reduce_scatter_input_bytes},
                {"no_sync_grad_bytes", u.no_sync_grad_bytes},
                {"all_gather", collectiveJson(u.all_gather)},
                {"all_gather_bwd", collectiveJson(u.all_gather_bwd)},
                {"reduce_scatter", collectiveJson(u.reduce_scatter)},
                {"all_reduce", collectiveJson(u.all_reduce)}};
}

json groupJson(const ProcessGroup& g) {
    return json{{"kind", groupKindName(g.kind)}, {"size", g.size}, {"stride", g.stride}, {"nodes", g.nodes}};
}

json taskJson(const Task& t) {
    json j{{"kind", taskKindName(t.kind)},
                {"stream", streamName(t.stream)},
                {"micro_batch", t.micro_batch},
                {"unit", t.unit},
                {"flops", t.flops},
                {"hbm_bytes", t.hbm_bytes},
                {"comm_bytes", t.comm_bytes},
                {"group", t.group},
                {"group_size", t.group_size},
                {"group_nodes", t.group_nodes},
                {"dtype", dtypeName(t.dtype)},
                {"host_blocks", t.host_blocks},
                {"host_wait", t.host_wait},
                {"deps", spanJson(t.deps)},
                {"mem_start", spanJson(t.mem_start)},
                {"mem_peak", spanJson(t.mem_peak)},
                {"mem_end", spanJson(t.mem_end)},
                {"ops", spanJson(t.ops)}};
    if (t.peer != 0) j["peer"] = t.peer;  // P2P only: other documents stay as they were
    if (t.chunk != 0) j["chunk"] = t.chunk;  // Interleaved1F1B only
    return j;
}

json memJson(const MemEvent& e) {
    return json{{"bytes", e.bytes},
                {"category", categoryName(e.category)},
                {"timed_after", e.timed_after},
                {"buffer", e.buffer},
                {"stream", streamName(e.stream)}};
}

json opJson(const OpShape& o) {
    if (isTpCollective(o.kind)) {
        return json{{"kind", opShapeKindName(o.kind)}, {"dtype", dtypeName(o.dtype)}, {"bytes", o.bytes},
                    {"group", o.group}, {"group_size", o.group_size}, {"group_nodes", o.group_nodes},
                    {"overlap", o.overlap}};
    }
    return json{{"kind", opShapeKindName(o.kind)},
                {"dtype", dtypeName(o.dtype)},
                {"causal", o.causal},
                {"m", o.m},
                {"n", o.n},
                {"k", o.k},
                {"batch", o.batch},
                {"heads", o.heads},
                {"kv_heads", o.kv_heads},
                {"head_dim", o.head_dim},
                {"seq", o.seq},
                {"bytes", o.bytes},
                {"flops", o.flops}};
}

// "one of a, b, c" over the names of an enum's `count` values.
template <class E, class NameOf>
std::string namesOf(int count, NameOf nameOf) {
    std::string out = "one of ";
    for (int i = 0; i < count; ++i) {
        if (i > 0) out += ", ";
        out += nameOf(static_cast<E>(i));
    }
    return out;
}

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Reads fields of the document, keeping the first error; every error names `where` and the
// field's path ("tasks[17].kind").
class Reader {
public:
    explicit Reader(std::string where) : m_where(std::move(where)) {}

    bool failed() const { return m_error.has_value(); }
    const Error& error() const { return *m_error; }
    void fail(const std::string& field, const std::string& what) {
        if (!m_error) m_error = makeError(m_where + ": field '" + field + "' " + what);
    }

    // `j` must be an object with exactly these keys (all of them required).
    // Every key of `keys` must be there; `optional_keys` may be.
    bool object(const json& j, const std::string& path, std::initializer_list<const char*> keys,
                std::initializer_list<const char*> optional_keys = {}) {
        if (failed()) return false;
        if (!j.is_object()) {
            fail(path, "must be an object");
            return false;
        }
        for (const char* key : keys) {
            if (!j.contains(key)) {
                fail(join(path, key), "is missing");
                return false;
            }
        }
        for (auto it = j.begin(); it != j.end(); ++it) {
            bool known = false;
            for (const char* key : keys) known = known || it.key() == key;
            for (const char* key : optional_keys) known = known || it.key() == key;
            if (!known) {
                std::string list;
                for (const char* key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
                for (const char* key : optional_keys) list += ", " + std::string(key);
                fail(join(path, it.key()), "is not a field of this object; fields: " + list);
                return false;
            }
        }
        return true;
    }

    const json* array(const json& obj, const std::string& path, const char* key) {
        const json& v = obj.at(key);
        if (!v.is_array()) {
            fail(join(path, key), "must be an array");
            return nullptr;
        }
        return &v;
    }

    template <class T>
    void integer(const json& obj, const std::string& path, const char* key, T& out, int64_t lo, int64_t hi) {
        integerValue(obj.at(key), join(path, key), out, lo, hi);
    }
    template <class T>
    void integerValue(const json& v, const std::string& field, T& out, int64_t lo, int64_t hi) {
        if (failed()) return;
        const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kInt64Max);
        if (!v.is_number_integer() || too_big || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
            fail(field, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
                            jsonExcerpt(v));
            return;
        }
        out = static_cast<T>(v.get<int64_t>());
    }

    // A finite non-negative number.
    void number(const json& obj, const std::string& path, const char* key, double& out) {
        if (failed()) return;
        const json& v = obj.at(key);
        if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
            fail(join(path, key), "must be a non-negative number, got " + jsonExcerpt(v));
            return;
        }
        out = v.get<double>();
    }

    void boolean(const json& obj, const std::string& path, const char* key, bool& out) {
        if (failed()) return;
        const json& v = obj.at(key);
        if (!v.is_boolean()) {
            fail(join(path, key), "must be true or false, got " + jsonExcerpt(v));
            return;
        }
        out = v.get<bool>();
    }

    void text(const json& obj, const std::string& path, const char* key, std::string& out) {
        if (failed()) return;
        const json& v = obj.at(key);
        if (!v.is_string()) {
            fail(join(path, key), "must be a string, got " + jsonExcerpt(v));
            return;
        }
        out = v.get<std::string>();
    }

    // An enum by name: `parse` maps a name to the value, `allowed` lists the names.
    template <class E, class Parse>
    void name(const json& obj, const std::string& path, const char* key, E& out, Parse parse,
              const std::string& allowed) {
        if (failed()) return;
        const json& v = obj.at(key);
        std::optional<E> parsed;
        if (v.is_string()) parsed = parse(v.get<std::string>());
        if (!parsed) {
            fail(join(path, key), "must be " + allowed + ", got " + jsonExcerpt(v));
            return;
        }
        out = *parsed;
    }

    void span(const json& obj, const std::string& path, const char* key, Span& out) {
        if (failed()) return;
        const json& v = obj.at(key);
        const std::string field = join(path, key);
        if (!v.is_array() || v.size() != 2) {
            fail(field, "must be [offset, count], got " + jsonExcerpt(v));
            return;
        }
        constexpr int64_t kMax = std::numeric_limits<uint32_t>::max();
        integerValue(v[0], field + "[0]", out.offset, 0, kMax);
        integerValue(v[1], field + "[1]", out.count, 0, kMax);
    }

    static std::string join(const std::string& path, const std::string& key) {
        return path.empty() ? key : path + "." + key;
    }
    static std::string item(const char* array, size_t i) { return std::string(array) + "[" + std::to_string(i) + "]"; }

private:
    std::string m_where;
    std::optional<Error> m_error;
};

void readCollective(Reader& r, const json& j, const std::string& at, UnitCollective& c) {
    if (!r.object(j, at, {"bytes", "group_size", "group_nodes"})) return;
    r.integer(j, at, "bytes", c.bytes, 0, kInt64Max);
    r.integer(j, at, "group_size", c.group_size, 0, kInt32Max);
    r.integer(j, at, "group_nodes", c.group_nodes, 0, kInt32Max);
}

void readUnit(Reader& r, const json& j, const std::string& at, UnitInfo& u) {
    if (!r.object(j, at, {"name", "is_root", "reshard_after_forward", "blocks", "params", "trainable_params",
                          "sharded_bytes", "unsharded_bytes", "grad_shard_bytes", "fwd_flops", "activation_bytes",
                          "unshard_in_flight_bytes", "unshard_wait_bytes", "unsharded_param_bytes",
                          "post_forward_shard_bytes", "reduce_scatter_input_bytes", "no_sync_grad_bytes", "all_gather",
                          "all_gather_bwd", "reduce_scatter", "all_reduce"}))
        return;
    r.integer(j, at, "unshard_in_flight_bytes", u.unshard_in_flight_bytes, 0, kInt64Max);
    r.integer(j, at, "unshard_wait_bytes", u.unshard_wait_bytes, 0, kInt64Max);
    r.integer(j, at, "unsharded_param_bytes", u.unsharded_param_bytes, 0, kInt64Max);
    r.integer(j, at, "post_forward_shard_bytes", u.post_forward_shard_bytes, 0, kInt64Max);
    r.integer(j, at, "reduce_scatter_input_bytes", u.reduce_scatter_input_bytes, 0, kInt64Max);
    r.integer(j, at, "no_sync_grad_bytes", u.no_sync_grad_bytes, 0, kInt64Max);
    readCollective(r, j.at("all_gather"), at + ".all_gather", u.all_gather);
    readCollective(r, j.at("all_gather_bwd"), at + ".all_gather_bwd", u.all_gather_bwd);
    readCollective(r, j.at("reduce_scatter"), at + ".reduce_scatter", u.reduce_scatter);
    readCollective(r, j.at("all_reduce"), at + ".all_reduce", u.all_reduce);
    r.text(j, at, "name", u.name);
    r.boolean(j, at, "is_root", u.is_root);
    r.boolean(j, at, "reshard_after_forward", u.reshard_after_forward);
    r.integer(j, at, "blocks", u.blocks, 0, kInt32Max);
    r.integer(j, at, "params", u.params, 0, kInt64Max);
    r.integer(j, at, "trainable_params", u.trainable_params, 0, kInt64Max);
    r.integer(j, at, "sharded_bytes", u.sharded_bytes, 0, kInt64Max);
    r.integer(j, at, "unsharded_bytes", u.unsharded_bytes, 0, kInt64Max);
    r.integer(j, at, "grad_shard_bytes", u.grad_shard_bytes, 0, kInt64Max);
    r.integer(j, at, "fwd_flops", u.fwd_flops, 0, kInt64Max);
    r.integer(j, at, "activation_bytes", u.activation_bytes, 0, kInt64Max);
}

void readGroup(Reader& r, const json& j, const std::string& at, ProcessGroup& g) {
    if (!r.object(j, at, {"kind", "size", "stride", "nodes"})) return;
    r.name(j, at, "kind", g.kind, parseGroupKind, namesOf<GroupKind>(kGroupKindCount, groupKindName));
    r.integer(j, at, "size", g.size, 1, kInt32Max);
    r.integer(j, at, "stride", g.stride, 1, kInt32Max);
    r.integer(j, at, "nodes", g.nodes, 1, kInt32Max);
}

void readTask(Reader& r, const json& j, const std::string& at, Task& t) {
    if (!r.object(j, at, {"kind", "stream", "micro_batch", "unit", "flops", "hbm_bytes", "comm_bytes", "group",
                          "group_size", "group_nodes", "dtype", "host_blocks", "host_wait", "deps", "mem_start",
                          "mem_peak", "mem_end", "ops"},
                  {"peer", "chunk"}))
        return;
    if (j.contains("peer")) r.integer(j, at, "peer", t.peer, -1, 1);
    if (j.contains("chunk")) r.integer(j, at, "chunk", t.chunk, 0, std::numeric_limits<int8_t>::max());
    r.name(j, at, "kind", t.kind, parseTaskKind, namesOf<TaskKind>(kTaskKindCount, taskKindName));
    r.name(j, at, "stream", t.stream, parseStream, namesOf<Stream>(kStreamCount, streamName));
    r.integer(j, at, "micro_batch", t.micro_batch, 0, std::numeric_limits<int16_t>::max());
    r.integer(j, at, "unit", t.unit, -1, kInt32Max);
    r.integer(j, at, "flops", t.flops, 0, kInt64Max);
    r.integer(j, at, "hbm_bytes", t.hbm_bytes, 0, kInt64Max);
    r.integer(j, at, "comm_bytes", t.comm_bytes, 0, kInt64Max);
    r.integer(j, at, "group", t.group, -1, kInt32Max);
    r.integer(j, at, "group_size", t.group_size, 0, kInt32Max);
    r.integer(j, at, "group_nodes", t.group_nodes, 0, kInt32Max);
    r.name(j, at, "dtype", t.dtype, parseDType, "one of fp32, bf16, fp16, fp8, int64, uint8");
    r.boolean(j, at, "host_blocks", t.host_blocks);
    r.integer(j, at, "host_wait", t.host_wait, -1, kInt32Max);
    r.span(j, at, "deps", t.deps);
    r.span(j, at, "mem_start", t.mem_start);
    r.span(j, at, "mem_peak", t.mem_peak);
    r.span(j, at, "mem_end", t.mem_end);
    r.span(j, at, "ops", t.ops);
}

void readMemEvent(Reader& r, const json& j, const std::string& at, MemEvent& e) {
    if (!r.object(j, at, {"bytes", "category", "timed_after", "buffer", "stream"})) return;
    r.integer(j, at, "bytes", e.bytes, -kInt64Max, kInt64Max);
    std::string names;
    for (int c = 0; c < kMemCategoryCount; ++c) names += (c ? ", " : "one of ") + std::string(categoryName(static_cast<MemCategory>(c)));
    r.name(j, at, "category", e.category, parseCategory, names);
    r.integer(j, at, "timed_after", e.timed_after, -1, kInt32Max);
    r.integer(j, at, "buffer", e.buffer, -1, kInt32Max);
    r.name(j, at, "stream", e.stream, parseStream, namesOf<Stream>(kStreamCount, streamName));
}

void readOp(Reader& r, const json& j, const std::string& at, OpShape& o) {
    // A TP collective carries its size and group; a kernel its shape.
    const bool collective = j.is_object() && j.contains("kind") && j.at("kind").is_string() &&
                            parseOpShapeKind(j.at("kind").get<std::string>()).has_value() &&
                            isTpCollective(*parseOpShapeKind(j.at("kind").get<std::string>()));
    if (collective) {
        if (!r.object(j, at, {"kind", "dtype", "bytes", "group", "group_size", "group_nodes", "overlap"})) return;
    } else if (!r.object(j, at, {"kind", "dtype", "causal", "m", "n", "k", "batch", "heads", "kv_heads", "head_dim",
                                 "seq", "bytes", "flops"})) {
        return;
    }
    r.name(j, at, "kind", o.kind, parseOpShapeKind, namesOf<OpShapeKind>(kOpShapeKindCount, opShapeKindName));
    r.name(j, at, "dtype", o.dtype, parseDType, "one of fp32, bf16, fp16, fp8, int64, uint8");
    r.integer(j, at, "bytes", o.bytes, 0, kInt64Max);
    if (collective) {
        r.integer(j, at, "group", o.group, 0, kInt32Max);
        r.integer(j, at, "group_size", o.group_size, 1, kInt32Max);
        r.integer(j, at, "group_nodes", o.group_nodes, 1, kInt32Max);
        r.integer(j, at, "overlap", o.overlap, 0, 2);
        return;
    }
    r.boolean(j, at, "causal", o.causal);
    r.integer(j, at, "m", o.m, 0, kInt64Max);
    r.integer(j, at, "n", o.n, 0, kInt64Max);
    r.integer(j, at, "k", o.k, 0, kInt64Max);
    r.integer(j, at, "batch", o.batch, 0, kInt64Max);
    r.integer(j, at, "heads", o.heads, 0, kInt32Max);
    r.integer(j, at, "kv_heads", o.kv_heads, 0, kInt32Max);
    r.integer(j, at, "head_dim", o.head_dim, 0, kInt32Max);
    r.integer(j, at, "seq", o.seq, 0, kInt64Max);
    r.integer(j, at, "flops", o.flops, 0, kInt64Max);
}

// Reads the array `key` of `j` element by element.
template <class T, class ReadOne>
void readArray(Reader& r, const json& j, const char* key, std::vector<T>& out, ReadOne readOne) {
    if (r.failed()) return;
    const json* a = r.array(j, "", key);
    if (!a) return;
    out.resize(a->size());
    for (size_t i = 0; i < a->size() && !r.failed(); ++i) readOne(r, (*a)[i], Reader::item(key, i), out[i]);
}

}  // namespace

json programToJson(const Program& p) {
    json j = documentHeader(kDocumentKind, kProgramFormatVersion);
    j["world_size"] = p.world_size;
    if (p.tp_size != 1) j["tp_size"] = p.tp_size;  // written when set: older documents stay as they were
    if (p.pp_size != 1) {
        j["pp_size"] = p.pp_size;
        j["pp_stage"] = p.pp_stage;
        if (p.pp_virtual != 1) j["pp_virtual"] = p.pp_virtual;
    }
    j["micro_batches"] = p.micro_batches;
    j["tokens_per_micro_batch"] = p.tokens_per_micro_batch;
    j["compute_dtype"] = dtypeName(p.compute_dtype);
    j["model_flops_per_step"] = p.model_flops_per_step;
    j["hardware_flops_per_step"] = p.hardware_flops_per_step;
    j["host_param_bytes"] = p.host_param_bytes;
    j["host_grad_bytes"] = p.host_grad_bytes;
    j["host_optimizer_bytes"] = p.host_optimizer_bytes;
    json initial = json::object();
    for (int c = 0; c < kMemCategoryCount; ++c) initial[std::string(categoryName(static_cast<MemCategory>(c)))] = p.initial[static_cast<size_t>(c)];
    j["initial"] = std::move(initial);
    j["buffer_count"] = p.buffer_count;
    json& units = j["units"] = json::array();
    for (const UnitInfo& u : p.units) units.push_back(unitJson(u));
    json& groups = j["groups"] = json::array();
    for (const ProcessGroup& g : p.groups) groups.push_back(groupJson(g));
    json& tasks = j["tasks"] = json::array();
    for (const Task& t : p.tasks) tasks.push_back(taskJson(t));
    j["deps"] = p.deps;
    json& mem = j["mem"] = json::array();
    for (const MemEvent& e : p.mem) mem.push_back(memJson(e));
    json& ops = j["ops"] = json::array();
    for (const OpShape& o : p.ops) ops.push_back(opJson(o));
    j["tensor_bytes"] = p.tensor_bytes;
    json& spans = j["buffer_tensors"] = json::array();
    for (const Span& s : p.buffer_tensors) spans.push_back(json::array({s.offset, s.count}));
    return j;
}

Result<Program> programFromJson(const json& j, const std::string& where) {
    if (auto s = checkDocumentHeader(j, kDocumentKind, kProgramFormatVersion, where); !s) return s.error();
    Reader r(where);
    Program p;
    if (!r.object(j, "", {"format", "version", "world_size", "micro_batches", "tokens_per_micro_batch", "compute_dtype",
                          "model_flops_per_step", "hardware_flops_per_step", "host_param_bytes", "host_grad_bytes",
                          "host_optimizer_bytes", "initial", "buffer_count", "units", "groups", "tasks", "deps", "mem",
                          "ops", "tensor_bytes", "buffer_tensors"},
                  {"tp_size", "pp_size", "pp_stage", "pp_virtual"}))
        return r.error();
    r.integer(j, "", "world_size", p.world_size, 1, kInt32Max);
    if (j.contains("tp_size")) r.integer(j, "", "tp_size", p.tp_size, 1, kInt32Max);
    if (j.contains("pp_size")) r.integer(j, "", "pp_size", p.pp_size, 1, kInt32Max);
    if (j.contains("pp_stage")) r.integer(j, "", "pp_stage", p.pp_stage, 0, kInt32Max);
    if (j.contains("pp_virtual")) r.integer(j, "", "pp_virtual", p.pp_virtual, 1, std::numeric_limits<int8_t>::max());
    r.integer(j, "", "micro_batches", p.micro_batches, 1, std::numeric_limits<int16_t>::max());
    r.integer(j, "", "tokens_per_micro_batch", p.tokens_per_micro_batch, 0, kInt64Max);
    r.name(j, "", "compute_dtype", p.compute_dtype, parseDType, "one of fp32, bf16, fp16, fp8, int64, uint8");
    r.number(j, "", "model_flops_per_step", p.model_flops_per_step);
    r.number(j, "", "hardware_flops_per_step", p.hardware_flops_per_step);
    r.integer(j, "", "host_param_bytes", p.host_param_bytes, 0, kInt64Max);
    r.integer(j, "", "host_grad_bytes", p.host_grad_bytes, 0, kInt64Max);
    r.integer(j, "", "host_optimizer_bytes", p.host_optimizer_bytes, 0, kInt64Max);
    r.integer(j, "", "buffer_count", p.buffer_count, 0, kInt32Max);
    if (!r.failed()) {
        const json& initial = j.at("initial");
        std::vector<std::string> names;
        for (int c = 0; c < kMemCategoryCount; ++c) names.emplace_back(categoryName(static_cast<MemCategory>(c)));
        if (!initial.is_object() || initial.size() != names.size()) {
            r.fail("initial", "must be an object with the bytes of each category (" + std::to_string(names.size()) +
                                  " categories)");
        }
        for (int c = 0; c < kMemCategoryCount && !r.failed(); ++c) {
            const std::string& name = names[static_cast<size_t>(c)];
            if (!initial.contains(name)) {
                r.fail("initial." + name, "is missing");
                break;
            }
            r.integerValue(initial.at(name), "initial." + name, p.initial[static_cast<size_t>(c)], 0, kInt64Max);
        }
    }
    readArray(r, j, "units", p.units, readUnit);
    readArray(r, j, "groups", p.groups, readGroup);
    readArray(r, j, "tasks", p.tasks, readTask);
    readArray(r, j, "deps", p.deps, [](Reader& rr, const json& v, const std::string& at, int32_t& d) {
        rr.integerValue(v, at, d, 0, kInt32Max);
    });
    readArray(r, j, "mem", p.mem, readMemEvent);
    readArray(r, j, "ops", p.ops, readOp);
    readArray(r, j, "tensor_bytes", p.tensor_bytes, [](Reader& rr, const json& v, const std::string& at, int64_t& b) {
        rr.integerValue(v, at, b, 1, kInt64Max);
    });
    readArray(r, j, "buffer_tensors", p.buffer_tensors, [](Reader& rr, const json& v, const std::string& at, Span& s) {
        if (!v.is_array() || v.size() != 2) {
            rr.fail(at, "must be [offset, count] into tensor_bytes");
            return;
        }
        rr.integerValue(v[0], at + "[0]", s.offset, 0, kInt32Max);
        rr.integerValue(v[1], at + "[1]", s.count, 0, kInt32Max);
    });
    if (r.failed()) return r.error();
    if (auto s = validateProgram(p); !s) return makeError(where + ": " + s.error().message);
    return p;
}

Status writeProgramFile(const std::filesystem::path& path, const Program& program) {
    return writeFileAtomically(path, programToJson(program).dump() + "\n");
}

Result<Program> loadProgramFile(const std::filesystem::path& path) {
    auto j = readJsonFile(path);
    if (!j) return j.error();
    return programFromJson(*j, path.string());
}

}  // namespace shardcast::core
