#include "executor/executor.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "executor/counting_allocator.hpp"

namespace shardcast::exec {
namespace {

int64_t steadyNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// State shared by the host thread and the stream workers during one run.
class Run {
public:
    Run(Backend& backend, const core::Program& program) : m_backend(backend), m_program(program), m_alloc(backend) {
        const int32_t n = program.size();
        m_stream_waits_for.fill(kWaitsForNothing);
        m_done.assign(static_cast<size_t>(n), 0);
        m_deferred.assign(static_cast<size_t>(n), {});
        auto deferFrees = [&](core::Span span) {
            for (uint32_t k = 0; k < span.count; ++k) {
                const core::MemEvent& e = program.mem[span.offset + k];
                if (e.timed_after >= 0) m_deferred[static_cast<size_t>(e.timed_after)].push_back(span.offset + k);
            }
        };
        for (const core::Task& t : program.tasks) {
            deferFrees(t.mem_start);
            deferFrees(t.mem_end);
            m_used[static_cast<size_t>(t.stream)] = true;
        }
        m_alloc.holdInitial(program);
    }

    ~Run() { stopWorkers(); }

    int32_t startWorkers() {
        for (int s = 0; s < core::kStreamCount; ++s) {
            if (m_used[static_cast<size_t>(s)]) m_workers.emplace_back([this, s] { workerLoop(static_cast<core::Stream>(s)); });
        }
        return static_cast<int32_t>(m_workers.size());
    }

    void stopWorkers() {
        {
            std::lock_guard lk(m_mutex);
            m_stop = true;
        }
        wakeAll();
        for (std::thread& w : m_workers) w.join();
        m_workers.clear();
    }

    // One step, issued by the calling (host) thread. On success the step's timeline is in timeline().
    core::Status step(int32_t step_index) {
        if (auto met = m_backend.barrier(); !met) return met;
        const int32_t n = m_program.size();
        {
            std::scoped_lock lk(m_mutex, m_alloc_mutex);
            std::fill(m_done.begin(), m_done.end(), uint8_t{0});
            m_finished = 0;
            m_step = step_index;
            m_timeline.clear();
            m_timeline.tasks.assign(static_cast<size_t>(n), core::TaskTime{});
            m_alloc.beginStep();
            m_last_stamp = -1;
            m_t0 = steadyNs();
        }
        for (int32_t id = 0; id < n; ++id) {
            const core::Task& t = m_program.tasks[static_cast<size_t>(id)];
            const auto s = static_cast<size_t>(t.stream);
            bool wake = false;
            {
                std::unique_lock lk(m_mutex);
                if (t.host_wait >= 0) hostWaitFor(lk, t.host_wait);
                if (m_failed) break;
                m_queues[s].push_back(id);
                wake = m_stream_waits_for[s] == kWaitsForQueue;
            }
            // Only the stream's own worker can take the task, and only if it is idle.
            if (wake) m_stream_cv[s].notify_one();
            if (t.host_blocks) {
                std::unique_lock lk(m_mutex);
                hostWaitFor(lk, id);
            }
        }
        {
            std::unique_lock lk(m_mutex);
            hostWaitFor(lk, kWaitsForAll);
            if (m_failed) return m_error;
        }
        for (int32_t id = 0; id < n; ++id) {
            const core::TaskTime& tt = m_timeline.tasks[static_cast<size_t>(id)];
            m_timeline.stream_busy_ns[static_cast<size_t>(tt.stream)] += tt.durationNs();
            m_timeline.step_ns = std::max(m_timeline.step_ns, tt.end_ns);
        }
        return core::Ok{};
    }

    const core::Timeline& timeline() const { return m_timeline; }
    core::CategoryBytes highWater() {
        std::lock_guard lk(m_alloc_mutex);
        return m_alloc.highWater();
    }

private:
    // Under m_alloc_mutex: the step clock, strictly increasing so that events never tie.
    int64_t stamp() {
        int64_t now = steadyNs() - m_t0;
        if (now <= m_last_stamp) now = m_last_stamp + 1;
        m_last_stamp = now;
        return now;
    }

    void applySpan(core::Span span, int64_t time_ns) {
        for (uint32_t k = 0; k < span.count; ++k) {
            const core::MemEvent& e = m_program.mem[span.offset + k];
            if (e.timed_after < 0) m_alloc.apply(e, time_ns);
        }
    }

    core::Status runTask(int32_t id) {
        const core::Task& t = m_program.tasks[static_cast<size_t>(id)];
        core::TaskTime& tt = m_timeline.tasks[static_cast<size_t>(id)];
        tt.stream = t.stream;
        {
            std::lock_guard lk(m_alloc_mutex);
            tt.start_ns = stamp();
            applySpan(t.mem_start, tt.start_ns);
            m_alloc.touchScratch(m_program.memBegin(t.mem_peak), t.mem_peak.count);
        }
        core::Status ran = core::Ok{};
        try {
            ran = m_backend.runTask(m_program, id, m_step);
        } catch (const std::exception& e) {
            ran = core::makeError(std::string("task ") + std::to_string(id) + ": " + e.what());
        }
        if (!ran) return ran;
        std::lock_guard lk(m_alloc_mutex);
        tt.end_ns = stamp();
        for (uint32_t event : m_deferred[static_cast<size_t>(id)]) m_alloc.apply(m_program.mem[event], tt.end_ns);
        applySpan(t.mem_end, tt.end_ns);
        m_alloc.logTransient(m_program.memBegin(t.mem_peak), t.mem_peak.count,
                             tt.start_ns + (tt.end_ns - tt.start_ns) / 2);
        return core::Ok{};
    }

    // Under m_mutex: the host waits until task `id` has ended (kWaitsForAll: every task), or a
    // task failed. A task's end wakes the host only when it is the one the host waits for.
    void hostWaitFor(std::unique_lock<std::mutex>& lk, int32_t id) {
        const int32_t n = m_program.size();
        auto ready = [&] {
            return m_failed || (id == kWaitsForAll ? m_finished == n : m_done[static_cast<size_t>(id)] != 0);
        };
        m_host_waits_for = id;
        m_host_cv.wait(lk, ready);
        m_host_waits_for = kWaitsForNothing;
    }

    // Wakes every waiting thread (a failure, or the end of the run).
    void wakeAll() {
        m_host_cv.notify_all();
        for (std::condition_variable& cv : m_stream_cv) cv.notify_all();
    }

    // Wakes exactly the threads waiting for task `id`, which has just ended: a worker whose next
    // task depends on it, and the host if it waits for it (or for the last task). Waking only those
    // keeps the hand-off between threads to about one context switch per task.
    void finished(int32_t id) {
        std::array<bool, core::kStreamCount> wake_stream{};
        bool wake_host = false;
        {
            std::lock_guard lk(m_mutex);
            m_done[static_cast<size_t>(id)] = 1;
            ++m_finished;
            for (size_t s = 0; s < wake_stream.size(); ++s) wake_stream[s] = m_stream_waits_for[s] == id;
            wake_host = m_host_waits_for == id || (m_host_waits_for == kWaitsForAll && m_finished == m_program.size());
        }
        for (size_t s = 0; s < wake_stream.size(); ++s) {
            if (wake_stream[s]) m_stream_cv[s].notify_one();
        }
        if (wake_host) m_host_cv.notify_one();
    }

    void workerLoop(core::Stream stream) {
        const auto s = static_cast<size_t>(stream);
        std::deque<int32_t>& queue = m_queues[s];
        std::condition_variable& cv = m_stream_cv[s];
        for (;;) {
            int32_t id = -1;
            {
                std::unique_lock lk(m_mutex);
                m_stream_waits_for[s] = kWaitsForQueue;
                cv.wait(lk, [&] { return m_stop || m_failed || !queue.empty(); });
                m_stream_waits_for[s] = kWaitsForNothing;
                if (m_failed || queue.empty()) return;
                id = queue.front();
                queue.pop_front();
                const core::Task& t = m_program.tasks[static_cast<size_t>(id)];
                const int32_t* deps = m_program.depsBegin(t);
                for (uint32_t k = 0; k < t.deps.count && !m_failed; ++k) {
                    const int32_t dep = deps[k];
                    m_stream_waits_for[s] = dep;
                    cv.wait(lk, [&] { return m_failed || m_done[static_cast<size_t>(dep)] != 0; });
                }
                m_stream_waits_for[s] = kWaitsForNothing;
                if (m_failed) return;
            }
            core::Status ran = core::Ok{};
            try {  // allocate() throws std::bad_alloc when the machine runs out of memory
                ran = runTask(id);
            } catch (const std::exception& e) {
                ran = core::makeError(std::string("allocating its buffers failed: ") + e.what());
            }
            if (!ran) {
                {
                    std::lock_guard lk(m_mutex);
                    if (!m_failed) {
                        m_failed = true;
                        m_error = ran.error();
                        m_error.message = "rank " + std::to_string(m_backend.rank()) + ", " +
                                          m_program.taskLabel(id) + " (task " + std::to_string(id) + "): " +
                                          m_error.message;
                    }
                }
                wakeAll();
                m_backend.abortRun(m_error);
                return;
            }
            finished(id);
        }
    }

    Backend& m_backend;
    const core::Program& m_program;

    // What a thread waits for: a task id, or one of these.
    static constexpr int32_t kWaitsForNothing = -1;
    static constexpr int32_t kWaitsForQueue = -2;  // a worker: a task in its queue
    static constexpr int32_t kWaitsForAll = -3;    // the host: every task of the step

    std::mutex m_mutex;  // queues, done flags, what each thread waits for, failure, stop
    std::condition_variable m_host_cv;
    std::array<std::condition_variable, core::kStreamCount> m_stream_cv;  // one per stream worker
    std::array<int32_t, core::kStreamCount> m_stream_waits_for{};
    int32_t m_host_waits_for = kWaitsForNothing;
    std::array<std::deque<int32_t>, core::kStreamCount> m_queues;
    std::array<bool, core::kStreamCount> m_used{};
    std::vector<uint8_t> m_done;
    int32_t m_finished = 0;
    int32_t m_step = 0;
    bool m_stop = false;
    bool m_failed = false;
    core::Error m_error;
    std::vector<std::thread> m_workers;

    std::mutex m_alloc_mutex;  // the allocator, the step clock and the timeline's entries
    CountingAllocator m_alloc;
    std::vector<std::vector<uint32_t>> m_deferred;  // per task: events of Program::mem freed at its end
    int64_t m_t0 = 0;
    int64_t m_last_stamp = -1;
    core::Timeline m_timeline;
};

}  // namespace

core::Result<Execution> Executor::run(const core::Program& program, const ExecutorOptions& options) {
    if (options.steps < 1 || options.warmup < 0) {
        return core::makeError("steps must be at least 1 and warmup at least 0 (got steps " +
                               std::to_string(options.steps) + ", warmup " + std::to_string(options.warmup) + ")");
    }
    if (auto prepared = m_backend.prepare(program); !prepared) return prepared.error();

    Execution out;
    std::vector<core::Timeline> timelines;
    std::vector<core::CategoryBytes> high_water;
    // Holding Program::initial allocates on this thread: a device out of memory (std::bad_alloc
    // from Backend::allocate) is an error of the run, not a crash. Tasks' allocations are caught
    // on the workers.
    try {
        Run run(m_backend, program);
        out.worker_threads = run.startWorkers();
        for (int32_t s = 0; s < options.warmup + options.steps; ++s) {
            if (auto stepped = run.step(s); !stepped) return stepped.error();
            if (m_on_step) m_on_step(s + 1, options.warmup + options.steps);
            if (s < options.warmup) continue;
            timelines.push_back(run.timeline());
            high_water.push_back(run.highWater());
            out.step_ns.push_back(run.timeline().step_ns);
        }
        // The last step's loose ends (a backend's posted sends) complete before the run returns.
        if (auto met = m_backend.barrier(); !met) return met.error();
    } catch (const std::exception& e) {
        return core::makeError(std::string("rank ") + std::to_string(m_backend.rank()) +
                               ": holding the Program's initial memory failed: " + e.what());
    }
    std::vector<int32_t> order(out.step_ns.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return out.step_ns[static_cast<size_t>(a)] < out.step_ns[static_cast<size_t>(b)];
    });
    out.median_step = order[(order.size() - 1) / 2];
    out.timeline = std::move(timelines[static_cast<size_t>(out.median_step)]);
    out.counted_high_water = high_water[static_cast<size_t>(out.median_step)];
    core::MemoryTimer timer;
    timer.compute(program, out.timeline, out.memory, /*record_curve=*/true);
    return out;
}

}  // namespace shardcast::exec
