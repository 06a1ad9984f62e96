#include "executor/null_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace shardcast::exec {

core::Status NullBackend::prepare(const core::Program&) { return core::Ok{}; }

void* NullBackend::allocate(int64_t bytes) {
    if (!m_hold_memory) return reinterpret_cast<void*>(m_next_token.fetch_add(16));
    void* p = std::malloc(static_cast<size_t>(bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, static_cast<size_t>(bytes));
    return p;
}

void NullBackend::release(void* ptr, int64_t) noexcept {
    if (m_hold_memory) std::free(ptr);
}

core::Status NullBackend::runTask(const core::Program&, int32_t id, int32_t) {
    m_tasks_run.fetch_add(1);
    if (id == m_fail_task) return core::makeError("injected failure");
    return core::Ok{};
}

}  // namespace shardcast::exec
