#include "gui/state/planner.hpp"

#include <utility>

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QEventLoop>
#include <QMetaObject>

namespace shardcast::gui {

Planner::Planner(QObject* parent) : QObject(parent), m_worker([this] { workerLoop(); }) {}

Planner::~Planner() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
        m_pending.reset();
        if (m_running) m_running->cancel();
    }
    m_wake.notify_all();
    m_worker.join();
}

uint64_t Planner::request(const core::PlanOverrides& overrides, const std::string& profile) {
    const uint64_t generation = ++m_generation;
    {
        std::lock_guard lock(m_mutex);
        if (m_running) m_running->cancel();
        m_pending = Job{generation, overrides, profile, std::make_shared<sim::CancelToken>()};
    }
    m_wake.notify_one();
    return generation;
}

bool Planner::waitUntilFinished(int timeout_ms) {
    QDeadlineTimer deadline(timeout_ms);
    while (busy()) {
        if (deadline.hasExpired()) return false;
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
        QCoreApplication::sendPostedEvents();
    }
    return true;
}

void Planner::workerLoop() {
    for (;;) {
        Job job;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [this] { return m_stop || m_pending.has_value(); });
            if (m_stop) return;
            job = std::move(*m_pending);
            m_pending.reset();
            m_running = job.cancel;
        }
        runJob(job);
        std::lock_guard lock(m_mutex);
        m_running.reset();
    }
}

void Planner::runJob(const Job& job) {
    const uint64_t gen = job.generation;
    const sim::CancelToken* cancel = job.cancel.get();
    auto post = [this](auto fn) { QMetaObject::invokeMethod(this, std::move(fn), Qt::QueuedConnection); };
    auto finish = [this, gen, post] {
        post([this, gen] {
            if (gen > m_finished_generation && gen <= m_generation) m_finished_generation = gen;
            if (isCurrent(gen)) emit finished(gen);
        });
    };
    sim::Evaluator evaluator;
    auto plan = computePlan(job.overrides, evaluator, cancel, job.profile);
    if (!plan) {
        if (!plan.error().cancelled) {
            const QString message = QString::fromStdString(plan.error().message);
            post([this, gen, message] {
                if (isCurrent(gen)) emit planFailed(gen, message);
            });
        }
        finish();
        return;
    }
    (*plan)->generation = gen;
    std::shared_ptr<const PlanResult> result = std::move(plan).value();
    post([this, result] {
        if (isCurrent(result->generation)) emit planReady(result);
    });

    if (auto strategies = computeStrategies(*result, evaluator, cancel)) {
        std::shared_ptr<const StrategyComparison> s = std::move(strategies).value();
        post([this, s] {
            if (isCurrent(s->generation)) emit strategiesReady(s);
        });
    }
    if (!cancel->cancelled()) {
        if (auto wrap = computeWrap(*result, cancel)) {
            std::shared_ptr<const WrapResult> w = std::move(wrap).value();
            post([this, w] {
                if (isCurrent(w->generation)) emit wrapReady(w);
            });
        }
    }
    finish();
}

}  // namespace shardcast::gui
