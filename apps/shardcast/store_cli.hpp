#pragma once
// What every command shares about the store (db/store.hpp): `--db PATH`, `--save [NAME]`,
// `--profile NAME|FILE` and saving a prediction. The store itself decides everything stored; this
// only parses the flags, opens the file and prints where things went.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "db/store.hpp"
#include "planstore/planstore.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

namespace CLI {
class App;
}

namespace shardcast::cli {

// Adds `--db PATH` to `cmd` (every subcommand has it; main.cpp adds it). The value is process-wide.
void addDbOption(CLI::App& cmd);

// The store file in effect: --db, else SHARDCAST_DB, else the default (db::defaultDbPath).
core::Result<std::filesystem::path> storePath();

// Opens the store in effect. `create`: make it (and its folders) on first use; otherwise a missing
// file is an error that says nothing has been saved there yet. Errors name the file.
core::Result<std::unique_ptr<db::Store>> openStore(bool create);

// `--save [NAME]`: save what the command produced in the store (NAME optional).
struct SaveRequest {
    bool requested = false;
    std::string name;
};
void addSaveOption(CLI::App& cmd, SaveRequest& save, const std::string& what);

// `--profile NAME|FILE`: an existing file is a profile JSON (sim::resolveProfile); anything else
// is the name of a profile stored with `calibrate --save NAME` (the newest of that name).
using planstore::ResolvedProfile;
void addProfileOption(CLI::App& cmd, std::string& profile);
// planstore::resolveProfile with the store in effect (--db).
core::Result<ResolvedProfile> resolveProfileArg(const core::ClusterSpec& cluster, const std::string& arg);

using planstore::planSummaryLine;
using planstore::SavedPrediction;
using planstore::savePrediction;

// Opens the store (creating it), runs `save` on it; prints the error naming the store and returns
// kExitRuntimeFailure (or kExitBadInput when the store file itself is unusable) on failure.
struct SaveOutcome {
    int exit_code = 0;               // 0: saved
    nlohmann::ordered_json saved;    // {"db": path, "prediction": "pred-3", "plan": "plan-2"} etc.
    std::string line;                // "Saved pred-3 (plan plan-2) in /path/shardcast.db"
};
// --save's store: opened (created on first use); on failure the error is printed and
// out.exit_code set (kExitBadInput: the file is unusable) and nullptr returned.
std::unique_ptr<db::Store> openStoreToSave(SaveOutcome& out);
// A save that failed in an open store: "shardcast: error: --save: DB: message", kExitRuntimeFailure.
void reportSaveFailure(SaveOutcome& out, const db::Store& store, const std::string& message);

SaveOutcome savePredictionReported(const core::Plan& plan, const sim::Evaluation& e, const ResolvedProfile& profile,
                                   const SaveRequest& request);

// Evaluates each plan (with its memory curve) on `profile` and saves it as savePrediction does, all
// in one store; each saved prediction gets `tag` when not empty. `saved` is then
// {"db": path, "predictions": [{"prediction": "pred-3", "plan": "plan-2"}, ...]}.
SaveOutcome evaluateAndSaveReported(const std::vector<core::Plan>& plans, const ResolvedProfile& profile,
                                    double headroom, const SaveRequest& request, const std::string& tag);

// `calibrate --save [NAME]`: the calibrated profile into the store under NAME (`default_name`
// when empty), source "calibrated", cluster this host. Returns the line that says where it went.
core::Result<std::string> saveCalibratedProfile(const SaveRequest& request, const sim::HardwareProfile& profile,
                                                const std::string& default_name);

}  // namespace shardcast::cli
