#pragma once
// The plan report: a readable text form and the JSON of `shardcast plan --json`, both printed from
// one sim::Evaluation so every front-end shows one truth.
#include <string>

#include <nlohmann/json.hpp>

#include "core/plan.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cli {

// Keys documented in README.md ("shardcast plan --json"); insertion-ordered for reading.
nlohmann::ordered_json planResultJson(const core::Plan& plan, const sim::Evaluation& e);
// The caching allocator's figures (plan and simulate --json "reserved"): bytes include Runtime
// Overhead, as peak_bytes does, so peak_allocated_bytes equals the peak and the reserved peak
// compares with the capacity.
nlohmann::ordered_json reservedMemoryJson(const core::Plan& plan, const sim::Evaluation& e);
// One line: "fits", "AT RISK" or "does NOT fit", with the reserved figures behind it.
std::string fitVerdictText(const sim::Evaluation& e);
std::string planReportText(const core::Plan& plan, const sim::Evaluation& e);

}  // namespace shardcast::cli
