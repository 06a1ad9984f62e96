#include "apps/shardcast/store_cli.hpp"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/shardcast/commands.hpp"
#include "core/sharding.hpp"
#include "core/host_info.hpp"
#include "core/step_io.hpp"
#include "core/units.hpp"
#include "core/version.hpp"

namespace shardcast::cli {
namespace {

namespace fs = std::filesystem;

std::string& dbFlag() {
    static std::string value;  // --db of the one subcommand that runs
    return value;
}

std::string joinNames(const std::vector<std::string>& names) { return fmt::format("{}", fmt::join(names, ", ")); }

}  // namespace

void addDbOption(CLI::App& cmd) {
    cmd.add_option("--db", dbFlag(),
                   "Store file (SQLite) to read and save in; default: $SHARDCAST_DB, else "
                   "$XDG_DATA_HOME/shardcast/shardcast.db, else ~/.local/share/shardcast/shardcast.db")
        ->type_name("PATH");
}

core::Result<fs::path> storePath() {
    if (!dbFlag().empty()) return fs::path(dbFlag());
    return db::defaultDbPath();
}

core::Result<std::unique_ptr<db::Store>> openStore(bool create) {
    auto path = storePath();
    if (!path) return path.error();
    std::error_code ec;
    if (!create && !fs::exists(*path, ec)) {
        return core::makeError(fmt::format("{}: no store there yet (nothing has been saved; `--save` on plan, simulate, "
                                           "sweep, search, run or calibrate creates it, or pass --db PATH)",
                                           path->string()));
    }
    return db::Store::open(*path, create);
}

void addSaveOption(CLI::App& cmd, SaveRequest& save, const std::string& what) {
    cmd.add_option_function<std::string>(
           "--save",
           [&save](const std::string& name) {
               save.requested = true;
               save.name = name;
           },
           "Save " + what + " in the store (see --db) under the optional NAME; `shardcast db list` shows it")
        ->expected(0, 1)
        ->type_name("[NAME]");
}

void addProfileOption(CLI::App& cmd, std::string& profile) {
    cmd.add_option("--profile", profile,
                   "Hardware profile: a profile JSON file, or the name of a profile stored with `calibrate --save "
                   "NAME` (the newest of that name); default: the GPU's documented figures")
        ->type_name("NAME|FILE");
}

core::Result<ResolvedProfile> resolveProfileArg(const core::ClusterSpec& cluster, const std::string& arg) {
    std::error_code ec;
    if (arg.empty() || fs::exists(arg, ec)) {
        auto profile = sim::resolveProfile(cluster, arg);
        if (!profile) return profile.error();
        return ResolvedProfile{std::move(*profile), std::nullopt, arg.empty() ? "preset" : "file"};
    }
    auto store = openStore(false);
    if (!store) {
        return core::makeError(fmt::format("'{}' is neither a file nor a stored profile: no such file, and {}", arg,
                                           store.error().message));
    }
    auto object = (*store)->profileByName(arg);
    if (!object) {
        std::vector<std::string> names;
        if (auto entries = (*store)->list(db::Kind::profile, std::nullopt)) {
            for (const db::Entry& e : *entries) {
                if (!e.name.empty() && std::find(names.begin(), names.end(), e.name) == names.end()) names.push_back(e.name);
            }
        }
        return core::makeError(fmt::format("'{}' is neither a file nor a profile stored in {} (stored profiles: {})", arg,
                                           (*store)->path().string(), names.empty() ? "none" : joinNames(names)));
    }
    const std::string where = fmt::format("{}: {}", (*store)->path().string(), db::formatId(object->id));
    auto profile = sim::profileFromJson(object->body.at("profile"), where, sim::HardwareProfile::fromCluster(cluster));
    if (!profile) return profile.error();
    return ResolvedProfile{std::move(*profile), object->id, object->body.value("source", std::string("calibrated"))};
}

std::string planSummaryLine(const core::Plan& plan) {
    const auto& t = plan.training;
    return fmt::format("{}, {}x {}, {}, {}, mb {} x seq {}{}", plan.model ? plan.model->name : plan.model_ref,
                       plan.cluster.worldSize(), plan.cluster.gpu.name, core::strategyName(plan.sharding.strategy),
                       core::wrapPolicyString(plan.sharding.wrap), t.micro_batch, t.seq_len,
                       t.grad_accum > 1 ? fmt::format(" x accum {}", t.grad_accum) : std::string());
}

core::Result<SavedPrediction> savePrediction(db::Store& store, const core::Plan& plan, const sim::Evaluation& e,
                                             const ResolvedProfile& profile, const std::string& name) {
    auto plan_json = core::selfContainedPlanJson(plan);
    if (!plan_json) return plan_json.error();
    // The plan first, with its one-line summary: savePrediction finds it again by its hash.
    auto plan_id = store.savePlan(*plan_json, "", planSummaryLine(plan));
    if (!plan_id) return plan_id.error();
    std::optional<db::ObjectId> profile_id = profile.stored;
    if (!profile_id) {
        // The figures in effect, stored once per content: a prediction can always be re-made.
        db::ProfileInput input;
        input.name = fmt::format("{} {}", profile.profile.gpu.name, profile.source == "preset" ? "defaults" : "file");
        input.cluster = profile.profile.gpu.name;
        input.source = profile.source;
        input.profile = sim::profileToJson(profile.profile);
        input.summary_line = fmt::format("{}, {} {} peak", core::formatGiB(profile.profile.gpu.memory_bytes),
                                         core::formatFlopRate(profile.profile.peakFlops(core::DType::BF16)), "bf16");
        auto saved = store.saveProfile(input);
        if (!saved) return saved.error();
        profile_id = *saved;
    }
    db::PredictionInput input;
    input.name = name;
    input.plan = std::move(*plan_json);
    input.profile = profile_id;
    input.headroom = e.fit.headroom;
    input.summary = core::stepSummaryToJson(e.summary);
    input.timeline = core::timelineToJson(e.timeline);
    input.memory = core::timedMemoryToJson(e.timed);
    input.summary_line = fmt::format("{}: {:.2f} ms/step, peak {} of {} ({})", planSummaryLine(plan), e.summary.step_s * 1e3,
                                     core::formatGiB(e.summary.peak_bytes), core::formatGiB(e.fit.capacity_bytes),
                                     e.fit.fits ? "fits" : "does not fit");
    auto saved = store.savePrediction(input);
    if (!saved) return saved.error();
    return SavedPrediction{*saved, *plan_id};
}

std::unique_ptr<db::Store> openStoreToSave(SaveOutcome& out) {
    auto store = openStore(true);
    if (store) return std::move(*store);
    fmt::print(stderr, "shardcast: error: --save: {}\n", store.error().message);
    out.exit_code = kExitBadInput;
    return nullptr;
}

void reportSaveFailure(SaveOutcome& out, const db::Store& store, const std::string& message) {
    fmt::print(stderr, "shardcast: error: --save: {}: {}\n", store.path().string(), message);
    out.exit_code = kExitRuntimeFailure;
}

SaveOutcome savePredictionReported(const core::Plan& plan, const sim::Evaluation& e, const ResolvedProfile& profile,
                                   const SaveRequest& request) {
    SaveOutcome out;
    auto store = openStoreToSave(out);
    if (!store) return out;
    auto saved = savePrediction(*store, plan, e, profile, request.name);
    if (!saved) {
        reportSaveFailure(out, *store, saved.error().message);
        return out;
    }
    out.saved = {{"db", store->path().string()},
                 {"prediction", db::formatId(saved->prediction)},
                 {"plan", db::formatId(saved->plan)}};
    out.line = fmt::format("Saved {} (plan {}) in {}", db::formatId(saved->prediction), db::formatId(saved->plan),
                           store->path().string());
    return out;
}

SaveOutcome evaluateAndSaveReported(const std::vector<core::Plan>& plans, const ResolvedProfile& profile,
                                    double headroom, const SaveRequest& request, const std::string& tag) {
    SaveOutcome out;
    auto store = openStoreToSave(out);
    if (!store) return out;
    const std::string db_path = store->path().string();
    sim::EvaluationOptions options;
    options.headroom = headroom;
    options.record_curve = true;
    options.issue_order_memory = false;
    sim::Evaluator evaluator;
    sim::Evaluation e;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    std::vector<std::string> ids;
    for (const core::Plan& plan : plans) {
        core::Status done = evaluator.evaluate(plan, &profile.profile, options, e);
        core::Result<SavedPrediction> saved = core::makeError("not evaluated");
        if (done) saved = savePrediction(*store, plan, e, profile, request.name);
        if (done && saved && !tag.empty()) done = store->addTag(saved->prediction, tag);
        if (!done || !saved) {
            reportSaveFailure(out, *store,
                              fmt::format("{} (saved before it: {})", (!done ? done.error() : saved.error()).message,
                                          ids.empty() ? "none" : joinNames(ids)));
            return out;
        }
        list.push_back({{"prediction", db::formatId(saved->prediction)}, {"plan", db::formatId(saved->plan)}});
        ids.push_back(db::formatId(saved->prediction));
    }
    out.saved = {{"db", db_path}, {"predictions", list}};
    out.line = fmt::format("Saved {} in {}", ids.empty() ? "nothing" : joinNames(ids), db_path);
    return out;
}

core::Result<std::string> saveCalibratedProfile(const SaveRequest& request, const sim::HardwareProfile& profile,
                                                const std::string& default_name) {
    auto store = openStore(true);
    if (!store) return store.error();
    db::ProfileInput input;
    input.name = request.name.empty() ? default_name : request.name;
    input.cluster = core::hostName();
    input.source = "calibrated";
    input.profile = sim::profileToJson(profile);
    input.summary_line = fmt::format("calibrated on {}: {}", input.cluster, profile.gpu.name);
    auto id = (*store)->saveProfile(input);
    if (!id) return core::makeError((*store)->path().string() + ": " + id.error().message);
    return fmt::format("Saved {} as profile '{}' in {}; plan with it: --profile {}", db::formatId(*id), input.name,
                       (*store)->path().string(), input.name);
}

}  // namespace shardcast::cli
