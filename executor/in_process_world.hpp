#pragma once
// A world of ranks that are threads of one process (`shardcast run --backend cuda --gpus N`: one
// thread per local GPU, no MPI). Each rank's thread uses its own Bootstrap, member(r); all of
// them meet in this object's shared state: allGather copies through shared memory, barrier waits
// for every rank, and abort from any rank makes every pending and later call of every rank fail
// with that rank's message, at once (no call waits for a rank that will never come).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "executor/bootstrap.hpp"

namespace shardcast::exec {

class InProcessWorld {
public:
    explicit InProcessWorld(int32_t size);  // size >= 1
    ~InProcessWorld();
    InProcessWorld(const InProcessWorld&) = delete;
    InProcessWorld& operator=(const InProcessWorld&) = delete;

    int32_t size() const { return static_cast<int32_t>(m_members.size()); }
    // Rank r's meeting point, to be used from rank r's thread only; lives as long as the world.
    Bootstrap& member(int32_t rank);
    bool aborted() const;
    std::string abortMessage() const;  // "rank R: message" of the first abort; empty if none

private:
    class Member;
    // Waits until every rank has called it this round (or the world is aborted). `write` runs
    // under the lock when this rank arrives, before anyone leaves the round.
    core::Status meet(int32_t rank, const char* what, const std::function<void()>& write);
    core::Status allGather(int32_t rank, const void* mine, int64_t bytes, void* all);
    void abort(int32_t rank, const std::string& message) noexcept;

    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    int32_t m_arrived = 0;
    uint64_t m_round = 0;   // completed meetings; a rank waits for the round it joined to complete
    bool m_aborted = false;
    std::string m_abort_message;
    std::vector<std::vector<unsigned char>> m_slots;  // allGather: rank r's bytes
    std::vector<std::unique_ptr<Member>> m_members;
};

}  // namespace shardcast::exec
