#pragma once
// A hardware profile fitted to one measured run of a plan (a trace of the user's own job, or a
// backend's run): the figures the run determines are set so that the plan's prediction matches what
// was measured; the rest are kept from the base profile, and the fit says which is which. Other
// plans on the same cluster are then predicted with the fitted profile (`plan --profile`).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/program/timeline.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

struct RunFitLine {
    std::string figure;   // a profile key, e.g. "forward_efficiency_max"
    double before = 0, after = 0;
    std::string from;     // what determined it, or why it was kept
    bool fitted = false;
};

struct RunCalibration {
    HardwareProfile profile;
    std::vector<RunFitLine> lines;   // every figure the fit considered, fitted or kept
    int64_t measured_step_ns = 0;
    int64_t predicted_step_before_ns = 0;  // the plan on the base profile
    int64_t predicted_step_after_ns = 0;   // the plan on the fitted profile
};

// `measured` is the run's timeline over the plan's Program; `skip` flags its tasks without a time
// (by id; empty: none). Compute: one factor each for forward, backward and memory-bound work, set
// by fixed-point iteration so the predicted busy time of each matches the measured one. Collectives:
// latency and bandwidth by least squares over the measured all-gathers and reduce-scatters, when
// they come in at least two sizes per kind inside one node. Errors: a plan the base profile cannot
// evaluate, a run with nothing to fit.
// `ops` (per task id; empty: none) breaks compute tasks down by op kind, as a trace's CPU ops do
// (trace::TraceImport::task_ops). Where it does, the compute figures are fitted op by op instead:
// GEMM efficiency (forward, backward) so the plan's GEMMs take the measured GEMM ops' time,
// attention efficiency likewise, and kernel_launch_ns as the time per predicted op that the
// compute tasks spend outside GEMM and attention ops beyond their elementwise bytes at
// hbm_efficiency (on a CPU: the dispatch of every op and the module code between them).
core::Result<RunCalibration> calibrateFromRun(const core::Plan& plan, const HardwareProfile& base,
                                              const core::Timeline& measured, const std::vector<uint8_t>& skip,
                                              const std::string& source, const std::vector<core::MeasuredOps>& ops = {});

nlohmann::json runCalibrationToJson(const RunCalibration& c);

}  // namespace shardcast::sim
