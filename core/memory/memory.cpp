#include "core/memory/memory.hpp"

#include <cassert>

namespace shardcast::core {

int64_t total(const CategoryBytes& b) {
    int64_t sum = 0;
    for (int64_t v : b) sum += v;
    return sum;
}

namespace {

struct Replay {
    MemoryReport& out;
    bool record;
    CategoryBytes cur{};
    int64_t cur_total = 0;

    void noteMax() {
        for (int c = 0; c < kMemCategoryCount; ++c) {
            if (cur[c] > out.max_per_category[c]) out.max_per_category[c] = cur[c];
        }
    }
    void noteState(int32_t task) {
        if (cur_total > out.peak_bytes) {
            out.peak_bytes = cur_total;
            out.peak_task = task;
            out.at_peak = cur;
        }
        if (record) out.curve.push_back(MemorySample{task, cur});
    }
    // Every allocation can be a new peak, so the state is checked after each one.
    void apply(const MemEvent* ev, uint32_t n, int32_t task, int sign) {
        for (uint32_t i = 0; i < n; ++i) {
            const int64_t delta = sign * ev[i].bytes;
            int64_t& bytes = cur[index(ev[i].category)];
            bytes += delta;
            cur_total += delta;
            assert(bytes >= 0 && "a free without a matching allocation");
            if (delta > 0) {
                // Only this category grew: its maximum is the only one that can change.
                if (bytes > out.max_per_category[index(ev[i].category)]) out.max_per_category[index(ev[i].category)] = bytes;
                noteState(task);
            }
        }
    }
    // A transient set mixes allocations and frees that hold at one instant: note it as a whole.
    void transient(const MemEvent* ev, uint32_t n, int32_t task) {
        for (uint32_t i = 0; i < n; ++i) {
            cur[index(ev[i].category)] += ev[i].bytes;
            cur_total += ev[i].bytes;
        }
        noteMax();
        noteState(task);
        for (uint32_t i = 0; i < n; ++i) {
            cur[index(ev[i].category)] -= ev[i].bytes;
            cur_total -= ev[i].bytes;
        }
    }
};

}  // namespace

void replayMemory(const Program& program, MemoryReport& out, bool record_curve) {
    out.peak_bytes = 0;
    out.peak_task = -1;
    out.at_peak.fill(0);
    out.max_per_category.fill(0);
    out.curve.clear();
    Replay r{out, record_curve};
    r.cur = program.initial;
    r.cur_total = total(program.initial);
    r.noteMax();
    r.noteState(-1);
    const MemEvent* pool = program.mem.data();
    for (int32_t id = 0; id < program.size(); ++id) {
        const Task& t = program.tasks[static_cast<size_t>(id)];
        r.apply(pool + t.mem_start.offset, t.mem_start.count, id, +1);
        if (t.mem_peak.count) r.transient(pool + t.mem_peak.offset, t.mem_peak.count, id);
        r.apply(pool + t.mem_end.offset, t.mem_end.count, id, +1);
        if (record_curve && (t.mem_start.count || t.mem_end.count)) r.noteState(id);
    }
    // Model states as held when the optimizer steps (before zero_grad frees the gradients).
    out.model_states.params = program.initial[index(MemCategory::ShardedParam)] + program.host_param_bytes;
    out.model_states.optimizer = program.initial[index(MemCategory::OptState)] + program.host_optimizer_bytes;
    out.model_states.grads = out.max_per_category[index(MemCategory::ShardedGrad)] + program.host_grad_bytes;
}

EvalReplay replayEvalStep(const Program& program) {
    EvalReplay r;
    for (int32_t id = 0; id < program.size(); ++id) {
        const Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch == 0 && t.kind == TaskKind::Forward) r.last_forward_task = id;
    }
    if (r.last_forward_task < 0) return r;
    const auto activation = index(MemCategory::Activation);
    int64_t cur = total(program.initial);
    int64_t peak = cur;
    // Events other than Activation change the state; a span's Activation bytes (and, for the
    // transient peak, its other bytes) are returned: Activation first, the rest second.
    auto apply = [&](Span span, bool transient) {
        std::pair<int64_t, int64_t> added{0, 0};
        for (uint32_t i = 0; i < span.count; ++i) {
            const MemEvent& e = program.mem[span.offset + i];
            if (index(e.category) == activation) {
                added.first += e.bytes;
                continue;
            }
            added.second += e.bytes;
            if (!transient) {
                cur += e.bytes;
                peak = std::max(peak, cur);
            }
        }
        return added;
    };
    for (int32_t id = 0; id <= r.last_forward_task; ++id) {
        const Task& t = program.tasks[static_cast<size_t>(id)];
        if (t.micro_batch != 0) continue;
        const int64_t at_start = std::max<int64_t>(0, apply(t.mem_start, false).first);
        const auto [act_transient, other_transient] = apply(t.mem_peak, true);
        peak = std::max(peak, cur + at_start + std::max<int64_t>(0, act_transient + other_transient));
        const int64_t at_end = std::max<int64_t>(0, apply(t.mem_end, false).first);
        peak = std::max(peak, cur + at_start + at_end);
    }
    r.peak_bytes = peak;
    return r;
}

}  // namespace shardcast::core
