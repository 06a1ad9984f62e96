#pragma once
// The plan report: a readable text form and the JSON of `shardcast plan --json`, both printed from
// one sim::Evaluation so every front-end shows one truth.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

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

// Long work's progress on a terminal (stderr): once it has run for half a second, one line naming
// the stage it is in and the time so far, redrawn every 0.2 s by a thread of its own (so a single
// long stage is seen working too) and cleared by done() (or the destructor), before the report.
// Nothing, and no thread, when stderr is not a terminal.
class StageProgress {
public:
    explicit StageProgress(std::string first_stage = "working");
    ~StageProgress() { done(); }
    StageProgress(const StageProgress&) = delete;
    StageProgress& operator=(const StageProgress&) = delete;
    // For EvaluationOptions::progress: names each stage of an evaluation as it starts.
    std::function<void(sim::EvaluationStage)> callback();
    void setStage(std::string_view stage);
    void done();

private:
    void tick();

    std::chrono::steady_clock::time_point m_start;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::string m_stage;
    bool m_stop = false;
    bool m_drawn = false;  // a line is on the terminal
    std::thread m_thread;
};

}  // namespace shardcast::cli
