#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "core/plan/plan_build.hpp"
#include "search/sweep.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cli {
namespace {

struct SweepCommandOptions {
    core::PlanOverrides plan;
    std::vector<std::string> strategies, acs;
    std::vector<int64_t> micro_batches;
    std::string profile;
    double headroom = core::kDefaultHeadroom;
    int threads = 0;
    int top = 20;
    bool json = false, csv = false;
    SaveRequest save;
};

double toGiB(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(core::kGiB); }

int runSweepCommand(const SweepCommandOptions& o) {
    auto built = buildPlanFromFlags(o.plan);
    if (!built) return reportInputError(built.error().message);
    const core::Plan& base = *built;
    if (auto mesh = core::validatePlan(base); !mesh) return reportInputError(mesh.error().message);

    sim::SweepOptions options;
    options.headroom = o.headroom;
    options.threads = o.threads;
    options.micro_batches = o.micro_batches;
    for (const auto& s : o.strategies) {
        auto parsed = core::parseStrategy(s);
        if (!parsed) return reportInputError("--strategies: '" + s + "' is not a strategy (NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2)");
        options.strategies.push_back(*parsed);
    }
    for (const auto& a : core::joinAcListItems(o.acs)) {
        auto parsed = core::parseAcSpec(a);
        if (!parsed) return reportInputError("--sweep-ac: " + core::acSpecError(a));
        if (auto e = core::resolveAcBlocks(*parsed, static_cast<int64_t>(base.model->blocks.size()), "--sweep-ac")) {
            return reportInputError(*e);
        }
        options.acs.push_back(*parsed);
    }
    for (int64_t mb : o.micro_batches) {
        if (mb <= 0) return reportInputError("--micro-batches: values must be positive (got " + std::to_string(mb) + ")");
    }
    auto resolved = resolveProfileArg(base.cluster, o.profile);
    if (!resolved) return reportInputError("--profile " + resolved.error().message);
    const sim::HardwareProfile& profile = resolved->profile;
    const bool tty = isatty(STDERR_FILENO) != 0 && !o.json && !o.csv;
    if (tty) {
        options.progress = [](size_t done, size_t total) {
            constexpr int kWidth = 40;
            const int filled = static_cast<int>(kWidth * done / std::max<size_t>(1, total));
            fmt::print(stderr, "\r[{}{}] {}/{}", std::string(filled, '#'), std::string(kWidth - filled, ' '), done, total);
            if (done == total) fmt::print(stderr, "\n");
        };
    }
    const auto candidates = sim::sweepCandidates(base, options);
    const auto results = sim::runSweep(base, candidates, profile, options);

    std::vector<size_t> order;
    for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].ok) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return results[a].step_s < results[b].step_s; });
    const auto front = sim::paretoFront(results);
    const int64_t best = sim::recommend(results);
    auto onFront = [&](size_t i) { return std::find(front.begin(), front.end(), i) != front.end(); };
    SaveOutcome saved;
    if (o.save.requested) {
        std::vector<core::Plan> plans;
        for (size_t i : front) {
            plans.push_back(base);
            sim::applyCandidate(results[i].candidate, plans.back());
        }
        saved = evaluateAndSaveReported(plans, *resolved, o.headroom, o.save, "sweep-front");
        if (saved.exit_code != kExitOk) return saved.exit_code;
        if (o.csv) fmt::print(stderr, "{}\n", saved.line);
    }

    if (o.csv) {
        fmt::print("strategy,wrap,micro_batch,ac,units,step_ms,peak_GiB,fits,exposed_comm_ms,mfu,tokens_per_s_per_gpu,pareto\n");
        for (size_t i : order) {
            const auto& r = results[i];
            fmt::print("{},{},{},{},{},{:.3f},{:.3f},{},{:.3f},{:.4f},{:.1f},{}\n", core::strategyName(r.candidate.strategy),
                       core::wrapPolicyString(r.candidate.wrap), r.candidate.micro_batch, core::acString(r.candidate.ac),
                       r.units, r.step_s * 1e3, toGiB(r.peak_bytes), r.fits ? 1 : 0, r.exposed_comm_s * 1e3, r.mfu,
                       r.tokens_per_s_per_gpu, onFront(i) ? 1 : 0);
        }
        return kExitOk;
    }
    if (o.json) {
        nlohmann::ordered_json j;
        j["capacity_bytes"] = profile.gpu.memory_bytes;
        j["headroom"] = o.headroom;
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        for (size_t i : order) {
            const auto& r = results[i];
            rows.push_back({{"strategy", core::strategyName(r.candidate.strategy)},
                            {"wrap", core::wrapPolicyString(r.candidate.wrap)},
                            {"micro_batch", r.candidate.micro_batch},
                            {"ac", core::acString(r.candidate.ac)},
                            {"units", r.units},
                            {"step_s", r.step_s},
                            {"peak_bytes", r.peak_bytes},
                            {"reserved_bytes", r.reserved_bytes},
                            {"fits", r.fits},
                            {"exposed_comm_s", r.exposed_comm_s},
                            {"mfu", r.mfu},
                            {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
                            {"pareto", onFront(i)}});
        }
        j["results"] = rows;
        nlohmann::ordered_json invalid = nlohmann::ordered_json::array();
        for (const auto& r : results) {
            if (!r.ok) invalid.push_back({{"candidate", sim::candidateLabel(r.candidate)}, {"error", r.error}});
        }
        j["invalid"] = invalid;
        if (o.save.requested) j["saved"] = saved.saved;
        j["recommendation"] = best >= 0 ? nlohmann::ordered_json(sim::candidateLabel(results[static_cast<size_t>(best)].candidate))
                                        : nlohmann::ordered_json(nullptr);
        fmt::print("{}\n", j.dump(2));
        return kExitOk;
    }

    fmt::print("{} candidates ({} valid), capacity {} with {:.0f}% headroom\n\n", results.size(), order.size(),
               core::formatGiB(profile.gpu.memory_bytes), o.headroom * 100);
    fmt::print("{:<3} {:<20} {:<18} {:>4} {:<10} {:>5} {:>11} {:>13} {:>14} {:>4} {:>14} {:>6} {:>12}\n", "", "strategy", "wrap", "mb",
               "ac", "units", "step (ms)", "peak (GiB)", "reserved (GiB)", "fits", "exp. comm (ms)", "MFU", "tok/s/GPU");
    int shown = 0;
    for (size_t i : order) {
        if (o.top > 0 && shown++ >= o.top) break;
        const auto& r = results[i];
        fmt::print("{:<3} {:<20} {:<18} {:>4} {:<10} {:>5} {:>11.2f} {:>13.2f} {:>14} {:>4} {:>14.2f} {:>6.3f} {:>12.0f}\n",
                   onFront(i) ? "*" : "", core::strategyName(r.candidate.strategy), core::wrapPolicyString(r.candidate.wrap),
                   r.candidate.micro_batch, core::acString(r.candidate.ac), r.units, r.step_s * 1e3, toGiB(r.peak_bytes),
                   r.reserved_bytes > 0 ? fmt::format("{:.2f}", toGiB(r.reserved_bytes)) : std::string("-"), r.fits ? "yes" : "no", r.exposed_comm_s * 1e3, r.mfu, r.tokens_per_s_per_gpu);
    }
    fmt::print("\n* on the Pareto front of (peak memory, step time)\n");
    if (best >= 0) {
        const auto& r = results[static_cast<size_t>(best)];
        fmt::print("Recommendation: {} ({:.2f} ms per step, peak {:.2f} GiB, reserved {:.2f} GiB)\n",
                   sim::candidateLabel(r.candidate), r.step_s * 1e3, toGiB(r.peak_bytes), toGiB(r.reserved_bytes));
    } else {
        fmt::print("Recommendation: none fits; try more GPUs, activation checkpointing or CPU offload\n");
    }
    if (o.save.requested) fmt::print("{} (the Pareto front, tagged sweep-front)\n", saved.line);
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerSweepCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<SweepCommandOptions>();
    CLI::App* cmd = app.add_subcommand("sweep", "Simulate every strategy x wrap policy of a plan: ranked table, Pareto "
                                                "front of (peak memory, step time), recommendation");
    addPlanOptions(*cmd, opts->plan);
    cmd->add_option("--strategies", opts->strategies, "Strategies to try (default: all valid for the cluster)")->delimiter(',');
    cmd->add_option("--micro-batches", opts->micro_batches, "Also vary the micro-batch over these values")->delimiter(',');
    cmd->add_option("--sweep-ac", opts->acs, "Also vary activation checkpointing over these: " + std::string(core::kAcChoices))->delimiter(',');
    addProfileOption(*cmd, opts->profile);
    addSaveOption(*cmd, opts->save, "the plans on the Pareto front and their predictions (tagged `sweep-front`)");
    addHeadroomOption(*cmd, opts->headroom);
    cmd->add_option("--threads", opts->threads, "Worker threads (0: every core)")->capture_default_str();
    cmd->add_option("--top", opts->top, "Rows of the table to print (0: all)")->capture_default_str();
    cmd->add_flag("--json", opts->json, "Print one JSON object");
    cmd->add_flag("--csv", opts->csv, "Print CSV rows");
    cmd->callback([opts, &exit_code] { exit_code = runSweepCommand(*opts); });
}

}  // namespace shardcast::cli
