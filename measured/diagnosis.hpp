#pragma once
// What a comparison says about a measured run beyond its errors: per-unit compute and communication,
// predicted against measured, and findings - all-gathers the compute stream waited for (a prefetch
// that came too late), units whose all-gather outlasts their compute, stragglers across ranks - each
// with the plan change the model predicts would help and its predicted gain. The FSDP guide leaves
// this to the user with the profiler open; every figure here is read off the two timelines of the
// same Program, so it holds for any measured run (a backend's or a trace's).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// One unit's work over the step, summed over micro-batches.
struct UnitTimes {
    int64_t forward_ns = 0;      // forward compute (recompute not included)
    int64_t backward_ns = 0;     // backward compute
    int64_t all_gather_ns = 0;   // all-gather durations
    int64_t reduce_ns = 0;       // reduce-scatter and all-reduce durations
    int64_t wait_ns = 0;         // time the compute stream sat idle while this unit's all-gathers ran
    bool operator==(const UnitTimes&) const = default;
};

struct UnitComparison {
    int32_t unit = -1;
    std::string name;
    UnitTimes predicted, measured;
    bool measured_complete = true;  // every task of the unit has a measured time
    std::optional<double> forward_error, backward_error, all_gather_error, reduce_error;
    double worstError() const;      // the largest |error| of the four, 0 when none
};

struct Finding {
    enum class Kind : uint8_t { LazyUnshard, AllGatherExceedsCompute, Straggler };
    Kind kind = Kind::LazyUnshard;
    int32_t unit = -1;        // LazyUnshard, AllGatherExceedsCompute
    int32_t rank = -1;        // Straggler
    int64_t measured_ns = 0;  // the wait; the all-gather; the rank's step
    int64_t reference_ns = 0; // the predicted wait; the unit's forward compute; the median rank's step
    std::string message;      // for people, with units
    std::string remedy;       // the plan change, or why none is proposed
    std::optional<int64_t> remedy_step_ns;  // the predicted step with that change
};
std::string_view findingKindName(Finding::Kind k);  // "lazy_unshard", "all_gather_exceeds_compute", "straggler"

struct RankStep {
    int32_t rank = 0;
    int64_t step_ns = 0;
};

struct Diagnosis {
    std::vector<UnitComparison> units;  // the furthest off first
    std::vector<Finding> findings;      // the largest measured cost first
    int64_t predicted_step_ns = 0;
};

// Per-unit sums of `timeline` (tasks flagged in `skip` are left out). The wait of an all-gather is
// the part of it during which the compute stream ran nothing: exposed communication (all of the
// step's first all-gather, which no compute can hide).
std::vector<UnitTimes> unitTimes(const core::Program& program, const core::Timeline& timeline,
                                 const std::vector<uint8_t>& skip);

// `skip`: the measured tasks without a time (emulated, unmeasured), by task id (empty: none).
// `rank_steps`: the same step on each rank, when the measurement has them. Remedies are predicted
// with `plan` on `profile` (the prediction's own), keeping only changes that still fit.
Diagnosis diagnose(const core::Plan& plan, const HardwareProfile& profile, const core::Program& program,
                   const core::Timeline& predicted, const core::Timeline& measured, const std::vector<uint8_t>& skip,
                   const std::vector<RankStep>& rank_steps);

nlohmann::json diagnosisUnitsToJson(const Diagnosis& d);
nlohmann::json diagnosisFindingsToJson(const Diagnosis& d, const core::Program& program);

}  // namespace shardcast::sim
