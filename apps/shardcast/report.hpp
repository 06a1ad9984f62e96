#pragma once
// The plan report: a readable text form and the JSON of `shardcast plan --json`, both printed from
// one sim::Evaluation so every front-end shows one truth.
#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/plan/plan.hpp"
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
// For a step simulated by its period (sim::PeriodicStep): one line saying which micro-batches were
// simulated and what each repeat adds; empty otherwise. The JSON form ("period", null when whole).
std::string periodText(const sim::Evaluation& e);
nlohmann::ordered_json periodJson(const sim::Evaluation& e);

// An evaluation's progress on a terminal (stderr): once it has run for half a second, one line
// naming the stage it has reached and the time so far, rewritten at each stage and cleared by
// done() (or the destructor), so a long plan (a large model over thousands of micro-batches) is
// seen working. Nothing when stderr is not a terminal.
class StageProgress {
public:
    StageProgress();
    ~StageProgress() { done(); }
    StageProgress(const StageProgress&) = delete;
    StageProgress& operator=(const StageProgress&) = delete;
    std::function<void(sim::EvaluationStage)> callback();
    void done();

private:
    std::chrono::steady_clock::time_point m_start;
    bool m_enabled = false;
    bool m_drawn = false;
};

}  // namespace shardcast::cli
