#pragma once
// Re-planning off the UI thread. request() cancels the evaluation in flight (sim::CancelToken)
// and queues the new overrides; one worker thread computes the plan, then the five strategies,
// then the wrap sweep and search, and hands each back to the UI thread tagged with its
// generation. Results of a generation older than the latest request are dropped, so the views
// only ever show the newest knobs' numbers.
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <QObject>
#include <QString>

#include "core/plan/plan_build.hpp"
#include "gui/state/plan_results.hpp"

namespace shardcast::gui {

class Planner : public QObject {
    Q_OBJECT
public:
    explicit Planner(QObject* parent = nullptr);
    ~Planner() override;

    // Returns the request's generation (increasing from 1). `profile`: computePlan's.
    uint64_t request(const core::PlanOverrides& overrides, const std::string& profile = {});
    uint64_t latestGeneration() const { return m_generation; }
    // Runs the event loop until the latest generation has finished (all stages delivered or an
    // error); false on timeout. For tests and screenshots.
    bool waitUntilFinished(int timeout_ms);
    bool busy() const { return m_finished_generation < m_generation; }

signals:
    void planReady(std::shared_ptr<const PlanResult> result);
    void planFailed(quint64 generation, QString message);
    void strategiesReady(std::shared_ptr<const StrategyComparison> result);
    void wrapReady(std::shared_ptr<const WrapResult> result);
    void finished(quint64 generation);

private:
    struct Job {
        uint64_t generation = 0;
        core::PlanOverrides overrides;
        std::string profile;
        std::shared_ptr<sim::CancelToken> cancel;
    };
    void workerLoop();
    void runJob(const Job& job);
    // On the UI thread: drops stale results.
    bool isCurrent(uint64_t generation) const { return generation == m_generation; }

    uint64_t m_generation = 0;           // UI thread only
    uint64_t m_finished_generation = 0;  // UI thread only

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::optional<Job> m_pending;               // guarded by m_mutex
    std::shared_ptr<sim::CancelToken> m_running;  // guarded by m_mutex
    bool m_stop = false;                          // guarded by m_mutex
    std::thread m_worker;
};

}  // namespace shardcast::gui
