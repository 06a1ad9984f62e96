// `shardcast search`: the fastest contiguous grouping of blocks into FSDP units that fits
// (search/wrap_search.hpp), checked with the full simulation, and the PyTorch code applying it.
#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/report.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "core/base/file_io.hpp"
#include "core/plan/plan_build.hpp"
#include "search/wrap_search.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/pytorch_code.hpp"

namespace shardcast::cli {
namespace {

struct SearchOptions {
    core::PlanOverrides plan;
    std::string profile, pytorch;
    double headroom = core::kDefaultHeadroom;
    bool json = false;
    SaveRequest save;
};

double toGiB(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(core::kGiB); }

int runSearch(const SearchOptions& o) {
    auto built = buildPlanFromFlags(o.plan);
    if (!built) return reportInputError(built.error().message);
    const core::Plan& plan = *built;
    auto mesh = core::validatePlan(plan);
    if (!mesh) return reportInputError(mesh.error().message);
    auto resolved = resolveProfileArg(plan.cluster, o.profile);
    if (!resolved) return reportInputError("--profile " + resolved.error().message);
    const sim::HardwareProfile& profile = resolved->profile;
    sim::WrapSearchOptions options;
    options.headroom = o.headroom;
    StageProgress progress("searching wrap units");
    auto searched = sim::searchWrap(plan, profile, options);
    progress.done();
    if (!searched) return reportInputError(searched.error().message);
    const sim::WrapSearchResult& r = *searched;

    std::string code;
    SaveOutcome saved;
    if (!r.ends.empty()) {
        core::Plan chosen = plan;
        chosen.sharding.wrap = r.wrap;
        code = sim::pytorchCode(chosen, *mesh, sim::unitsOfPolicy(r.wrap));
        if (o.save.requested) {
            saved = evaluateAndSaveReported({chosen}, *resolved, o.headroom, o.save, "search");
            if (saved.exit_code != kExitOk) return saved.exit_code;
        }
    } else if (o.save.requested) {
        saved.line = "Nothing saved: the search found no grouping";
        saved.saved = nullptr;
    }
    if (!o.pytorch.empty() && !code.empty()) {
        if (auto written = core::writeFileAtomically(o.pytorch, code); !written) {
            return reportInputError("--pytorch: " + written.error().message);
        }
    }

    if (o.json) {
        nlohmann::ordered_json j;
        j["fits"] = r.fits;
        j["message"] = r.message;
        j["grouping"] = sim::groupingString(r.ends);
        j["unit_ends"] = r.ends;
        j["units"] = r.units;
        j["wrap_modules"] = r.wrap.modules;
        j["capacity_bytes"] = r.capacity_bytes;
        j["cap_bytes"] = r.cap_bytes;
        j["headroom"] = o.headroom;
        j["predicted"] = {{"step_s", r.predicted_step_s}, {"peak_bytes", r.predicted_peak_bytes}};
        j["full"] = {{"step_s", r.full.step_s},
                     {"peak_bytes", r.full.peak_bytes},
                     {"reserved_bytes", r.full.reserved_bytes},
                     {"at_risk", r.full.at_risk},
                     {"mfu", r.full.mfu},
                     {"exposed_comm_s", r.full.exposed_comm_s},
                     {"tokens_per_s_per_gpu", r.full.tokens_per_s_per_gpu}};
        j["per_block"] = {{"step_s", r.per_block.step_s}, {"peak_bytes", r.per_block.peak_bytes}};
        j["tightenings"] = r.tightenings;
        j["notes"] = r.notes;
        if (o.save.requested) j["saved"] = saved.saved;
        if (o.pytorch.empty()) {
            j["pytorch"] = code;
        } else {
            j["pytorch_file"] = o.pytorch;
        }
        fmt::print("{}\n", j.dump(2));
        std::fflush(stdout);
        return kExitOk;
    }

    for (const std::string& note : r.notes) fmt::print("note: {}\n", note);
    if (!r.ends.empty()) {
        fmt::print("Grouping            {}\n", sim::groupingString(r.ends));
        fmt::print("Units               {} (+ root)\n", r.units);
        fmt::print("{:<20}{:>14} {:>14}\n", "", "model", "full sim");
        fmt::print("{:<20}{:>14.2f} {:>14.2f}\n", "Step time (ms)", r.predicted_step_s * 1e3, r.full.step_s * 1e3);
        fmt::print("{:<20}{:>14.2f} {:>14.2f}   cap {:.2f} of {:.2f} GiB\n", "Peak (GiB)", toGiB(r.predicted_peak_bytes),
                   toGiB(r.full.peak_bytes), toGiB(r.cap_bytes), toGiB(r.capacity_bytes));
        if (r.full.reserved_bytes > 0) {
            fmt::print("{:<20}{:>14} {:>14.2f}   caching allocator's peak reserved + runtime overhead{}\n", "Reserved (GiB)", "",
                       toGiB(r.full.reserved_bytes), r.full.at_risk ? ": AT RISK, over the cap or the cache flushed" : "");
        }
        fmt::print("MFU                 {:14.3f}\n", r.full.mfu);
        fmt::print("Per block           {:14.2f} ms, peak {:.2f} GiB\n", r.per_block.step_s * 1e3, toGiB(r.per_block.peak_bytes));
    }
    if (!r.fits) fmt::print("Does not fit: {}\n", r.message);
    if (!code.empty()) {
        if (o.pytorch.empty()) {
            fmt::print("\n{}", code);
        } else {
            fmt::print("\nPyTorch code written to {}\n", o.pytorch);
        }
    }
    if (o.save.requested) fmt::print("{}\n", saved.line);
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerSearchCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<SearchOptions>();
    CLI::App* cmd = app.add_subcommand("search", "Find the fastest grouping of blocks into FSDP units that fits in memory "
                                                 "(exact DP, checked by the full simulation) and print its PyTorch code");
    addPlanOptions(*cmd, opts->plan);
    addHeadroomOption(*cmd, opts->headroom);
    addProfileOption(*cmd, opts->profile);
    addSaveOption(*cmd, opts->save, "the chosen plan and its prediction (tagged `search`)");
    cmd->add_option("--pytorch", opts->pytorch, "Write the PyTorch code to FILE instead of printing it")->type_name("FILE");
    cmd->add_flag("--json", opts->json, "Print one JSON object");
    cmd->callback([opts, &exit_code] { exit_code = runSearch(*opts); });
}

}  // namespace shardcast::cli
