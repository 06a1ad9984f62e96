#pragma once
// Sweeps (DESIGN.md section 5): every strategy x wrap policy (and optionally micro-batch and
// activation checkpointing) of a base plan, each lowered, simulated and timed on a pool of
// threads (one Program and one Simulator per thread); the Pareto front of (peak memory, step time)
// and the fastest plan that fits.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/memory/fit.hpp"
#include "core/plan/plan.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {
class CancelToken;
}

namespace shardcast::sim {

struct SweepCandidate {
    core::Strategy strategy = core::Strategy::FullShard;
    core::WrapPolicy wrap;
    int64_t micro_batch = 1;
    core::AcSpec ac;
};

struct SweepResult {
    SweepCandidate candidate;
    bool ok = false;
    std::string error;          // why the plan is invalid (when !ok)
    int units = 0;
    double step_s = 0;
    double exposed_comm_s = 0;
    double mfu = 0;
    double tokens_per_s_per_gpu = 0;
    int64_t peak_bytes = 0;     // allocated, Runtime Overhead included
    int64_t reserved_bytes = 0; // the caching allocator's peak reserved + Runtime Overhead (0: not modelled,
                                // or SweepOptions::reserved_for_every_candidate off and the allocated peak misses)
    bool fits = false;          // the evaluation's verdict (reserved where modelled) with SweepOptions::headroom
    bool evaluated() const { return ok || !error.empty(); }
};

struct SweepOptions {
    std::vector<core::Strategy> strategies;   // empty: those valid for the cluster
    std::vector<int64_t> micro_batches;       // empty: the base plan's
    std::vector<core::AcSpec> acs;            // empty: the base plan's
    double headroom = core::kDefaultHeadroom; // fraction of GPU memory kept free (core::judgeFit)
    int threads = 0;                          // 0: std::thread::hardware_concurrency()
    std::function<void(size_t done, size_t total)> progress;  // called from worker threads, serialised
    // Cancelled: the workers stop after their current candidate; results not reached keep ok=false
    // and an empty error (SweepResult::evaluated() is false).
    const CancelToken* cancel = nullptr;
    // false: the caching allocator is replayed only for candidates whose allocated peak fits the
    // budget (reserved is never below allocated: the others cannot fit) and reserved_bytes stays 0
    // for the rest; for views that show the verdict but not every candidate's reserved figure.
    bool reserved_for_every_candidate = true;
};

// Wrap policies worth trying for a model of L blocks: whole, every k blocks for each k that gives a
// distinct number of units, min-params thresholds of 1, 2, 4 and 8 blocks' parameters, per block.
std::vector<core::WrapPolicy> wrapCandidates(const core::Model& model);
std::vector<SweepCandidate> sweepCandidates(const core::Plan& base, const SweepOptions& options);

// `profile` overrides the cost-model figures of base.cluster's GPU (use HardwareProfile::fromCluster
// for the defaults). Results come back in candidate order.
std::vector<SweepResult> runSweep(const core::Plan& base, const std::vector<SweepCandidate>& candidates,
                                  const HardwareProfile& profile, const SweepOptions& options);

// Indices of the results on the Pareto front of (peak memory, step time), by increasing peak.
std::vector<size_t> paretoFront(const std::vector<SweepResult>& results);
// The fastest result that fits; -1 when none does.
int64_t recommend(const std::vector<SweepResult>& results);

std::string candidateLabel(const SweepCandidate& c);
// The plan a candidate stands for: `plan` (the sweep's base) with the candidate's choices.
void applyCandidate(const SweepCandidate& c, core::Plan& plan);

}  // namespace shardcast::sim
