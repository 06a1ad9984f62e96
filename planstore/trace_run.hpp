#pragma once
// The planning chain of a traced run, shared by the CLI (`import-trace`, `compare --torch-trace`,
// `calibrate --from-trace`) and the GUI's compare view: the plan loaded, its profile resolved, its
// prediction made, the torch.profiler traces read and mapped onto its Program (trace/), and the
// measured run completed with the plan and profile it is compared against; and saving such a run.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "db/store.hpp"
#include "planstore/planstore.hpp"
#include "simulator/evaluation.hpp"
#include "trace/fsdp_import.hpp"

namespace shardcast::planstore {

struct ImportedRun {
    core::Plan plan;             // as loaded from the plan file
    ResolvedProfile profile;     // the profile the prediction and the run record use
    sim::Evaluation predicted;   // the plan on that profile: its Program is what the run maps onto
    trace::TraceImport import;   // run: plan (self-contained), profile and environment filled
};

// `traces`: files or directories (trace::traceFiles); `profile_arg`: as resolveProfile takes it
// (empty: the plan's GPU preset); `memory_snapshot`: a CUDA memory snapshot of the recorded rank
// (trace/memory_snapshot.hpp; empty: none), whose caching-allocator figures join the run;
// `reading` is called before each file is read (progress). Every error is the user's input and
// names the file.
core::Result<ImportedRun> importTraceRun(const std::vector<std::string>& traces, const std::filesystem::path& plan_path,
                                         const std::string& profile_arg, const std::filesystem::path& store_path,
                                         const trace::ImportOptions& options,
                                         const std::function<void(const std::filesystem::path&)>& reading = {},
                                         const std::filesystem::path& memory_snapshot = {});

// A measured run saved with its plan and the prediction it is compared with, as `run --save`
// stores a backend's run.
struct SavedRun {
    db::ObjectId run, prediction, plan;
};
core::Result<SavedRun> saveMeasuredRun(db::Store& store, const core::Plan& plan, const sim::Evaluation& predicted,
                                       const ResolvedProfile& profile, const core::RunRecord& record,
                                       const std::string& name);

}  // namespace shardcast::planstore
