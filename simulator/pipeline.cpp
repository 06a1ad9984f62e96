#include "simulator/pipeline.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>

namespace shardcast::sim {
namespace {

// A transfer between two stages: the activations of a micro-batch go forward, its gradients back.
// Keyed by (sending stage, receiving stage, micro-batch), stages counted over the whole pipeline
// (Program::stageOf: with Interleaved1F1B a rank holds several).
using TransferKey = std::tuple<int32_t, int32_t, int32_t>;

// Landing times closer than this are the same (rounding in the rescaled ends).
constexpr int64_t kSettledNs = 1000;

}  // namespace

core::Status PipelineTimer::match(const std::vector<core::Program>& stages) {
    const auto n = static_cast<int32_t>(stages.size());
    std::map<TransferKey, int32_t> sends;
    m_edges.assign(stages.size(), {});
    for (int32_t s = 0; s < n; ++s) {
        const core::Program& p = stages[static_cast<size_t>(s)];
        for (int32_t id = 0; id < p.size(); ++id) {
            const core::Task& t = p.tasks[static_cast<size_t>(id)];
            if (t.kind == core::TaskKind::Send) sends[{p.stageOf(t), p.stageOf(t) + t.peer, t.micro_batch}] = id;
        }
    }
    for (int32_t s = 0; s < n; ++s) {
        const core::Program& p = stages[static_cast<size_t>(s)];
        for (int32_t id = 0; id < p.size(); ++id) {
            const core::Task& t = p.tasks[static_cast<size_t>(id)];
            if (t.kind != core::TaskKind::Recv) continue;
            const int32_t to = p.stageOf(t), from = to + t.peer;
            const auto it = sends.find({from, to, t.micro_batch});
            if (from < 0 || from >= n * p.pp_virtual || it == sends.end()) {
                return core::makeError("pipeline: stage " + std::to_string(to) + "'s " + p.taskLabel(id) +
                                       " has no matching send on stage " + std::to_string(from));
            }
            // The receive's consumer: the first later task that depends on it.
            int32_t consumer = id;
            for (int32_t later = id + 1; later < p.size() && consumer == id; ++later) {
                const core::Task& c = p.tasks[static_cast<size_t>(later)];
                const int32_t* deps = p.depsBegin(c);
                if (std::find(deps, deps + c.deps.count, id) != deps + c.deps.count) consumer = later;
            }
            m_edges[static_cast<size_t>(s)].push_back(Edge{id, from % n, it->second, consumer});
        }
    }
    return core::Ok{};
}

// Stage s's timeline alone, shifted after each receive r by delay(r) = max(delay before r,
// landing(r) - start(consumer of r)), where landing(r) = end of the matching send + the sender's
// delay there: the consumer starts at max(its own start + the delay before r, landing(r)).
// A receive can be placed once the sender's receives before its send are: a worklist over the
// stages, in the order the sends allow.
void PipelineTimer::delayModel(const std::vector<core::Timeline>& alone) {
    const size_t n = m_edges.size();
    std::vector<size_t> next(n, 0);          // per stage: its first receive not yet placed
    std::vector<int64_t> delay(n, 0);        // per stage: the delay after its placed receives
    std::vector<std::vector<int64_t>> after(n);  // per stage, per receive: the delay after it
    for (size_t s = 0; s < n; ++s) after[s].assign(m_edges[s].size(), 0);
    // The sender's delay at task `id`: the delay after its last receive before `id`.
    auto delayAt = [&](size_t s, int32_t id) -> int64_t {
        int64_t d = 0;
        for (size_t k = 0; k < next[s] && m_edges[s][k].recv < id; ++k) d = after[s][k];
        return d;
    };
    bool progress = true;
    while (progress) {
        progress = false;
        for (size_t s = 0; s < n; ++s) {
            while (next[s] < m_edges[s].size()) {
                const Edge& e = m_edges[s][next[s]];
                const auto from = static_cast<size_t>(e.send_stage);
                // Placeable when every receive of the sender before the send is placed.
                if (next[from] < m_edges[from].size() && m_edges[from][next[from]].recv < e.send) break;
                const int64_t landing = alone[from].tasks[static_cast<size_t>(e.send)].end_ns + delayAt(from, e.send);
                const core::TaskTime& consumer = alone[s].tasks[static_cast<size_t>(e.consumer)];
                const int64_t start = e.consumer == e.recv ? consumer.end_ns : consumer.start_ns;
                delay[s] = std::max(delay[s], landing - start);
                after[s][next[s]] = delay[s];
                m_ready[s][static_cast<size_t>(e.recv)] = landing;
                ++next[s];
                progress = true;
            }
        }
    }
    // Receives left unplaced wait on each other in a cycle: run() reports it (match() has already
    // paired every receive, so only a cycle stops the worklist).
    for (size_t s = 0; s < n; ++s) {
        for (size_t k = next[s]; k < m_edges[s].size(); ++k) m_ready[s][static_cast<size_t>(m_edges[s][k].recv)] = -2;
    }
}

bool PipelineTimer::landingTimesFrom(size_t sender, const core::Timeline& timeline) {
    bool changed = false;
    for (size_t s = 0; s < m_edges.size(); ++s) {
        for (const Edge& e : m_edges[s]) {
            if (static_cast<size_t>(e.send_stage) != sender) continue;
            const int64_t landing = timeline.tasks[static_cast<size_t>(e.send)].end_ns;
            int64_t& r = m_ready[s][static_cast<size_t>(e.recv)];
            if (std::abs(landing - r) > kSettledNs) changed = true;
            if (landing != r) m_stale[s] = 1;
            r = landing;
        }
    }
    return changed;
}

core::Status PipelineTimer::run(Simulator& simulator, const std::vector<core::Program>& stages,
                                std::vector<core::Timeline>& out) {
    m_passes = 0;
    if (auto s = match(stages); !s) return s;
    const size_t n = stages.size();
    out.resize(n);
    m_ready.assign(n, {});
    for (size_t s = 0; s < n; ++s) m_ready[s].assign(stages[s].tasks.size(), -1);
    simulator.setReadyTimes(nullptr);
    for (size_t s = 0; s < n; ++s) {
        if (m_slowdowns) simulator.setCoreSlowdown((*m_slowdowns)[s]);
        simulator.run(stages[s], out[s]);
        if (!simulator.inRange()) return checkStepBound(simulator.stepBoundSeconds());
    }
    delayModel(out);
    for (size_t s = 0; s < n; ++s) {
        for (const Edge& e : m_edges[s]) {
            if (m_ready[s][static_cast<size_t>(e.recv)] == -2) {
                return core::makeError("pipeline: the stages' sends and receives wait on each other (stage " +
                                       std::to_string(s) + "'s " + stages[s].taskLabel(e.recv) +
                                       " can never receive); the schedule cannot run");
            }
        }
    }
    // Gauss-Seidel passes, alternately from the first stage and from the last: a stage is simulated
    // with the landing times its neighbours' latest timelines give, so a pass carries changes along
    // a whole wave of the pipeline in its direction.
    // A wait that moves travels one neighbour per pass in the pass's direction, and a 1F1B step's
    // critical path turns at every micro-batch: the passes it may take grow with both.
    int max_passes = 2 * static_cast<int>(n) + 4;
    for (const core::Program& p : stages) {
        max_passes = std::max(max_passes, 2 * p.pp_virtual * (p.micro_batches + static_cast<int>(n)) + 4);
    }
    max_passes = std::min(max_passes, kMaxPasses);
    // A stage whose landing times are the same as at its last simulation would time the same again:
    // it is skipped (m_stale).
    m_stale.assign(n, 1);
    for (int pass = 0; pass < max_passes; ++pass) {
        bool changed = false;
        for (size_t k = 0; k < n; ++k) {
            const size_t s = pass % 2 == 0 ? k : n - 1 - k;
            if (!m_stale[s]) continue;
            m_stale[s] = 0;
            simulator.setReadyTimes(&m_ready[s]);
            if (m_slowdowns) simulator.setCoreSlowdown((*m_slowdowns)[s]);
            simulator.run(stages[s], out[s]);
            simulator.setReadyTimes(nullptr);
            if (!simulator.inRange()) return checkStepBound(simulator.stepBoundSeconds());
            changed = landingTimesFrom(s, out[s]) || changed;
        }
        m_passes = pass + 1;
        if (!changed) break;
    }
    return core::Ok{};
}

std::vector<double> coreSlowdowns(const std::vector<core::Timeline>& timelines, const std::vector<core::Program>& stages,
                                  const std::vector<int>& host, const std::vector<int>& ranks, int64_t cores) {
    const size_t n = timelines.size();
    std::vector<double> out(n);
    for (size_t s = 0; s < n; ++s) out[s] = sharedCoreSlowdown(ranks[s], cores);
    // Busy edges of every rank's compute stream: (time, rank, +1 start / -1 end), ends first at a tie.
    struct Edge {
        int64_t t;
        int delta;
        size_t rank;
    };
    std::vector<Edge> edges;
    for (size_t s = 0; s < n; ++s) {
        const core::Program& p = stages[s];
        for (size_t id = 0; id < p.tasks.size(); ++id) {
            if (p.tasks[id].stream != core::Stream::Compute) continue;
            const core::TaskTime& tt = timelines[s].tasks[id];
            if (tt.end_ns <= tt.start_ns) continue;
            edges.push_back({tt.start_ns, 1, s});
            edges.push_back({tt.end_ns, -1, s});
        }
    }
    std::sort(edges.begin(), edges.end(),
              [](const Edge& a, const Edge& b) { return a.t != b.t ? a.t < b.t : a.delta < b.delta; });
    std::vector<int> busy(n, 0);
    std::vector<double> weighted(n, 0), time(n, 0);
    std::map<int, double> computing;  // per node: ranks computing
    int64_t last = edges.empty() ? 0 : edges.front().t;
    for (const Edge& e : edges) {
        if (const auto d = static_cast<double>(e.t - last); d > 0) {
            for (size_t s = 0; s < n; ++s) {
                if (busy[s] == 0) continue;
                weighted[s] += d * sharedCoreSlowdown(computing[host[s]], cores);
                time[s] += d;
            }
        }
        last = e.t;
        const bool was = busy[e.rank] > 0;
        busy[e.rank] += e.delta;
        if (was != (busy[e.rank] > 0)) computing[host[e.rank]] += (was ? -1 : 1) * ranks[e.rank];
    }
    for (size_t s = 0; s < n; ++s) {
        if (time[s] > 0) out[s] = weighted[s] / time[s];
    }
    return out;
}

}  // namespace shardcast::sim
