#pragma once
// Pipeline parallelism across stages (DESIGN.md section 4): each stage's Program is simulated on
// its own, then the stages are coupled through their P2P sends and receives. A receive's data
// lands when the matching send (same micro-batch, the other direction) has run on the
// neighbouring stage; until then the receive, and what waits for it, waits. First a delay model
// shifts each stage's own timeline after every receive by the wait it adds (exact for a stage
// whose later tasks all wait on the receive, and evaluated across stages in the order the sends
// allow), then each stage is simulated again with the receives' landing times, and those are
// taken again from the new timelines, until they stop moving (a few passes).
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
    // Refinement passes the last run needed after the delay model (0: its landing times held).
    int lastPasses() const { return m_passes; }

    static constexpr int kMaxPasses = 4;

private:
    struct Edge {
        int32_t recv = -1;       // task id in the receiving stage
        int32_t send_stage = -1;
        int32_t send = -1;       // task id in the sending stage
    };
    core::Status match(const std::vector<core::Program>& stages);
    void delayModel(const std::vector<core::Timeline>& alone);
    bool landingTimes(const std::vector<core::Timeline>& timelines);  // true when any changed

    std::vector<std::vector<Edge>> m_edges;     // per stage, its receives in program order
    std::vector<std::vector<int64_t>> m_ready;  // per stage, per task: landing time or -1
    int m_passes = 0;
};

}  // namespace shardcast::sim
