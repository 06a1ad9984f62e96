#include "search/optimize.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base/units.hpp"
#include "core/lower/lower.hpp"
#include "core/memory/reserved_floor.hpp"
#include "search/optimize_bounds.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

// The space's pipeline ranks: one rank has no pipeline schedule, so the base plan's interleaving
// (pp_virtual_stages) applies to pipelines only.
void setPipelineRanks(core::ShardingSpec& s, int pp) {
    s.pp = pp;
    if (pp == 1 && s.pp_schedule == core::PpSchedule::Interleaved1F1B) {
        s.pp_schedule = core::PpSchedule::OneFOneB;
        s.pp_virtual_stages = 1;
    }
}

// With pp > 1, the schedule too (OptimizeSpace::pp_schedules).
void setPipelineRanks(core::ShardingSpec& s, int pp, const PipelineScheduleChoice& schedule) {
    if (pp > 1) {
        s.pp_schedule = schedule.schedule;
        s.pp_virtual_stages = schedule.virtual_stages;
    }
    setPipelineRanks(s, pp);
}

// The schedules searched with `pp` ranks: the space's, or the base plan's (one rank: no schedule).
std::vector<PipelineScheduleChoice> pipelineSchedulesFor(const core::Plan& base, const OptimizeSpace& space, int pp) {
    const PipelineScheduleChoice own{base.sharding.pp_schedule, base.sharding.pp_virtual_stages};
    if (pp == 1 || space.pp_schedules.empty()) return {own};
    return space.pp_schedules;
}

using BackwardPrefetch = core::ShardingSpec::BackwardPrefetch;
constexpr int64_t kNoBound = std::numeric_limits<int64_t>::max();
constexpr size_t kNone = std::numeric_limits<size_t>::max();
constexpr size_t kKeptReplays = 16;  // allocator replays whose figures a search keeps for reuse

// The sharding part of a choice: everything but micro-batch, accumulation and checkpointing, which
// the groups hold.
using Sharding = OptimizeChoice;

// Micro-batch and checkpointing: what the step-time bound depends on.
struct Group {
    int64_t micro_batch = 1;
    int64_t grad_accum = 1;
    int ac = 0;  // index into the space's acs
};

// An evaluated configuration. Its fit is judged on reserved memory (a replay of the caching
// allocator, ~85% of an evaluation) only where the allocated-only evaluation cannot decide it: the
// judged figure is never below the allocated peak (core::FitVerdict::judgedBytes) nor, when it
// fits, below core::reservedFloorBytes, so a configuration with either over the budget cannot fit.
// Until judged, peak_bytes is the larger of the two, a lower bound on the judged peak of a fitting
// configuration, and the searches order what may fit by it: a configuration ordered first is
// judged before it is used (its peak then only rises, so nothing judged later moves ahead of it).
struct Scored {
    int32_t group = 0, sharding = 0;
    int64_t step_ns = 0;
    int64_t peak_bytes = 0, budget_bytes = 0;
    int64_t allocated_bytes = 0;  // a lower bound on the judged peak, fitting or not
    double tokens_per_s_per_gpu = 0, mfu = 0;
    bool judged = false;   // peak_bytes and fits are the verdict on reserved memory
    bool fits = false;     // judged: the verdict; not judged: false
    bool may_fit = false;  // not judged, and both lower bounds fit: only judging decides
    bool mayFit() const { return fits || may_fit; }
    int64_t peakLowerBound() const { return judged ? peak_bytes : allocated_bytes; }
};

struct Space {
    std::vector<core::WrapPolicy> wraps;
    std::vector<core::AcSpec> acs;
    std::vector<core::Offload> offloads;
    std::vector<Sharding> shardings;
    std::vector<Group> groups;
    // Per sharding: the shardings that differ only in prefetch share a class, and their bound parts
    // (prefetch changes when units are gathered, not which collectives and copies run; the tests
    // check the parts are equal).
    std::vector<int32_t> bound_class;
    int32_t bound_classes = 0;
    int64_t batch_per_rank = 0;
};

template <class T>
bool contains(const std::vector<T>& v, const T& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

core::Result<Space> buildSpace(const core::Plan& base, const OptimizeSpace& in, int64_t global_batch) {
    Space sp;
    // With tensor parallelism FSDP's mesh is the data-parallel part: world / tp ranks, gpus_per_node
    // / tp of them per node (core/plan/plan.hpp Mesh).
    // Pipeline stages take world / pp ranks each; FSDP shards inside a stage.
    const int tp = std::max(1, base.sharding.tp);
    const int pp = std::max(1, base.sharding.pp);
    const int world = base.cluster.nodes * base.cluster.gpus_per_node / (tp * pp);
    const int gpn = std::max(1, base.cluster.gpus_per_node / tp);
    if (world < 1) return core::makeError("cluster: the world size must be positive");
    if (global_batch < 1) {
        return core::makeError("--global-batch must be a positive number of sequences per optimizer step (got " +
                               std::to_string(global_batch) + ")");
    }
    if (global_batch % world != 0) {
        const int64_t below = global_batch / world * world, above = below + world;
        return core::makeError(fmt::format(
            "--global-batch {} does not split over {} ranks: data parallelism gives every rank whole sequences, "
            "so the global batch must be a multiple of the data-parallel size ({} x {} GPUs{}); e.g. {}",
            global_batch, world, base.cluster.nodes, base.cluster.gpus_per_node,
            tp > 1 || pp > 1 ? fmt::format(" / (tp {} x pp {})", tp, pp) : std::string(),
            below > 0 ? fmt::format("{} or {}", below, above) : fmt::format("{} (one sequence per rank)", above)));
    }
    sp.batch_per_rank = global_batch / world;

    std::vector<core::Strategy> strategies = in.strategies;
    if (strategies.empty()) {
        strategies = {core::Strategy::FullShard, core::Strategy::HybridShard, core::Strategy::ShardGradOp,
                      core::Strategy::HybridShardZero2, core::Strategy::NoShard};
    }
    if (tp > 1 || pp > 1) {  // what composes with tensor and pipeline parallelism (validatePlan): sharded, FSDP2, no offload
        strategies.erase(std::remove(strategies.begin(), strategies.end(), core::Strategy::NoShard), strategies.end());
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
    if (tp > 1 || pp > 1) fsdps.erase(std::remove(fsdps.begin(), fsdps.end(), 1), fsdps.end());
    sp.wraps = in.wraps.empty() ? defaultWrapChoices(*base.model) : in.wraps;
    sp.acs = in.acs.empty() ? defaultAcChoices(*base.model) : in.acs;
    if (in.ac_first_n) {
        // Only the pairs whose two modes the space holds for the whole model (N = 0 and N = L).
        auto holds = [&sp](core::Checkpointing mode) {
            return std::any_of(sp.acs.begin(), sp.acs.end(), [mode](const core::AcSpec& a) { return a.mode == mode; });
        };
        for (core::AcSpec& ac : firstNAcChoices(*base.model)) {
            if (!holds(ac.runs.front().mode) || !holds(ac.runs.back().mode)) continue;
            if (std::find(sp.acs.begin(), sp.acs.end(), ac) == sp.acs.end()) sp.acs.push_back(std::move(ac));
        }
    }
    sp.offloads = in.offloads.empty() ? std::vector<core::Offload>{core::Offload::None, core::Offload::Cpu} : in.offloads;
    if (tp > 1 || pp > 1) {
        sp.offloads.erase(std::remove(sp.offloads.begin(), sp.offloads.end(), core::Offload::Cpu), sp.offloads.end());
    }

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
                    const int32_t class_base = sp.bound_classes;
                    sp.bound_classes += static_cast<int32_t>(sp.offloads.size() * sp.wraps.size());
                    for (const Prefetch& p : prefetches) {
                        for (size_t oi = 0; oi < sp.offloads.size(); ++oi) {
                            const core::Offload off = sp.offloads[oi];
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
                                c.tp = tp;
                                c.pp = pp;
                                c.pp_schedule = base.sharding.pp_schedule;
                                c.pp_virtual = base.sharding.pp_virtual_stages;
                                sp.shardings.push_back(std::move(c));
                                sp.bound_class.push_back(class_base + static_cast<int32_t>(oi * sp.wraps.size()) + w);
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
        for (int a = 0; a < static_cast<int>(sp.acs.size()); ++a) sp.groups.push_back({mb, sp.batch_per_rank / mb, a});
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
    sh.tp = c.tp;
    setPipelineRanks(sh, c.pp);
    if (c.pp > 1) {
        sh.pp_schedule = c.pp_schedule;
        sh.pp_virtual_stages = c.pp_virtual;
    }
    plan.training.offload = c.offload;
    core::applyAc(plan.training, c.ac);
    plan.training.micro_batch = c.micro_batch;
    plan.training.grad_accum = c.grad_accum;
}

void setChoice(core::Plan& plan, const Space& sp, const Group& g, const Sharding& s) {
    writeChoice(plan, makeChoice(sp, g, s));
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

std::vector<core::AcSpec> firstNAcChoices(const core::Model& model) {
    using core::Checkpointing;
    const auto blocks = static_cast<int64_t>(model.blocks.size());
    constexpr std::pair<Checkpointing, Checkpointing> kPairs[] = {
        {Checkpointing::Full, Checkpointing::None}, {Checkpointing::Full, Checkpointing::Op}, {Checkpointing::Op, Checkpointing::None}};
    std::vector<core::AcSpec> out;
    for (const auto& [x, y] : kPairs) {
        for (int64_t n = 1; n < blocks; ++n) out.push_back({Checkpointing::Blocks, 1, {{x, n}, {y, blocks - n}}});
    }
    return out;
}

std::string lossValue(const OptimizeChoice& c, OptimizeDimension d) {
    if (d != OptimizeDimension::Ac || c.ac.mode != core::Checkpointing::Blocks || c.ac.runs.size() != 2) return choiceValue(c, d);
    return fmt::format("blocks:{}*N,{}*rest", core::checkpointingName(c.ac.runs[0].mode), core::checkpointingName(c.ac.runs[1].mode));
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
        case OptimizeDimension::Tp: return "tp";
        case OptimizeDimension::Pp: return "pp";
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
        case OptimizeDimension::Ac: return core::acString(c.ac);
        case OptimizeDimension::MicroBatch: return fmt::format("{} x {} accumulation", c.micro_batch, c.grad_accum);
        case OptimizeDimension::Tp: return fmt::format("{}", c.tp);
        case OptimizeDimension::Pp:
            // 1F1B, the default schedule, goes unnamed.
            if (c.pp == 1 || c.pp_schedule == core::PpSchedule::OneFOneB) return fmt::format("{}", c.pp);
            return fmt::format("{} {}", c.pp, pipelineScheduleChoiceName({c.pp_schedule, c.pp_virtual}));
    }
    return "?";
}

core::Plan applyChoice(const core::Plan& base, const OptimizeChoice& c) {
    core::Plan plan = base;
    writeChoice(plan, c);
    return plan;
}

namespace {

// pp > 1: micro-batch 0's chain through the pipeline (search/optimize_bounds.hpp), from every
// pipeline rank's Program of `plan`, lowered in turn into `scratch`; 0 with one rank.
core::Result<int64_t> pipelineChainOf(const core::Plan& plan, const core::Mesh& mesh, core::Lowerer& lowerer,
                                      BoundAnalyzer& analyzer, const CostModel& cost, core::Program& scratch) {
    if (mesh.pp < 2) return int64_t{0};
    std::vector<PipelineRankPart> ranks(static_cast<size_t>(mesh.pp));
    for (int s = 0; s < mesh.pp; ++s) {
        if (auto lowered = lowerer.lowerStage(plan, mesh, s, scratch); !lowered) return lowered.error();
        ranks[static_cast<size_t>(s)] = analyzer.pipelineRankPart(scratch, cost);
    }
    return pipelineChainNs(ranks);
}

}  // namespace

core::Result<BoundParts> boundParts(const core::Plan& plan, const HardwareProfile& profile) {
    core::Plan on_profile = plan;
    on_profile.cluster.gpu = profile.gpu;
    auto mesh = core::validatePlan(on_profile);
    if (!mesh) return mesh.error();
    core::Program program;
    if (auto lowered = core::lower(on_profile, *mesh, program); !lowered) return lowered.error();
    const CostModel cost(profile);
    BoundAnalyzer analyzer;
    BoundParts parts;
    parts.group = analyzer.groupPart(program, cost);
    parts.sharding = analyzer.shardingPart(program, cost, profile);
    core::Lowerer lowerer;
    auto chain = pipelineChainOf(on_profile, *mesh, lowerer, analyzer, cost, program);
    if (!chain) return chain.error();
    parts.group.pipeline_ns = *chain;
    return parts;
}

core::Result<ConfigurationBounds> configurationBounds(const core::Plan& plan, const HardwareProfile& profile) {
    auto parts = boundParts(plan, profile);
    if (!parts) return parts.error();
    return combineBounds(parts->group, parts->sharding, profile);
}

core::Result<PipelineScheduleChoice> parsePipelineScheduleChoice(std::string_view text) {
    const size_t colon = text.find(':');
    const auto schedule = core::parsePpSchedule(text.substr(0, colon));
    const std::string valid = "GPipe, 1F1B or Interleaved1F1B:V (V >= 2 stages per rank)";
    if (!schedule) return core::makeError(fmt::format("'{}' is not a pipeline schedule; valid: {}", text, valid));
    PipelineScheduleChoice c{*schedule, 1};
    if (*schedule != core::PpSchedule::Interleaved1F1B) {
        if (colon != std::string_view::npos) {
            return core::makeError(fmt::format("'{}': only Interleaved1F1B takes stages per rank; valid: {}", text, valid));
        }
        return c;
    }
    const std::string_view v = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
    int n = 0;
    const bool digits = !v.empty() && v.size() <= 3 && v.find_first_not_of("0123456789") == std::string_view::npos;
    if (digits) n = std::stoi(std::string(v));
    if (!digits || n < 2) {
        return core::makeError(fmt::format("'{}': Interleaved1F1B needs its stages per rank, 2 or more, as "
                                           "Interleaved1F1B:V; valid: {}",
                                           text, valid));
    }
    c.virtual_stages = n;
    return c;
}

std::string pipelineScheduleChoiceName(const PipelineScheduleChoice& c) {
    if (c.schedule != core::PpSchedule::Interleaved1F1B) return std::string(core::ppScheduleName(c.schedule));
    return fmt::format("Interleaved1F1B:{}", c.virtual_stages);
}

core::Result<std::vector<OptimizeChoice>> enumerateSpace(const core::Plan& base, const OptimizeSpace& space,
                                                         int64_t global_batch) {
    std::vector<OptimizeChoice> out;
    const std::vector<int> tps = space.tps.empty() ? std::vector<int>{base.sharding.tp} : space.tps;
    const std::vector<int> pps = space.pps.empty() ? std::vector<int>{base.sharding.pp} : space.pps;
    for (int tp : tps) {
        for (int pp : pps) {
            for (const PipelineScheduleChoice& sched : pipelineSchedulesFor(base, space, pp)) {
                core::Plan with_tp = base;
                with_tp.sharding.tp = tp;
                setPipelineRanks(with_tp.sharding, pp, sched);
                auto sp = buildSpace(with_tp, space, global_batch);
                if (!sp) return sp.error();
                out.reserve(out.size() + sp->groups.size() * sp->shardings.size());
                for (const Group& g : sp->groups) {
                    for (const Sharding& s : sp->shardings) out.push_back(makeChoice(*sp, g, s));
                }
            }
        }
    }
    return out;
}

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A configuration (sharding >= 0) or a whole group not yet expanded into its configurations
// (sharding < 0), keyed by a lower bound on the step time of what it stands for.
struct Node {
    int64_t key = 0;
    int32_t group = 0;
    int32_t sharding = -1;
};
// For a min-heap in (key, group, sharding) order: deterministic.
bool later(const Node& a, const Node& b) {
    if (a.key != b.key) return a.key > b.key;
    if (a.group != b.group) return a.group > b.group;
    return a.sharding > b.sharding;
}

enum class State : uint8_t { Unseen, Queued, Evaluated, MemoryPruned };

// Fastest first; ties to the smaller peak, then enumeration order (deterministic).
bool faster(const Scored& a, const Scored& b) {
    if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
    if (a.peak_bytes != b.peak_bytes) return a.peak_bytes < b.peak_bytes;
    if (a.group != b.group) return a.group < b.group;
    return a.sharding < b.sharding;
}

// One run of the search over a built space: best-first in increasing time bound, pruning by the
// bounds of search/optimize_bounds.hpp when `prune`. A bound proved wrong on an evaluated
// configuration sets `violated`; the caller then runs again without pruning.
class Search {
public:
    Search(const core::Plan& base, const Space& sp, const HardwareProfile& profile, const OptimizeOptions& options,
           bool prune)
        : m_base(base), m_sp(sp), m_profile(profile), m_options(options), m_prune(prune), m_cost(profile),
          m_groups(sp.groups.size()), m_shardings(sp.shardings.size()) {
        m_plan = base;
        m_plan.cluster.gpu = profile.gpu;
        m_budget_bytes = core::judgeFit(0, profile.gpu.memory_bytes, options.headroom).budget_bytes;
        m_eo.headroom = options.headroom;
        m_eo.per_unit = false;
        m_eo.lifecycle = false;  // the search ranks steps; the report's init and eval lines are the winner's
        // Allocated only: the allocator is replayed by judge(), where the answer needs it (or on
        // every configuration without pruning, the reference the tests compare with).
        m_eo.reserved_memory = false;
        // The fit verdict judges the timed curve; the host-issue-order replay only adds report figures.
        m_eo.issue_order_memory = false;
        m_eo.cancel = options.cancel;
        // Configurations that differ in time only replay the same allocator calls: keep the last
        // replays' figures (exact: the calls are compared in full). Not in the unpruned reference.
        if (prune) m_evaluator.keepReplays(kKeptReplays);
        m_eo.progress = [this](EvaluationStage stage) { enterStage(static_cast<int>(stage)); };
        m_state.assign(m_groups * m_shardings, State::Unseen);
        m_step_bound.assign(m_groups * m_shardings, 0);
        m_peak_bound.assign(m_groups * m_shardings, 0);
        m_class_initial.assign(static_cast<size_t>(sp.bound_classes), -1);
    }

    core::Status run(OptimizeResult& result);

    bool violated() const { return m_violated; }

private:
    size_t at(int32_t g, int32_t s) const { return static_cast<size_t>(g) * m_shardings + static_cast<size_t>(s); }
    core::Status computeGroupParts();
    core::Status expand(int32_t g);
    core::Status evaluate(int32_t g, int32_t s);
    // Judges m_scored[k] on reserved memory (re-evaluating it first unless m_e holds it).
    core::Status judge(size_t k);
    // The first configuration in `faster` order that `admit` accepts and that fits or may fit;
    // npos when none. Once it is judged it is the fastest fitting one `admit` accepts, exactly.
    template <class Admit>
    size_t firstMayFit(Admit admit) const;
    // Judges, first in `faster` order, those that may fit among the first T that fit or may fit,
    // until the first T are judged: they are then the top T, exactly.
    core::Status resolveTop();
    // The T-th fastest step among the configurations that fit or may fit (kNoBound: fewer).
    int64_t topThreshold();
    // The configuration closest to fitting (least overshoot, then faster), judged; npos: none scored.
    core::Result<size_t> closestJudged();
    // Lowers (g, s) into m_program for a bound; false: not a valid plan.
    core::Result<bool> lowerForBound(const Group& g, const Sharding& s);
    void enterStage(int stage);
    void finishStages();
    core::Status assemble(OptimizeResult& result);
    OptimizeEntry entryOf(const Scored& s) const;
    // The pending node with the smallest key that `admit` accepts; pending.size() when none.
    template <class Admit>
    size_t nextPending(const std::vector<Node>& pending, Admit admit) const;
    // Expands or evaluates pending[k] (removed from `pending`; an expansion adds its configurations).
    core::Status consume(std::vector<Node>& pending, size_t k);
    core::Status completeFront(OptimizeResult& result, std::vector<Node>& pending);
    core::Status refineLosses(OptimizeResult& result, std::vector<Node>& pending);
    core::Status findClosest();

    const core::Plan& m_base;
    const Space& m_sp;
    const HardwareProfile& m_profile;
    const OptimizeOptions& m_options;
    const bool m_prune;
    const CostModel m_cost;
    const size_t m_groups, m_shardings;
    core::Plan m_plan;  // the configuration being looked at (one plan, rewritten in place)
    int64_t m_budget_bytes = 0;

    Evaluator m_evaluator;
    Evaluation m_e;
    EvaluationOptions m_eo;
    core::Lowerer m_lowerer;
    core::Program m_program;
    BoundAnalyzer m_analyzer;

    std::vector<GroupBoundPart> m_group_part;
    // Sharding parts per class, by accumulation count, made when first needed.
    struct ClassParts {
        std::vector<ShardingBoundPart> part;
        std::vector<uint8_t> done;
    };
    std::map<int64_t, ClassParts> m_sharding_part;
    std::vector<int64_t> m_class_initial;  // per class, from any accumulation count; -1 until known
    std::vector<State> m_state;
    std::vector<int64_t> m_step_bound, m_peak_bound;
    std::vector<Node> m_heap;
    std::vector<Scored> m_scored;
    // Step times of configurations that fit or may fit, ascending, at most options.top; stale when
    // a configuration that may fit is judged not to.
    std::vector<int64_t> m_top_steps;
    bool m_top_stale = false;
    size_t m_in_e = kNone;  // the m_scored entry whose evaluation m_e holds
    bool m_violated = false;
    size_t m_evaluated = 0, m_invalid = 0, m_since_report = 0;
    OptimizeStats m_stats;
    int m_stage = -1;
    Clock::time_point m_stage_start;
};

void Search::enterStage(int stage) {
    const Clock::time_point now = Clock::now();
    if (m_stage >= 0) {
        const double s = std::chrono::duration<double>(now - m_stage_start).count();
        switch (static_cast<EvaluationStage>(m_stage)) {
            case EvaluationStage::Lower: m_stats.lower_seconds += s; break;
            case EvaluationStage::Simulate: m_stats.simulate_seconds += s; break;
            case EvaluationStage::ReplayMemory:
            case EvaluationStage::TimeMemory:
            case EvaluationStage::ReplayAllocator: m_stats.memory_seconds += s; break;
            case EvaluationStage::Validate:
            case EvaluationStage::Summarize: m_stats.other_evaluation_seconds += s; break;
        }
    }
    m_stage = stage;
    m_stage_start = now;
}

void Search::finishStages() {
    enterStage(-1);
    m_stage = -1;
}

core::Result<bool> Search::lowerForBound(const Group& g, const Sharding& s) {
    if (m_options.cancel && m_options.cancel->cancelled()) return core::cancelledError();
    setChoice(m_plan, m_sp, g, s);
    auto mesh = core::validatePlan(m_plan);
    if (!mesh) return false;
    if (!m_lowerer.lower(m_plan, *mesh, m_program)) return false;
    ++m_stats.bound_programs;
    return true;
}

// Group parts from a reference sharding (FULL_SHARD, FSDP2, one unit per block); a group whose
// reference is not a valid plan keeps the zero part (a bound still).
core::Status Search::computeGroupParts() {
    m_group_part.assign(m_groups, GroupBoundPart{});
    Sharding reference;
    reference.strategy = core::Strategy::FullShard;
    reference.fsdp = 2;
    reference.wrap.kind = core::WrapKind::Block;
    // The space's tensor- and pipeline-parallel degrees and schedule: a pipeline rank's kernels are
    // those of its stages' blocks, in its schedule's order.
    if (!m_sp.shardings.empty()) {
        const Sharding& any = m_sp.shardings.front();
        reference.tp = any.tp;
        reference.pp = any.pp;
        reference.pp_schedule = any.pp_schedule;
        reference.pp_virtual = any.pp_virtual;
    }
    for (size_t g = 0; g < m_groups; ++g) {
        auto ok = lowerForBound(m_sp.groups[g], reference);
        if (!ok) return ok.error();
        if (!*ok) continue;
        m_group_part[g] = m_analyzer.groupPart(m_program, m_cost);
        if (reference.pp > 1) {
            auto mesh = core::validatePlan(m_plan);  // the group's reference, as lowerForBound left it
            if (!mesh) return mesh.error();
            auto chain = pipelineChainOf(m_plan, *mesh, m_lowerer, m_analyzer, m_cost, m_program);
            if (!chain) return chain.error();
            m_group_part[g].pipeline_ns = *chain;
            m_stats.bound_programs += static_cast<size_t>(reference.pp);
        }
    }
    return core::Ok{};
}

// The group's configurations get their bounds: queued, or pruned when their peak bound exceeds the
// budget. A sharding class's part is made once per accumulation count, when first needed, from the
// group of that count with the fewest tasks (no checkpointing where the space has it).
core::Status Search::expand(int32_t gi) {
    const Group& g = m_sp.groups[static_cast<size_t>(gi)];
    // The class's part at `accum` (made when first needed); false when the class's plan is invalid.
    auto partAt = [this](int64_t accum, size_t s) -> core::Result<const ShardingBoundPart*> {
        ClassParts& parts = m_sharding_part[accum];
        if (parts.part.empty()) {
            parts.part.assign(static_cast<size_t>(m_sp.bound_classes), ShardingBoundPart{});
            parts.done.assign(static_cast<size_t>(m_sp.bound_classes), 0);
        }
        const auto c = static_cast<size_t>(m_sp.bound_class[s]);
        if (!parts.done[c]) {
            parts.done[c] = 1;
            const Group* ref = nullptr;
            for (const Group& other : m_sp.groups) {
                if (other.grad_accum != accum) continue;
                if (!ref || m_sp.acs[other.ac].mode == core::Checkpointing::None) ref = &other;
            }
            auto ok = lowerForBound(*ref, m_sp.shardings[s]);
            if (!ok) return ok.error();
            if (*ok) {
                parts.part[c] = m_analyzer.shardingPart(m_program, m_cost, m_profile);
                m_class_initial[c] = parts.part[c].initial_bytes;
            }
        }
        return &parts.part[c];
    };
    const GroupBoundPart& group = m_group_part[static_cast<size_t>(gi)];
    for (size_t s = 0; s < m_shardings; ++s) {
        const size_t i = at(gi, static_cast<int32_t>(s));
        if (m_state[i] != State::Unseen) continue;
        const auto c = static_cast<size_t>(m_sp.bound_class[s]);
        const ClassParts& here = m_sharding_part[g.grad_accum];
        if (here.done.empty() || !here.done[c]) {
            const int64_t initial = m_class_initial[c];
            if (initial >= 0 && initial + group.activation_peak_bytes > m_budget_bytes) {
                // Pruned without the class's Program at this accumulation: Program::initial does
                // not depend on the micro-batches, and initial + the activation high-water mark is
                // a bound by itself.
                m_peak_bound[i] = initial + group.activation_peak_bytes;
                m_state[i] = State::MemoryPruned;
                continue;
            }
        }
        auto part_at = partAt(g.grad_accum, s);
        if (!part_at) return part_at.error();
        const ShardingBoundPart& part = **part_at;
        const ConfigurationBounds b = combineBounds(m_group_part[static_cast<size_t>(gi)], part, m_profile);
        m_step_bound[i] = b.step_ns;
        m_peak_bound[i] = b.peak_bytes;
        if (b.peak_bytes > m_budget_bytes) {
            m_state[i] = State::MemoryPruned;
        } else {
            m_state[i] = State::Queued;
            m_heap.push_back({b.step_ns, gi, static_cast<int32_t>(s)});
            std::push_heap(m_heap.begin(), m_heap.end(), later);
        }
    }
    return core::Ok{};
}

core::Status Search::evaluate(int32_t gi, int32_t si) {
    if (m_options.cancel && m_options.cancel->cancelled()) return core::cancelledError();
    const size_t i = at(gi, si);
    m_state[i] = State::Evaluated;
    setChoice(m_plan, m_sp, m_sp.groups[static_cast<size_t>(gi)], m_sp.shardings[static_cast<size_t>(si)]);
    ++m_evaluated;
    auto st = m_evaluator.evaluate(m_plan, &m_profile, m_eo, m_e);
    finishStages();
    if (!st) {
        if (st.error().cancelled) return st.error();
        ++m_invalid;
    } else {
        Scored s;
        s.group = gi;
        s.sharding = si;
        s.step_ns = m_e.timeline.step_ns;
        s.allocated_bytes = m_e.fit.peak_bytes;
        s.peak_bytes = std::max(s.allocated_bytes, core::reservedFloorBytes(m_e.program, m_e.timed));
        s.budget_bytes = m_e.fit.budget_bytes;
        s.tokens_per_s_per_gpu = m_e.summary.tokens_per_s_per_gpu;
        s.mfu = m_e.summary.mfu;
        s.may_fit = s.peak_bytes <= s.budget_bytes;
        m_scored.push_back(s);
        m_in_e = m_scored.size() - 1;
        // The self-check: a configuration faster or smaller than its bound disproves the bound (the
        // peak bound is one on the allocated peak, and so on the judged one).
        const int64_t step_bound = m_step_bound[i] + m_options.bound_error_ns;
        if (m_prune && (s.step_ns < step_bound || s.allocated_bytes < m_peak_bound[i])) m_violated = true;
        if (!m_prune) {
            // The reference: every configuration judged as it is evaluated.
            if (auto judged = judge(m_in_e); !judged) return judged;
        }
        if (m_scored.back().mayFit()) {
            m_top_steps.insert(std::upper_bound(m_top_steps.begin(), m_top_steps.end(), s.step_ns), s.step_ns);
            if (static_cast<int>(m_top_steps.size()) > m_options.top) m_top_steps.pop_back();
        }
    }
    if (m_options.progress && ++m_since_report == 64) {
        m_since_report = 0;
        m_options.progress(std::min(m_evaluated, m_groups * m_shardings - 1), m_groups * m_shardings);
    }
    return core::Ok{};
}

core::Status Search::judge(size_t k) {
    if (m_in_e != k) {
        // Evaluated before: the same plan again (an allocated-only evaluation is ~15% of the replay).
        if (m_options.cancel && m_options.cancel->cancelled()) return core::cancelledError();
        const Scored& s = m_scored[k];
        setChoice(m_plan, m_sp, m_sp.groups[static_cast<size_t>(s.group)], m_sp.shardings[static_cast<size_t>(s.sharding)]);
        auto st = m_evaluator.evaluate(m_plan, &m_profile, m_eo, m_e);
        finishStages();
        if (!st) return st;
        assert(m_e.timeline.step_ns == s.step_ns && "an evaluation is deterministic");
        m_in_e = k;
        ++m_stats.reevaluations;
    }
    const Clock::time_point t = Clock::now();
    m_evaluator.judgeReserved(m_options.headroom, m_e);
    m_stats.replay_seconds += secondsSince(t);
    ++m_stats.reserved_replays;
    m_stats.replays_reused = static_cast<size_t>(m_evaluator.replaysReused());
    Scored& s = m_scored[k];
    const core::AllocatorStats& a = m_e.reserved.stats;
    // The self-check of core::reservedFloorBytes: a judged peak below it, where the allocator kept its
    // cache, disproves the floor (the search then re-runs without pruning).
    if (m_prune && a.releases == 0 && !a.out_of_memory && judgedPeakBytes(m_e.fit) < s.peak_bytes) m_violated = true;
    if (s.may_fit && !m_e.fit.fits) m_top_stale = true;
    s.judged = true;
    s.may_fit = false;
    s.fits = m_e.fit.fits;
    s.peak_bytes = judgedPeakBytes(m_e.fit);
    return core::Ok{};
}

template <class Admit>
size_t Search::firstMayFit(Admit admit) const {
    size_t first = kNone;
    for (size_t k = 0; k < m_scored.size(); ++k) {
        const Scored& s = m_scored[k];
        if (s.mayFit() && admit(s) && (first == kNone || faster(s, m_scored[first]))) first = k;
    }
    return first;
}

core::Status Search::resolveTop() {
    const auto top = static_cast<size_t>(m_options.top);
    std::vector<size_t> order;
    for (;;) {
        order.clear();
        for (size_t k = 0; k < m_scored.size(); ++k) {
            if (m_scored[k].mayFit()) order.push_back(k);
        }
        const size_t n = std::min(top, order.size());
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                          [this](size_t a, size_t b) { return faster(m_scored[a], m_scored[b]); });
        size_t open = kNone;
        for (size_t i = 0; i < n && open == kNone; ++i) {
            if (!m_scored[order[i]].judged) open = order[i];
        }
        if (open == kNone) return core::Ok{};
        if (auto st = judge(open); !st) return st;
    }
}

int64_t Search::topThreshold() {
    if (m_top_stale) {
        m_top_stale = false;
        m_top_steps.clear();
        for (const Scored& s : m_scored) {
            if (s.mayFit()) m_top_steps.push_back(s.step_ns);
        }
        std::sort(m_top_steps.begin(), m_top_steps.end());
        if (static_cast<int>(m_top_steps.size()) > m_options.top) m_top_steps.resize(static_cast<size_t>(m_options.top));
    }
    return static_cast<int>(m_top_steps.size()) >= m_options.top ? m_top_steps.back() : kNoBound;
}

core::Result<size_t> Search::closestJudged() {
    // Ordered by overshoot (from the allocated peak until judged: a bound whether it fits or not),
    // then step and enumeration order.
    auto closer = [](const Scored& a, const Scored& b) {
        const int64_t over_a = a.peakLowerBound() - a.budget_bytes, over_b = b.peakLowerBound() - b.budget_bytes;
        if (over_a != over_b) return over_a < over_b;
        if (a.step_ns != b.step_ns) return a.step_ns < b.step_ns;
        if (a.group != b.group) return a.group < b.group;
        return a.sharding < b.sharding;
    };
    for (;;) {
        size_t first = kNone;
        for (size_t k = 0; k < m_scored.size(); ++k) {
            if (first == kNone || closer(m_scored[k], m_scored[first])) first = k;
        }
        if (first == kNone || m_scored[first].judged) return first;
        if (auto st = judge(first); !st) return st.error();
    }
}

// Nothing fits: the closest configuration (least overshoot, then fastest) may be one pruned for
// memory. Its overshoot is at least its bound's, so they are evaluated in increasing peak bound
// while that bound overshoots no more than the closest so far. Groups pruned whole are expanded
// first when their own bound allows.
core::Status Search::findClosest() {
    std::vector<Node> items;  // key: a peak bound
    for (size_t g = 0; g < m_groups; ++g) {
        bool whole = true;
        for (size_t s = 0; s < m_shardings && whole; ++s) whole = m_state[at(static_cast<int32_t>(g), static_cast<int32_t>(s))] == State::Unseen;
        if (whole) items.push_back({m_group_part[g].activation_peak_bytes, static_cast<int32_t>(g), -1});
    }
    for (size_t i = 0; i < m_state.size(); ++i) {
        if (m_state[i] == State::MemoryPruned) {
            items.push_back({m_peak_bound[i], static_cast<int32_t>(i / m_shardings), static_cast<int32_t>(i % m_shardings)});
        }
    }
    std::make_heap(items.begin(), items.end(), later);
    while (!items.empty() && !m_violated) {
        auto closest_k = closestJudged();
        if (!closest_k) return closest_k.error();
        const int64_t closest =
            *closest_k == kNone ? kNoBound : m_scored[*closest_k].peak_bytes - m_scored[*closest_k].budget_bytes;
        const Node n = items.front();
        if (n.key - m_budget_bytes > closest) break;
        std::pop_heap(items.begin(), items.end(), later);
        items.pop_back();
        if (n.sharding >= 0) {
            if (auto st = evaluate(n.group, n.sharding); !st) return st;
            continue;
        }
        if (auto st = expand(n.group); !st) return st;
        for (size_t s = 0; s < m_shardings; ++s) {
            const size_t i = at(n.group, static_cast<int32_t>(s));
            if (m_state[i] == State::Queued) {
                // Fits by its bound: evaluated now (nothing fitting was found before it was expanded).
                if (auto st = evaluate(n.group, static_cast<int32_t>(s)); !st) return st;
            } else if (m_state[i] == State::MemoryPruned) {
                items.push_back({m_peak_bound[i], n.group, static_cast<int32_t>(s)});
                std::push_heap(items.begin(), items.end(), later);
            }
        }
    }
    m_heap.clear();  // expansions queued configurations that were evaluated just above
    return core::Ok{};
}

core::Status Search::run(OptimizeResult& result) {
    const Clock::time_point started = Clock::now();
    if (!m_prune) {
        for (size_t g = 0; g < m_groups; ++g) {
            for (size_t s = 0; s < m_shardings; ++s) {
                if (auto st = evaluate(static_cast<int32_t>(g), static_cast<int32_t>(s)); !st) return st;
            }
        }
    } else {
        const Clock::time_point bounds_started = Clock::now();
        if (auto st = computeGroupParts(); !st) return st;
        m_stats.bound_seconds += secondsSince(bounds_started);
        for (size_t g = 0; g < m_groups; ++g) {
            // A group whose activations alone exceed the budget holds nothing that fits.
            if (m_group_part[g].activation_peak_bytes > m_budget_bytes) continue;
            const ConfigurationBounds b = combineBounds(m_group_part[g], ShardingBoundPart{}, m_profile);
            m_heap.push_back({b.step_ns, static_cast<int32_t>(g), -1});
        }
        std::make_heap(m_heap.begin(), m_heap.end(), later);
        // Best first: a node whose bound exceeds the T-th fastest fitting step found holds nothing
        // of the top T, and neither does anything after it.
        while (!m_heap.empty() && !m_violated) {
            const Node n = m_heap.front();
            if (n.key > topThreshold()) {
                // Stop only once the T fastest that may fit are known to fit: judging drops those
                // whose reserved peak does not, and the threshold then rises.
                if (auto st = resolveTop(); !st) return st;
                if (n.key > topThreshold()) break;
                continue;
            }
            std::pop_heap(m_heap.begin(), m_heap.end(), later);
            m_heap.pop_back();
            if (n.sharding < 0) {
                const Clock::time_point t = Clock::now();
                if (auto st = expand(n.group); !st) return st;
                m_stats.bound_seconds += secondsSince(t);
            } else if (auto st = evaluate(n.group, n.sharding); !st) {
                return st;
            }
        }
        if (!m_violated) {
            if (auto st = resolveTop(); !st) return st;
        }
        if (!m_violated && firstMayFit([](const Scored&) { return true; }) == kNone) {
            if (auto st = findClosest(); !st) return st;
        }
    }
    if (m_violated) return core::Ok{};
    // findClosest evaluates configurations that may fit when it expands a group pruned whole.
    if (auto st = resolveTop(); !st) return st;
    if (auto st = assemble(result); !st) return st;
    const size_t before_losses = m_evaluated;
    if (result.fits) {
        // What is left to look at: nothing without pruning.
        std::vector<Node> pending = std::move(m_heap);
        m_heap.clear();
        if (auto st = refineLosses(result, pending); !st) return st;
        if (m_violated) return core::Ok{};
        m_stats.loss_evaluations = m_evaluated - before_losses;
        const size_t before_front = m_evaluated;
        if (auto st = completeFront(result, pending); !st) return st;
        if (m_violated) return core::Ok{};
        m_stats.front_evaluations = m_evaluated - before_front;
    }
    result.evaluated = m_evaluated;
    result.invalid = m_invalid;
    result.pruned = result.space_size - m_evaluated;
    for (State s : m_state) {
        if (s == State::MemoryPruned) ++m_stats.pruned_by_memory;
    }
    for (size_t g = 0; g < m_groups && m_prune; ++g) {
        if (m_group_part[g].activation_peak_bytes <= m_budget_bytes) continue;
        for (size_t s = 0; s < m_shardings; ++s) {
            if (m_state[at(static_cast<int32_t>(g), static_cast<int32_t>(s))] == State::Unseen) ++m_stats.pruned_by_memory;
        }
    }
    m_stats.pruned_by_time = result.pruned - m_stats.pruned_by_memory;
    m_stats.seconds = secondsSince(started);
    result.stats = m_stats;
    return core::Ok{};
}


OptimizeEntry Search::entryOf(const Scored& s) const {
    OptimizeEntry en;
    en.choice = makeChoice(m_sp, m_sp.groups[s.group], m_sp.shardings[s.sharding]);
    en.step_s = static_cast<double>(s.step_ns) * 1e-9;
    en.tokens_per_s_per_gpu = s.tokens_per_s_per_gpu;
    en.mfu = s.mfu;
    en.peak_bytes = s.peak_bytes;
    en.peak_is_bound = !s.judged;
    en.allocated_bytes = s.allocated_bytes;
    en.budget_bytes = s.budget_bytes;
    en.fits = s.fits;
    return en;
}

core::Status Search::assemble(OptimizeResult& result) {
    std::vector<Scored> fitting;
    for (const Scored& s : m_scored) {
        if (s.fits) fitting.push_back(s);
    }
    std::sort(fitting.begin(), fitting.end(), faster);
    result.fits = !fitting.empty();

    if (result.fits) {
        result.best = entryOf(fitting.front());
        for (size_t i = 0; i < fitting.size() && static_cast<int>(i) < m_options.top; ++i) result.top.push_back(entryOf(fitting[i]));
        // Every configuration that may fit and is ordered before the winner was judged (resolveTop).
        std::vector<Scored> at_risk;
        for (const Scored& s : m_scored) {
            if (!s.fits && s.allocated_bytes <= s.budget_bytes && s.step_ns < fitting.front().step_ns) at_risk.push_back(s);
        }
        std::sort(at_risk.begin(), at_risk.end(), faster);
        for (const Scored& s : at_risk) result.at_risk.push_back(entryOf(s));
    } else if (!m_scored.empty()) {
        auto closest = closestJudged();
        if (!closest) return closest.error();
        result.best = entryOf(m_scored[*closest]);
        const OptimizeChoice& c = result.best.choice;
        std::string help;
        auto add = [&help](const std::string& s) { help += (help.empty() ? "" : "; ") + s; };
        const int64_t over = result.best.peak_bytes - result.best.budget_bytes;
        int64_t states = 0;  // sharded model states per GPU of the closest configuration
        EvaluationOptions with_states = m_eo;
        with_states.progress = nullptr;
        with_states.issue_order_memory = true;
        m_in_e = kNone;
        if (m_evaluator.evaluate(applyChoice(m_base, c), &m_profile, with_states, m_e)) {
            states = m_e.memory.model_states.params + m_e.memory.model_states.grads + m_e.memory.model_states.optimizer;
        }
        const int world = m_base.cluster.nodes * m_base.cluster.gpus_per_node / (std::max(1, c.tp) * std::max(1, c.pp));
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
        if (!contains(m_sp.offloads, core::Offload::Cpu)) add("allowing CPU offload (--offload none,cpu)");
        bool has_full = false;
        for (const core::AcSpec& a : m_sp.acs) has_full = has_full || a.mode == core::Checkpointing::Full;
        if (!has_full) add("allowing full activation checkpointing (--ac ...,full)");
        add("shorter sequences (--seq-len): activations grow with them");
        // Fits when budget = floor(capacity x (1 - H)) >= peak, i.e. H <= 1 - peak / capacity.
        const double capacity = static_cast<double>(m_profile.gpu.memory_bytes);
        const double max_headroom = std::floor((1.0 - static_cast<double>(result.best.peak_bytes) / capacity) * 1000) / 1000;
        if (max_headroom >= 0 && max_headroom < m_options.headroom) {
            add(fmt::format("--headroom {:.3f} or less (now {:.3f}), if the allocator's slack allows it", max_headroom,
                            m_options.headroom));
        }
        result.no_fit = fmt::format("No configuration fits under {} (GPU memory less {:.0f}% headroom). Closest: {}: "
                                    "peak {}, {} over. What would make it fit: {}.",
                                    gib(result.best.budget_bytes), m_options.headroom * 100, choiceLabel(c),
                                    gib(result.best.peak_bytes), gib(result.best.peak_bytes - result.best.budget_bytes),
                                    help);
    } else {
        result.no_fit = "No configuration of the space is a valid plan (every one was refused by validation).";
    }
    return core::Ok{};
}

// What the best configuration with another choice in each dimension loses against the winner:
// exact, by the same bounds. The best with value v is known once it steps no slower than the bound
// of every node left that may hold configurations with v; until then the one with the smallest
// bound is expanded or evaluated. (Nothing found here can enter the top T: every node left steps
// slower than its T-th.)
core::Status Search::refineLosses(OptimizeResult& result, std::vector<Node>& pending) {
    const OptimizeChoice& w = result.best.choice;
    for (int d = 0; d < kOptimizeDimensionCount; ++d) {
        const auto dim = static_cast<OptimizeDimension>(d);
        const bool group_dim = dim == OptimizeDimension::Ac || dim == OptimizeDimension::MicroBatch;
        // The dimension's value of each group (group_dim) or of each sharding.
        std::vector<std::string> value_of;
        if (group_dim) {
            for (const Group& g : m_sp.groups) value_of.push_back(lossValue(makeChoice(m_sp, g, m_sp.shardings.front()), dim));
        } else {
            for (const Sharding& sh : m_sp.shardings) value_of.push_back(lossValue(makeChoice(m_sp, m_sp.groups.front(), sh), dim));
        }
        std::vector<std::string> values = value_of;
        std::sort(values.begin(), values.end());
        values.erase(std::unique(values.begin(), values.end()), values.end());
        if (values.size() < 2) continue;
        const std::string wv = lossValue(w, dim);
        auto valueOf = [&](int32_t g, int32_t s) -> const std::string& {
            return value_of[group_dim ? static_cast<size_t>(g) : static_cast<size_t>(s)];
        };
        for (const std::string& v : values) {
            if (v == wv) continue;
            auto withV = [&](const Scored& s) { return valueOf(s.group, s.sharding) == v; };
            const Scored* best = nullptr;
            for (;;) {
                const size_t first = firstMayFit(withV);
                const size_t pick = nextPending(pending, [&](const Node& n) {
                    if (group_dim) return value_of[static_cast<size_t>(n.group)] == v;
                    return n.sharding < 0 || value_of[static_cast<size_t>(n.sharding)] == v;
                });
                if (pick != pending.size() && (first == kNone || m_scored[first].step_ns > pending[pick].key)) {
                    if (auto st = consume(pending, pick); !st) return st;
                    if (m_violated) return core::Ok{};
                    continue;
                }
                // Nothing pending can be faster: the first that may fit is the answer once judged.
                if (first == kNone) break;
                if (m_scored[first].judged) {
                    best = &m_scored[first];
                    break;
                }
                if (auto st = judge(first); !st) return st;
            }
            DimensionLoss loss;
            loss.dimension = dim;
            loss.value = v;
            loss.best_value = v;
            loss.winner_value = choiceValue(w, dim);
            loss.fits = best != nullptr;
            if (best) {
                loss.best_value = choiceValue(makeChoice(m_sp, m_sp.groups[static_cast<size_t>(best->group)],
                                                         m_sp.shardings[static_cast<size_t>(best->sharding)]),
                                              dim);
                loss.step_s = static_cast<double>(best->step_ns) * 1e-9;
                loss.tokens_per_s_per_gpu = best->tokens_per_s_per_gpu;
                loss.change = loss.tokens_per_s_per_gpu / result.best.tokens_per_s_per_gpu - 1.0;
            }
            result.losses.push_back(std::move(loss));
        }
    }
    return core::Ok{};
}

template <class Admit>
size_t Search::nextPending(const std::vector<Node>& pending, Admit admit) const {
    size_t pick = pending.size();
    for (size_t k = 0; k < pending.size(); ++k) {
        if (!admit(pending[k])) continue;
        if (pick == pending.size() || later(pending[pick], pending[k])) pick = k;
    }
    return pick;
}

core::Status Search::consume(std::vector<Node>& pending, size_t k) {
    const Node n = pending[k];
    pending[k] = pending.back();
    pending.pop_back();
    if (n.sharding >= 0) return evaluate(n.group, n.sharding);
    const Clock::time_point t = Clock::now();
    if (auto st = expand(n.group); !st) return st;
    m_stats.bound_seconds += secondsSince(t);
    pending.insert(pending.end(), m_heap.begin(), m_heap.end());
    m_heap.clear();
    return core::Ok{};
}

// The Pareto front of (peak, step) over the fitting configurations, exact over the whole space: from
// the winner, each next entry is the fastest fitting configuration with a smaller peak than the
// last (ties to the smaller peak), found by the same bounds: a node is looked at while its step
// bound is at most the fastest such configuration found and its peak bound (for a group not yet
// expanded, its activation high-water mark) is below the last peak. Listed by increasing peak.
core::Status Search::completeFront(OptimizeResult& result, std::vector<Node>& pending) {
    result.front.clear();
    int64_t below = kNoBound;  // the peak the next entry must stay under
    for (;;) {
        auto isBelow = [&](const Scored& s) { return s.peak_bytes < below; };
        const Scored* best = nullptr;
        for (;;) {
            const size_t first = firstMayFit(isBelow);
            const size_t pick = nextPending(pending, [&](const Node& n) {
                if (n.sharding >= 0) return m_peak_bound[at(n.group, n.sharding)] < below;
                return m_group_part[static_cast<size_t>(n.group)].activation_peak_bytes < below;
            });
            if (pick != pending.size() && (first == kNone || m_scored[first].step_ns >= pending[pick].key)) {
                if (auto st = consume(pending, pick); !st) return st;
                if (m_violated) return core::Ok{};
                continue;
            }
            if (first == kNone) break;
            if (m_scored[first].judged) {
                best = &m_scored[first];
                break;
            }
            if (auto st = judge(first); !st) return st;
        }
        if (!best) break;
        result.front.push_back(entryOf(*best));
        below = best->peak_bytes;
    }
    std::reverse(result.front.begin(), result.front.end());
    return core::Ok{};
}

}  // namespace

namespace {

core::Result<OptimizeResult> optimizeAtTp(const core::Plan& base, const OptimizeSpace& space, const HardwareProfile& profile,
                                          const OptimizeOptions& options) {
    if (!base.model) return core::makeError("model: no model loaded");
    if (options.top < 1) return core::makeError("--top must be at least 1 (got " + std::to_string(options.top) + ")");
    if (!(options.headroom >= 0.0 && options.headroom < 1.0)) {
        return core::makeError("--headroom: must be a fraction of GPU memory from 0 (inclusive) to 1 (exclusive), got " +
                               std::to_string(options.headroom));
    }
    auto built = buildSpace(base, space, options.global_batch);
    if (!built) return built.error();
    const Space& sp = *built;
    const std::string options_first_n_text =
        space.ac_first_n ? "activation checkpointing per block beyond the first-N family (the first N blocks full, the rest none "
                           "or op; or the first N op, the rest none)"
                         : "activation checkpointing per block: one mode for the whole model (layer:K checkpoints every K-th "
                           "block); --ac-per-block adds the first-N family (the first N blocks in one mode, the rest in another)";

    bool violated = false;
    auto attempt = [&](bool prune) -> core::Result<OptimizeResult> {
        OptimizeResult result;
        result.batch_per_rank = sp.batch_per_rank;
        result.space_size = sp.groups.size() * sp.shardings.size();
        result.not_searched = {
            options_first_n_text,
            "arbitrary contiguous groupings of blocks: the wrap choices are policies (whole, every:K, block); "
            "`shardcast search` finds the exact grouping for the chosen configuration",
            "explicit FSDP2 prefetch lists: the implicit prefetch depth is searched",
        };
        Search search(base, sp, profile, options, prune);
        if (auto st = search.run(result); !st) return st.error();
        violated = search.violated();
        return result;
    };
    auto result = attempt(options.prune);
    if (result && violated) {
        // The bounds' premise failed for this model: answer exactly by evaluating everything.
        result = attempt(false);
        if (result) result->bound_restarted = true;
    }
    if (result && options.progress) options.progress(result->space_size, result->space_size);
    return result;
}

void addStats(OptimizeStats& a, const OptimizeStats& b) {
    a.bound_programs += b.bound_programs;
    a.pruned_by_memory += b.pruned_by_memory;
    a.pruned_by_time += b.pruned_by_time;
    a.loss_evaluations += b.loss_evaluations;
    a.front_evaluations += b.front_evaluations;
    a.reserved_replays += b.reserved_replays;
    a.reevaluations += b.reevaluations;
    a.replays_reused += b.replays_reused;
    a.seconds += b.seconds;
    a.bound_seconds += b.bound_seconds;
    a.lower_seconds += b.lower_seconds;
    a.simulate_seconds += b.simulate_seconds;
    a.memory_seconds += b.memory_seconds;
    a.other_evaluation_seconds += b.other_evaluation_seconds;
    a.replay_seconds += b.replay_seconds;
}

// The answer over several tensor-parallel degrees from the answer at each: every configuration
// lies in exactly one degree's space, so the fastest fitting ones, the front, the configurations
// at risk and the best with each other choice are those of the union, exactly.
OptimizeResult mergeTpResults(std::vector<OptimizeResult> subs, int top) {
    OptimizeResult out;
    auto faster = [](const OptimizeEntry& a, const OptimizeEntry& b) { return a.step_s < b.step_s; };
    size_t best_sub = 0;
    for (size_t i = 0; i < subs.size(); ++i) {
        const OptimizeResult& r = subs[i];
        out.space_size += r.space_size;
        out.evaluated += r.evaluated;
        out.invalid += r.invalid;
        out.pruned += r.pruned;
        out.bound_restarted = out.bound_restarted || r.bound_restarted;
        addStats(out.stats, r.stats);
        out.fits = out.fits || r.fits;
        for (const OptimizeEntry& e : r.top) out.top.push_back(e);
        for (const OptimizeEntry& e : r.front) out.front.push_back(e);
        const OptimizeEntry& a = r.best;
        const OptimizeEntry& b = subs[best_sub].best;
        const bool better = r.fits ? (!subs[best_sub].fits || a.step_s < b.step_s)
                                   : (!subs[best_sub].fits && a.peak_bytes - a.budget_bytes < b.peak_bytes - b.budget_bytes);
        if (i > 0 && better) best_sub = i;
    }
    std::stable_sort(out.top.begin(), out.top.end(), faster);
    if (out.top.size() > static_cast<size_t>(top)) out.top.resize(static_cast<size_t>(top));
    const OptimizeResult& win = subs[best_sub];
    out.best = win.best;
    out.batch_per_rank = win.batch_per_rank;
    out.no_fit = win.no_fit;
    out.not_searched = win.not_searched;
    // The front of the union: by increasing peak, each strictly faster than every one before it.
    std::stable_sort(out.front.begin(), out.front.end(), [](const OptimizeEntry& a, const OptimizeEntry& b) {
        return a.peak_bytes != b.peak_bytes ? a.peak_bytes < b.peak_bytes : a.step_s < b.step_s;
    });
    std::vector<OptimizeEntry> front;
    for (const OptimizeEntry& e : out.front) {
        if (front.empty() || e.step_s < front.back().step_s) front.push_back(e);
    }
    out.front = std::move(front);
    if (!out.fits) return out;
    const OptimizeEntry& w = out.best;
    for (const OptimizeResult& r : subs) {
        for (const OptimizeEntry& e : r.at_risk)
            if (e.step_s < w.step_s) out.at_risk.push_back(e);
    }
    std::stable_sort(out.at_risk.begin(), out.at_risk.end(), faster);
    // The best configuration with each other value of each dimension: a degree's own losses, and
    // its winner for the values it has.
    std::map<std::pair<int, std::string>, DimensionLoss> best;
    auto offer = [&](const DimensionLoss& l) {
        if (l.value == lossValue(w.choice, l.dimension)) return;
        auto [it, inserted] = best.try_emplace({static_cast<int>(l.dimension), l.value}, l);
        if (inserted) return;
        DimensionLoss& have = it->second;
        if ((l.fits && !have.fits) || (l.fits && have.fits && l.step_s < have.step_s)) have = l;
    };
    for (const OptimizeResult& r : subs) {
        for (const DimensionLoss& l : r.losses) offer(l);
        // The degree's best (or, where nothing of it fits, its closest) has the values its losses leave out.
        for (int d = 0; d < kOptimizeDimensionCount; ++d) {
            DimensionLoss l;
            l.dimension = static_cast<OptimizeDimension>(d);
            l.value = lossValue(r.best.choice, l.dimension);
            l.best_value = choiceValue(r.best.choice, l.dimension);
            l.fits = r.fits;
            if (r.fits) {
                l.step_s = r.best.step_s;
                l.tokens_per_s_per_gpu = r.best.tokens_per_s_per_gpu;
            }
            offer(l);
        }
    }
    for (auto& [key, l] : best) {
        l.winner_value = choiceValue(w.choice, l.dimension);
        l.change = l.fits ? l.tokens_per_s_per_gpu / w.tokens_per_s_per_gpu - 1.0 : 0.0;
        out.losses.push_back(l);
    }
    return out;
}

}  // namespace

core::Result<OptimizeResult> optimize(const core::Plan& base, const OptimizeSpace& space, const HardwareProfile& profile,
                                      const OptimizeOptions& options) {
    if (!base.model) return core::makeError("model: no model loaded");
    auto sorted = [](std::vector<int> v) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        return v;
    };
    const std::vector<int> tps = sorted(space.tps.empty() ? std::vector<int>{base.sharding.tp} : space.tps);
    const std::vector<int> pps = sorted(space.pps.empty() ? std::vector<int>{base.sharding.pp} : space.pps);
    // Every degree checked before any is searched, on a plan of the space with it (FSDP2
    // FULL_SHARD, no offload; a pipeline gets as many micro-batches as stages, the least 1F1B takes).
    auto probe = [&](int tp, int pp, const PipelineScheduleChoice& sched) {
        core::Plan at = base;
        at.sharding.tp = tp;
        setPipelineRanks(at.sharding, pp, sched);
        at.sharding.strategy = core::Strategy::FullShard;
        at.sharding.fsdp_version = 2;
        at.sharding.shard_size = 0;
        at.training.offload = core::Offload::None;
        at.training.grad_accum = std::max<int64_t>(at.training.grad_accum, pp);
        if (sched.schedule == core::PpSchedule::Interleaved1F1B) at.training.grad_accum = pp;  // one round
        return core::validatePlan(at);
    };
    for (int tp : tps) {
        if (tp == 1) continue;
        if (auto mesh = probe(tp, 1, {}); !mesh && mesh.error().message.find("sharding.tp") != std::string::npos) {
            return core::makeError("--tp " + std::to_string(tp) + ": " + mesh.error().message);
        }
    }
    for (int pp : pps) {
        if (pp == 1) continue;
        for (const PipelineScheduleChoice& sched : pipelineSchedulesFor(base, space, pp)) {
            auto mesh = probe(1, pp, sched);
            if (!mesh && mesh.error().message.find("sharding.pp") != std::string::npos) {
                return core::makeError("--pp " + std::to_string(pp) +
                                       (space.pp_schedules.empty() ? std::string()
                                                                   : " with " + pipelineScheduleChoiceName(sched)) +
                                       ": " + mesh.error().message);
            }
        }
    }
    // A global batch that splits over no degree of the space: name the tensor-parallel degrees it
    // would split over (each GPU then shares its sequences with tp - 1 others).
    auto withHint = [&](core::Error e) {
        if (e.message.find("does not split over") == std::string::npos) return e;
        const int64_t gpus = int64_t{base.cluster.nodes} * base.cluster.gpus_per_node;
        const int pp = std::max(1, base.sharding.pp);
        std::vector<std::string> fits;
        for (int tp = 2; tp <= base.cluster.gpus_per_node; ++tp) {
            if (std::find(tps.begin(), tps.end(), tp) != tps.end() || gpus % (int64_t{tp} * pp) != 0) continue;
            const int64_t dp = gpus / (int64_t{tp} * pp);
            if (options.global_batch % dp == 0 && probe(tp, 1, {})) fits.push_back(std::to_string(tp));
        }
        if (!fits.empty()) {
            e.message += fmt::format("; tensor parallelism leaves fewer data-parallel ranks, and the global batch "
                                     "splits over them with --tp {}",
                                     fmt::join(fits, ","));
        }
        return e;
    };
    std::vector<OptimizeResult> subs;
    std::vector<std::string> skipped;
    size_t spaces = 0;
    for (int pp : pps) spaces += tps.size() * pipelineSchedulesFor(base, space, pp).size();
    const bool several = spaces > 1;
    for (int tp : tps) {
        for (int pp : pps) {
            for (const PipelineScheduleChoice& sched : pipelineSchedulesFor(base, space, pp)) {
                core::Plan at = base;
                at.sharding.tp = tp;
                setPipelineRanks(at.sharding, pp, sched);
                auto r = optimizeAtTp(at, space, profile, options);
                if (!r) {
                    // With several degrees, one whose space is empty (the global batch does not split
                    // over its data-parallel ranks, nothing left to search, nothing valid) is left out
                    // and said so.
                    if (r.error().cancelled) return r.error();
                    if (!several) return withHint(r.error());
                    skipped.push_back(pp > 1 ? fmt::format("tp {} x pp {} {}: {}", tp, pp, pipelineScheduleChoiceName(sched),
                                                           r.error().message)
                                             : fmt::format("tp {}: {}", tp, r.error().message));
                    continue;
                }
                subs.push_back(std::move(*r));
            }
        }
    }
    if (subs.empty()) {
        return withHint(core::Error{"no tensor- or pipeline-parallel degree leaves anything to search: " + skipped.front()});
    }
    OptimizeResult out = subs.size() == 1 ? std::move(subs.front()) : mergeTpResults(std::move(subs), options.top);
    for (std::string& s : skipped) out.not_searched.push_back(std::move(s));
    return out;
}

}  // namespace shardcast::sim
