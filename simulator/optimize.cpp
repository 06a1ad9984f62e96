#include "simulator/optimize.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/lower.hpp"
#include "core/units.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

using BackwardPrefetch = core::ShardingSpec::BackwardPrefetch;
constexpr int64_t kNoBound = std::numeric_limits<int64_t>::max();

// The sharding part of a choice: everything but micro-batch, accumulation and checkpointing, which
// the groups hold.
using Sharding = OptimizeChoice;

// Micro-batch and checkpointing: what the step-time bound depends on.
struct Group {
    int64_t micro_batch = 1;
    int64_t grad_accum = 1;
    int ac = 0;  // index into the space's acs
    int64_t bound_ns = 0;         // no configuration of the group steps faster
    int64_t mem_bound_bytes = 0;  // no configuration of the group peaks lower
};

struct Scored {
    int32_t group = 0, sharding = 0;
    int64_t step_ns = 0;
    int64_t peak_bytes = 0, budget_bytes = 0;
    double tokens_per_s_per_gpu = 0, mfu = 0;
    bool fits = false;
};

struct Space {
    std::vector<core::WrapPolicy> wraps;
    std::vector<core::AcSpec> acs;
    std::vector<core::Offload> offloads;
    std::vector<Sharding> shardings;
    std::vector<Group> groups;
    int64_t batch_per_rank = 0;
};

template <class T>
bool contains(const std::vector<T>& v, const T& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

core::Result<Space> buildSpace(const core::Plan& base, const OptimizeSpace& in, int64_t global_batch) {
    Space sp;
    const int world = base.cluster.nodes * base.cluster.gpus_per_node;
    const int gpn = base.cluster.gpus_per_node;
    if (world < 1) return core::makeError("cluster: the world size must be positive");
    if (global_batch < 1) {
        return core::makeError("--global-batch must be a positive number of sequences per optimizer step (got " +
                               std::to_string(global_batch) + ")");
    }
    if (global_batch % world != 0) {
        const int64_t below = global_batch / world * world, above = below + world;
        return core::makeError(fmt::format(
            "--global-batch {} does not split over {} ranks: data parallelism gives every rank whole sequences, "
            "so the global batch must be a multiple of the world size ({} x {} GPUs); e.g. {}",
            global_batch, world, base.cluster.nodes, gpn,
            below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{} (one sequence per rank)", above)));
    }
    sp.batch_per_rank = global_batch / world;

    std::vector<core::Strategy> strategies = in.strategies;
    if (strategies.empty()) {
        strategies = {core::Strategy::FullShard, core::Strategy::HybridShard, core::Strategy::ShardGradOp,
                      core::Strategy::HybridShardZero2, core::Strategy::NoShard};
    }
    std::vector<int> hybrid_sizes = in.hybrid_shard_sizes;
    if (hybrid_sizes.empty()) {
        for (int d = 2; d < world; ++d) {
            if (world % d == 0) hybrid_sizes.push_back(d);
        }
    }
    for (int d : hybrid_sizes) {
        if (d < 2 || d >= world || world % d != 0) {
            return core::makeError(fmt::format("--shard-size {}: a hybrid shard group must divide the world size {} "
                                               "and lie strictly between 1 and it",
                                               d, world));
        }
    }
    std::vector<int> fsdps = in.fsdp_versions.empty() ? std::vector<int>{2, 1} : in.fsdp_versions;
    sp.wraps = in.wraps.empty() ? defaultWrapChoices(*base.model) : in.wraps;
    sp.acs = in.acs.empty() ? defaultAcChoices(*base.model) : in.acs;
    sp.offloads = in.offloads.empty() ? std::vector<core::Offload>{core::Offload::None, core::Offload::Cpu} : in.offloads;

    for (core::Strategy st : strategies) {
        std::vector<int> shards;
        if (st == core::Strategy::NoShard) {
            shards = {1};
        } else if (core::isHybrid(st)) {
            shards = hybrid_sizes;
        } else {
            shards = {world};
        }
        for (int shard : shards) {
            for (int fsdp : fsdps) {
                std::vector<std::pair<core::ReshardMode, int>> reshards{{core::ReshardMode::Default, 0}};
                const bool reshards_by_default = st == core::Strategy::FullShard || st == core::Strategy::HybridShard;
                if (in.partial_reshard && fsdp == 2 && reshards_by_default && gpn > 1 && shard > gpn && shard % gpn == 0) {
                    reshards.emplace_back(core::ReshardMode::Count, gpn);
                }
                struct Prefetch {
                    int depth;
                    bool forward;
                    BackwardPrefetch backward;
                };
                std::vector<Prefetch> prefetches{{1, false, BackwardPrefetch::Pre}};
                if (in.prefetch && st != core::Strategy::NoShard) {
                    if (fsdp == 2) {
                        prefetches.push_back({2, false, BackwardPrefetch::Pre});
                    } else {
                        prefetches.push_back({1, true, BackwardPrefetch::Pre});
                        prefetches.push_back({1, false, BackwardPrefetch::Post});
                        prefetches.push_back({1, true, BackwardPrefetch::Post});
                    }
                }
                for (auto [reshard, k] : reshards) {
                    for (const Prefetch& p : prefetches) {
                        for (core::Offload off : sp.offloads) {
                            // FSDP CPU offload keeps the sharded state on the host: NO_SHARD has none.
                            if (off == core::Offload::Cpu && st == core::Strategy::NoShard) continue;
                            for (int w = 0; w < static_cast<int>(sp.wraps.size()); ++w) {
                                Sharding c;
                                c.strategy = st;
                                c.shard_size = shard;
                                c.fsdp = fsdp;
                                c.reshard = reshard;
                                c.reshard_k = k;
                                c.prefetch_depth = p.depth;
                                c.forward_prefetch = p.forward;
                                c.backward_prefetch = p.backward;
                                c.offload = off;
                                c.wrap = sp.wraps[w];
                                sp.shardings.push_back(std::move(c));
                            }
                        }
                    }
                }
            }
        }
    }

    // Validation caps accumulation at 4096 micro-batches per step: smaller micro-batches are not plans.
    constexpr int64_t kMaxGradAccum = 4096;
    for (int64_t mb = 1; mb <= sp.batch_per_rank; ++mb) {
        if (sp.batch_per_rank % mb != 0) continue;
        if (in.max_micro_batch > 0 && mb > in.max_micro_batch) continue;
        if (sp.batch_per_rank / mb > kMaxGradAccum) continue;
        for (int a = 0; a < static_cast<int>(sp.acs.size()); ++a) sp.groups.push_back({mb, sp.batch_per_rank / mb, a, 0, 0});
    }
    if (sp.shardings.empty() || sp.groups.empty()) {
        return core::makeError(fmt::format(
            "the constraints leave nothing to search: {} sharding choices, {} micro-batch x checkpointing choices "
            "(batch per rank {}{})",
            sp.shardings.size(), sp.groups.size(), sp.batch_per_rank,
            in.max_micro_batch > 0 ? fmt::format(", --max-micro-batch {}", in.max_micro_batch) : std::string()));
    }
    return sp;
}

OptimizeChoice makeChoice(const Space& sp, const Group& g, const Sharding& s) {
    OptimizeChoice c = s;
    c.ac = sp.acs[g.ac];
    c.micro_batch = g.micro_batch;
    c.grad_accum = g.grad_accum;
    return c;
}

// Writes the choice into `plan` in place (the search reuses one plan).
void writeChoice(core::Plan& plan, const OptimizeChoice& c) {
    core::ShardingSpec& sh = plan.sharding;
    sh.strategy = c.strategy;
    sh.shard_size = c.shard_size;
    sh.fsdp_version = c.fsdp;
    sh.reshard_after_forward = c.reshard;
    sh.reshard_after_forward_k = c.reshard_k;
    sh.prefetch_depth = c.prefetch_depth;
    sh.forward_prefetch = c.forward_prefetch;
    sh.backward_prefetch = c.backward_prefetch;
    sh.wrap = c.wrap;
    plan.training.offload = c.offload;
    plan.training.ac = c.ac.mode;
    plan.training.ac_every = c.ac.every;
    plan.training.micro_batch = c.micro_batch;
    plan.training.grad_accum = c.grad_accum;
}

void setChoice(core::Plan& plan, const Space& sp, const Group& g, const Sharding& s) {
    writeChoice(plan, makeChoice(sp, g, s));
}

// The uncontended durations of the compute stream's forward, backward and recompute tasks, less a
// slack for the simulator's rounding of rescaled ends (at most half a ns per rescale; 1e-6 of the
// step plus 1 us covers millions of them).
int64_t boundOfProgram(const core::Program& program, const CostModel& cost) {
    int64_t sum = 0;
    for (const core::Task& t : program.tasks) {
        if (t.stream != core::Stream::Compute) continue;
        if (t.kind != core::TaskKind::Forward && t.kind != core::TaskKind::Backward &&
            t.kind != core::TaskKind::Recompute) {
            continue;
        }
        sum += cost.durationNs(t, program);
    }
    constexpr int64_t kSlackNs = 1000;
    return std::max<int64_t>(0, static_cast<int64_t>(static_cast<double>(sum) * (1.0 - 1e-6)) - kSlackNs);
}

ConfigurationBounds boundsOf(const Evaluation& e, const CostModel& cost) {
    return {boundOfProgram(e.program, cost), e.timed.max_per_category[core::index(core::MemCategory::Activation)]};
}

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(core::kGiB)); }

std::string choiceLabel(const OptimizeChoice& c) {
    std::string out;
    for (int d = 0; d < kOptimizeDimensionCount; ++d) {
        const auto dim = static_cast<OptimizeDimension>(d);
        if (!out.empty()) out += ", ";
        out += fmt::format("{} {}", dimensionName(dim), choiceValue(c, dim));
    }
    return out;
}

}  // namespace

std::vector<core::WrapPolicy> defaultWrapChoices(const core::Model& model) {
    std::vector<core::WrapPolicy> out;
    const int64_t blocks = static_cast<int64_t>(model.blocks.size());
    core::WrapPolicy whole;
    whole.kind = core::WrapKind::Whole;
    out.push_back(whole);
    for (int64_t k : {8, 4, 2}) {
        if (k >= blocks) continue;
        core::WrapPolicy w;
        w.kind = core::WrapKind::EveryK;
        w.k = k;
        out.push_back(w);
    }
    if (blocks > 0) {
        core::WrapPolicy block;
        block.kind = core::WrapKind::Block;
        out.push_back(block);
    }
    return out;
}

std::vector<core::AcSpec> defaultAcChoices(const core::Model& model) {
    std::vector<core::AcSpec> out{{core::Checkpointing::None, 1}, {core::Checkpointing::AttnCore, 1}, {core::Checkpointing::Op, 1}};
    if (model.blocks.size() >= 2) out.push_back({core::Checkpointing::Layer, 2});
    out.push_back({core::Checkpointing::Full, 1});
    return out;
}

std::string_view dimensionName(OptimizeDimension d) {
    switch (d) {
        case OptimizeDimension::Strategy: return "strategy";
        case OptimizeDimension::Fsdp: return "fsdp";
        case OptimizeDimension::Reshard: return "reshard_after_forward";
        case OptimizeDimension::Prefetch: return "prefetch";
        case OptimizeDimension::Offload: return "offload";
        case OptimizeDimension::Wrap: return "wrap";
        case OptimizeDimension::Ac: return "ac";
        case OptimizeDimension::MicroBatch: return "micro-batch";
    }
    return "?";
}

std::string choiceValue(const OptimizeChoice& c, OptimizeDimension d) {
    switch (d) {
        case OptimizeDimension::Strategy:
            return core::isHybrid(c.strategy) ? fmt::format("{} (shard {})", core::strategyName(c.strategy), c.shard_size)
                                              : std::string(core::strategyName(c.strategy));
        case OptimizeDimension::Fsdp: return fmt::format("FSDP{}", c.fsdp);
        case OptimizeDimension::Reshard:
            return c.reshard == core::ReshardMode::Count ? fmt::format("{} ranks", c.reshard_k) : std::string("per strategy");
        case OptimizeDimension::Prefetch:
            if (c.fsdp == 2) return fmt::format("depth {}", c.prefetch_depth);
            return fmt::format("backward {}, forward {}", c.backward_prefetch == BackwardPrefetch::Pre ? "PRE" : "POST",
                               c.forward_prefetch ? "on" : "off");
        case OptimizeDimension::Offload: return std::string(core::offloadName(c.offload));
        case OptimizeDimension::Wrap: return core::wrapPolicyString(c.wrap);
        case OptimizeDimension::Ac: return core::acString(c.ac.mode, c.ac.every);
        case OptimizeDimension::MicroBatch: return fmt::format("{} x {} accumulation", c.micro_batch, c.grad_accum);
    }
    return "?";
}

core::Plan applyChoice(const core::Plan& base, const OptimizeChoice& c) {
    core::Plan plan = base;
    writeChoice(plan, c);
    return plan;
}

core::Result<ConfigurationBounds> configurationBounds(const core::Plan& plan, const HardwareProfile& profile) {
    EvaluationOptions eo;
    eo.per_unit = false;
    auto e = evaluatePlan(plan, &profile, eo);
    if (!e) return e.error();
    return boundsOf(*e, CostModel(profile));
}

core::Result<std::vector<OptimizeChoice>> enumerateSpace(const core::Plan& base, const OptimizeSpace& space,
                                                         int64_t global_batch) {
    auto sp = buildSpace(base, space, global_batch);
    if (!sp) return sp.error();
    std::vector<OptimizeChoice> out;
    out.reserve(sp->groups.size() * sp->shardings.size());
    for (const Group& g : sp->groups) {
        for (const Sharding& s : sp->shardings) out.push_back(makeChoice(*sp, g, s));
    }
    return out;
}

core::Result<OptimizeResult> optimize(const core::Plan& base, const OptimizeSpace& space, const HardwareProfile& profile,
                                      const OptimizeOptions& options) {
    if (!base.model) return core::makeError("model: no model loaded");
    if (options.top < 1) return core::makeError("--top must be at least 1 (got " + std::to_string(options.top) + ")");
    auto built = buildSpace(base, space, options.global_batch);
    if (!built) return built.error();
    Space& sp = *built;

    OptimizeResult result;
    result.batch_per_rank = sp.batch_per_rank;
    result.space_size = sp.groups.size() * sp.shardings.size();
    result.not_searched = {
        "activation checkpointing per unit: one mode for the whole model (layer:K checkpoints every K-th block)",
        "arbitrary contiguous groupings of blocks: the wrap choices are policies (whole, every:K, block); "
        "`shardcast search` finds the exact grouping for the chosen configuration",
        "explicit FSDP2 prefetch lists: the implicit prefetch depth is searched",
    };

    // Bounds per group, from a reference evaluation of each (FULL_SHARD, FSDP2, one unit per block).
    core::Plan plan = base;
    plan.cluster.gpu = profile.gpu;
    const CostModel cost(profile);
    // The time bound needs contention to only stretch compute (see the header).
    const bool bound_holds = profile.overlap_compute_slowdown >= 1.0;
    int64_t budget_bytes = kNoBound;  // the evaluation's own, from the first reference evaluated
    Evaluator evaluator;
    Evaluation e;
    EvaluationOptions eo;
    eo.headroom = options.headroom;
    eo.per_unit = false;
    // The fit verdict judges the timed curve (and the allocator's replay of it where modelled); the
    // host-issue-order replay only adds report figures.
    eo.issue_order_memory = false;
    eo.cancel = options.cancel;
    if (options.prune && bound_holds) {
        Sharding reference;
        reference.strategy = core::Strategy::FullShard;
        reference.fsdp = 2;
        reference.wrap.kind = core::WrapKind::Block;
        for (Group& g : sp.groups) {
            setChoice(plan, sp, g, reference);
            auto st = evaluator.evaluate(plan, &profile, eo, e);
            if (!st) {
                if (st.error().cancelled) return st.error();
                continue;  // bounds 0: never pruned
            }
            if (budget_bytes == kNoBound) budget_bytes = e.fit.budget_bytes;
            const ConfigurationBounds b = boundsOf(e, cost);
            g.bound_ns = b.step_ns;
            g.mem_bound_bytes = b.peak_bytes;
        }
    }
    std::vector<int32_t> order(sp.groups.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&sp](int32_t a, int32_t b) { return sp.groups[a].bound_ns < sp.groups[b].bound_ns; });

    std::vector<Scored> scored;
    std::vector<int32_t> pruned_groups, mem_pruned_groups;
    bool prune = options.prune && bound_holds;
    size_t since_report = 0;
    // Evaluates configuration (gi, si); false when one of its group's bounds proved wrong on it.
    auto evaluateOne = [&](int32_t gi, int32_t si, std::vector<int64_t>& top_steps) -> core::Result<bool> {
        if (options.cancel && options.cancel->cancelled()) return core::cancelledError();
        const Group& g = sp.groups[gi];
        setChoice(plan, sp, g, sp.shardings[si]);
        ++result.evaluated;
        bool ok = true;
        auto st = evaluator.evaluate(plan, &profile, eo, e);
        if (!st) {
            if (st.error().cancelled) return st.error();
            ++result.invalid;
        } else {
            Scored s;
            s.group = gi;
            s.sharding = si;
            s.step_ns = e.timeline.step_ns;
            s.peak_bytes = judgedPeakBytes(e.fit);
            s.budget_bytes = e.fit.budget_bytes;
            s.tokens_per_s_per_gpu = e.summary.tokens_per_s_per_gpu;
            s.mfu = e.summary.mfu;
            s.fits = e.fit.fits;
            scored.push_back(s);
            if (prune && (s.step_ns < g.bound_ns || s.peak_bytes < g.mem_bound_bytes)) ok = false;
            if (s.fits) {
                top_steps.insert(std::upper_bound(top_steps.begin(), top_steps.end(), s.step_ns), s.step_ns);
                if (static_cast<int>(top_steps.size()) > options.top) top_steps.pop_back();
            }
        }
        if (options.progress && result.evaluated + result.pruned < result.space_size && ++since_report == 64) {
            since_report = 0;
            options.progress(result.evaluated + result.pruned, result.space_size);
        }
        return ok;
    };
    // Evaluates every configuration of group `gi`; false when a bound proved wrong on one of them.
    auto evaluateGroup = [&](int32_t gi, std::vector<int64_t>& top_steps) -> core::Result<bool> {
        bool ok = true;
        for (int32_t si = 0; si < static_cast<int32_t>(sp.shardings.size()); ++si) {
            auto one = evaluateOne(gi, si, top_steps);
            if (!one) return one.error();
            ok = ok && *one;
        }
        return ok;
    };
    for (;;) {
        scored.clear();
        pruned_groups.clear();
        mem_pruned_groups.clear();
        result.evaluated = result.invalid = result.pruned = 0;
        std::vector<int64_t> top_steps;  // fitting step times, ascending, at most options.top
        bool violated = false;
        for (int32_t gi : order) {
            const Group& g = sp.groups[gi];
            const int64_t threshold =
                static_cast<int>(top_steps.size()) >= options.top ? top_steps.back() : kNoBound;
            if (prune && g.mem_bound_bytes > budget_bytes) {
                mem_pruned_groups.push_back(gi);  // its activations alone exceed the budget: nothing fits
                result.pruned += sp.shardings.size();
                continue;
            }
            if (prune && g.bound_ns > threshold) {
                pruned_groups.push_back(gi);
                result.pruned += sp.shardings.size();
                continue;
            }
            auto ok = evaluateGroup(gi, top_steps);
            if (!ok) return ok.error();
            if (!*ok) {
                violated = true;
                break;
            }
        }
        // Nothing fits: the closest configuration may lie in a group pruned for memory. Its overshoot
        // is at least its bound's, so only groups whose bound overshoots less than the closest so far
        // can hold a closer one.
        if (!violated && top_steps.empty() && !mem_pruned_groups.empty()) {
            std::sort(mem_pruned_groups.begin(), mem_pruned_groups.end(), [&sp](int32_t a, int32_t b) {
                return sp.groups[a].mem_bound_bytes < sp.groups[b].mem_bound_bytes;
            });
            size_t kept = 0;
            for (size_t i = 0; i < mem_pruned_groups.size(); ++i) {
                const int32_t gi = mem_pruned_groups[i];
                int64_t closest = kNoBound;
                for (const Scored& s : scored) closest = std::min(closest, s.peak_bytes - s.budget_bytes);
                if (violated || sp.groups[gi].mem_bound_bytes - budget_bytes >= closest) {
                    mem_pruned_groups[kept++] = gi;
                    continue;
                }
                result.pruned -= sp.shardings.size();
                auto ok = evaluateGroup(gi, top_steps);
                if (!ok) return ok.error();
                if (!*ok) violated = true;
            }
            mem_pruned_groups.resize(kept);
        }
        if (violated) {
            // The bounds' premise failed for this model: answer exactly by evaluating everything.
            prune = false;
            result.bound_restarted = true;
            continue;
        }
        break;
    }
    auto entryOf = [&sp](const Scored& s) {
        OptimizeEntry en;
        en.choice = makeChoice(sp, sp.groups[s.group], sp.shardings[s.sharding]);
        en.step_s = static_cast<double>(s.step_ns) * 1e-9;
        en.tokens_per_s_per_gpu = s.tokens_per_s_per_gpu;
        en.mfu = s.mfu;
        en.peak_bytes = s.peak_bytes;
        en.budget_bytes = s.budget_bytes;
        en.fits = s.fits;
        return en;
    };
    // Fastest first; ties to the smaller peak, then enumeration order (deterministic).
    auto faster = [](const Scored& a, const Scored& b) {
        if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
        if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
        if (a.group != b.group) return a.group < b.group;
        return a.sharding < b.sharding;
    };
    std::vector<Scored> fitting;
    for (const Scored& s : scored) {
        if (s.fits) fitting.push_back(s);
    }
    std::sort(fitting.begin(), fitting.end(), faster);
    result.fits = !fitting.empty();

    int64_t min_pruned_bound = kNoBound;
    for (int32_t gi : pruned_groups) min_pruned_bound = std::min(min_pruned_bound, sp.groups[gi].bound_ns);
    result.cutoff_step_s = pruned_groups.empty() ? 0.0 : static_cast<double>(min_pruned_bound) * 1e-9;
    if (result.fits) {
        result.best = entryOf(fitting.front());
        for (size_t i = 0; i < fitting.size() && static_cast<int>(i) < options.top; ++i) result.top.push_back(entryOf(fitting[i]));
        // Front: by increasing peak, each strictly faster than everything with a smaller peak.
        std::vector<Scored> by_peak = fitting;
        std::sort(by_peak.begin(), by_peak.end(), [&faster](const Scored& a, const Scored& b) {
            if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
            return faster(a, b);
        });
        // A pruned configuration steps at least min_pruned_bound: only faster entries are known to be
        // undominated.
        int64_t best_step = kNoBound;
        for (const Scored& s : by_peak) {
            if (s.step_ns < best_step && s.step_ns < min_pruned_bound) {
                result.front.push_back(entryOf(s));
                best_step = s.step_ns;
            }
        }
    } else if (!scored.empty()) {
        const Scored* closest = &scored.front();
        for (const Scored& s : scored) {
            const int64_t over = s.peak_bytes - s.budget_bytes, best_over = closest->peak_bytes - closest->budget_bytes;
            if (over < best_over || (over == best_over && faster(s, *closest))) closest = &s;
        }
        result.best = entryOf(*closest);
        const OptimizeChoice& c = result.best.choice;
        std::string help;
        auto add = [&help](const std::string& s) { help += (help.empty() ? "" : "; ") + s; };
        const int64_t over = result.best.peak_bytes - result.best.budget_bytes;
        int64_t states = 0;  // sharded model states per GPU of the closest configuration
        EvaluationOptions with_states = eo;
        with_states.issue_order_memory = true;
        if (evaluator.evaluate(applyChoice(base, c), &profile, with_states, e)) {
            states = e.memory.model_states.params + e.memory.model_states.grads + e.memory.model_states.optimizer;
        }
        const int world = base.cluster.nodes * base.cluster.gpus_per_node;
        const int shard = c.shard_size == 0 ? world : c.shard_size;
        if (states > over) {
            // Sharding over k times the ranks leaves states / k: it saves states (1 - 1/k) >= over from
            // k >= states / (states - over). Nothing else shrinks, so k is a lower bound.
            const double k = std::ceil(static_cast<double>(states) / static_cast<double>(states - over));
            add(fmt::format("more GPUs: at least {:.0f}x the shard group ({} ranks now), which divides the {} of "
                            "sharded parameters, gradients and optimizer state per GPU",
                            k, shard, gib(states)));
        } else {
            add(fmt::format("more GPUs cannot make it fit by themselves: sharded model states are only {} per GPU",
                            gib(states)));
        }
        if (!contains(sp.offloads, core::Offload::Cpu)) add("allowing CPU offload (--offload none,cpu)");
        bool has_full = false;
        for (const core::AcSpec& a : sp.acs) has_full = has_full || a.mode == core::Checkpointing::Full;
        if (!has_full) add("allowing full activation checkpointing (--ac ...,full)");
        add("shorter sequences (--seq-len): activations grow with them");
        // Fits when budget = floor(capacity x (1 - H)) >= peak, i.e. H <= 1 - peak / capacity.
        const double capacity = static_cast<double>(profile.gpu.memory_bytes);
        const double max_headroom = std::floor((1.0 - static_cast<double>(result.best.peak_bytes) / capacity) * 1000) / 1000;
        if (max_headroom >= 0 && max_headroom < options.headroom) {
            add(fmt::format("--headroom {:.3f} or less (now {:.3f}), if the allocator's slack allows it", max_headroom,
                            options.headroom));
        }
        result.no_fit = fmt::format("No configuration fits under {} (GPU memory less {:.0f}% headroom). Closest: {}: "
                                    "peak {}, {} over. What would make it fit: {}.",
                                    gib(result.best.budget_bytes), options.headroom * 100, choiceLabel(c),
                                    gib(result.best.peak_bytes), gib(result.best.peak_bytes - result.best.budget_bytes),
                                    help);
    } else {
        result.no_fit = "No configuration of the space is a valid plan (every one was refused by validation).";
    }

    // What the best configuration with another choice in each dimension loses against the winner:
    // exact, by the same bound per choice. The best with value v is known once it steps no slower
    // than the bound of every pruned group that still holds configurations with v; until then the
    // configurations with v of the pruned group with the smallest bound are evaluated.
    if (result.fits) {
        std::vector<uint8_t> done(sp.groups.size() * sp.shardings.size(), 0);
        for (const Scored& s : scored) done[static_cast<size_t>(s.group) * sp.shardings.size() + s.sharding] = 1;
        for (int32_t gi : order) {
            // Invalid plans of evaluated groups are not in `scored`; they count as done.
            const bool pruned_group = std::find(pruned_groups.begin(), pruned_groups.end(), gi) != pruned_groups.end() ||
                                      std::find(mem_pruned_groups.begin(), mem_pruned_groups.end(), gi) != mem_pruned_groups.end();
            if (!pruned_group) std::fill_n(done.begin() + static_cast<ptrdiff_t>(gi * sp.shardings.size()), sp.shardings.size(), 1);
        }
        const OptimizeChoice& w = result.best.choice;
        bool violated = false;
        std::vector<int64_t> no_top;  // the refinement cannot change the top T (see above)
        for (int d = 0; d < kOptimizeDimensionCount && !violated; ++d) {
            const auto dim = static_cast<OptimizeDimension>(d);
            const bool group_dim = dim == OptimizeDimension::Ac || dim == OptimizeDimension::MicroBatch;
            // The dimension's value of each group (group_dim) or of each sharding.
            std::vector<std::string> value_of;
            if (group_dim) {
                for (const Group& g : sp.groups) value_of.push_back(choiceValue(makeChoice(sp, g, sp.shardings.front()), dim));
            } else {
                for (const Sharding& sh : sp.shardings) value_of.push_back(choiceValue(makeChoice(sp, sp.groups.front(), sh), dim));
            }
            std::vector<std::string> values = value_of;
            std::sort(values.begin(), values.end());
            values.erase(std::unique(values.begin(), values.end()), values.end());
            if (values.size() < 2) continue;
            const std::string wv = choiceValue(w, dim);
            auto valueOf = [&](const Scored& s) -> const std::string& {
                return value_of[group_dim ? static_cast<size_t>(s.group) : static_cast<size_t>(s.sharding)];
            };
            for (const std::string& v : values) {
                if (v == wv) continue;
                auto bestWith = [&]() -> const Scored* {
                    const Scored* best = nullptr;
                    for (const Scored& s : scored) {
                        if (s.fits && valueOf(s) == v && (!best || faster(s, *best))) best = &s;
                    }
                    return best;
                };
                const Scored* best = bestWith();
                for (int32_t gi : pruned_groups) {  // in increasing bound
                    if (group_dim && value_of[gi] != v) continue;
                    if (best && best->step_ns <= sp.groups[gi].bound_ns) break;
                    for (int32_t si = 0; si < static_cast<int32_t>(sp.shardings.size()); ++si) {
                        if (!group_dim && value_of[si] != v) continue;
                        uint8_t& flag = done[static_cast<size_t>(gi) * sp.shardings.size() + si];
                        if (flag) continue;
                        flag = 1;
                        --result.pruned;
                        auto one = evaluateOne(gi, si, no_top);
                        if (!one) return one.error();
                        if (!*one) violated = true;
                    }
                    best = bestWith();
                }
                if (violated) break;
                DimensionLoss loss;
                loss.dimension = dim;
                loss.value = v;
                loss.winner_value = wv;
                loss.fits = best != nullptr;
                if (best) {
                    loss.step_s = static_cast<double>(best->step_ns) * 1e-9;
                    loss.tokens_per_s_per_gpu = best->tokens_per_s_per_gpu;
                    loss.change = loss.tokens_per_s_per_gpu / result.best.tokens_per_s_per_gpu - 1.0;
                }
                result.losses.push_back(std::move(loss));
            }
        }
        if (violated) {
            // The bounds' premise failed for this model: answer exactly by evaluating everything.
            OptimizeOptions exhaustive = options;
            exhaustive.prune = false;
            auto again = optimize(base, space, profile, exhaustive);
            if (again) again->bound_restarted = true;
            return again;
        }
    }
    if (options.progress) options.progress(result.space_size, result.space_size);
    return result;
}

}  // namespace shardcast::sim
