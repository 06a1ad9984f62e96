#pragma once
// An in-process backend with empty kernels, for the executor's tests and benchmark: one rank,
// collectives that return at once, memory that is really held only when asked.
#include <atomic>
#include <cstdint>
#include <string_view>

#include "executor/backend.hpp"

namespace shardcast::exec {

class NullBackend final : public Backend {
public:
    // hold_memory false: allocate returns a distinct non-null token without holding memory, so
    // that a Program of a large model runs in a test or benchmark.
    explicit NullBackend(bool hold_memory = false) : m_hold_memory(hold_memory) {}

    std::string_view name() const override { return "null"; }
    int32_t rank() const override { return 0; }
    int32_t worldSize() const override { return 1; }
    core::Status prepare(const core::Program& program) override;
    void* allocate(int64_t bytes) override;
    void release(void* ptr, int64_t bytes) noexcept override;
    core::Status runTask(const core::Program& program, int32_t id, int32_t step) override;
    core::Status barrier() override { return core::Ok{}; }
    void abortRun(const core::Error&) noexcept override {}

    // A task id that fails when run (tests of the failure path); -1: none.
    void failTask(int32_t id) { m_fail_task = id; }
    int64_t tasksRun() const { return m_tasks_run.load(); }

private:
    bool m_hold_memory;
    int32_t m_fail_task = -1;
    std::atomic<int64_t> m_tasks_run{0};
    std::atomic<uintptr_t> m_next_token{16};
};

}  // namespace shardcast::exec
