#include "apps/shardcast/store_cli.hpp"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/shardcast/commands.hpp"
#include "core/base/host_info.hpp"
#include "core/base/units.hpp"
#include "core/base/version.hpp"
#include "core/plan/sharding.hpp"
#include "core/results/step_io.hpp"

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
    auto path = storePath();
    if (!path) return path.error();
    return planstore::resolveProfile(cluster, arg, *path);
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
    auto saved = planstore::evaluateAndSave(*store, plans, profile, headroom, request.name, tag);
    if (!saved) {
        reportSaveFailure(out, *store, saved.error().message);
        return out;
    }
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    std::vector<std::string> ids;
    for (const SavedPrediction& s : *saved) {
        list.push_back({{"prediction", db::formatId(s.prediction)}, {"plan", db::formatId(s.plan)}});
        ids.push_back(db::formatId(s.prediction));
    }
    out.saved = {{"db", db_path}, {"predictions", list}};
    out.line = fmt::format("Saved {} in {}", ids.empty() ? "nothing" : joinNames(ids), db_path);
    return out;
}

core::Result<std::string> saveCalibratedProfile(const SaveRequest& request, const sim::HardwareProfile& profile,
                                                const std::string& default_name) {
    auto store = openStore(true);
    if (!store) return store.error();
    const std::string name = request.name.empty() ? default_name : request.name;
    auto id = planstore::saveCalibratedProfile(**store, profile, name);
    if (!id) return core::makeError((*store)->path().string() + ": " + id.error().message);
    return fmt::format("Saved {} as profile '{}' in {}; plan with it: --profile {}", db::formatId(*id), name,
                       (*store)->path().string(), name);
}

}  // namespace shardcast::cli
