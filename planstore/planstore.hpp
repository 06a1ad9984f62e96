#pragma once
// The planning chains that touch the store, shared by the CLI and the GUI: which hardware profile
// a `--profile NAME|FILE` means, and what is saved with a prediction (its self-contained plan, the
// profile in effect and the evaluation's summary, timeline and memory curve). Front-ends parse,
// call these and print; nothing here prints.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/plan/cluster.hpp"
#include "core/plan/plan.hpp"
#include "db/store.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::planstore {

struct ResolvedProfile {
    sim::HardwareProfile profile;
    std::optional<db::ObjectId> stored;  // the stored profile used
    std::string source;                  // "preset", "file", or the stored profile's source ("calibrated", ...)
};

// The GPU's documented figures (`arg` empty), a profile JSON file (an existing path), or the newest
// profile stored under the name `arg` in the store at `store_path`. Errors name the file or the
// store and list the stored profile names.
core::Result<ResolvedProfile> resolveProfile(const core::ClusterSpec& cluster, const std::string& arg,
                                             const std::filesystem::path& store_path);

// The names of the stored profiles, newest first, each once.
core::Result<std::vector<std::string>> storedProfileNames(const db::Store& store);

// "llama-3.1-8b, 8x H100-SXM, FULL_SHARD, block, mb 1 x seq 4096" (the line `db list` shows).
std::string planSummaryLine(const core::Plan& plan);

// Saves the plan (found again by its content if already stored), the profile in effect (when not
// already stored; once per content) and the prediction made from `e` (evaluated with its memory
// curve) under `name` (may be empty).
struct SavedPrediction {
    db::ObjectId prediction, plan;
};
core::Result<SavedPrediction> savePrediction(db::Store& store, const core::Plan& plan, const sim::Evaluation& e,
                                             const ResolvedProfile& profile, const std::string& name);

// Evaluates each plan on `profile` (with its memory curve) and saves it as savePrediction does;
// each saved prediction is tagged `tag` when not empty. On an error the message says which
// predictions were saved before it.
core::Result<std::vector<SavedPrediction>> evaluateAndSave(db::Store& store, const std::vector<core::Plan>& plans,
                                                           const ResolvedProfile& profile, double headroom,
                                                           const std::string& name, const std::string& tag);

// A calibrated profile saved under `name` (source "calibrated", cluster this host).
core::Result<db::ObjectId> saveCalibratedProfile(db::Store& store, const sim::HardwareProfile& profile,
                                                 const std::string& name);

// A stored prediction as it was made: its timeline and memory curve as stored, and its plan and
// profile (as linked from it; the plan's documented figures when no profile is linked) re-lowered
// and re-evaluated into `evaluation` (its Program). An error names the store and the object when a
// link is missing or the plan now lowers to another number of tasks than the stored timeline holds
// (made by another shardcast: re-make the prediction).
struct StoredPrediction {
    core::Plan plan;
    sim::HardwareProfile profile;
    core::Timeline timeline;
    core::TimedMemory memory;
    sim::Evaluation evaluation;
};
core::Result<StoredPrediction> loadStoredPrediction(const db::Store& store, const db::ObjectId& id);

}  // namespace shardcast::planstore
