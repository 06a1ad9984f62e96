#include "backend_cpu/mpi_session.hpp"

#include <cstdio>
#include <cstdlib>

#include <mpi.h>

namespace shardcast::cpu {

core::Status mpiCheck(int code, std::string_view call, int32_t rank) {
    if (code == MPI_SUCCESS) return core::Ok{};
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
    return core::makeError(std::string(call) + " failed on rank " + std::to_string(rank) + ": " +
                           (length > 0 ? std::string(text, static_cast<size_t>(length)) : "error code " + std::to_string(code)));
}

core::Result<std::unique_ptr<MpiSession>> MpiSession::start(int* argc, char*** argv) {
    int provided = MPI_THREAD_SINGLE;
    if (auto s = mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1); !s) {
        return s.error();
    }
    std::unique_ptr<MpiSession> session(new MpiSession());
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &session->m_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &session->m_world_size);
    if (provided < MPI_THREAD_MULTIPLE) {
        return core::makeError("the MPI library provides thread level " + std::to_string(provided) +
                               "; the CPU backend needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                               ") to run collectives on the streams' own threads");
    }
    MPI_Comm local = MPI_COMM_NULL;
    if (auto s = mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, session->m_rank, MPI_INFO_NULL, &local),
                          "MPI_Comm_split_type", session->m_rank);
        !s) {
        return s.error();
    }
    MPI_Comm_size(local, &session->m_local_ranks);
    MPI_Comm_rank(local, &session->m_local_rank);
    MPI_Comm_free(&local);
    return session;
}

MpiSession::~MpiSession() { MPI_Finalize(); }

std::string MpiSession::libraryVersion() const {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(text, &length);
    std::string version(text, static_cast<size_t>(length));
    if (auto nl = version.find('\n'); nl != std::string::npos) version.resize(nl);
    while (!version.empty() && (version.back() == '\0' || version.back() == ' ')) version.pop_back();
    return version;
}

void MpiSession::abort(std::string_view message) const noexcept {
    std::fprintf(stderr, "shardcast: error: %.*s\n", static_cast<int>(message.size()), message.data());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
}

}  // namespace shardcast::cpu
