#pragma once
// One MPI process's session: MPI_Init_thread on construction (MPI_THREAD_MULTIPLE: the stream
// workers call MPI concurrently, each on its own communicators), MPI_Finalize on destruction.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/base/result.hpp"

namespace shardcast::cpu {

// MPI's return code checked: an error naming the call, MPI_Error_string of the code and the rank.
core::Status mpiCheck(int code, std::string_view call, int32_t rank);

class MpiSession {
public:
    // Errors: MPI_Init_thread failed, or it provides less than MPI_THREAD_MULTIPLE.
    static core::Result<std::unique_ptr<MpiSession>> start(int* argc, char*** argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;

    int32_t rank() const { return m_rank; }
    int32_t worldSize() const { return m_world_size; }
    int32_t localRanks() const { return m_local_ranks; }  // ranks on this machine
    int32_t localRank() const { return m_local_rank; }    // this rank's place among them
    std::string libraryVersion() const;                  // MPI_Get_library_version, first line
    // Prints "shardcast: error: MESSAGE" and ends every rank (MPI_Abort on MPI_COMM_WORLD).
    [[noreturn]] void abort(std::string_view message) const noexcept;

private:
    MpiSession() = default;
    int32_t m_rank = 0;
    int32_t m_world_size = 1;
    int32_t m_local_ranks = 1;
    int32_t m_local_rank = 0;
};

}  // namespace shardcast::cpu
