#include "core/program/program_check.hpp"

#include <string>
#include <vector>

namespace shardcast::core {
namespace {

enum class BufferState : uint8_t { Unused, Live, Freed };

struct BufferRecord {
    BufferState state = BufferState::Unused;
    int64_t bytes = 0;
    MemCategory category = MemCategory::Temp;
    Stream stream = Stream::Compute;
    int32_t task = -1;  // the task that allocated it
};

bool inPool(Span s, size_t pool) { return uint64_t{s.offset} + s.count <= pool; }

class Checker {
public:
    explicit Checker(const Program& p) : m_p(p) {}

    Status run() {
        if (auto s = checkHeader(); !s) return s;
        m_buffers.assign(static_cast<size_t>(m_p.buffer_count), BufferRecord{});
        m_cur = m_p.initial;
        for (int32_t id = 0; id < m_p.size(); ++id) {
            if (auto s = checkTask(id); !s) return s;
        }
        for (size_t b = 0; b < m_buffers.size(); ++b) {
            const BufferRecord& r = m_buffers[b];
            if (r.state != BufferState::Live) continue;
            return fail(r.task, "allocates buffer " + std::to_string(b) + " (" + std::to_string(r.bytes) + " B " +
                                    std::string(categoryName(r.category)) +
                                    ") that no task frees by the end of the step; every buffer must be freed so "
                                    "that the step ends in the initial state");
        }
        return Ok{};
    }

private:
    Status checkHeader() const {
        if (m_p.world_size < 1) return makeError("program: world_size must be at least 1, got " + std::to_string(m_p.world_size));
        if (m_p.tp_size < 1 || m_p.world_size % m_p.tp_size != 0)
            return makeError("program: tp_size " + std::to_string(m_p.tp_size) + " must be at least 1 and divide the world size " + std::to_string(m_p.world_size));
        if (m_p.pp_size < 1 || m_p.world_size % (int64_t{m_p.tp_size} * m_p.pp_size) != 0 || m_p.pp_stage < 0 ||
            m_p.pp_stage >= m_p.pp_size)
            return makeError("program: pp_size " + std::to_string(m_p.pp_size) + " must be at least 1 with tp_size x pp_size "
                             "dividing the world size " + std::to_string(m_p.world_size) + ", and pp_stage " +
                             std::to_string(m_p.pp_stage) + " must be one of its stages");
        if (m_p.pp_virtual < 1 || (m_p.pp_virtual > 1 && m_p.pp_size < 2))
            return makeError("program: pp_virtual " + std::to_string(m_p.pp_virtual) +
                             " must be at least 1, and 1 without pipeline ranks (pp_size 1)");
        if (m_p.micro_batches < 1)
            return makeError("program: micro_batches must be at least 1, got " + std::to_string(m_p.micro_batches));
        // Every buffer has at least one event, so more buffers than events is a corrupt count.
        if (m_p.buffer_count < 0 || static_cast<size_t>(m_p.buffer_count) > m_p.mem.size())
            return makeError("program: buffer_count " + std::to_string(m_p.buffer_count) + " must be in 0.." +
                             std::to_string(m_p.mem.size()) + " (the number of memory events)");
        for (int c = 0; c < kMemCategoryCount; ++c) {
            if (m_p.initial[static_cast<size_t>(c)] < 0)
                return makeError("program: initial " + std::string(categoryName(static_cast<MemCategory>(c))) +
                                 " is negative (" + std::to_string(m_p.initial[static_cast<size_t>(c)]) + " B)");
        }
        if (!m_p.buffer_tensors.empty() && m_p.buffer_tensors.size() != static_cast<size_t>(m_p.buffer_count))
            return makeError("program: buffer_tensors has " + std::to_string(m_p.buffer_tensors.size()) +
                             " spans; it must be empty or have one per buffer (" + std::to_string(m_p.buffer_count) + ")");
        for (size_t b = 0; b < m_p.buffer_tensors.size(); ++b) {
            const Span sp = m_p.buffer_tensors[b];
            if (!inPool(sp, m_p.tensor_bytes.size()))
                return makeError("program: buffer_tensors[" + std::to_string(b) + "] runs past tensor_bytes (" +
                                 std::to_string(m_p.tensor_bytes.size()) + " entries)");
            for (uint32_t k = 0; k < sp.count; ++k) {
                if (m_p.tensor_bytes[sp.offset + k] <= 0)
                    return makeError("program: tensor_bytes[" + std::to_string(sp.offset + k) + "] (a tensor of buffer " +
                                     std::to_string(b) + ") must be positive");
            }
        }
        for (size_t g = 0; g < m_p.groups.size(); ++g) {
            const ProcessGroup& pg = m_p.groups[g];
            const std::string at = "program: groups[" + std::to_string(g) + "] (" + std::string(groupKindName(pg.kind)) + ")";
            if (pg.size < 1 || pg.stride < 1 || pg.nodes < 1)
                return makeError(at + ": size, stride and nodes must be at least 1");
            if (m_p.world_size % (int64_t{pg.size} * pg.stride) != 0)
                return makeError(at + ": size " + std::to_string(pg.size) + " x stride " + std::to_string(pg.stride) +
                                 " does not divide the world size " + std::to_string(m_p.world_size));
        }
        return Ok{};
    }

    Span tensorSpan(int32_t buffer) const {
        return m_p.buffer_tensors.empty() ? Span{} : m_p.buffer_tensors[static_cast<size_t>(buffer)];
    }
    int64_t tensorSum(Span sp) const {
        int64_t sum = 0;
        for (uint32_t k = 0; k < sp.count; ++k) sum += m_p.tensor_bytes[sp.offset + k];
        return sum;
    }

    // "task 17 (RS layers.3)"; a task whose unit is out of range is named by its kind only.
    std::string name(int32_t id) const {
        const Task& t = m_p.tasks[static_cast<size_t>(id)];
        const bool unit_ok = t.unit >= -1 && t.unit < static_cast<int32_t>(m_p.units.size());
        return "task " + std::to_string(id) + " (" + (unit_ok ? m_p.taskLabel(id) : std::string(taskKindName(t.kind))) + ")";
    }
    Error fail(int32_t id, const std::string& what) const { return makeError(name(id) + ": " + what); }

    Status checkTask(int32_t id) {
        const Task& t = m_p.tasks[static_cast<size_t>(id)];
        if (t.unit < -1 || t.unit >= static_cast<int32_t>(m_p.units.size()))
            return fail(id, "unit " + std::to_string(t.unit) + " is out of range (-1.." + std::to_string(m_p.units.size() - 1) + ")");
        if (t.micro_batch < 0 || t.micro_batch >= m_p.micro_batches)
            return fail(id, "micro_batch " + std::to_string(t.micro_batch) + " is out of range (0.." +
                                std::to_string(m_p.micro_batches - 1) + ")");
        if (!inPool(t.deps, m_p.deps.size()))
            return fail(id, "deps span [" + std::to_string(t.deps.offset) + ", +" + std::to_string(t.deps.count) +
                                ") lies outside the deps pool (" + std::to_string(m_p.deps.size()) + ")");
        for (uint32_t i = 0; i < t.deps.count; ++i) {
            const int32_t d = m_p.deps[t.deps.offset + i];
            if (d < 0 || d >= id)
                return fail(id, "depends on task " + std::to_string(d) + ", which is not an earlier task (0.." +
                                    std::to_string(id - 1) + ")");
        }
        if (t.host_wait != -1 && (t.host_wait < 0 || t.host_wait >= id))
            return fail(id, "host_wait " + std::to_string(t.host_wait) + " is not an earlier task");
        if (auto s = checkGroup(id, t); !s) return s;
        const Span spans[] = {t.mem_start, t.mem_peak, t.mem_end};
        const char* span_names[] = {"mem_start", "mem_peak", "mem_end"};
        for (int k = 0; k < 3; ++k) {
            if (!inPool(spans[k], m_p.mem.size()))
                return fail(id, std::string(span_names[k]) + " span [" + std::to_string(spans[k].offset) + ", +" +
                                    std::to_string(spans[k].count) + ") lies outside the mem pool (" +
                                    std::to_string(m_p.mem.size()) + ")");
        }
        if (auto s = checkOps(id, t); !s) return s;
        if (auto s = applyEvents(id, t.mem_start, "mem_start"); !s) return s;
        if (auto s = applyPeak(id, t); !s) return s;
        return applyEvents(id, t.mem_end, "mem_end");
    }

    Status checkGroup(int32_t id, const Task& t) const {
        if (t.chunk < 0 || t.chunk >= m_p.pp_virtual)
            return fail(id, "chunk " + std::to_string(t.chunk) + " is not one of the rank's " +
                                std::to_string(m_p.pp_virtual) + " pipeline stages");
        if (isP2P(t.kind)) {
            const int32_t to = m_p.stageOf(t) + t.peer;
            if (t.peer == 0 || to < 0 || to >= m_p.pipelineStages())
                return fail(id, "peer " + std::to_string(t.peer) + " is not a neighbouring stage of stage " +
                                    std::to_string(m_p.stageOf(t)) + " (of " + std::to_string(m_p.pipelineStages()) + ")");
            if (t.group < 0 || t.group >= static_cast<int32_t>(m_p.groups.size()) ||
                m_p.groups[static_cast<size_t>(t.group)].kind != GroupKind::Pipeline)
                return fail(id, "a pipeline send or receive must name the pipeline process group");
            return Ok{};
        }
        if (t.peer != 0) return fail(id, "names a peer stage but is not a pipeline send or receive");
        if (!isCollective(t.kind)) {
            if (t.group != -1) return fail(id, "names process group " + std::to_string(t.group) + " but is not a collective");
            return Ok{};
        }
        if (t.group < 0 || t.group >= static_cast<int32_t>(m_p.groups.size()))
            return fail(id, "process group " + std::to_string(t.group) + " does not exist (" +
                                std::to_string(m_p.groups.size()) + " groups)");
        const ProcessGroup& g = m_p.groups[static_cast<size_t>(t.group)];
        if (t.group_size != g.size)
            return fail(id, "group_size " + std::to_string(t.group_size) + " differs from the size " +
                                std::to_string(g.size) + " of its process group " + std::to_string(t.group) + " (" +
                                std::string(groupKindName(g.kind)) + ")");
        if (t.group_nodes != g.nodes)
            return fail(id, "group_nodes " + std::to_string(t.group_nodes) + " differs from the " +
                                std::to_string(g.nodes) + " nodes of its process group " + std::to_string(t.group));
        return Ok{};
    }

    // Compute tasks list at least one kernel, other tasks none; every kernel has real sizes.
    Status checkOps(int32_t id, const Task& t) const {
        if (!inPool(t.ops, m_p.ops.size()))
            return fail(id, "ops span [" + std::to_string(t.ops.offset) + ", +" + std::to_string(t.ops.count) +
                                ") lies outside the ops pool (" + std::to_string(m_p.ops.size()) + ")");
        if (!isCompute(t.kind)) {
            if (t.ops.count != 0) return fail(id, "lists " + std::to_string(t.ops.count) + " ops but is not a compute task");
            return Ok{};
        }
        if (t.ops.count == 0) return fail(id, "a compute task lists no ops (the kernels it stands for)");
        for (uint32_t i = 0; i < t.ops.count; ++i) {
            const OpShape& o = m_p.ops[t.ops.offset + i];
            const std::string at = "ops[" + std::to_string(i) + "] (" + std::string(opShapeKindName(o.kind)) + ")";
            if (static_cast<int>(o.kind) >= kOpShapeKindCount) return fail(id, "ops[" + std::to_string(i) + "]: the kind is not valid");
            switch (o.kind) {
                case OpShapeKind::Gemm:
                    if (o.m < 1 || o.n < 1 || o.k < 1 || o.batch < 1)
                        return fail(id, at + ": m, n, k and batch must be at least 1, got " + std::to_string(o.m) + " x " +
                                            std::to_string(o.n) + " x " + std::to_string(o.k) + " x " + std::to_string(o.batch));
                    break;
                case OpShapeKind::Attention:
                case OpShapeKind::AttentionBackward:
                    if (o.batch < 1 || o.heads < 1 || o.kv_heads < 1 || o.seq < 1 || o.head_dim < 1 || o.heads % o.kv_heads != 0)
                        return fail(id, at + ": batch, heads, kv_heads, seq and head_dim must be at least 1 and kv_heads "
                                             "must divide heads");
                    break;
                case OpShapeKind::Elementwise:
                    if (o.bytes < 0 || o.flops < 0) return fail(id, at + ": bytes and flops must not be negative");
                    break;
                case OpShapeKind::TpAllGather:
                case OpShapeKind::TpReduceScatter:
                case OpShapeKind::TpAllReduce: {
                    if (o.group < 0 || static_cast<size_t>(o.group) >= m_p.groups.size())
                        return fail(id, at + ": group " + std::to_string(o.group) + " is not one of the program's " +
                                            std::to_string(m_p.groups.size()) + " process groups");
                    const ProcessGroup& g = m_p.groups[static_cast<size_t>(o.group)];
                    if (g.size != o.group_size || g.nodes != o.group_nodes)
                        return fail(id, at + ": group_size and group_nodes must be those of group " + std::to_string(o.group));
                    if (o.bytes < 1) return fail(id, at + ": bytes must be at least 1");
                    break;
                }
            }
        }
        return Ok{};
    }

    // Common to every event: valid enums and ids.
    Status checkEvent(int32_t id, const MemEvent& e, const std::string& at) const {
        if (static_cast<int>(e.category) >= kMemCategoryCount) return fail(id, at + ": the category is not valid");
        if (static_cast<int>(e.stream) >= kStreamCount) return fail(id, at + ": the stream is not valid");
        if (e.bytes == 0) return fail(id, at + ": an event of 0 bytes");
        if (e.buffer < 0 || e.buffer >= m_p.buffer_count)
            return fail(id, at + ": buffer " + std::to_string(e.buffer) + " is out of range (0.." +
                                std::to_string(m_p.buffer_count - 1) + ")");
        if (e.timed_after != -1 && (e.timed_after < 0 || e.timed_after > id))
            return fail(id, at + ": timed_after " + std::to_string(e.timed_after) + " is not this task or an earlier one");
        return Ok{};
    }

    Status applyEvents(int32_t id, Span span, const char* span_name) {
        const Task& t = m_p.tasks[static_cast<size_t>(id)];
        for (uint32_t i = 0; i < span.count; ++i) {
            const MemEvent& e = m_p.mem[span.offset + i];
            const std::string at = std::string(span_name) + "[" + std::to_string(i) + "]";
            if (auto s = checkEvent(id, e, at); !s) return s;
            BufferRecord& r = m_buffers[static_cast<size_t>(e.buffer)];
            const std::string buf = "buffer " + std::to_string(e.buffer);
            if (e.bytes > 0) {
                if (r.state != BufferState::Unused)
                    return fail(id, at + " allocates " + buf + ", already allocated by task " + std::to_string(r.task) +
                                        " (buffer ids are allocated once)");
                if (e.stream != t.stream && e.stream != Stream::Compute)
                    return fail(id, at + " allocates " + buf + " owned by the " + std::string(streamName(e.stream)) +
                                        " stream, but the task runs on the " + std::string(streamName(t.stream)) +
                                        " stream (an allocation is owned by its task's stream or the compute stream)");
                if (auto sp = tensorSpan(e.buffer); sp.count > 0 && tensorSum(sp) != e.bytes)
                    return fail(id, at + " allocates " + buf + " with " + std::to_string(e.bytes) + " B, but its tensors (buffer_tensors) sum to " +
                                        std::to_string(tensorSum(sp)) + " B");
                r = BufferRecord{BufferState::Live, e.bytes, e.category, e.stream, id};
            } else {
                if (r.state != BufferState::Live)
                    return fail(id, at + " frees " + buf + ", which is " +
                                        (r.state == BufferState::Unused ? "not allocated yet" : "already freed"));
                if (-e.bytes != r.bytes)
                    return fail(id, at + " frees " + std::to_string(-e.bytes) + " B of " + buf + ", allocated with " +
                                        std::to_string(r.bytes) + " B by task " + std::to_string(r.task));
                if (e.category != r.category)
                    return fail(id, at + " frees " + buf + " as " + std::string(categoryName(e.category)) +
                                        ", allocated as " + std::string(categoryName(r.category)) + " by task " +
                                        std::to_string(r.task));
                if (e.stream != r.stream)
                    return fail(id, at + " frees " + buf + " as owned by the " + std::string(streamName(e.stream)) +
                                        " stream, allocated on the " + std::string(streamName(r.stream)) + " stream by task " +
                                        std::to_string(r.task));
                r.state = BufferState::Freed;
            }
            if (auto s = change(id, e, at); !s) return s;
        }
        return Ok{};
    }

    // Scratch buffers are allocated and freed inside the task; releases name live buffers.
    Status applyPeak(int32_t id, const Task& t) {
        const CategoryBytes before = m_cur;
        for (uint32_t i = 0; i < t.mem_peak.count; ++i) {
            const MemEvent& e = m_p.mem[t.mem_peak.offset + i];
            const std::string at = "mem_peak[" + std::to_string(i) + "]";
            if (auto s = checkEvent(id, e, at); !s) return s;
            BufferRecord& r = m_buffers[static_cast<size_t>(e.buffer)];
            const std::string buf = "buffer " + std::to_string(e.buffer);
            if (e.bytes > 0) {
                if (r.state != BufferState::Unused)
                    return fail(id, at + " uses " + buf + " as scratch, but task " + std::to_string(r.task) +
                                        " already allocated it (buffer ids are allocated once)");
                if (e.stream != t.stream)
                    return fail(id, at + " scratch " + buf + " is owned by the " + std::string(streamName(e.stream)) +
                                        " stream, but the task runs on the " + std::string(streamName(t.stream)) + " stream");
                r = BufferRecord{BufferState::Freed, e.bytes, e.category, e.stream, id};
            } else {
                if (r.state != BufferState::Live)
                    return fail(id, at + " releases part of " + buf + ", which is not live");
                if (-e.bytes > r.bytes || e.category != r.category || e.stream != r.stream)
                    return fail(id, at + " releases " + std::to_string(-e.bytes) + " B " +
                                        std::string(categoryName(e.category)) + " of " + buf + ", a " +
                                        std::to_string(r.bytes) + " B " + std::string(categoryName(r.category)) +
                                        " buffer on the " + std::string(streamName(r.stream)) + " stream");
            }
            if (auto s = change(id, e, at); !s) return s;
        }
        m_cur = before;
        return Ok{};
    }

    Status change(int32_t id, const MemEvent& e, const std::string& at) {
        int64_t& bytes = m_cur[static_cast<size_t>(index(e.category))];
        bytes += e.bytes;
        if (bytes < 0)
            return fail(id, at + " takes " + std::string(categoryName(e.category)) + " below zero (" +
                                std::to_string(bytes) + " B) in issue-order replay");
        return Ok{};
    }

    const Program& m_p;
    std::vector<BufferRecord> m_buffers;
    CategoryBytes m_cur{};
};

}  // namespace

Status validateProgram(const Program& program) {
    return Checker(program).run();
}

}  // namespace shardcast::core
