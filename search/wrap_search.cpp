#include "search/wrap_search.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "core/memory/memory.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/simulator.hpp"

namespace shardcast::sim {
namespace {

using core::MemCategory;
using core::TaskKind;

// Time of compute work `compute_ns` sharing the GPU with a collective of `comm_ns` that starts
// with it: the compute runs `slowdown` times slower while the collective runs (as in the
// simulator's event loop), and the window ends when both are done.
double overlapNs(double compute_ns, double comm_ns, double slowdown) {
    if (comm_ns <= 0) return compute_ns;
    if (comm_ns >= compute_ns * slowdown) return comm_ns;
    return compute_ns + comm_ns * (1.0 - 1.0 / slowdown);
}

int64_t allocatedBytes(const core::Program& p, core::Span span) {
    int64_t s = 0;
    const core::MemEvent* e = p.memBegin(span);
    for (uint32_t k = 0; k < span.count; ++k) s += std::max<int64_t>(0, e[k].bytes);
    return s;
}

// The bytes a compute task's own work allocates and frees (activations, temporaries, the
// gradients autograd writes). Parameter and collective buffers, which the lowering may attach to
// the same task (a unit's post-forward reshard, say), come from core::UnitInfo instead.
int64_t workBytes(const core::Program& p, core::Span span) {
    int64_t s = 0;
    const core::MemEvent* e = p.memBegin(span);
    for (uint32_t k = 0; k < span.count; ++k) {
        switch (e[k].category) {
            case MemCategory::ShardedParam:
            case MemCategory::UnshardedParam:
            case MemCategory::AllGather:
            case MemCategory::ReduceScatter: break;
            default: s += e[k].bytes; break;
        }
    }
    return s;
}

// Applies one compute task's events to a relative running total and its peak.
void replayInto(const core::Program& p, const core::Task& t, int64_t& running, int64_t& peak) {
    running += workBytes(p, t.mem_start);
    peak = std::max(peak, running);
    if (t.mem_peak.count > 0) peak = std::max(peak, running + workBytes(p, t.mem_peak));
    running += workBytes(p, t.mem_end);
    peak = std::max(peak, running);
}

CollectiveGroup groupOf(const core::UnitCollective& c) { return CollectiveGroup{c.group_size, c.group_nodes}; }

// The block units' backward all-gathers of the first micro-batch that start on `timeline` before
// its first backward compute task ends; tasks after `last_forward` belong to the backward.
int gathersAheadOfBackward(const core::Program& p, const core::Timeline& timeline,
                           const std::vector<int32_t>& block_of_unit, int32_t last_forward) {
    int32_t first_backward = -1;
    for (int32_t id = last_forward + 1; id < p.size() && first_backward < 0; ++id) {
        const TaskKind k = p.tasks[static_cast<size_t>(id)].kind;
        if (k == TaskKind::Backward || k == TaskKind::Recompute) first_backward = id;
    }
    if (first_backward < 0) return 0;
    const int64_t turn_ns = timeline.tasks[static_cast<size_t>(first_backward)].end_ns;
    int ahead = 0;
    for (int32_t id = last_forward + 1; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        const bool block_gather = t.kind == TaskKind::AllGather && t.micro_batch == 0 && t.unit >= 0 &&
                                  block_of_unit[static_cast<size_t>(t.unit)] >= 0;
        if (block_gather && timeline.tasks[static_cast<size_t>(id)].start_ns < turn_ns) ++ahead;
    }
    return ahead;
}

// One plan's full evaluation through the shared planning chain, reusing its buffers between calls.
struct FullEvaluator {
    explicit FullEvaluator(const HardwareProfile& p, double headroom) : profile(p) {
        options.headroom = headroom;
        options.issue_order_memory = false;
        options.per_unit = false;
        // The search's figures are the allocated peak and the step (WrapEvaluation): the caching
        // allocator's replay would cost most of each evaluation and change neither.
        options.reserved_memory = false;
    }
    HardwareProfile profile;
    EvaluationOptions options;
    Evaluator evaluator;
    Evaluation e;

    core::Result<WrapEvaluation> run(const core::Plan& plan) {
        if (auto s = evaluator.evaluate(plan, &profile, options, e); !s) return s.error();
        WrapEvaluation w;
        w.step_s = e.summary.step_s;
        w.peak_bytes = e.summary.peak_bytes;
        w.mfu = e.summary.mfu;
        w.exposed_comm_s = e.summary.exposed_comm_s;
        w.tokens_per_s_per_gpu = e.summary.tokens_per_s_per_gpu;
        return w;
    }
    // Replays the caching allocator over the last run's plan: the verdict on reserved memory.
    bool judgeReserved(WrapEvaluation& w) {
        evaluator.judgeReserved(options.headroom, e);
        w.reserved_bytes = e.fit.reserved_bytes;
        w.at_risk = !e.fit.fits;
        w.cache_flushed = e.fit.cache_flushed;
        return e.fit.fits;
    }
};

Grouping perBlock(int blocks) {
    Grouping g(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) g[static_cast<size_t>(b)] = b + 1;
    return g;
}

[[maybe_unused]] bool validGrouping(const Grouping& ends, int blocks) {
    if (ends.empty() || ends.back() != blocks) return false;
    int32_t prev = 0;
    for (int32_t e : ends) {
        if (e <= prev) return false;
        prev = e;
    }
    return true;
}

}  // namespace

WrapCostModel::WrapCostModel(WrapCostInputs inputs, const HardwareProfile& profile)
    : m_in(std::move(inputs)), m_profile(profile) {
    buildTables();
}

void WrapCostModel::buildTables() {
    const auto L = static_cast<size_t>(blockCount());
    auto prefix = [&](auto field, auto& out) {
        out.assign(L + 1, 0);
        for (size_t b = 0; b < L; ++b) out[b + 1] = out[b] + field(m_in.blocks[b]);
    };
    prefix([](const BlockFigures& f) { return f.fwd_delta_bytes; }, m_act_prefix);
    prefix([](const BlockFigures& f) { return f.unsharded_bytes; }, m_unsharded_prefix);
    prefix([](const BlockFigures& f) { return f.post_forward_shard_bytes; }, m_slice_prefix);
    prefix([](const BlockFigures& f) { return f.fwd_ns; }, m_fwd_prefix);
    prefix([](const BlockFigures& f) { return f.bwd_ns; }, m_bwd_prefix);
    prefix([](const BlockFigures& f) { return f.reduce_extra_ns; }, m_reduce_extra_prefix);
    prefix([](const BlockFigures& f) { return f.gather_extra_ns; }, m_gather_extra_prefix);
    prefix([](const BlockFigures& f) { return f.ag_bytes; }, m_ag_prefix);
    prefix([](const BlockFigures& f) { return f.ag_bwd_bytes; }, m_ag_bwd_prefix);
    prefix([](const BlockFigures& f) { return f.rs_bytes; }, m_rs_prefix);
    prefix([](const BlockFigures& f) { return f.ar_bytes; }, m_ar_prefix);
    prefix([](const BlockFigures& f) { return f.in_flight_bytes; }, m_in_flight_prefix);
    prefix([](const BlockFigures& f) { return f.wait_bytes; }, m_wait_prefix);
    prefix([](const BlockFigures& f) { return f.rs_input_bytes; }, m_rs_input_prefix);
    prefix([](const BlockFigures& f) { return f.fwd_delta_bytes; }, m_fwd_delta_prefix);
    prefix([](const BlockFigures& f) { return f.bwd_delta_bytes; }, m_bwd_delta_prefix);
    prefix([](const BlockFigures& f) { return static_cast<int64_t>(f.fwd_tasks); }, m_task_fwd_prefix);
    prefix([](const BlockFigures& f) { return static_cast<int64_t>(f.bwd_tasks); }, m_task_bwd_prefix);
    m_grad_shard_suffix.assign(L + 1, 0);
    for (size_t b = L; b-- > 0;) m_grad_shard_suffix[b] = m_grad_shard_suffix[b + 1] + m_in.blocks[b].grad_shard_bytes;

    const size_t stride = L + 1;
    m_units.assign(stride * stride, Unit{});
    for (size_t lo = 0; lo < L; ++lo) {
        for (size_t hi = lo + 1; hi <= L; ++hi) {
            m_units[lo * stride + hi] = unit(static_cast<int32_t>(lo), static_cast<int32_t>(hi));
        }
    }
    // Peaks inside a unit: the forward walks blocks in order on top of the activations the unit
    // already saved; the backward walks them in reverse on top of what the later blocks left.
    for (size_t lo = 0; lo < L; ++lo) {
        int64_t best = std::numeric_limits<int64_t>::min();
        for (size_t hi = lo + 1; hi <= L; ++hi) {
            const int64_t before = m_fwd_delta_prefix[hi - 1] - m_fwd_delta_prefix[lo];
            best = std::max(best, before + m_in.blocks[hi - 1].fwd_peak_bytes);
            m_units[lo * stride + hi].fwd_peak = best;
        }
    }
    for (size_t hi = 1; hi <= L; ++hi) {
        int64_t best = std::numeric_limits<int64_t>::min();
        for (size_t lo = hi; lo-- > 0;) {
            const int64_t after = m_bwd_delta_prefix[hi] - m_bwd_delta_prefix[lo + 1];
            best = std::max(best, after + m_in.blocks[lo].bwd_peak_bytes);
            m_units[lo * stride + hi].bwd_peak = best;
        }
    }
    auto rootPart = [&](const BlockFigures& f, int32_t pos) {
        Unit u;
        u.fwd_ns = f.fwd_ns;
        u.bwd_ns = f.bwd_ns;
        u.fwd_peak = f.fwd_peak_bytes;
        u.bwd_peak = f.bwd_peak_bytes;
        u.fwd_delta = f.fwd_delta_bytes;
        u.bwd_delta = f.bwd_delta_bytes;
        u.lo = u.hi = pos;
        return u;
    };
    m_root_pre = rootPart(m_in.root_pre, 0);
    m_root_post = rootPart(m_in.root_post, static_cast<int32_t>(L));
}

WrapCostModel::Unit WrapCostModel::unit(int32_t lo, int32_t hi) const {
    const CostModel cost(m_profile);
    Unit u;
    u.lo = lo;
    u.hi = hi;
    auto span = [&](const auto& prefix) { return prefix[static_cast<size_t>(hi)] - prefix[static_cast<size_t>(lo)]; };
    u.fwd_ns = span(m_fwd_prefix);
    u.bwd_ns = span(m_bwd_prefix);
    const int64_t ag = span(m_ag_prefix), ag_bwd = span(m_ag_bwd_prefix), rs = span(m_rs_prefix), ar = span(m_ar_prefix);
    const double gather_extra = span(m_gather_extra_prefix);
    if (ag > 0) u.ag_ns = cost.collectiveSeconds(TaskKind::AllGather, ag, m_in.ag_group.size, m_in.ag_group.nodes) * 1e9 + gather_extra;
    if (ag_bwd > 0) {
        u.ag_bwd_ns = cost.collectiveSeconds(TaskKind::AllGather, ag_bwd, m_in.ag_bwd_group.size, m_in.ag_bwd_group.nodes) * 1e9 +
                      gather_extra;
    }
    u.reduce_ns = span(m_reduce_extra_prefix);
    if (rs > 0) u.reduce_ns += cost.collectiveSeconds(TaskKind::ReduceScatter, rs, m_in.rs_group.size, m_in.rs_group.nodes) * 1e9;
    if (ar > 0) u.reduce_ns += cost.collectiveSeconds(TaskKind::AllReduce, ar, m_in.ar_group.size, m_in.ar_group.nodes) * 1e9;
    const auto launch = static_cast<double>(m_profile.task_launch_ns);
    const auto hook = static_cast<double>(m_profile.unit_hook_ns);
    u.host_fwd_ns = hook + launch * static_cast<double>(m_in.unit_tasks_fwd + span(m_task_fwd_prefix));
    u.host_bwd_ns = hook + launch * static_cast<double>(m_in.unit_tasks_bwd + span(m_task_bwd_prefix));
    u.params = span(m_unsharded_prefix);
    u.in_flight = span(m_in_flight_prefix);
    u.wait = span(m_wait_prefix);
    u.in_flight_bwd = ag_bwd > 0 ? u.in_flight : 0;
    u.wait_bwd = ag_bwd > 0 ? u.wait : 0;
    u.rs_input = span(m_rs_input_prefix);
    u.fwd_delta = span(m_fwd_delta_prefix);
    u.bwd_delta = span(m_bwd_delta_prefix);
    return u;
}

const WrapCostModel::Unit& WrapCostModel::cached(int32_t lo, int32_t hi) const {
    return m_units[static_cast<size_t>(lo) * static_cast<size_t>(blockCount() + 1) + static_cast<size_t>(hi)];
}

// x precedes y in forward order. x may be the root's part before the blocks, y the part after.
double WrapCostModel::pairNs(const Unit& x, const Unit& y) const {
    const double slow = m_profile.overlap_compute_slowdown;
    const double m = m_in.micro_batches, synced = m_in.synced_micro_batches;
    // Forward: y's all-gather is prefetched under x's forward. Backward (y first): x's all-gather
    // is prefetched under y's backward, and y's reduction runs under x's backward.
    const double fwd = std::max(overlapNs(x.fwd_ns, y.ag_ns, slow), x.host_fwd_ns);
    const double bwd_sync = std::max(overlapNs(x.bwd_ns, y.reduce_ns, slow), x.host_bwd_ns);
    const double bwd_nosync = std::max(x.bwd_ns, x.host_bwd_ns);
    const double gather_exposed = std::max(0.0, x.ag_bwd_ns - slow * y.bwd_ns);
    return m * fwd + synced * bwd_sync + (m - synced) * bwd_nosync + m * gather_exposed;
}

int64_t WrapCostModel::saved(int32_t act_pos, int32_t slice_pos) const {
    return m_act_prefix[static_cast<size_t>(act_pos)] + m_slice_prefix[static_cast<size_t>(slice_pos)];
}

int64_t WrapCostModel::held(const Unit& u) const {
    return m_in.reshard_after_forward ? u.params : m_unsharded_prefix[static_cast<size_t>(u.hi)];
}

int64_t WrapCostModel::heldBefore(int32_t pos) const {
    return m_in.reshard_after_forward ? 0 : m_unsharded_prefix[static_cast<size_t>(pos)];
}

int64_t WrapCostModel::turnBytes(const Unit& last, int64_t ahead_bytes) const {
    const auto L = static_cast<int32_t>(blockCount());
    const int64_t in_flight = last.in_flight_bwd + ahead_bytes;
    int64_t peak = saved(last.lo, last.lo) + held(last) + in_flight + last.fwd_peak;
    const int64_t root_post = saved(L, L) + held(m_root_post) + in_flight;
    peak = std::max(peak, root_post + m_root_post.fwd_peak);
    return std::max(peak, root_post + m_root_post.fwd_delta + m_root_post.bwd_peak);
}

// The pair's memory terms (see the header), each the sum of what is live at that point.
int64_t WrapCostModel::pairBytes(const Unit& x, const Unit& y) const {
    const auto L = static_cast<int32_t>(blockCount());
    const bool x_is_root_pre = &x == &m_root_pre, y_is_root_post = &y == &m_root_post;
    const int64_t root_kept = m_root_post.fwd_delta + m_root_post.bwd_delta;  // output layers' gradients
    auto grads = [&](int32_t pos) { return m_grad_shard_suffix[static_cast<size_t>(pos)]; };

    // Forward: x's wait and compute with y's all-gather in flight.
    int64_t peak = 0;
    if (x_is_root_pre) {
        // The root's copy-out and its layers before the blocks; root_pre's activations (in
        // base_bytes) are not yet saved.
        peak = std::max(m_in.root_gather_bytes, x.fwd_peak) - x.fwd_delta + y.in_flight;
    } else {
        peak = saved(x.lo, x.lo) + heldBefore(x.lo) + x.wait + y.in_flight;
        peak = std::max(peak, saved(x.lo, x.lo) + held(x) + y.in_flight + x.fwd_peak);
    }
    if (y_is_root_post) {
        peak = std::max(peak, turnBytes(x, 0));
    } else {
        if (y.hi == L && m_in.backward_gathers_ahead > 1) peak = std::max(peak, turnBytes(y, x.in_flight_bwd));
        // Backward of y with x's all-gather prefetched (and the reduce-scatter input of the unit
        // after y, seen through its first block).
        const int64_t after_y_rs_input = y.hi < L ? m_in.blocks[static_cast<size_t>(y.hi)].rs_input_bytes : 0;
        peak = std::max(peak, saved(y.hi, y.lo) + held(y) + x.in_flight_bwd + y.bwd_peak + grads(y.hi) + root_kept +
                                  after_y_rs_input);
        // y's reduction starts: its reduce-scatter input is made while its gradients are held.
        if (y.rs_input > 0) {
            peak = std::max(peak, saved(y.lo, y.lo) + heldBefore(y.lo) + y.fwd_delta + y.bwd_delta + y.rs_input +
                                      grads(y.hi) + root_kept + x.in_flight_bwd);
        }
    }
    // Backward of x, its wait and its compute, while y's reduce-scatter input is held (and the
    // all-gather of the unit before x, seen through its last block, in flight).
    const BlockFigures* before_x = x.lo > 0 ? &m_in.blocks[static_cast<size_t>(x.lo - 1)] : nullptr;
    const int64_t before_x_in_flight = before_x && before_x->ag_bwd_bytes > 0 ? before_x->in_flight_bytes : 0;
    const int64_t x_base = saved(x.hi, x.lo) + y.rs_input + grads(x.hi) + root_kept;
    if (!x_is_root_pre) peak = std::max(peak, x_base + heldBefore(x.hi) + x.wait_bwd);
    return std::max(peak, x_base + held(x) + x.bwd_peak + before_x_in_flight);
}

double WrapCostModel::stepNs(const Grouping& ends) const {
    assert(validGrouping(ends, blockCount()));
    double t = m_in.constant_ns;
    const Unit* prev = &m_root_pre;
    int32_t lo = 0;
    for (int32_t hi : ends) {
        const Unit& u = cached(lo, hi);
        t += pairNs(*prev, u);
        prev = &u;
        lo = hi;
    }
    return t + pairNs(*prev, m_root_post);
}

int64_t WrapCostModel::peakBytes(const Grouping& ends) const {
    assert(validGrouping(ends, blockCount()));
    int64_t peak = std::numeric_limits<int64_t>::min();
    const Unit* prev = &m_root_pre;
    int32_t lo = 0;
    for (int32_t hi : ends) {
        const Unit& u = cached(lo, hi);
        peak = std::max(peak, pairBytes(*prev, u));
        prev = &u;
        lo = hi;
    }
    peak = std::max(peak, pairBytes(*prev, m_root_post));
    return std::max(m_in.floor_bytes, m_in.base_bytes + peak);
}

WrapChoice WrapCostModel::best(int64_t cap_bytes) const {
    WrapChoice choice;
    const int32_t L = blockCount();
    if (L == 0 || m_in.floor_bytes > cap_bytes) return choice;
    const int64_t room = cap_bytes - m_in.base_bytes;
    const auto stride = static_cast<size_t>(L + 1);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    // State (j, i): blocks [0, j) grouped, the last unit is [i, j). Value: the pair terms so far.
    struct Cell {
        double ns;
        int32_t units;
        int32_t prev;  // start of the unit before [i, j); -1 for the root
    };
    std::vector<Cell> cell(stride * stride, Cell{kInf, 0, -1});
    auto at = [&](int32_t j, int32_t i) -> Cell& { return cell[static_cast<size_t>(j) * stride + static_cast<size_t>(i)]; };
    auto better = [](double ns, int32_t units, const Cell& c) { return ns < c.ns || (ns == c.ns && units < c.units); };
    for (int32_t j = 1; j <= L; ++j) {
        const Unit& u = cached(0, j);
        if (pairBytes(m_root_pre, u) <= room) at(j, 0) = Cell{pairNs(m_root_pre, u), 1, -1};
    }
    for (int32_t j = 1; j < L; ++j) {
        for (int32_t i = 0; i < j; ++i) {
            const Cell& c = at(j, i);
            if (c.ns == kInf) continue;
            const Unit& x = cached(i, j);
            for (int32_t k = j + 1; k <= L; ++k) {
                const Unit& y = cached(j, k);
                if (pairBytes(x, y) > room) continue;
                const double ns = c.ns + pairNs(x, y);
                if (better(ns, c.units + 1, at(k, j))) at(k, j) = Cell{ns, c.units + 1, i};
            }
        }
    }
    double best_ns = kInf;
    int32_t best_units = 0, best_i = -1;
    for (int32_t i = 0; i < L; ++i) {
        const Cell& c = at(L, i);
        if (c.ns == kInf) continue;
        const Unit& x = cached(i, L);
        if (pairBytes(x, m_root_post) > room) continue;
        const double ns = c.ns + pairNs(x, m_root_post);
        if (ns < best_ns || (ns == best_ns && c.units < best_units)) {
            best_ns = ns;
            best_units = c.units;
            best_i = i;
        }
    }
    if (best_i < 0) return choice;
    for (int32_t j = L, i = best_i; i >= 0;) {
        choice.ends.push_back(j);
        const int32_t p = at(j, i).prev;
        j = i;
        i = p;
    }
    std::reverse(choice.ends.begin(), choice.ends.end());
    choice.found = true;
    choice.step_ns = m_in.constant_ns + best_ns;
    choice.peak_bytes = peakBytes(choice.ends);
    return choice;
}

core::Result<WrapCostModel> WrapCostModel::fromPlan(const core::Plan& plan, const HardwareProfile& profile) {
    const core::Model& model = *plan.model;
    const auto L = static_cast<int32_t>(model.blocks.size());
    if (L == 0) return core::makeError("wrap search: model '" + model.name + "' has no transformer blocks to group");
    if (plan.sharding.tp != 1) {
        return core::makeError("wrap search: its unit cost model is not checked under tensor parallelism yet; give --tp 1, "
                               "or compare wrap policies of a tensor-parallel plan with `sweep`");
    }
    if (plan.sharding.pp != 1) {
        return core::makeError("wrap search: its unit cost model is not built for pipeline stages yet; give --pp 1, "
                               "or compare wrap policies of a pipeline-parallel plan with `sweep`");
    }
    core::Plan per_block = plan;
    per_block.sharding.wrap = core::WrapPolicy{};
    per_block.sharding.wrap.kind = core::WrapKind::Block;
    // The per-block plan through the shared chain: its Program gives the per-unit figures, its
    // timeline the calibration.
    EvaluationOptions eval_options;
    eval_options.issue_order_memory = false;
    eval_options.per_unit = false;
    eval_options.reserved_memory = false;  // the Program and timeline are what is read
    auto evaluated = evaluatePlan(per_block, &profile, eval_options);
    if (!evaluated) return evaluated.error();
    const core::Program& p = evaluated->program;
    const core::Timeline& timeline = evaluated->timeline;

    std::unordered_map<std::string, int32_t> block_of_name;
    for (int32_t b = 0; b < L; ++b) block_of_name.emplace(model.modules[static_cast<size_t>(model.blocks[static_cast<size_t>(b)])].name, b);
    std::vector<int32_t> block_of_unit(p.units.size(), -1);
    for (size_t u = 1; u < p.units.size(); ++u) {
        auto it = block_of_name.find(p.units[u].name);
        if (it == block_of_name.end()) {
            return core::makeError("wrap search: the per-block unit '" + p.units[u].name + "' of model '" + model.name +
                                   "' is not one of its blocks");
        }
        block_of_unit[u] = it->second;
    }

    WrapCostInputs in;
    in.blocks.assign(static_cast<size_t>(L), BlockFigures{});
    // How many micro-batches reduce gradients (all, or the last one under no_sync): read off the
    // lowered Program, not the plan's flags.
    in.micro_batches = p.micro_batches;
    {
        std::vector<uint8_t> reduces(static_cast<size_t>(p.micro_batches), 0);
        for (const core::Task& t : p.tasks) {
            if (t.kind == TaskKind::ReduceScatter || t.kind == TaskKind::AllReduce) reduces[static_cast<size_t>(t.micro_batch)] = 1;
        }
        in.synced_micro_batches = std::max(1, static_cast<int>(std::count(reduces.begin(), reduces.end(), 1)));
    }
    in.reshard_after_forward = p.units.size() > 1 ? p.units[1].reshard_after_forward : true;
    const bool grads_on_host = p.host_grad_bytes > 0;  // CPU offload keeps sharded gradients on the host
    // A micro-batch after one that reduced finds every sharded gradient made: they count in the
    // base then, not from each unit's reduction on.
    const bool grads_held_all_step = !grads_on_host && in.synced_micro_batches > 1;

    // Sizes: the lowering's per-unit table. The DP times every unit's collectives with one group
    // per kind, the first block unit's that issues it.
    bool ag_seen = false, ag_bwd_seen = false, rs_seen = false, ar_seen = false;
    for (size_t u = 1; u < p.units.size(); ++u) {
        const core::UnitInfo& info = p.units[u];
        BlockFigures& f = in.blocks[static_cast<size_t>(block_of_unit[u])];
        f.ag_bytes = info.all_gather.bytes;
        f.ag_bwd_bytes = info.all_gather_bwd.bytes;
        f.rs_bytes = info.reduce_scatter.bytes;
        f.ar_bytes = info.all_reduce.bytes;
        f.in_flight_bytes = info.unshard_in_flight_bytes;
        f.wait_bytes = info.unshard_wait_bytes;
        f.unsharded_bytes = info.unsharded_param_bytes;
        f.post_forward_shard_bytes = info.post_forward_shard_bytes;
        f.rs_input_bytes = info.reduce_scatter_input_bytes;
        f.grad_shard_bytes = grads_on_host || grads_held_all_step ? 0 : info.grad_shard_bytes;
        auto firstGroup = [](const core::UnitCollective& c, bool& seen, CollectiveGroup& group) {
            if (seen || c.bytes == 0) return;
            group = groupOf(c);
            seen = true;
        };
        firstGroup(info.all_gather, ag_seen, in.ag_group);
        firstGroup(info.all_gather_bwd, ag_bwd_seen, in.ag_bwd_group);
        firstGroup(info.reduce_scatter, rs_seen, in.rs_group);
        firstGroup(info.all_reduce, ar_seen, in.ar_group);
    }

    // Time and compute memory: the tasks of the first micro-batch, by unit. A task belongs to the
    // backward once the host has issued the last forward compute task (the root's prefetch of
    // the last block's all-gather comes before any backward compute task).
    const CostModel cost(profile);
    int32_t last_forward = -1;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.micro_batch == 0 && t.kind == TaskKind::Forward) last_forward = id;
    }
    struct Running {
        int64_t fwd = 0, fwd_peak = 0, bwd = 0, bwd_peak = 0;
    };
    std::vector<Running> run(static_cast<size_t>(L) + 2);  // blocks, then root pre and post
    const size_t kPre = static_cast<size_t>(L), kPost = static_cast<size_t>(L) + 1;
    bool block_fwd_seen = false, block_bwd_seen = false;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.micro_batch != 0 || t.unit < 0) continue;
        const bool backward = id > last_forward;
        const bool is_compute = t.kind == TaskKind::Forward || t.kind == TaskKind::Backward || t.kind == TaskKind::Recompute;
        const int32_t b = block_of_unit[static_cast<size_t>(t.unit)];
        if (b >= 0 && is_compute) (backward ? block_bwd_seen : block_fwd_seen) = true;
        size_t slot = 0;
        if (b >= 0) {
            slot = static_cast<size_t>(b);
        } else {
            slot = backward ? (block_bwd_seen ? kPre : kPost) : (block_fwd_seen ? kPost : kPre);
        }
        BlockFigures& f = b >= 0 ? in.blocks[slot] : (slot == kPre ? in.root_pre : in.root_post);
        Running& r = run[slot];
        const auto ns = static_cast<double>(cost.durationNs(t, p));
        if (is_compute) {
            if (backward) {
                f.bwd_ns += ns;
                ++f.bwd_tasks;
                replayInto(p, t, r.bwd, r.bwd_peak);
            } else {
                f.fwd_ns += ns;
                ++f.fwd_tasks;
                replayInto(p, t, r.fwd, r.fwd_peak);
            }
            continue;
        }
        if (b == 0) ++(backward ? in.unit_tasks_bwd : in.unit_tasks_fwd);
        switch (t.kind) {
            case TaskKind::CopyOut:
            case TaskKind::Cast:
                if (t.stream == core::Stream::Compute) {
                    (backward ? f.bwd_ns : f.fwd_ns) += ns;
                } else if (b >= 0) {
                    f.reduce_extra_ns += ns;
                }
                break;
            case TaskKind::HostToDevice:
                if (!backward && b >= 0) f.gather_extra_ns += ns;
                break;
            case TaskKind::DeviceToHost:
                if (b >= 0) f.reduce_extra_ns += ns;
                break;
            default: break;
        }
    }
    auto finish = [&](BlockFigures& f, const Running& r) {
        f.fwd_delta_bytes = r.fwd;
        f.fwd_peak_bytes = r.fwd_peak;
        f.bwd_delta_bytes = r.bwd;
        f.bwd_peak_bytes = r.bwd_peak;
    };
    for (int32_t b = 0; b < L; ++b) finish(in.blocks[static_cast<size_t>(b)], run[static_cast<size_t>(b)]);
    finish(in.root_pre, run[kPre]);
    finish(in.root_post, run[kPost]);

    // How many all-gathers run ahead of the compute stream at the turn into the backward, on the
    // per-block simulation: the block units' backward all-gathers that start before the first
    // backward compute task ends (FSDP2's copy-in waits for the previous copy-out: one; FSDP1's
    // all-gathers wait for no copy-out: two).
    in.backward_gathers_ahead = std::clamp(gathersAheadOfBackward(p, timeline, block_of_unit, last_forward), 1, 2);

    const core::UnitInfo& root = p.units[0];
    int64_t all_grads = 0, no_sync_grads = 0;
    for (const core::UnitInfo& u : p.units) {
        if (!grads_on_host) all_grads += u.grad_shard_bytes;
        no_sync_grads += u.no_sync_grad_bytes;
    }
    const int64_t initial = core::total(p.initial);
    in.base_bytes = initial + root.unsharded_param_bytes + in.root_pre.fwd_delta_bytes + no_sync_grads +
                    (grads_held_all_step ? all_grads : 0);
    in.root_gather_bytes = root.unshard_wait_bytes - root.unsharded_param_bytes;
    int64_t opt_temp = 0;
    for (const core::Task& t : p.tasks) {
        if (t.kind == TaskKind::OptimizerStep) opt_temp = std::max(opt_temp, allocatedBytes(p, t.mem_peak));
    }
    // The root reduces last: its reduce-scatter input is made while its gradients are held, and
    // is held with every sharded gradient until the optimizer step starts.
    const int64_t root_grads = in.root_pre.fwd_delta_bytes + in.root_pre.bwd_delta_bytes + in.root_post.fwd_delta_bytes +
                               in.root_post.bwd_delta_bytes;
    const int64_t root_reduction = root.reduce_scatter_input_bytes > 0 ? root.reduce_scatter_input_bytes + root_grads : 0;
    // The root's own sharded gradient is not live yet at that point: its reduce-scatter task
    // frees the unsharded gradients before it allocates the output that becomes (or is cast into)
    // the sharded gradient. all_grads counts it, so the reduction term leaves it out unless it is
    // held from an earlier micro-batch. (Masked while the loss backward peaked above this floor;
    // with one bf16 vocab tensor less there, counting it put the floor above the simulated peak.)
    const int64_t root_shard_made_after = grads_on_host || grads_held_all_step ? 0 : root.grad_shard_bytes;
    in.floor_bytes = initial + all_grads + std::max(opt_temp, root_reduction > 0 ? root_reduction - root_shard_made_after : 0);

    WrapCostModel model_out(std::move(in), profile);
    // Calibrate the terms outside the pairs (root collectives, optimizer, host start-up) on the
    // per-block simulation: the model then reproduces it exactly.
    model_out.setConstantNs(static_cast<double>(timeline.step_ns) - model_out.stepNs(perBlock(L)));
    return model_out;
}

std::string groupingString(const Grouping& ends) {
    std::string s;
    int32_t lo = 0;
    for (int32_t hi : ends) {
        s += hi - lo == 1 ? fmt::format("[{}]", lo) : fmt::format("[{}-{}]", lo, hi - 1);
        lo = hi;
    }
    return s;
}

core::WrapPolicy groupingPolicy(const core::Model& model, const Grouping& ends) {
    core::WrapPolicy w;
    w.kind = core::WrapKind::Modules;
    int32_t lo = 0;
    for (int32_t hi : ends) {
        std::string entry;
        for (int32_t b = lo; b < hi; ++b) {
            if (!entry.empty()) entry += '+';
            entry += model.modules[static_cast<size_t>(model.blocks[static_cast<size_t>(b)])].name;
        }
        w.modules.push_back(std::move(entry));
        lo = hi;
    }
    return w;
}

std::vector<Grouping> allGroupings(int blocks) {
    std::vector<Grouping> out;
    if (blocks <= 0) return out;
    const uint32_t n = 1u << (blocks - 1);
    for (uint32_t mask = 0; mask < n; ++mask) {
        Grouping g;
        for (int b = 1; b < blocks; ++b) {
            if (mask & (1u << (b - 1))) g.push_back(b);
        }
        g.push_back(blocks);
        out.push_back(std::move(g));
    }
    return out;
}

core::Result<WrapSearchResult> searchWrap(const core::Plan& plan, const HardwareProfile& profile,
                                          const WrapSearchOptions& options) {
    if (!(options.headroom >= 0 && options.headroom < 1)) {
        return core::makeError(fmt::format("headroom must be in [0, 1) (got {})", options.headroom));
    }
    auto model = WrapCostModel::fromPlan(plan, profile);
    if (!model) return model.error();
    WrapSearchResult r;
    r.capacity_bytes = plan.cluster.gpu.memory_bytes;
    r.cap_bytes = static_cast<int64_t>(static_cast<double>(r.capacity_bytes) * (1.0 - options.headroom));
    FullEvaluator evaluator(profile, options.headroom);
    core::Plan candidate = plan;
    candidate.sharding.wrap = core::WrapPolicy{};
    candidate.sharding.wrap.kind = core::WrapKind::Block;
    auto per_block = evaluator.run(candidate);
    if (!per_block) return per_block.error();
    r.per_block = *per_block;

    // Judged on reserved memory too: the answer when every grouping the model prefers is at risk.
    const bool per_block_fits =
        r.per_block.peak_bytes <= r.cap_bytes && (!options.reserved_memory || evaluator.judgeReserved(r.per_block));

    const double gib = static_cast<double>(core::kGiB);
    int64_t dp_cap = r.cap_bytes;
    for (int round = 0;; ++round) {
        const WrapChoice choice = model->best(dp_cap);
        if (!choice.found && round == 0) {
            r.fits = false;
            r.message = fmt::format(
                "no grouping of the {} blocks fits under {:.2f} GiB (capacity {:.2f} GiB less {:.0f}% headroom; per block "
                "the peak is {:.2f} GiB): try --ac full, a smaller --micro-batch, or more GPUs (--nodes)",
                model->blockCount(), static_cast<double>(r.cap_bytes) / gib, static_cast<double>(r.capacity_bytes) / gib,
                options.headroom * 100, static_cast<double>(r.per_block.peak_bytes) / gib);
            break;
        }
        if (!choice.found || round > options.max_tightenings) {
            // The groupings tried were over the cap in the full evaluation (allocated or reserved).
            if (per_block_fits) {
                const Grouping ends = perBlock(model->blockCount());
                r.notes.push_back(fmt::format("none of the {} groupings the model preferred fits in the full evaluation; "
                                              "one unit per block does: keeping it",
                                              round));
                r.ends = ends;
                r.units = static_cast<int>(ends.size());
                r.wrap = groupingPolicy(*plan.model, ends);
                r.predicted_step_s = model->stepNs(ends) / 1e9;
                r.predicted_peak_bytes = model->peakBytes(ends);
                r.full = r.per_block;
                r.fits = true;
                break;
            }
            r.fits = false;
            r.message = fmt::format(
                "no grouping of the {} blocks fits under {:.2f} GiB (capacity {:.2f} GiB less {:.0f}% headroom): the {} "
                "grouping(s) the model preferred were over it in the full evaluation (the last, {}, {} {:.2f} GiB), and one unit per block "
                "{} {:.2f} GiB; try --ac full, a smaller --micro-batch, or more GPUs (--nodes)",
                model->blockCount(), static_cast<double>(r.cap_bytes) / gib, static_cast<double>(r.capacity_bytes) / gib,
                options.headroom * 100, round, groupingString(r.ends), r.full.reserved_bytes > 0 ? "reserves" : "allocates",
                static_cast<double>(r.full.reserved_bytes > 0 ? r.full.reserved_bytes : r.full.peak_bytes) / gib,
                r.per_block.reserved_bytes > 0 ? "reserves" : "allocates",
                static_cast<double>(r.per_block.reserved_bytes > 0 ? r.per_block.reserved_bytes : r.per_block.peak_bytes) / gib);
            break;
        }
        r.ends = choice.ends;
        r.units = static_cast<int>(choice.ends.size());
        r.wrap = groupingPolicy(*plan.model, choice.ends);
        r.predicted_step_s = choice.step_ns / 1e9;
        r.predicted_peak_bytes = choice.peak_bytes;
        candidate.sharding.wrap = r.wrap;
        auto full = evaluator.run(candidate);
        if (!full) return full.error();
        r.full = *full;
        // Allocated first (cheap); a grouping whose allocated peak fits is judged on reserved memory.
        const bool allocated_fits = r.full.peak_bytes <= r.cap_bytes;
        if (allocated_fits && (!options.reserved_memory || evaluator.judgeReserved(r.full))) {
            r.fits = true;
            break;
        }
        const int64_t margin = std::max<int64_t>(core::kMiB, r.cap_bytes / 500);
        // Lower the model's cap by the overshoot (of reserved memory over the cap, or of the
        // allocated peak), and at least below what the model said of this grouping, so that the
        // next round cannot pick it again. A cache flushed at the device limit is at risk even
        // where reserved ends under the cap: the overshoot is then the margin.
        const int64_t over = allocated_fits ? std::max<int64_t>(0, r.full.reserved_bytes - r.cap_bytes)
                                            : r.full.peak_bytes - r.cap_bytes;
        const int64_t new_cap = std::min(dp_cap - over - margin, choice.peak_bytes - margin);
        std::string why;
        if (!allocated_fits) {
            why = fmt::format("the peak {:.2f} GiB exceeds the cap {:.2f} GiB", static_cast<double>(r.full.peak_bytes) / gib,
                              static_cast<double>(r.cap_bytes) / gib);
        } else if (r.full.cache_flushed) {
            why = fmt::format("the caching allocator reaches the device limit and frees its cache (reserved {:.2f} GiB): at risk",
                              static_cast<double>(r.full.reserved_bytes) / gib);
        } else {
            why = fmt::format("reserved memory {:.2f} GiB exceeds the cap {:.2f} GiB", static_cast<double>(r.full.reserved_bytes) / gib,
                              static_cast<double>(r.cap_bytes) / gib);
        }
        if (round < options.max_tightenings) {
            r.notes.push_back(fmt::format("{} ({} units): in the full evaluation {} (model said {:.2f} GiB allocated); lowering the "
                                          "model's cap to {:.2f} GiB",
                                          groupingString(r.ends), r.units, why, static_cast<double>(choice.peak_bytes) / gib,
                                          static_cast<double>(new_cap) / gib));
            dp_cap = new_cap;
            ++r.tightenings;
        } else {
            r.notes.push_back(fmt::format("{} ({} units): in the full evaluation {}; no tightening left", groupingString(r.ends), r.units, why));
        }
    }
    return r;
}

}  // namespace shardcast::sim
