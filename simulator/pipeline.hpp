#pragma once
// Pipeline parallelism across stages (DESIGN.md section 4): each stage's Program is simulated on
// its own, then the stages are coupled through their P2P sends and receives. A receive's data
// lands when the matching send (same micro-batch, the other direction) has run on the
// neighbouring stage; until then the receive, and what waits for it, waits. First a delay model
// shifts each stage's own timeline after every receive by the wait it adds to the task that
// consumes it (exact for a stage whose tasks run one after the other, and evaluated across stages
// in the order the sends allow), then each stage is simulated again with the receives' landing
// times, stage after stage (Gauss-Seidel, alternating direction), each taking the landing times
// its neighbours' latest timelines give, until no landing time moves by more than 1 us (at most
// 2 x virtual stages x (micro-batches + ranks) + 4 passes, since a change travels one neighbour per pass and a
// 1F1B step's critical path turns at every micro-batch; the last pass's timelines are the answer).
// A stage whose landing times are exactly those of its last simulation is not simulated again: it
// would time the same.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "simulator/simulator.hpp"

namespace shardcast::sim {

class PipelineTimer {
public:
    // Times `stages` (stage i's Program at index i) into `out`, one Timeline per stage, with the
    // pipeline's waits. Errors: a receive without its send, or sends and receives that wait on
    // each other in a cycle (a schedule the stages cannot run). The simulator's profile is used.
    core::Status run(Simulator& simulator, const std::vector<core::Program>& stages, std::vector<core::Timeline>& out);
    // Simulation passes over the stages the last run made after the delay model (1: its landing
    // times held).
    int lastPasses() const { return m_passes; }
    // Per pipeline rank, the core slowdown its stage is simulated at (Simulator::setCoreSlowdown);
    // null (the default): the simulator's own. The vector must outlive the runs.
    void setCoreSlowdowns(const std::vector<double>* slowdowns) { m_slowdowns = slowdowns; }

    static constexpr int kMaxPasses = 1000;

private:
    struct Edge {
        int32_t recv = -1;       // task id in the receiving stage
        int32_t send_stage = -1;  // the sending pipeline rank (its Program's index)
        int32_t send = -1;       // task id in the sending stage
        int32_t consumer = -1;   // the first task of the receiving stage that waits for the receive
    };
    core::Status match(const std::vector<core::Program>& stages);
    void delayModel(const std::vector<core::Timeline>& alone);
    // The landing times of the receives whose sends `sender` runs, from its timeline; true when
    // any moved.
    bool landingTimesFrom(size_t sender, const core::Timeline& timeline);

    std::vector<std::vector<Edge>> m_edges;     // per stage, its receives in program order
    std::vector<std::vector<int64_t>> m_ready;  // per stage, per task: landing time or -1
    std::vector<uint8_t> m_stale;               // per stage: landing times moved since its last simulation
    const std::vector<double>* m_slowdowns = nullptr;
    int m_passes = 0;
};

// `ranks` of a node computing at once on its `cores` (> 0): each at cores / ranks of its rate alone,
// never faster than alone.
inline double sharedCoreSlowdown(double ranks, int64_t cores) {
    return std::max(1.0, ranks / static_cast<double>(std::max<int64_t>(1, cores)));
}

// Ranks sharing a host's CPU cores (HardwareProfile::host_cores), processor sharing: while k of a
// node's ranks compute and the node has c cores, each computes at min(1, c / k) of its rate alone.
// Pipeline rank s has ranks[s] ranks of its stage on node host[s] (its stage's ranks are
// consecutive, pipeline outermost in the mesh), all computing when its Program's compute stream is
// busy (their tensor- and data-parallel peers run the same tasks at once). Returns per pipeline
// rank the mean slowdown max(1, k / c) over the time its compute stream is busy in `timelines`, k
// counting the ranks of every stage on its node busy then; a rank never busy gets its stage alone,
// max(1, ranks[s] / c).
std::vector<double> coreSlowdowns(const std::vector<core::Timeline>& timelines, const std::vector<core::Program>& stages,
                                  const std::vector<int>& host, const std::vector<int>& ranks, int64_t cores);

}  // namespace shardcast::sim
