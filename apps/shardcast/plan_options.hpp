#pragma once
// The flags that describe a plan, shared by `plan`, `simulate`, `sweep` and `search`: a plan file as
// the base, then every flag the user gave overrides the matching field (core::buildPlan).
#include "core/memory/fit.hpp"
#include "core/plan/plan_build.hpp"

namespace CLI {
class App;
}

namespace shardcast::cli {

// Adds the positional PLAN.json and every plan flag to `cmd`; values land in `overrides`.
void addPlanOptions(CLI::App& cmd, core::PlanOverrides& overrides);

// core::buildPlan, starting from `--from-config FILE` when given (configs/config_import.hpp): the
// config's fields first, then every flag given over them. Says on stderr how the config mapped.
core::Result<core::Plan> buildPlanFromFlags(const core::PlanOverrides& overrides);

// Adds --headroom (the fraction of GPU memory that "fits" keeps free; default core::kDefaultHeadroom).
void addHeadroomOption(CLI::App& cmd, double& headroom);
// --whole-step: simulate every micro-batch rather than the step's period past sim::kPeriodOver.
void addWholeStepOption(CLI::App& cmd, bool& whole_step);

}  // namespace shardcast::cli
