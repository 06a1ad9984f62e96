#include "executor/in_process_world.hpp"

#include <cassert>
#include <cstring>

namespace shardcast::exec {

class InProcessWorld::Member final : public Bootstrap {
public:
    Member(InProcessWorld& world, int32_t rank) : m_world(world), m_rank(rank) {}
    int32_t rank() const override { return m_rank; }
    int32_t worldSize() const override { return m_world.size(); }
    core::Status allGather(const void* mine, int64_t bytes, void* all) override {
        return m_world.allGather(m_rank, mine, bytes, all);
    }
    core::Status barrier() override { return m_world.meet(m_rank, "barrier", nullptr); }
    void abort(const std::string& message) noexcept override { m_world.abort(m_rank, message); }

private:
    InProcessWorld& m_world;
    int32_t m_rank;
};

InProcessWorld::InProcessWorld(int32_t size) {
    assert(size >= 1);
    m_slots.resize(static_cast<size_t>(size));
    for (int32_t r = 0; r < size; ++r) m_members.push_back(std::make_unique<Member>(*this, r));
}

InProcessWorld::~InProcessWorld() = default;

Bootstrap& InProcessWorld::member(int32_t rank) {
    assert(rank >= 0 && rank < size());
    return *m_members[static_cast<size_t>(rank)];
}

bool InProcessWorld::aborted() const {
    std::lock_guard lk(m_mutex);
    return m_aborted;
}

std::string InProcessWorld::abortMessage() const {
    std::lock_guard lk(m_mutex);
    return m_abort_message;
}

core::Status InProcessWorld::meet(int32_t rank, const char* what, const std::function<void()>& write) {
    std::unique_lock lk(m_mutex);
    auto abortedError = [&] {
        return core::makeError(std::string(what) + " on rank " + std::to_string(rank) + ": the run was aborted: " +
                               m_abort_message);
    };
    if (m_aborted) return abortedError();
    if (write) write();
    const uint64_t round = m_round;
    if (++m_arrived == size()) {
        m_arrived = 0;
        ++m_round;
        lk.unlock();
        m_cv.notify_all();
        return core::Ok{};
    }
    m_cv.wait(lk, [&] { return m_round != round || m_aborted; });
    if (m_round != round) return core::Ok{};  // every rank arrived before the abort
    return abortedError();
}

core::Status InProcessWorld::allGather(int32_t rank, const void* mine, int64_t bytes, void* all) {
    // Round 1: every rank has written its slot. Round 2: every rank has read all slots, so no
    // rank's next allGather overwrites a slot another rank has yet to read.
    auto written = meet(rank, "allGather", [&] {
        const auto* p = static_cast<const unsigned char*>(mine);
        m_slots[static_cast<size_t>(rank)].assign(p, p + bytes);
    });
    if (!written) return written;
    {
        std::lock_guard lk(m_mutex);
        for (int32_t r = 0; r < size(); ++r) {
            const std::vector<unsigned char>& slot = m_slots[static_cast<size_t>(r)];
            if (static_cast<int64_t>(slot.size()) != bytes) {
                return core::makeError("allGather on rank " + std::to_string(rank) + ": rank " + std::to_string(r) +
                                       " gave " + std::to_string(slot.size()) + " bytes where this rank gave " +
                                       std::to_string(bytes) + " (every rank must give the same count)");
            }
            if (bytes > 0) std::memcpy(static_cast<unsigned char*>(all) + r * bytes, slot.data(), slot.size());
        }
    }
    return meet(rank, "allGather", nullptr);
}

void InProcessWorld::abort(int32_t rank, const std::string& message) noexcept {
    {
        std::lock_guard lk(m_mutex);
        if (m_aborted) return;  // the first abort's message is the run's error
        m_aborted = true;
        m_abort_message = "rank " + std::to_string(rank) + ": " + message;
    }
    m_cv.notify_all();
}

}  // namespace shardcast::exec
